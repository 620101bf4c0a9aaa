"""OffsetForLeaderEpoch (23): the end offset of a leader epoch, from the partition log's leader-epoch cache
(Kafka's LeaderEpochFileCache.endOffsetFor, KIP-101/KIP-279): the log end for the current epoch, the start of the
next epoch for an older one. Consumers use it to validate their position after metadata changes (KIP-320),
followers to find where their log diverges from the leader's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from oncelog.protocol.messages.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed, allowed_names
from ._common import missing_partition_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 23
MIN_VERSION = 2
MAX_VERSION = 4


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    names = [t.topic for t in request.topics]  # a broker (CLUSTER_ACTION) or DESCRIBE on each topic (KIP-320)
    described = set(names) if allowed(broker, ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                      audit_denial=False) \
        else allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    for t in request.topics:
        view = broker.topics.get(t.topic)
        parts = []
        for p in t.partitions:
            out = EpochEndOffset(partition=p.partition, error_code=0, leader_epoch=-1, end_offset=-1)
            parts.append(out)
            partition = view.partitions[p.partition] if view and 0 <= p.partition < len(view.partitions) else None
            if t.topic not in described:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                out.error_code = missing_partition_error(broker, t.topic, p.partition,
                                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif p.current_leader_epoch > partition.leader_epoch:
                out.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
            elif 0 <= p.current_leader_epoch < partition.leader_epoch:
                out.error_code = ErrorCode.FENCED_LEADER_EPOCH
            elif not partition.is_leader:  # in a cluster only the leader answers (a single node leads all)
                out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                out.leader_epoch, out.end_offset = partition.log.end_offset_for_epoch(p.leader_epoch)
        topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
