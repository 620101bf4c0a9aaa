"""Committed offsets, pending transactional offsets, and the offset APIs of a ``__consumer_offsets`` partition.

Kafka's OffsetMetadataManager: :class:`OffsetMetadataManager` holds the offsets (:class:`OffsetStore`) and what the
offset operations read (the groups, which they never change, the broker's settings, the clock), and the functions
of this module are its operations. ``OffsetStore`` changes only by replay: a committed offset from a non-transactional
record, a pending one from a transactional batch (kept per producer id, invisible to OffsetFetch), made visible by
the COMMIT marker that follows it on the partition or dropped by ABORT (KIP-98). When a pending offset is
committed, it replaces the committed one only if its record is newer in the log (Kafka compares the record
offsets, so a plain commit written after the transactional one wins).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.clock import Clock
from oncelog.coordinator.runtime import CoordinatorResult
from oncelog.protocol.coordinator_records import OffsetCommitKey, OffsetCommitValue
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.offset_commit_request import OffsetCommitRequest
from oncelog.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from oncelog.protocol.messages.offset_delete_request import OffsetDeleteRequest
from oncelog.protocol.messages.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from oncelog.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from oncelog.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

from . import consumer_admin
from .config import GroupConfig
from .consumer_group import ConsumerGroup, GroupError
from .group import ClassicGroup
from .records import offset_record, offset_tombstone
from .state import GroupState

__all__ = [
    "FetchedOffset",
    "OffsetEntry",
    "OffsetMetadataManager",
    "OffsetStore",
    "commit_offsets",
    "delete_offsets",
    "expired_offset_records",
    "fetch_offsets",
    "txn_commit_error",
    "txn_commit_offsets",
    "validate_fetch",
]

TP = tuple[str, int]
Record = tuple[bytes, "bytes | None"]


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1 = retention counted by the broker's offsets.retention.minutes
    record_offset: int  # where the record sits in __consumer_offsets (which of two commits is newer)


class OffsetStore:
    def __init__(self) -> None:
        self.committed: dict[str, dict[TP, OffsetEntry]] = {}
        self.pending: dict[int, dict[str, dict[TP, OffsetEntry]]] = {}  # producer id -> group -> offsets
        self._pending_count: dict[tuple[str, TP], int] = {}  # (group, tp) -> producers with a pending offset

    # ------------------------------------------------------------------ replay
    def put(self, group: str, tp: TP, entry: OffsetEntry) -> None:
        self.committed.setdefault(group, {})[tp] = entry

    def delete(self, group: str, tp: TP) -> None:
        offsets = self.committed.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.committed[group]

    def delete_group(self, group: str) -> None:
        self.committed.pop(group, None)

    def add_pending(self, producer_id: int, group: str, tp: TP, entry: OffsetEntry) -> None:
        offsets = self.pending.setdefault(producer_id, {}).setdefault(group, {})
        if tp not in offsets:
            self._pending_count[(group, tp)] = self._pending_count.get((group, tp), 0) + 1
        offsets[tp] = entry

    def complete(self, producer_id: int, commit: bool) -> list[str]:
        """A marker of ``producer_id`` landed: make its pending offsets visible (commit) or drop them (abort).
        Returns the groups that had pending offsets."""
        groups = self.pending.pop(producer_id, {})
        for group, offsets in groups.items():
            for tp, entry in offsets.items():
                key = (group, tp)
                n = self._pending_count.get(key, 1) - 1
                if n:
                    self._pending_count[key] = n
                else:
                    self._pending_count.pop(key, None)
                if commit:
                    current = self.committed.get(group, {}).get(tp)
                    if current is None or current.record_offset < entry.record_offset:
                        self.put(group, tp, entry)
        return list(groups)

    # ------------------------------------------------------------------ queries
    def get(self, group: str, tp: TP) -> OffsetEntry | None:
        return self.committed.get(group, {}).get(tp)

    def group_offsets(self, group: str) -> dict[TP, OffsetEntry]:
        return self.committed.get(group, {})

    def has_pending(self, group: str, tp: TP) -> bool:
        return (group, tp) in self._pending_count

    def has_any_pending(self, group: str) -> bool:
        return any(group in groups for groups in self.pending.values())

    def has_offsets(self, group: str) -> bool:
        return bool(self.committed.get(group)) or self.has_any_pending(group)


class OffsetMetadataManager:
    """The offsets of one ``__consumer_offsets`` partition and what their operations read: the partition's groups
    (looked up, never added or removed here), the broker's settings, the clock, and whether a partition exists."""

    def __init__(self, groups: Mapping[str, ClassicGroup], clock: Clock, config: GroupConfig,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 consumer_groups: Mapping[str, ConsumerGroup] | None = None) -> None:
        self.groups = groups
        self.consumer_groups: Mapping[str, ConsumerGroup] = consumer_groups if consumer_groups is not None else {}
        self.clock = clock
        self.config = config
        self.partition_exists = partition_exists
        self.store = OffsetStore()

    def now(self) -> int:
        return self.clock.monotonic_ms()

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None, record_offset: int,
               producer_id: int = -1) -> None:
        """An offset record at ``record_offset``: committed, deleted (a tombstone), or, with ``producer_id`` >= 0 (a
        transactional batch), pending until that producer's marker."""
        tp = (key.topic, key.partition)
        if value is None:
            if producer_id < 0:
                self.store.delete(key.group, tp)
            return
        entry = OffsetEntry(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                            value.expire_timestamp, record_offset)
        if producer_id >= 0:
            self.store.add_pending(producer_id, key.group, tp, entry)
        else:
            self.store.put(key.group, tp, entry)

    def replay_end_transaction_marker(self, producer_id: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended on this partition: its pending offsets become committed
        (COMMIT) or are dropped (ABORT)."""
        self.store.complete(producer_id, commit)


# -------------------------------------------------------------------------------------------------------- commit
def _validate_commit(group: ClassicGroup | None, generation: int, member_id: str,
                     instance_id: str | None) -> int:
    """Kafka's ClassicGroup.validateOffsetCommit (non-transactional)."""
    if group is None:
        return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state is GroupState.EMPTY:
        return ErrorCode.NONE  # a simple (standalone) commit: the group is not managed by this coordinator
    if instance_id is not None and group.is_static_member_fenced(instance_id, member_id):
        return ErrorCode.FENCED_INSTANCE_ID
    if group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if not group.has_member(member_id):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


def _partition_error(manager: OffsetMetadataManager, topic: str, partition: int, metadata: str | None) -> int:
    if metadata is not None and len(metadata.encode("utf-8")) > manager.config.offset_metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    if manager.partition_exists is not None and not manager.partition_exists(topic, partition):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def _validate_consumer_commit(group: ConsumerGroup, member_id: str, instance_id: str | None, epoch: int,
                              transactional: bool, version: int, partitions: list[tuple[str, int]]) -> int:
    try:
        consumer_admin.validate_offset_commit(group, member_id, instance_id, epoch, transactional, version,
                                              partitions)
    except GroupError as e:
        return e.code
    return ErrorCode.NONE


def commit_offsets(manager: OffsetMetadataManager, req: OffsetCommitRequest, version: int) -> CoordinatorResult[Any]:
    gid = req.group_id
    instance_id = req.group_instance_id if version >= 7 else None
    group = manager.groups.get(gid)
    cgroup = manager.consumer_groups.get(gid)
    epoch = req.generation_id_or_member_epoch
    if not gid:
        code: int = ErrorCode.INVALID_GROUP_ID
    elif cgroup is not None:
        code = _validate_consumer_commit(cgroup, req.member_id, instance_id, epoch, False, version,
                                         [(t.name, p.partition_index) for t in req.topics for p in t.partitions])
    elif group is None and epoch >= 0 and version >= 9:
        code = ErrorCode.GROUP_ID_NOT_FOUND  # Kafka: v9+ (usable by both protocols) says the group is not there
    else:
        code = _validate_commit(group, epoch, req.member_id, instance_id)
    wall = manager.clock.wall_ms()
    retention = req.retention_time_ms if 2 <= version <= 4 else -1
    records: list[Record] = []
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pcode = code or _partition_error(manager, t.name, p.partition_index, p.committed_metadata)
            if not pcode:
                records.append(offset_record(gid, t.name, p.partition_index, p.committed_offset,
                                             p.committed_leader_epoch if version >= 6 else -1,
                                             p.committed_metadata or "", wall,
                                             wall + retention if retention >= 0 else -1))
            parts.append(OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=pcode))
        topics.append(OffsetCommitResponseTopic(name=t.name, partitions=parts))
    if records and group is not None and group.has_member(req.member_id):
        m = group.members[req.member_id]
        m.heartbeat_deadline = max(m.heartbeat_deadline, manager.now() + m.session_timeout_ms)
    return CoordinatorResult(records, OffsetCommitResponse(topics=topics))


