"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), latest tiered (-5), or the
first offset at or after a timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.list_offsets_request import ListOffsetsRequest
from oncelog.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed_names
from ._common import leadership_error, missing_partition_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition
    from oncelog.broker.request import RequestContext

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 9

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def _lookup(partition: "Partition", timestamp: int, read_committed: bool) -> tuple[int, int]:
    """(offset, timestamp) for one partition; (-1, -1) when no record is at or after ``timestamp``.

    Results are bounded by the high watermark, or by the last stable offset for read_committed, as Kafka does.
    """
    limit = partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp == LATEST:
        return limit, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return partition.log_start_offset, -1
    if timestamp == LATEST_TIERED:
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        ts, offset = partition.log.max_timestamp_and_offset()
    else:
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None:
            return -1, -1
        offset, ts = found
    if offset < 0 or offset >= limit:
        return -1, -1
    return offset, ts


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ListOffsetsRequest) -> ListOffsetsResponse:
    read_committed = request.isolation_level == 1
    topics = []
    described = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (t.name for t in request.topics))
    for t in request.topics:
        view = broker.topics.get(t.name)
        parts = []
        for p in t.partitions:
            out = ListOffsetsPartitionResponse(partition_index=p.partition_index, timestamp=-1, offset=-1,
                                               leader_epoch=-1)
            partition = view.partitions[p.partition_index] if view and 0 <= p.partition_index < len(
                view.partitions) else None
            if t.name not in described:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                out.error_code = missing_partition_error(broker, t.name, p.partition_index,
                                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif code := leadership_error(partition, p.current_leader_epoch):
                out.error_code = code
            elif (p.timestamp == MAX_TIMESTAMP and ctx.api_version < 7) or p.timestamp < LATEST_TIERED:
                out.error_code = ErrorCode.UNSUPPORTED_VERSION
            else:
                out.offset, out.timestamp = _lookup(partition, p.timestamp, read_committed)
                out.leader_epoch = partition.leader_epoch if out.offset >= 0 else -1
            parts.append(out)
        topics.append(ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
