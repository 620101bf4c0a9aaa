"""CreatePartitions (37): grow a topic's partition count (in a cluster: placed over the live brokers, in etcd)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_partitions_request import CreatePartitionsRequest
from oncelog.protocol.messages.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from oncelog.security.acl import AclOperation, ResourceType
from dataclasses import replace

from ..security.authorization import allowed_names
from ._authz import then
from ._common import error_for

if TYPE_CHECKING:
    from oncelog.broker.cluster.node import ClusterNode
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: CreatePartitionsRequest) -> CreatePartitionsResponse | Awaitable[CreatePartitionsResponse]:
    alterable = allowed_names(broker, ctx, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in request.topics))
    if len(alterable) < len({t.name for t in request.topics}):
        def merged(r: CreatePartitionsResponse) -> CreatePartitionsResponse:
            done = iter(r.results)
            return replace(r, results=[next(done) if t.name in alterable else CreatePartitionsTopicResult(
                name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message="The topic authorization is failed.") for t in request.topics])
        kept = replace(request, topics=[t for t in request.topics if t.name in alterable])
        return then(_handle(broker, kept), merged)
    return _handle(broker, request)


def _handle(broker: "BrokerContext",
            request: CreatePartitionsRequest) -> CreatePartitionsResponse | Awaitable[CreatePartitionsResponse]:
    if broker.cluster is not None:
        return _grow_in_cluster(broker.cluster, request)
    results = []
    for t in request.topics:
        out = CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
        results.append(out)
        view = broker.topics.get(t.name)
        if view is None:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            out.error_message = f"no topic {t.name} on this broker"
        elif t.count <= len(view.partitions):
            out.error_code = ErrorCode.INVALID_PARTITIONS
            out.error_message = (f"topic {t.name} has {len(view.partitions)} partitions; the new count {t.count} "
                                 "must be larger")
        elif not request.validate_only:
            try:
                broker.topics.add_partitions(t.name, t.count)
            except Exception as e:
                out.error_code, out.error_message = error_for(e)
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


async def _grow_in_cluster(node: "ClusterNode", request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    from oncelog.broker.cluster.topic_admin import create_partitions

    results = []
    for t in request.topics:
        out = CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
        results.append(out)
        assignments = None if t.assignments is None or not t.assignments else [a.broker_ids for a in t.assignments]
        error = await create_partitions(node, t.name, t.count, assignments, validate_only=request.validate_only)
        if error is not None:
            out.error_code, out.error_message = error.code, error.message
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
