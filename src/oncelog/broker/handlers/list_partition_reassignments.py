"""ListPartitionReassignments (46): the partitions with a reassignment in progress, from this broker's view (all of
them, or those asked for that exist: Kafka skips the others)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest
from oncelog.protocol.messages.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ..cluster.reassign import by_topic, list_ongoing

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    if not allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return ListPartitionReassignmentsResponse(throttle_time_ms=0,
                                                  error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  error_message=f"{ctx.principal} may not DESCRIBE the cluster")
    asked = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    ongoing = list_ongoing(broker, asked)
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        OngoingTopicReassignment(name=topic, partitions=[
            OngoingPartitionReassignment(partition_index=index, replicas=list(r.replicas),
                                         adding_replicas=list(r.adding), removing_replicas=list(r.removing))
            for index, r in parts])
        for topic, parts in by_topic(ongoing).items()])
