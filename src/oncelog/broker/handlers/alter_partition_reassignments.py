"""AlterPartitionReassignments (45): start, replace or cancel moves of partitions' replicas (KIP-455); in a cluster
decided by the controller (see :mod:`oncelog.broker.cluster.reassign`), the data copied by replication."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING

from oncelog.cluster.api_error import ApiError
from oncelog.protocol.messages.alter_partition_reassignments_request import AlterPartitionReassignmentsRequest
from oncelog.protocol.messages.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed
from ..cluster.reassign import alter, by_topic, forward, is_forwarded, request_timeout

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: "BrokerContext", ctx: "RequestContext", request: AlterPartitionReassignmentsRequest,
           ) -> Awaitable[AlterPartitionReassignmentsResponse] | AlterPartitionReassignmentsResponse:
    return _handle(broker, ctx, request)


async def _handle(broker: "BrokerContext", ctx: "RequestContext",
                  request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    if not allowed(broker, ctx, AclOperation.ALTER, ResourceType.CLUSTER):
        return AlterPartitionReassignmentsResponse(throttle_time_ms=0,
                                                   error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                   error_message=f"{ctx.principal} may not ALTER the cluster")
    targets = [((t.name, p.partition_index), None if p.replicas is None else tuple(p.replicas))
               for t in request.topics for p in t.partitions]
    timeout = request_timeout(request.timeout_ms)
    node = broker.cluster
    if node is not None and not node.is_controller():
        if is_forwarded(ctx.client_id):
            error = ApiError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller; retry")
            return _response({tp: error for tp, _ in targets})
        got = await forward(node, request, ctx.api_version, timeout)
        if isinstance(got, AlterPartitionReassignmentsResponse):
            return got
        if got is not None:  # None: this broker is the controller now
            assert isinstance(got, ApiError)
            return _response({tp: got for tp, _ in targets})
    outcome = await alter(broker, targets, timeout)
    if isinstance(outcome, ApiError):
        return _response({tp: outcome for tp, _ in targets})
    return _response(outcome)


def _response(results: Mapping[tuple[str, int], ApiError]) -> AlterPartitionReassignmentsResponse:
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        ReassignableTopicResponse(name=topic, partitions=[
            ReassignablePartitionResponse(partition_index=index, error_code=int(e.code), error_message=e.message)
            for index, e in parts])
        for topic, parts in by_topic(results).items()])
