"""OffsetForLeaderEpoch (23): this broker has led every partition at epoch 0 since its creation, so the end
offset of epoch 0 is the log end offset (clients use it to validate positions after metadata changes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from oncelog.protocol.messages.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

if TYPE_CHECKING:
    from oncelog.broker.router import RequestContext
    from oncelog.broker.server import Broker

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4

LEADER_EPOCH = 0


def handle(broker: "Broker", ctx: "RequestContext",
           request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    for t in request.topics:
        view = broker.topics.get(t.topic)
        parts = []
        for p in t.partitions:
            out = EpochEndOffset(partition=p.partition, error_code=0, leader_epoch=-1, end_offset=-1)
            parts.append(out)
            partition = view.partitions[p.partition] if view and 0 <= p.partition < len(view.partitions) else None
            if partition is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p.current_leader_epoch > LEADER_EPOCH:
                out.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
            elif p.leader_epoch > LEADER_EPOCH:
                out.leader_epoch, out.end_offset = -1, -1
            else:
                out.leader_epoch, out.end_offset = LEADER_EPOCH, partition.high_watermark
        topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
