"""OffsetCommit (8): durable commits of a group member (generation checked) or a simple consumer (generation -1)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.offset_commit_request import OffsetCommitRequest
from oncelog.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9


def handle(broker: BrokerContext, ctx: RequestContext,
           request: OffsetCommitRequest) -> OffsetCommitResponse | Awaitable[OffsetCommitResponse]:
    gc = coordinator(broker)
    if gc is None:
        return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=NOT_AVAILABLE)
            for p in t.partitions]) for t in request.topics])
    return gc.commit_offsets(request, ctx.api_version)