def txn_commit_offsets(manager: OffsetMetadataManager, req: TxnOffsetCommitRequest,
                       version: int) -> CoordinatorResult[TxnOffsetCommitResponse]:
    """TxnOffsetCommit: validate (Kafka's validateOffsetCommit with isTransactional, KIP-447) and return the
    records the runtime writes as a transactional batch of the request's producer, with the answer."""
    gid = req.group_id
    group = manager.groups.get(gid)
    code: int = ErrorCode.NONE
    member_id = req.member_id if version >= 3 else ""
    generation = req.generation_id if version >= 3 else -1
    instance_id = req.group_instance_id if version >= 3 else None
    cgroup = manager.consumer_groups.get(gid)
    if not gid:
        code = ErrorCode.INVALID_GROUP_ID
    elif cgroup is not None:
        code = _validate_consumer_commit(cgroup, member_id, instance_id, generation, True, version,
                                         [(t.name, p.partition_index) for t in req.topics for p in t.partitions])
    elif group is not None:
        if group.state is GroupState.DEAD:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif instance_id is not None and group.is_static_member_fenced(instance_id, member_id):
            code = ErrorCode.FENCED_INSTANCE_ID
        elif member_id and not group.has_member(member_id):
            code = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation >= 0 and generation != group.generation:
            code = ErrorCode.ILLEGAL_GENERATION
    elif member_id or generation >= 0:
        code = ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.UNKNOWN_MEMBER_ID
    wall = manager.clock.wall_ms()
    records: list[Record] = []
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pcode = code or _partition_error(manager, t.name, p.partition_index, p.committed_metadata)
            if not pcode:
                records.append(offset_record(gid, t.name, p.partition_index, p.committed_offset,
                                             p.committed_leader_epoch if version >= 2 else -1,
                                             p.committed_metadata or "", wall))
            parts.append(TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=pcode))
        topics.append(TxnOffsetCommitResponseTopic(name=t.name, partitions=parts))
    return CoordinatorResult(records, TxnOffsetCommitResponse(topics=topics))


