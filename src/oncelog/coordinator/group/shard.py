"""The state of one ``__consumer_offsets`` partition: its groups and offsets, and the operations on them.

Kafka's GroupCoordinatorShard: it composes the group metadata manager (:class:`.membership.GroupMetadataManager`:
the groups and their membership) and the offset metadata manager (:class:`.offsets.OffsetMetadataManager`: the
committed and pending offsets, which reads the groups), dispatches replayed records to them, runs what needs both
(deleting groups, expiring offsets and the groups left without any) and keeps the timers.

``replay`` (records) and ``replay_end_transaction_marker`` (the COMMIT/ABORT marker that resolves a producer's pending
transactional offsets) are how the log changes state, live and at start-up (the same path, driven by the coordinator
runtime). Offsets change only by replay.
Group *membership* is in-memory state the operations change directly, as in Kafka's classic coordinator; the
group snapshot records they write are replayed only while loading (Kafka's ``replayRecords=false``), except that
the replay of the leader's assignment hands that assignment out. A group tombstone removes the group.

Timers (Kafka's ``CoordinatorTimer``: one named timer per deadline): :attr:`GroupShard.timers` holds a key per
member session, pending member id, join phase and sync phase, plus the offset-retention check (every
``offsets.retention.check.interval.ms``). Membership operations run through :meth:`GroupShard.run_timed`, which
schedules what they changed (O(log n) per timer; a heartbeat or offset commit touches only its member's timer). A
deadline that only moves later (a heartbeat) needs no rescheduling: a key is checked against the state when it
fires and, if its deadline moved, put back at the new one. The coordinator calls :meth:`GroupShard.tick` (through
the runtime, so it is serialised with requests) when :meth:`GroupShard.next_deadline` has passed; it pops the due
keys and runs the expiry of their groups (``membership.expire``), so no group without a due deadline is looked at.
The broker arms one timer at the earliest deadline (``on_timer`` is told when a sooner one is scheduled).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from oncelog.clock import Clock
from oncelog.coordinator.runtime import CoordinatorResult
from oncelog.coordinator.timers import DeadlineTimers
from oncelog.protocol.coordinator_records import GroupMetadataKey, GroupMetadataValue, OffsetCommitValue
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import consumer_group_describe_response as cgd
from oncelog.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from oncelog.protocol.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse
from oncelog.protocol.messages.delete_groups_response import DeletableGroupResult
from oncelog.protocol.messages.join_group_request import JoinGroupRequest
from oncelog.protocol.messages.leave_group_request import MemberIdentity
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest
from oncelog.protocol.messages.describe_groups_response import DescribedGroup
from oncelog.protocol.messages.list_groups_response import ListedGroup

from . import consumer_admin, consumer_membership, membership, migration
from . import consumer_records as consumer_rec
from .config import GroupConfig
from .consumer_group import ConsumerGroup, GroupError
from .consumer_membership import ConsumerGroupManager
from .group import ClassicGroup, Member
from .membership import GroupMetadataManager
from .topic_image import TopicImage
from .offsets import OffsetMetadataManager, OffsetStore, expired_offset_records
from .records import decode_key, decode_value, group_from_record, group_tombstone, offset_tombstone
from .state import GroupState

__all__ = ["GroupShard"]

log = logging.getLogger("oncelog.coordinator.group")
Record = tuple[bytes, "bytes | None"]
T = TypeVar("T")

#: timer keys: (SESSION, group, member), (PENDING_MEMBER, group, member), (JOIN_PHASE, group), (SYNC_PHASE, group)
TimerKey = tuple[str, ...]
SESSION, PENDING_MEMBER, JOIN_PHASE, SYNC_PHASE = "session", "pending-member", "join", "sync"
#: consumer group (KIP-848) member deadlines: (CG_SESSION, group, member), (CG_REBALANCE, group, member)
CG_SESSION, CG_REBALANCE = "cg-session", "cg-rebalance"
_RETENTION: TimerKey = ("offsets-retention",)
_DEFERRED: TimerKey = ("deferred-records",)


class GroupShard:
    def __init__(self, partition: int, clock: Clock, config: GroupConfig,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 on_timer: Callable[[int], None] | None = None, topics: TopicImage | None = None,
                 group_overrides: Callable[[str], dict[str, str]] | None = None) -> None:
        self.partition = partition
        self.clock = clock
        self.config = config
        #: the classic groups and their membership (Kafka's GroupMetadataManager, classic paths)
        self.group_manager = GroupMetadataManager(clock, config)
        #: the consumer groups of the KIP-848 protocol (Kafka's GroupMetadataManager, consumer group paths)
        self.consumer_manager = ConsumerGroupManager(clock, config, topics, self.group_manager.groups,
                                                     group_overrides)
        migration.install(self.consumer_manager, self.group_manager)
        #: the committed and pending offsets (Kafka's OffsetMetadataManager); it reads the groups
        self.offset_manager = OffsetMetadataManager(self.group_manager.groups, clock, config, partition_exists,
                                                    self.consumer_manager.groups)
        self.live = False  # False while loading: group snapshots replace the in-memory group
        self.next_retention_check = 0
        self.last_offset = -1
        #: deadlines (monotonic ms) by key; ``on_timer`` hears of a deadline sooner than every other
        self.timers: DeadlineTimers[TimerKey] = DeadlineTimers(on_timer)

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        """The partition's groups by id (the group manager's)."""
        return self.group_manager.groups

    @property
    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        """The partition's consumer groups (KIP-848) by id."""
        return self.consumer_manager.groups

    @property
    def offsets(self) -> OffsetStore:
        """The partition's committed and pending offsets (the offset manager's)."""
        return self.offset_manager.store

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
            ck = consumer_rec.decode_key(key)
            if ck is not None and producer_id < 0:  # a group record is never transactional
                self.consumer_manager.replay(ck, value, on_group_removed=lambda gid: None,
                                             drop_classic=self._drop_simple_classic_group)
            return
        if isinstance(k, GroupMetadataKey):
            if producer_id < 0:  # a group record is never transactional
                self._replay_group(k.group, None if value is None else decode_value(k, value))
            return
        if producer_id >= 0 and value is None:
            return
        v = None if value is None else decode_value(k, value)
        assert v is None or isinstance(v, OffsetCommitValue)
        self.offset_manager.replay(k, v, offset, producer_id)
        if v is not None and k.group not in self.consumer_manager.groups:
            self.group_manager.ensure_group(k.group)

    def _drop_simple_classic_group(self, group_id: str) -> None:
        """A consumer group record for a group id held by a classic group without members (a simple group made by
        an offset commit, or one its tombstone is about to remove): the consumer group takes the id (Kafka's
        getOrMaybeCreatePersistedConsumerGroup). Its offsets stay."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            del self.groups[group_id]

    def _replay_group(self, group_id: str, v: GroupMetadataValue | OffsetCommitValue | None) -> None:
        if v is None:
            self._remove_group(group_id)
            return
        assert isinstance(v, GroupMetadataValue)
        group = self.groups.get(group_id)
        if self.live and group is not None:
            membership.on_assignment_durable(group, v.generation, self.clock.wall_ms(), self.now())
            self.schedule_group(group_id)  # members no longer parked in SyncGroup: their sessions run
            return
        self.groups[group_id] = group_from_record(group_id, v)

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended on this partition: its pending offsets become committed
        (COMMIT) or are dropped (ABORT)."""
        self.offset_manager.replay_end_transaction_marker(producer_id, commit)

    def _remove_group(self, group_id: str) -> None:
        """A classic group's tombstone: the group goes, its offsets stay (DeleteGroups and offset expiry write the
        offsets' own tombstones; a group converted to a consumer group keeps them)."""
        self.group_manager.remove_group(group_id)

    def on_loaded(self) -> CoordinatorResult[None]:
        """Loading ended: from now on membership is live; loaded members get a session to heartbeat in."""
        self.live = True
        now = self.now()
        for group in self.groups.values():
            for m in group.members.values():
                m.heartbeat_deadline = now + m.session_timeout_ms
        for gid in self.groups:
            self.schedule_group(gid)
        cm = self.consumer_manager
        for gid, cgroup in self.consumer_groups.items():  # Kafka's onLoaded: sessions and rebalance timeouts
            for mid, cm_member in cgroup.members.items():
                cm.sessions[(gid, mid)] = now + cm.session_timeout_ms(gid)
                consumer_membership.rebalance_timer(cm, gid, cm_member)
                self.schedule_consumer_member(gid, mid)
        self.next_retention_check = self.clock.wall_ms() + self.config.offsets_retention_check_interval_ms
        self.timers.schedule(_RETENTION, now + self.config.offsets_retention_check_interval_ms)
        return CoordinatorResult([], None)

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> int | None:
        """The earliest timer deadline (monotonic ms), None when nothing is scheduled."""
        return self.timers.next_deadline()

    def tick(self) -> CoordinatorResult[None]:
        """Fire the timers due now: the expiry of every group with a due deadline (``membership.expire``, which
        checks all of that group's deadlines), the offset-retention check when due, and records an append-failure
        path left behind. Groups without a due deadline are not looked at."""
        records = self.group_manager.take_deferred_records()
        now = self.now()
        due_groups: dict[str, None] = {}
        retention = False
        due_consumer_groups: dict[str, None] = {}
        for key in self.timers.pop_due(now):
            if key == _RETENTION:
                retention = True
                continue
            if key == _DEFERRED:
                continue
            deadline = self._current_deadline(key)
            if deadline is None:
                continue  # nothing of it left (member gone, phase over)
            if deadline > now:
                self.timers.schedule_if_earlier(key, deadline)  # moved later (a heartbeat): wait for it
                continue
            (due_consumer_groups if key[0] in (CG_SESSION, CG_REBALANCE) else due_groups)[key[1]] = None
        for gid in due_consumer_groups:
            cgroup = self.consumer_groups.get(gid)
            if cgroup is not None:
                records += consumer_membership.expire(self.consumer_manager, cgroup, now)
        for gid in due_groups:
            group = self.groups.get(gid)
            if group is not None:
                records += membership.expire(self.group_manager, group, now)
                self.schedule_group(gid)
        self._schedule_touched()
        if retention:
            wall = self.clock.wall_ms()
            self.next_retention_check = wall + self.config.offsets_retention_check_interval_ms
            self.timers.schedule(_RETENTION, now + self.config.offsets_retention_check_interval_ms)
            records += self.expire_offsets(wall)
        return CoordinatorResult(records, None)

    def run_timed(self, group_id: str, op: Callable[[GroupShard], CoordinatorResult[T]],
                  member_id: str | None = None) -> CoordinatorResult[T]:
        """Run a membership/offset operation of ``group_id``, then schedule the timers it changed: those of
        ``member_id`` only when given (a heartbeat, an offset commit), else the whole group's. Its ``on_failure``
        (which may restore state or start a rebalance) schedules them again after it runs."""
        result = op(self)
        if member_id is None:
            self.schedule_group(group_id)
        else:
            self.schedule_member(group_id, member_id)
        self._schedule_touched()
        undo = result.on_failure
        if undo is not None:
            def on_failure() -> None:
                try:
                    undo()
                finally:
                    self.schedule_group(group_id)
                    if self.group_manager.deferred_records:
                        self.timers.schedule_if_earlier(_DEFERRED, self.now())

            result.on_failure = on_failure
        return result

    def schedule_group(self, group_id: str) -> None:
        """Make sure every deadline of the group has a timer at or before it (O(members + pending) lookups, a
        heap push only for a deadline that came sooner)."""
        group = self.groups.get(group_id)
        if group is None or not self.live or group.state is GroupState.DEAD:
            return
        timers = self.timers
        for m in group.members.values():
            self._schedule_session(group_id, m)
        for mid, deadline in group.pending_members.items():
            timers.schedule_if_earlier((PENDING_MEMBER, group_id, mid), deadline)
        if group.state is GroupState.PREPARING_REBALANCE:
            timers.schedule_if_earlier((JOIN_PHASE, group_id), group.join_deadline)
        if group.pending_sync and group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            timers.schedule_if_earlier((SYNC_PHASE, group_id), group.sync_deadline)

    def schedule_member(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or not self.live:
            return
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_session(group_id, member)

    def _schedule_session(self, group_id: str, m: Member) -> None:
        # A member parked in JoinGroup/SyncGroup (not new) satisfies its heartbeats (Member.heartbeat_satisfied_until):
        # no timer, as in Kafka; whatever ends the wait (the join phase's end, the assignment's replay, a removal)
        # schedules its session again.
        if m.is_new or not (m.awaiting_join or m.awaiting_sync):
            self.timers.schedule_if_earlier((SESSION, group_id, m.member_id), m.heartbeat_deadline)

    def schedule_consumer_member(self, group_id: str, member_id: str) -> None:
        """Make sure a consumer group member's session and rebalance deadlines have a timer at or before them."""
        if not self.live:
            return
        cm = self.consumer_manager
        session = cm.sessions.get((group_id, member_id))
        if session is not None:
            self.timers.schedule_if_earlier((CG_SESSION, group_id, member_id), session)
        rebalance = cm.rebalances.get((group_id, member_id))
        if rebalance is not None:
            self.timers.schedule_if_earlier((CG_REBALANCE, group_id, member_id), rebalance[0])

    def _current_deadline(self, key: TimerKey) -> int | None:
        """What ``key`` stands for in the state now: its deadline, or None when there is nothing left to expire."""
        if key[0] in (CG_SESSION, CG_REBALANCE):
            cgroup = self.consumer_groups.get(key[1])
            if cgroup is None or key[2] not in cgroup.members:
                return None
            if key[0] == CG_SESSION:
                return self.consumer_manager.sessions.get((key[1], key[2]))
            rebalance = self.consumer_manager.rebalances.get((key[1], key[2]))
            return None if rebalance is None else rebalance[0]
        group = self.groups.get(key[1])
        if group is None or group.state is GroupState.DEAD:
            return None
        kind = key[0]
        if kind == SESSION:
            m = group.members.get(key[2])
            if m is None or (not m.is_new and (m.awaiting_join or m.awaiting_sync)):
                return None
            return m.heartbeat_deadline
        if kind == PENDING_MEMBER:
            return group.pending_members.get(key[2])
        if kind == JOIN_PHASE:
            return group.join_deadline if group.state is GroupState.PREPARING_REBALANCE else None
        if kind == SYNC_PHASE:
            if group.pending_sync and group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                return group.sync_deadline
            return None
        return None

    def expire_offsets(self, wall: int) -> list[Record]:
        records: list[Record] = []
        for gid in sorted(set(self.groups) | set(self.offsets.committed) | set(self.consumer_groups)):
            recs, all_gone = expired_offset_records(self.offset_manager, gid, wall)
            records += recs
            cgroup = self.consumer_groups.get(gid)
            if cgroup is not None:
                if cgroup.is_empty() and all_gone:
                    records += consumer_admin.delete_group_records(cgroup)
                    log.info("consumer group %s is Empty and has no offsets left: removing it", gid)
                elif recs:
                    log.info("expired %d offset(s) of group %s", len(recs), gid)
                continue
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
            cgroup = self.consumer_groups.get(gid)
            if gid and cgroup is not None:
                try:
                    group_records = consumer_admin.delete_group_records(cgroup)
                except GroupError as e:
                    out.append(DeletableGroupResult(group_id=gid, error_code=e.code))
                    continue
                for topic, partition in sorted(self.offsets.group_offsets(gid)):
                    records.append(offset_tombstone(gid, topic, partition))
                records += group_records
                out.append(DeletableGroupResult(group_id=gid, error_code=ErrorCode.NONE))
                continue
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
        cgroup = self.consumer_groups.get(group_id)
        if cgroup is not None:
            return consumer_admin.describe_classic(self.consumer_manager, cgroup)
        return self.group_manager.describe(group_id)

    def list_groups(self, states: set[str] | None, types: set[str] | None = None) -> list[ListedGroup]:
        """ListGroups of both group types; ``states`` lower-case state names, ``types`` lower-case group types
        (None: all)."""
        out: list[ListedGroup] = []
        if types is None or "classic" in types:
            classic_states = None if states is None else \
                {st for st in (GroupState.from_name(n) for n in states) if st is not None}
            out += self.group_manager.list_groups(classic_states)
        if types is None or "consumer" in types:
            out += consumer_admin.list_groups(self.consumer_manager, states)
        return out

    # ------------------------------------------------------------------ consumer groups (KIP-848)
    def classic_join(self, req: JoinGroupRequest, version: int, client_id: str,
                     client_host: str) -> CoordinatorResult[Any]:
        """JoinGroup. On the id of a consumer group: an Empty one is deleted and a classic group takes the id
        (Kafka's maybeDeleteEmptyConsumerGroup); one with members takes the joining member as a classic member
        (``migration.classic_join``: INCONSISTENT_GROUP_PROTOCOL unless its protocols fit)."""
        cgroup = self.consumer_groups.get(req.group_id)
        if cgroup is None:
            return membership.join_group(self.group_manager, req, version, client_id, client_host)
        if not cgroup.is_empty():
            return migration.classic_join(self.consumer_manager, cgroup, req, version, client_id, client_host)
        tombstones = consumer_admin.delete_group_records(cgroup)  # written first: replayed, they remove it
        result = membership.join_group(self.group_manager, req, version, client_id, client_host)
        result.records[:0] = tombstones
        return result

    def consumer_heartbeat(self, req: ConsumerGroupHeartbeatRequest, version: int, client_id: str, client_host: str,
                           describable: Callable[[str], bool] | None = None,
                           ) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]:
        """ConsumerGroupHeartbeat, then the member's session and rebalance timers."""
        result = consumer_membership.heartbeat(self.consumer_manager, req, version, client_id, client_host,
                                               describable)
        self._schedule_touched()
        return result

    def _schedule_touched(self) -> None:
        """Put timers on the consumer group deadlines the last operation set, and the classic timers of groups it
        turned into classic groups."""
        cm = self.consumer_manager
        touched, cm.touched = cm.touched, set()
        for group_id, member_id in touched:
            self.schedule_consumer_member(group_id, member_id)
        converted, cm.converted = cm.converted, set()
        for group_id in converted:
            self.schedule_group(group_id)

    def classic_sync(self, req: SyncGroupRequest, version: int) -> CoordinatorResult[Any]:
        """SyncGroup, of a classic group or of a classic member of a consumer group."""
        cgroup = self.consumer_groups.get(req.group_id)
        if cgroup is not None:
            return migration.classic_sync(self.consumer_manager, cgroup, req, version)
        return membership.sync_group(self.group_manager, req, version)

    def classic_heartbeat(self, group_id: str, generation: int, member_id: str,
                          instance_id: str | None) -> CoordinatorResult[Any]:
        """Heartbeat, of a classic group or of a classic member of a consumer group."""
        cgroup = self.consumer_groups.get(group_id)
        if cgroup is not None:
            return migration.classic_heartbeat(self.consumer_manager, cgroup, member_id, generation, instance_id)
        return membership.heartbeat(self.group_manager, group_id, generation, member_id, instance_id)

    def classic_leave(self, group_id: str, members: list[MemberIdentity]) -> CoordinatorResult[Any]:
        """LeaveGroup, of a classic group or of classic members of a consumer group."""
        cgroup = self.consumer_groups.get(group_id)
        if cgroup is not None:
            return migration.classic_leave(self.consumer_manager, cgroup, members)
        return membership.leave_group(self.group_manager, group_id, members)

    def consumer_group_describe(self, group_id: str) -> cgd.DescribedGroup:
        return consumer_admin.describe(self.consumer_manager, group_id)
