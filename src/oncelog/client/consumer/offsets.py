"""A group's committed offsets: OffsetFetch (what to start from) and OffsetCommit (with generation and member id).

Both take an open connection to the group coordinator and raise :class:`KafkaError` for a whole-request error;
per-partition errors of a commit come back as a map so the caller decides (Kafka's OffsetCommitResponseHandler:
generation errors mean the commit failed for good and the member must rejoin; coordinator errors mean retry
elsewhere).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)

from ..connection import BrokerConnection
from ..errors import KafkaError, raise_for_code

__all__ = ["CommitFailedError", "commit_offsets", "fetch_committed"]

TopicPartition = tuple[str, int]
_OFFSET_COMMIT, _OFFSET_FETCH = 8, 9

#: commit errors after which this generation can never commit: the partitions may be someone else's now
COMMIT_FAILED = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                           ErrorCode.FENCED_INSTANCE_ID})


class CommitFailedError(KafkaError):
    """The commit cannot succeed: the group rebalanced and this consumer's generation is over (Kafka's
    CommitFailedException). The records since the last commit will be consumed again by the new owner."""

    def __init__(self, code: int, group_id: str) -> None:
        super().__init__(code, f"commit for group {group_id!r} failed: the group rebalanced and this consumer is "
                               f"no longer a member of the current generation ({KafkaError(code).name}); its "
                               "partitions may have moved. Poll again to rejoin; process records faster or raise "
                               "max.poll.interval.ms if this repeats", retriable=False)


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for t, p in tps:
        out[t].append(p)
    return out


async def fetch_committed(conn: BrokerConnection, group_id: str, partitions: Iterable[TopicPartition], *,
                          require_stable: bool = True) -> dict[TopicPartition, int]:
    """Committed offset of each partition (-1 where the group has none). ``require_stable`` (KIP-447, v7+):
    the coordinator answers UNSTABLE_OFFSET_COMMIT while a transactional commit is pending; raised as a
    retriable KafkaError so the caller waits and asks again."""
    tps = list(dict.fromkeys(partitions))
    if not tps:
        return {}
    by_topic = _by_topic(tps)
    version = conn.version_for(_OFFSET_FETCH)
    req: Any
    if version >= 8:
        req = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group_id, topics=[
            OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()])],
            require_stable=require_stable)
    else:
        req = OffsetFetchRequest(group_id=group_id, topics=[
            OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            require_stable=require_stable and version >= 7)
    resp = await conn.send(req, version=version)
    context = f"fetch committed offsets of group {group_id!r}"
    if version >= 8:
        topics = []
        for g in resp.groups:
            raise_for_code(g.error_code, None, context)
            topics.extend(g.topics)
    else:
        if version >= 2:
            raise_for_code(resp.error_code, None, context)
        topics = resp.topics
    out = {tp: -1 for tp in tps}
    for rt in topics:
        for rp in rt.partitions:
            tp = (rt.name, rp.partition_index)
            if rp.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue  # Kafka treats it as "no committed offset"
            raise_for_code(rp.error_code, None, f"{context} for {tp[0]}[{tp[1]}]")
            if tp in out:
                out[tp] = rp.committed_offset if rp.committed_offset >= 0 else -1
    return out


async def commit_offsets(conn: BrokerConnection, group_id: str, offsets: Mapping[TopicPartition, int], *,
                         generation_id: int, member_id: str, group_instance_id: str | None,
                         metadata: str = "") -> dict[TopicPartition, int]:
    """OffsetCommit; returns the error code of each partition (0 = committed)."""
    if not offsets:
        return {}
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = defaultdict(list)
    for (t, p), off in offsets.items():
        by_topic[t].append(OffsetCommitRequestPartition(partition_index=p, committed_offset=off,
                                                        committed_metadata=metadata))
    req = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=generation_id, member_id=member_id,
                              group_instance_id=group_instance_id,
                              topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    resp = await conn.send(req)
    codes = {tp: int(ErrorCode.UNKNOWN_SERVER_ERROR) for tp in offsets}
    for rt in resp.topics:
        for rp in rt.partitions:
            tp = (rt.name, rp.partition_index)
            if tp in codes:
                codes[tp] = rp.error_code
    return codes
