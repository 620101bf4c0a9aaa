"""ConsumerGroupDescribe (69): consumer groups (KIP-848) with their epochs, members, assignments and targets.

Authorization as Kafka's KafkaApis.handleConsumerGroupDescribe: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED
for that group), the group's KIP-430 authorized operations when asked; a group some of whose members' topics the
principal may not describe answers TOPIC_AUTHORIZATION_FAILED (Kafka 4.0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from oncelog.protocol.messages.consumer_group_describe_response import (
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed, allowed_names, authorized_operations
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 0


def _topics(group: DescribedGroup) -> set[str]:
    names: set[str] = set()
    for m in group.members:
        names.update(m.subscribed_topic_names)
        names.update(tp.topic_name for tp in m.assignment.topic_partitions)
        names.update(tp.topic_name for tp in m.target_assignment.topic_partitions)
    return names


def handle(broker: BrokerContext, ctx: RequestContext,
           request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    gc = coordinator(broker)
    out = []
    for gid in request.group_ids:
        if not allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            out.append(DescribedGroup(group_id=gid, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if gc is None:
            out.append(DescribedGroup(group_id=gid, error_code=NOT_AVAILABLE))
            continue
        group = gc.consumer_group_describe(gid)
        if group.error_code == ErrorCode.NONE:
            topics = _topics(group)
            if topics - allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics):
                group = DescribedGroup(group_id=gid, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                       error_message="The group has described topic(s) that the client is not "
                                       "authorized to describe.")
            elif request.include_authorized_operations:
                group.authorized_operations = authorized_operations(broker, ctx, ResourceType.GROUP, gid)
        out.append(group)
    return ConsumerGroupDescribeResponse(groups=out)
