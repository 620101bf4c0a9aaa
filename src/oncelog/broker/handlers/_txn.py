"""Helpers shared by the transaction API handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.coordinator.transaction import TransactionCoordinator

__all__ = ["coordinator_or_error"]


def coordinator_or_error(broker: "BrokerContext") -> tuple["TransactionCoordinator | None", int]:
    """(the transaction coordinator, NONE) or (None, COORDINATOR_NOT_AVAILABLE) while it is starting (built now if
    it waits for its first use)."""
    broker.load_coordinators()
    if broker.txn_coordinator is None:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    return broker.txn_coordinator, ErrorCode.NONE
