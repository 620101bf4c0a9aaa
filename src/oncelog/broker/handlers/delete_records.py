"""DeleteRecords (21): move a partition's log start offset forward (-1 means up to the high watermark)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.delete_records_request import DeleteRecordsRequest
from oncelog.protocol.messages.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed_names
from ._common import error_for, missing_partition_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    deletable = allowed_names(broker, ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        view = broker.topics.get(t.name)
        parts = []
        for p in t.partitions:
            out = DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=0)
            parts.append(out)
            partition = view.partitions[p.partition_index] if view and 0 <= p.partition_index < len(
                view.partitions) else None
            if t.name not in deletable:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if partition is None:
                out.error_code = missing_partition_error(broker, t.name, p.partition_index,
                                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if not partition.is_leader:  # in a cluster: the leader moves the log start, its followers follow
                out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            target = partition.high_watermark if p.offset == -1 else p.offset
            if target < 0 or target > partition.high_watermark:
                out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            try:
                out.low_watermark = partition.log.delete_records_before(target)
                partition.reset_after_truncation()
            except Exception as e:
                out.error_code, _ = error_for(e)
        topics.append(DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
