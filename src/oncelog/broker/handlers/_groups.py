"""Shared bits of the group API handlers: the coordinator, or a code saying it is not there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.coordinator.group.coordinator import GroupCoordinator

__all__ = ["NOT_AVAILABLE", "client_host", "coordinator"]

NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE


def coordinator(broker: BrokerContext) -> GroupCoordinator | None:
    """The broker's GroupCoordinator (built now if it waits for its first use), or None until the broker has loaded
    it."""
    broker.load_coordinators()
    return broker.group_coordinator


def client_host(ctx: RequestContext) -> str:
    """Kafka's form of the client address in group metadata: "/" + IP."""
    host = ctx.peer
    if host.startswith("[") and "]" in host:
        host = host[1:host.index("]")]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return "/" + host
