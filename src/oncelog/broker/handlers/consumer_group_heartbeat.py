"""ConsumerGroupHeartbeat (68): join, heartbeat in and leave a consumer group of the KIP-848 protocol (see
oncelog.coordinator.group.consumer_membership).

Authorization as Kafka's KafkaApis.handleConsumerGroupHeartbeat: READ on the group, then DESCRIBE on every topic
the member subscribes to by name (TOPIC_AUTHORIZATION_FAILED naming the refused ones); a subscription regex only
matches topics the member may describe."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from oncelog.protocol.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed, allowed_names
from ._groups import NOT_AVAILABLE, client_host, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: BrokerContext, ctx: RequestContext,
           request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse | Awaitable[
               ConsumerGroupHeartbeatResponse]:
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if request.subscribed_topic_names:
        names = set(request.subscribed_topic_names)
        refused = names - allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if refused:
            return ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=f"The group has subscribed to topics which are not authorized: {sorted(refused)}.")
    gc = coordinator(broker)
    if gc is None:
        return ConsumerGroupHeartbeatResponse(error_code=NOT_AVAILABLE)

    def describable(topic: str) -> bool:
        return allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic, audit_denial=False)

    return gc.consumer_group_heartbeat(request, ctx.api_version, ctx.client_id or "", client_host(ctx),
                                       describable if broker.authorizer is not None else None)
