"""OffsetCommit (8): durable commits of a group member (generation checked) or a simple consumer (generation -1)."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace
from typing import TYPE_CHECKING

from oncelog.protocol.messages.offset_commit_request import OffsetCommitRequest
from oncelog.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed, allowed_names
from ._authz import then
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


def handle(broker: BrokerContext, ctx: RequestContext,
           request: OffsetCommitRequest) -> OffsetCommitResponse | Awaitable[OffsetCommitResponse]:
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index,
                                          error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for p in t.partitions]) for t in request.topics])
    readable = allowed_names(broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    refused = [t for t in request.topics if t.name not in readable]
    if refused:  # the others are committed; these answer TOPIC_AUTHORIZATION_FAILED
        def add_refused(r: OffsetCommitResponse) -> OffsetCommitResponse:
            return replace(r, topics=r.topics + [OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponsePartition(partition_index=p.partition_index,
                                              error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for p in t.partitions]) for t in refused])
        return then(_commit(broker, ctx, replace(request, topics=[t for t in request.topics if t.name in readable])),
                    add_refused)
    return _commit(broker, ctx, request)


def _commit(broker: BrokerContext, ctx: RequestContext,
            request: OffsetCommitRequest) -> OffsetCommitResponse | Awaitable[OffsetCommitResponse]:
    gc = coordinator(broker)
    if gc is None:
        return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=NOT_AVAILABLE)
            for p in t.partitions]) for t in request.topics])
    return gc.commit_offsets(request, ctx.api_version)