def txn_commit_error(req: TxnOffsetCommitRequest, code: int) -> TxnOffsetCommitResponse:
    """The answer to a TxnOffsetCommit that failed as a whole: ``code`` on every partition."""
    return TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions]) for t in req.topics])


# -------------------------------------------------------------------------------------------------------- fetch
@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error_code: int = 0


def validate_fetch(manager: OffsetMetadataManager, group_id: str, member_id: str | None, member_epoch: int) -> int:
    """OffsetFetch v9+ from a member of a consumer group: its member epoch must be current (Kafka's
    validateOffsetFetch: STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID). Any other group answers what it has (no group:
    no offsets, as Kafka's fetchOffsets)."""
    if member_id is None and member_epoch < 0:
        return ErrorCode.NONE
    cgroup = manager.consumer_groups.get(group_id)
    if cgroup is None:
        return ErrorCode.NONE
    try:
        consumer_admin.validate_offset_fetch(cgroup, member_id, member_epoch)
    except GroupError as e:
        return e.code
    return ErrorCode.NONE


def fetch_offsets(manager: OffsetMetadataManager, group_id: str, topics: list[tuple[str, list[int]]] | None,
                  require_stable: bool) -> list[FetchedOffset]:
    """Committed offsets of ``group_id`` (all of them when ``topics`` is None). Pending transactional offsets
    are invisible; with ``require_stable`` a partition that has one answers UNSTABLE_OFFSET_COMMIT."""
    store = manager.store
    group = manager.groups.get(group_id)
    if group is not None and group.state is GroupState.DEAD:
        group = None
    out: list[FetchedOffset] = []
    if topics is None:
        pairs = sorted(store.group_offsets(group_id))
    else:
        pairs = [(t, p) for t, parts in topics for p in parts]
    for tp in pairs:
        f = FetchedOffset(tp[0], tp[1])
        if require_stable and store.has_pending(group_id, tp):
            f.error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
        else:
            e = store.get(group_id, tp)
            if e is not None:
                f.offset, f.leader_epoch, f.metadata = e.offset, e.leader_epoch, e.metadata
        out.append(f)
    return out


