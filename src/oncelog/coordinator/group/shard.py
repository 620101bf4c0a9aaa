"""The state of one ``__consumer_offsets`` partition: its groups and offsets, and the operations on them.

``replay`` (records) and ``replay_end_transaction_marker`` (the COMMIT/ABORT marker that resolves a producer's pending
transactional offsets) are how the log changes state, live and at start-up (the same path, driven by the coordinator
runtime). Offsets change only by replay.
Group *membership* is in-memory state the operations change directly, as in Kafka's classic coordinator; the
group snapshot records they write are replayed only while loading (Kafka's ``replayRecords=false``), except that
the replay of the leader's assignment hands that assignment out. A group tombstone removes the group.

Timers: the coordinator calls :meth:`GroupShard.tick` (through the runtime, so it is serialised with requests)
every ~100 ms; it fires member session timeouts, pending-member and pending-sync deadlines, the end of join
phases (rebalance timeout / initial delay) and, every ``offsets.retention.check.interval.ms``, offset expiry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from oncelog.clock import Clock
from oncelog.coordinator.runtime import CoordinatorResult
from oncelog.protocol.coordinator_records import GroupMetadataKey, GroupMetadataValue, OffsetCommitValue
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.delete_groups_response import DeletableGroupResult
from oncelog.protocol.messages.describe_groups_response import DescribedGroup, DescribedGroupMember
from oncelog.protocol.messages.list_groups_response import ListedGroup

from . import membership
from .group import ClassicGroup, Member
from .offsets import OffsetEntry, OffsetStore, expired_offset_records
from .records import decode_key, decode_value, group_tombstone, offset_tombstone
from .state import GroupState

__all__ = ["GroupConfig", "GroupShard"]

log = logging.getLogger("oncelog.coordinator.group")
Record = tuple[bytes, "bytes | None"]


@dataclass
class GroupConfig:
    """Broker settings the group coordinator obeys (Kafka's names and defaults)."""
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2_147_483_647  # group.max.size
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes


class GroupShard:
    def __init__(self, partition: int, clock: Clock, config: GroupConfig,
                 partition_exists: Callable[[str, int], bool] | None = None) -> None:
        self.partition = partition
        self.clock = clock
        self.config = config
        self.partition_exists = partition_exists
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore()
        self.live = False  # False while loading: group snapshots replace the in-memory group
        self.deferred_records: list[Record] = []  # records an append-failure path could not return
        self.next_retention_check = 0
        self.last_offset = -1

    def now(self) -> int:
        return self.clock.monotonic_ms()

    # ------------------------------------------------------------------ replay
    def replay(self, key: bytes | None, value: bytes | None, offset: int, producer_id: int = -1,
               producer_epoch: int = -1) -> None:
        """One record of the partition; ``producer_id`` >= 0 for a record of a transactional batch (a
        TxnOffsetCommit), which stays a pending offset of that producer until its marker."""
        self.last_offset = max(self.last_offset, offset)
        if key is None:
            return
        k = decode_key(key)
        if k is None:
            return
        if producer_id >= 0:
            if value is None or isinstance(k, GroupMetadataKey):
                return
            pv = decode_value(k, value)
            assert isinstance(pv, OffsetCommitValue)
            self.offsets.add_pending(producer_id, k.group, (k.topic, k.partition), _entry(pv, offset))
            self._ensure_group(k.group)
            return
        if isinstance(k, GroupMetadataKey):
            if value is None:
                self._remove_group(k.group)
                return
            v = decode_value(k, value)
            assert isinstance(v, GroupMetadataValue)
            group = self.groups.get(k.group)
            if self.live and group is not None:
                membership.on_assignment_durable(group, v.generation, self.clock.wall_ms())
                return
            self.groups[k.group] = _group_from_record(k.group, v)
            return
        tp = (k.topic, k.partition)
        if value is None:
            self.offsets.delete(k.group, tp)
            return
        v = decode_value(k, value)
        assert isinstance(v, OffsetCommitValue)
        self.offsets.put(k.group, tp, _entry(v, offset))
        self._ensure_group(k.group)

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended on this partition: its pending offsets become committed
        (COMMIT) or are dropped (ABORT)."""
        self.offsets.complete(producer_id, commit)

    def _ensure_group(self, group_id: str) -> None:
        if group_id not in self.groups:  # offsets of a group never managed here: a simple (standalone) group
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.wall_ms())

    def _remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            if group.state is not GroupState.DEAD:
                group.transition_to(GroupState.DEAD, self.clock.wall_ms())
            for m in group.all_members():
                membership.remove_member(group, m.member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self.offsets.delete_group(group_id)

    def on_loaded(self) -> CoordinatorResult[None]:
        """Loading ended: from now on membership is live; loaded members get a session to heartbeat in."""
        self.live = True
        now = self.now()
        for group in self.groups.values():
            for m in group.members.values():
                m.heartbeat_deadline = now + m.session_timeout_ms
        self.next_retention_check = self.clock.wall_ms() + self.config.offsets_retention_check_interval_ms
        return CoordinatorResult([], None)

    # ------------------------------------------------------------------ timers
    def tick(self) -> CoordinatorResult[None]:
        records = self.deferred_records
        self.deferred_records = []
        now = self.now()
        for group in list(self.groups.values()):
            records += membership.expire(self, group, now)
        wall = self.clock.wall_ms()
        if wall >= self.next_retention_check:
            self.next_retention_check = wall + self.config.offsets_retention_check_interval_ms
            records += self.expire_offsets(wall)
        return CoordinatorResult(records, None)

    def expire_offsets(self, wall: int) -> list[Record]:
        records: list[Record] = []
        for gid in sorted(set(self.groups) | set(self.offsets.committed)):
            recs, all_gone = expired_offset_records(self, gid, wall)
            records += recs
            group = self.groups.get(gid)
            if group is not None and group.state is GroupState.EMPTY and all_gone and not group.pending_members:
                records.append(group_tombstone(gid))
                log.info("group %s is Empty and has no offsets left: removing it", gid)
            elif recs:
                log.info("expired %d offset(s) of group %s", len(recs), gid)
        return records

    # ------------------------------------------------------------------ admin
    def delete_groups(self, group_ids: list[str]) -> CoordinatorResult[list[DeletableGroupResult]]:
        records: list[Record] = []
        out = []
        for gid in group_ids:
            group = self.groups.get(gid)
            if not gid:
                code = ErrorCode.INVALID_GROUP_ID
            elif group is None or group.state is GroupState.DEAD:
                code = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                code = ErrorCode.NON_EMPTY_GROUP
            else:
                code = ErrorCode.NONE
                for topic, partition in sorted(self.offsets.group_offsets(gid)):
                    records.append(offset_tombstone(gid, topic, partition))
                records.append(group_tombstone(gid))
            out.append(DeletableGroupResult(group_id=gid, error_code=code))
        return CoordinatorResult(records, out)

    def describe(self, group_id: str) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return DescribedGroup(error_code=0, group_id=group_id, group_state=GroupState.DEAD.display_name,
                                  protocol_type="", protocol_data="", members=[])
        stable = group.state is GroupState.STABLE
        members = [DescribedGroupMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                        client_id=m.client_id, client_host=m.client_host,
                                        member_metadata=m.metadata(group.protocol_name) if stable else b"",
                                        member_assignment=m.assignment if stable else b"")
                   for m in group.members.values()]
        return DescribedGroup(error_code=0, group_id=group_id, group_state=group.state.display_name,
                              protocol_type=group.protocol_type or "",
                              protocol_data=(group.protocol_name or "") if stable else "", members=members)

    def list_groups(self, states: set[GroupState] | None) -> list[ListedGroup]:
        return [ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.display_name,
                            group_type="classic")
                for g in self.groups.values()
                if g.state is not GroupState.DEAD and (states is None or g.state in states)]


def _entry(v: OffsetCommitValue, offset: int) -> OffsetEntry:
    return OffsetEntry(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, offset)


def _group_from_record(group_id: str, v: GroupMetadataValue) -> ClassicGroup:
    group = ClassicGroup(group_id, state=GroupState.STABLE if v.members else GroupState.EMPTY,
                         state_timestamp=v.current_state_timestamp, generation=v.generation,
                         protocol_type=v.protocol_type or None, protocol_name=v.protocol or None,
                         leader_id=v.leader or None)
    for mm in v.members:
        rebalance = mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout
        member = Member(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host, rebalance,
                        mm.session_timeout, v.protocol_type, [(v.protocol or "", bytes(mm.subscription))],
                        assignment=bytes(mm.assignment))
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id
    return group


