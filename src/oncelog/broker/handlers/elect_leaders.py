"""ElectLeaders (43): move leadership to the preferred replica, or elect a leader for a leaderless partition
(unclean); in a cluster decided by the controller (see :mod:`oncelog.broker.cluster.reassign`)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.cluster.api_error import ApiError
from oncelog.cluster.controller import ElectionType
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.elect_leaders_request import ElectLeadersRequest
from oncelog.protocol.messages.elect_leaders_response import (
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed
from ..cluster.reassign import Outcome, by_topic, elect, forward, is_forwarded, request_timeout

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ElectLeadersRequest) -> Awaitable[ElectLeadersResponse] | ElectLeadersResponse:
    return _handle(broker, ctx, request)


async def _handle(broker: "BrokerContext", ctx: "RequestContext", request: ElectLeadersRequest) -> ElectLeadersResponse:
    asked = None if request.topic_partitions is None else [
        (t.topic, p) for t in request.topic_partitions for p in t.partitions]
    if not allowed(broker, ctx, AclOperation.ALTER, ResourceType.CLUSTER):
        return _response(asked, ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
    try:
        election_type = ElectionType(request.election_type if ctx.api_version >= 1 else 0)
    except ValueError:
        return _response(asked, ApiError(ErrorCode.INVALID_REQUEST,
                                         f"unknown election type {request.election_type}"), top_level=True)
    timeout = request_timeout(request.timeout_ms)
    node = broker.cluster
    if node is not None and not node.is_controller():
        if is_forwarded(ctx.client_id):
            return _response(asked, ApiError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller; retry"))
        got = await forward(node, request, ctx.api_version, timeout)
        if isinstance(got, ElectLeadersResponse):
            return got
        if got is not None:  # None: this broker is the controller now
            assert isinstance(got, ApiError)
            return _response(asked, got)
    return _response(asked, await elect(broker, election_type, asked, timeout))


def _response(asked: list[tuple[str, int]] | None, outcome: Outcome, top_level: bool = False) -> ElectLeadersResponse:
    if isinstance(outcome, ApiError):
        if asked is None or top_level:  # nothing to name per partition: the error is the request's
            return ElectLeadersResponse(throttle_time_ms=0, error_code=int(outcome.code), replica_election_results=[])
        outcome = {tp: outcome for tp in asked}
    return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=[
        ReplicaElectionResult(topic=topic, partition_result=[
            PartitionResult(partition_id=index, error_code=int(e.code), error_message=e.message)
            for index, e in parts])
        for topic, parts in by_topic(outcome).items()])