# -------------------------------------------------------------------------------------------------------- delete
def delete_offsets(manager: OffsetMetadataManager, req: OffsetDeleteRequest) -> CoordinatorResult[Any]:
    """Kafka's OffsetMetadataManager.deleteOffsets: a group that is not Empty may only lose offsets of topics
    none of its members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""
    gid = req.group_id
    group = manager.groups.get(gid)
    cgroup = manager.consumer_groups.get(gid)
    if not gid:
        return CoordinatorResult([], OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID))
    subscribed: set[str] | None = set()
    if cgroup is not None:
        subscribed = consumer_subscribed_topics(cgroup)
    elif group is None or group.state is GroupState.DEAD:
        return CoordinatorResult([], OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND))
    elif group.state is not GroupState.EMPTY:
        if group.protocol_type != "consumer":
            return CoordinatorResult([], OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP))
        subscribed = group.subscribed_topics()
    records: list[Record] = []
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if subscribed is None or t.name in subscribed:
                parts.append(OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                                           error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if manager.store.get(gid, (t.name, p.partition_index)) is not None:
                records.append(offset_tombstone(gid, t.name, p.partition_index))
            parts.append(OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=0))
        topics.append(OffsetDeleteResponseTopic(name=t.name, partitions=parts))
    return CoordinatorResult(records, OffsetDeleteResponse(error_code=0, topics=topics))


def consumer_subscribed_topics(group: ConsumerGroup) -> set[str]:
    """Every topic a member of the consumer group subscribes to (Kafka's isSubscribedToTopic)."""
    topics: set[str] = set()
    for m in group.members.values():
        topics |= group.member_topics(m)
    return topics


# -------------------------------------------------------------------------------------------------------- retention
def expired_offset_records(manager: OffsetMetadataManager, group_id: str, now_wall: int) -> tuple[list[Record], bool]:
    """Tombstones for the offsets of ``group_id`` past retention (Kafka's ClassicGroup.offsetExpirationCondition
    and OffsetMetadataManager.cleanupExpiredOffsets). Returns (records, every offset of the group expired)."""
    store = manager.store
    group = manager.groups.get(group_id)
    cgroup = manager.consumer_groups.get(group_id)
    retention_ms = manager.config.offsets_retention_ms
    offsets = store.group_offsets(group_id)
    subscribed: set[str] | None = None
    if cgroup is not None:
        # Kafka's ConsumerGroup.offsetExpirationCondition: from each commit, topics no member subscribes to
        subscribed = consumer_subscribed_topics(cgroup)
        group = None
        base_from_state = False
    elif group is None or not group.protocol_type:
        base_from_state = False  # a simple group: counted from each commit
    elif group.state is GroupState.EMPTY:
        base_from_state = True  # counted from when the group became Empty
    elif group.state is GroupState.STABLE and group.protocol_type == "consumer":
        subscribed = group.subscribed_topics()
        if subscribed is None:
            return [], False
        base_from_state = False  # KIP-496: offsets of topics no member subscribes to
    else:
        return [], False
    records: list[Record] = []
    for tp, e in sorted(offsets.items()):
        if store.has_pending(group_id, tp) or (subscribed is not None and tp[0] in subscribed):
            continue
        if e.expire_timestamp >= 0:
            expired = now_wall >= e.expire_timestamp
        else:
            base = group.state_timestamp if base_from_state and group is not None and group.state_timestamp >= 0 \
                else e.commit_timestamp
            expired = now_wall - base >= retention_ms
        if expired:
            records.append(offset_tombstone(group_id, tp[0], tp[1]))
    all_gone = len(records) == len(offsets) and not store.has_any_pending(group_id)
    return records, all_gone
