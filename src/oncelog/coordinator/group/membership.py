"""The classic groups of a ``__consumer_offsets`` partition: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
membership timers, DescribeGroups and ListGroups.

Kafka's GroupMetadataManager classic paths (classicGroupJoin*, classicGroupSync, classicGroupHeartbeat,
classicGroupLeave, completeClassicGroupJoin, prepareRebalance, onExpireHeartbeat, expirePendingSync), as functions
of a :class:`GroupMetadataManager` (the groups and what their operations read). The shard
(:class:`~oncelog.coordinator.group.manager.GroupShard`) runs them and schedules the timers they change; nothing
here knows of offsets. Each returns a ``CoordinatorResult`` whose response is a future: already resolved when the
answer is known, or parked on the member until the join phase ends or the leader's assignment is durable.

Membership lives in memory, as in Kafka: only the group snapshot (``GroupMetadata`` record) is written, when a
generation's assignment is stored, when a static member is replaced, and when the group becomes Empty. Records the
shard writes for a live group are *not* replayed into it (Kafka writes them with ``replayRecords=false``); the
one exception is the leader's assignment, whose replay hands the assignment out (see ``GroupShard.replay``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from oncelog.clock import Clock
from oncelog.coordinator.runtime import CoordinatorResult
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_groups_response import DescribedGroup, DescribedGroupMember
from oncelog.protocol.messages.heartbeat_response import HeartbeatResponse
from oncelog.protocol.messages.join_group_request import JoinGroupRequest
from oncelog.protocol.messages.join_group_response import JoinGroupResponse, JoinGroupResponseMember
from oncelog.protocol.messages.leave_group_request import MemberIdentity
from oncelog.protocol.messages.leave_group_response import LeaveGroupResponse, MemberResponse
from oncelog.protocol.messages.list_groups_response import ListedGroup
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest
from oncelog.protocol.messages.sync_group_response import SyncGroupResponse

from .config import GroupConfig
from .group import NEW_MEMBER_JOIN_TIMEOUT_MS, ClassicGroup, Member
from .records import group_record
from .state import GroupState

log = logging.getLogger("oncelog.coordinator.group")

__all__ = [
    "GroupMetadataManager",
    "complete_join",
    "expire",
    "heartbeat",
    "join_error",
    "join_group",
    "leave_group",
    "on_assignment_durable",
    "prepare_rebalance",
    "remove_member",
    "resolved",
    "sync_error",
    "sync_group",
]

Record = tuple[bytes, "bytes | None"]

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                                              GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)


class GroupMetadataManager:
    """The classic groups of one ``__consumer_offsets`` partition by id, with what their operations read (the
    broker's group settings, the clock) and the records an append-failure path produced but could not return (the
    shard writes them at its next tick)."""

    def __init__(self, clock: Clock, config: GroupConfig) -> None:
        self.clock = clock
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self.deferred_records: list[Record] = []

    def now(self) -> int:
        return self.clock.monotonic_ms()

    def take_deferred_records(self) -> list[Record]:
        records, self.deferred_records = self.deferred_records, []
        return records

    def ensure_group(self, group_id: str) -> None:
        """A group with offsets here: if it was never managed here, a simple (standalone) group."""
        if group_id not in self.groups:
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.wall_ms())

    def remove_group(self, group_id: str) -> None:
        """The group's tombstone: it becomes Dead and its parked members are answered COORDINATOR_NOT_AVAILABLE."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            if group.state is not DEAD:
                group.transition_to(DEAD, self.clock.wall_ms())
            for m in group.all_members():
                remove_member(group, m.member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def describe(self, group_id: str) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None or group.state is DEAD:
            return DescribedGroup(error_code=0, group_id=group_id, group_state=DEAD.display_name,
                                  protocol_type="", protocol_data="", members=[])
        stable = group.state is STABLE
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
                if g.state is not DEAD and (states is None or g.state in states)]


def _future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


def resolved(value: Any) -> asyncio.Future[Any]:
    """A future that already holds ``value`` (an answer known at once)."""
    return _resolved(value)


def _resolved(value: Any) -> asyncio.Future[Any]:
    fut = _future()
    fut.set_result(value)
    return fut


def _complete(fut: asyncio.Future[Any] | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)


def join_error(code: int, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, generation_id=-1, member_id=member_id, protocol_name=None,
                             protocol_type=None, leader="")


def sync_error(code: int) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, assignment=b"")


def _members_for_leader(group: ClassicGroup) -> list[JoinGroupResponseMember]:
    return [JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                    metadata=m.metadata(group.protocol_name)) for m in group.members.values()]


def _join_result(group: ClassicGroup, member: Member, leader: str | None = None, members: bool | None = None,
                 skip_assignment: bool = False) -> JoinGroupResponse:
    is_leader = group.is_leader(member.member_id) if members is None else members
    return JoinGroupResponse(error_code=0, generation_id=group.generation, protocol_type=group.protocol_type,
                             protocol_name=group.protocol_name, leader=leader if leader is not None else
                             (group.leader_id or ""), skip_assignment=skip_assignment, member_id=member.member_id,
                             members=_members_for_leader(group) if is_leader else [])


def _validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
    """Kafka's ClassicGroup.validateMember: FENCED_INSTANCE_ID for a replaced static member, else
    UNKNOWN_MEMBER_ID for an id the group does not know."""
    if instance_id is not None:
        existing = group.static_member_id(instance_id)
        if existing is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if existing != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE
    return ErrorCode.NONE if group.has_member(member_id) else ErrorCode.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------------------------------- join
def join_group(manager: GroupMetadataManager, req: JoinGroupRequest, version: int, client_id: str,
               client_host: str) -> CoordinatorResult[Any]:
    cfg = manager.config
    gid, member_id = req.group_id, req.member_id
    instance_id = req.group_instance_id if version >= 5 else None
    rebalance_timeout = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms

    def err(code: int, mid: str = member_id) -> CoordinatorResult[Any]:
        return CoordinatorResult([], _resolved(join_error(code, mid)))

    if not gid:
        return err(ErrorCode.INVALID_GROUP_ID)
    if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
        return err(ErrorCode.INVALID_SESSION_TIMEOUT)
    group = manager.groups.get(gid)
    is_unknown = member_id == ""
    created = False
    if group is None:
        if not is_unknown:
            return err(ErrorCode.UNKNOWN_MEMBER_ID)
        group = ClassicGroup(gid, state_timestamp=manager.clock.wall_ms())
        manager.groups[gid] = group
        created = True
    if group.state is DEAD:
        return err(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
    code = ErrorCode.NONE
    if not _accept_joining_member(group, member_id, cfg.max_size):
        group.pending_members.pop(member_id, None)
        code = ErrorCode.GROUP_MAX_SIZE_REACHED
    elif not group.supports_protocols(req.protocol_type, [n for n, _ in protocols]):
        code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if code:
        if created:
            del manager.groups[gid]
        return err(code, "" if code == ErrorCode.GROUP_MAX_SIZE_REACHED else member_id)
    spec = _Spec(client_id, client_host, rebalance_timeout, req.session_timeout_ms, req.protocol_type, protocols)
    if is_unknown:
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is None:
                return _add_member_and_rebalance(manager, group, new_id, instance_id, spec)
            return _update_static_member(manager, group, instance_id, existing, new_id, spec, version)
        if version >= 4:
            group.pending_members[new_id] = manager.now() + req.session_timeout_ms
            return err(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        return _add_member_and_rebalance(manager, group, new_id, None, spec)
    return _join_existing(manager, group, member_id, instance_id, spec)


class _Spec:
    __slots__ = ("client_host", "client_id", "protocol_type", "protocols", "rebalance_timeout", "session_timeout")

    def __init__(self, client_id: str, client_host: str, rebalance_timeout: int, session_timeout: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        self.client_id, self.client_host = client_id, client_host
        self.rebalance_timeout, self.session_timeout = rebalance_timeout, session_timeout
        self.protocol_type, self.protocols = protocol_type, protocols


def _accept_joining_member(group: ClassicGroup, member_id: str, max_size: int) -> bool:
    """Kafka's acceptJoiningMember (group.max.size)."""
    if group.state in (EMPTY, DEAD):
        return True
    if group.state is PREPARING:
        m = group.members.get(member_id)
        return (m is not None and m.awaiting_join) or sum(1 for x in group.members.values() if x.awaiting_join) \
            < max_size
    return group.has_member(member_id) or len(group.members) < max_size


def _join_existing(manager: GroupMetadataManager, group: ClassicGroup, member_id: str, instance_id: str | None,
                   spec: _Spec) -> CoordinatorResult[Any]:
    if member_id in group.pending_members:
        if instance_id is not None:  # pending ids are only handed to dynamic members
            return CoordinatorResult([], _resolved(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)))
        return _add_member_and_rebalance(manager, group, member_id, None, spec)
    code = _validate_member(group, member_id, instance_id)
    if code:
        return CoordinatorResult([], _resolved(join_error(code, member_id)))
    member = group.members[member_id]
    if group.state is PREPARING:
        return _update_member_and_rebalance(manager, group, member, spec)
    if group.state is COMPLETING:
        if member.matches(spec.protocols):
            # the member lost the JoinGroup answer of this generation: give it again
            return CoordinatorResult([], _resolved(_join_result(group, member)))
        return _update_member_and_rebalance(manager, group, member, spec)
    if group.state is STABLE:
        if group.is_leader(member_id) or not member.matches(spec.protocols):
            return _update_member_and_rebalance(manager, group, member, spec)
        return CoordinatorResult([], _resolved(_join_result(group, member)))
    return CoordinatorResult([], _resolved(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)))


def _add_member_and_rebalance(manager: GroupMetadataManager, group: ClassicGroup, member_id: str, instance_id: str | None,
                              spec: _Spec) -> CoordinatorResult[Any]:
    fut = _future()
    member = Member(member_id, instance_id, spec.client_id, spec.client_host, spec.rebalance_timeout,
                    spec.session_timeout, spec.protocol_type, spec.protocols, join_waiter=fut, is_new=True,
                    heartbeat_deadline=manager.now() + NEW_MEMBER_JOIN_TIMEOUT_MS)
    if group.state is PREPARING and group.generation == 0:
        group.new_member_added = True
    group.add(member)
    return CoordinatorResult(_rebalance_or_complete_join(manager, group), fut)


def _set_join_waiter(member: Member) -> asyncio.Future[Any]:
    if member.awaiting_join:  # a repeated JoinGroup: the older request must still get an answer
        _complete(member.join_waiter, join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
    fut = _future()
    member.join_waiter = fut
    return fut


def _update_member(member: Member, spec: _Spec) -> None:
    member.protocols = spec.protocols
    member.rebalance_timeout_ms = spec.rebalance_timeout
    member.session_timeout_ms = spec.session_timeout
    member.client_id, member.client_host = spec.client_id, spec.client_host


def _update_member_and_rebalance(manager: GroupMetadataManager, group: ClassicGroup, member: Member,
                                 spec: _Spec) -> CoordinatorResult[Any]:
    _update_member(member, spec)
    fut = _set_join_waiter(member)
    return CoordinatorResult(_rebalance_or_complete_join(manager, group), fut)


def _update_static_member(manager: GroupMetadataManager, group: ClassicGroup, instance_id: str, old_id: str, new_id: str,
                          spec: _Spec, version: int) -> CoordinatorResult[Any]:
    current_leader = group.leader_id
    old = group.members[old_id]
    _complete(old.join_waiter, join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
    _complete(old.sync_waiter, sync_error(ErrorCode.FENCED_INSTANCE_ID))
    member = group.replace_static_member(instance_id, old_id, new_id)
    member.heartbeat_deadline = manager.now() + spec.session_timeout
    saved = (list(member.protocols), member.rebalance_timeout_ms, member.session_timeout_ms)
    _update_member(member, spec)
    fut = _set_join_waiter(member)
    if group.state is STABLE:
        if group.protocol_name == group.select_protocol():
            # nothing the assignment depends on changed: persist the new member id, no rebalance
            member.join_waiter = None
            if version >= 9:
                is_leader = group.is_leader(new_id)
                resp = _join_result(group, member, members=is_leader, skip_assignment=is_leader)
            else:
                resp = _join_result(group, member, leader=current_leader or "", members=False)

            def revert() -> None:
                # The new member id could not be stored: the instance keeps its old id and settings (Kafka reverts
                # the replacement and reschedules the old member's heartbeat). ``fut`` is not touched: it holds the
                # answer of a durable write and is handed out only then; on a failed write the runtime answers
                # the caller with the code mapped from the append failure (append_error_code), which the
                # coordinator turns into a JoinGroup error without a member id, as Kafka answers.
                if group.static_member_id(instance_id) != new_id:
                    return
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved
                group.replace_static_member(instance_id, new_id, old_id)
                member.heartbeat_deadline = manager.now() + member.session_timeout_ms

            fut.set_result(resp)
            return CoordinatorResult([group_record(group)], fut, on_failure=revert)
        return CoordinatorResult(_rebalance_or_complete_join(manager, group), fut)
    if group.state is COMPLETING:
        return CoordinatorResult(_prepare_rebalance(manager, group), fut)
    return CoordinatorResult(_maybe_complete_join(manager, group), fut)


# ---------------------------------------------------------------------------------------------------- phases
def _rebalance_or_complete_join(manager: GroupMetadataManager, group: ClassicGroup) -> list[Record]:
    if group.can_rebalance():
        return _prepare_rebalance(manager, group)
    return _maybe_complete_join(manager, group)


def prepare_rebalance(manager: GroupMetadataManager, group: ClassicGroup) -> list[Record]:
    """Start a rebalance of a Stable/CompletingRebalance/Empty group (Kafka's prepareRebalance)."""
    return _prepare_rebalance(manager, group)


def _prepare_rebalance(manager: GroupMetadataManager, group: ClassicGroup) -> list[Record]:
    if group.state is COMPLETING:
        _reset_and_propagate(group, ErrorCode.REBALANCE_IN_PROGRESS)
    group.pending_sync.clear()
    group.sync_deadline = 0
    now = manager.now()
    initial = group.state is EMPTY
    group.transition_to(PREPARING, manager.clock.wall_ms())
    if initial:
        delay = manager.config.initial_rebalance_delay_ms
        group.initial_join = True
        group.initial_remaining_ms = max(group.max_rebalance_timeout_ms() - delay, 0)
        group.join_deadline = now + delay
        return []
    group.initial_join = False
    group.join_deadline = now + group.max_rebalance_timeout_ms()
    return _maybe_complete_join(manager, group)


def _maybe_complete_join(manager: GroupMetadataManager, group: ClassicGroup) -> list[Record]:
    if group.state is PREPARING and not group.initial_join and group.has_all_members_joined():
        return complete_join(manager, group)
    return []


def _reset_and_propagate(group: ClassicGroup, code: int) -> None:
    """Forget the assignment being handed out and fail every parked SyncGroup (prepareRebalance,
    resetAndPropagateAssignmentWithError)."""
    group.awaiting_persist = None
    group.pending_assignment = {}
    for m in group.members.values():
        m.assignment = b""
        _complete(m.sync_waiter, sync_error(code))


def complete_join(manager: GroupMetadataManager, group: ClassicGroup) -> list[Record]:
    """The join phase ends: drop dynamic members that did not rejoin, start the next generation, answer every
    parked JoinGroup (the leader gets the members and their metadata)."""
    if group.state is not PREPARING:
        return []
    now = manager.now()
    for m in group.all_members():
        if not m.awaiting_join and not m.is_static:
            remove_member(group, m.member_id)
    if group.members and not group.maybe_elect_joined_leader():
        # nobody rejoined (only static members that went quiet): wait another rebalance timeout, the session
        # timeouts will remove them
        group.initial_join = False
        group.join_deadline = now + group.max_rebalance_timeout_ms()
        return []
    group.generation += 1
    group.initial_join = False
    group.join_deadline = 0
    group.pending_sync.clear()
    if not group.members:
        group.protocol_name = None
        group.transition_to(EMPTY, manager.clock.wall_ms())
        return [group_record(group)]
    group.protocol_name = group.select_protocol()
    group.transition_to(COMPLETING, manager.clock.wall_ms())
    log.info("group %s: generation %d with %d member(s) %s, leader %s, protocol %s", group.group_id,
             group.generation, len(group.members), list(group.members), group.leader_id, group.protocol_name)
    for m in group.all_members():
        _complete(m.join_waiter, _join_result(group, m))
        m.join_waiter = None
        m.is_new = False
        m.heartbeat_deadline = now + m.session_timeout_ms
        group.pending_sync.add(m.member_id)
    group.sync_deadline = now + group.max_rebalance_timeout_ms()
    return []


def remove_member(group: ClassicGroup, member_id: str, code: int = ErrorCode.UNKNOWN_MEMBER_ID) -> None:
    member = group.remove(member_id)
    if member is not None:
        log.info("group %s: member %s removed (%s)", group.group_id, member_id, group.state.display_name)
        _complete(member.join_waiter, join_error(code, ""))
        _complete(member.sync_waiter, sync_error(code))


def _remove_member_and_update(manager: GroupMetadataManager, group: ClassicGroup, member_id: str) -> list[Record]:
    remove_member(group, member_id)
    if group.state in (STABLE, COMPLETING):
        return _prepare_rebalance(manager, group)
    if group.state is PREPARING:
        return _maybe_complete_join(manager, group)
    return []


# ---------------------------------------------------------------------------------------------------- sync
def sync_group(manager: GroupMetadataManager, req: SyncGroupRequest, version: int) -> CoordinatorResult[Any]:
    def err(code: int) -> CoordinatorResult[Any]:
        return CoordinatorResult([], _resolved(sync_error(code)))

    group = manager.groups.get(req.group_id)
    if group is None:
        return err(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.state is DEAD:
        return err(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    instance_id = req.group_instance_id if version >= 3 else None
    code = _validate_member(group, req.member_id, instance_id)
    if code:
        return err(code)
    if req.generation_id != group.generation:
        return err(ErrorCode.ILLEGAL_GENERATION)
    if version >= 5 and ((req.protocol_type is not None and req.protocol_type != group.protocol_type)
                         or (req.protocol_name is not None and req.protocol_name != group.protocol_name)):
        return err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    group.pending_sync.discard(req.member_id)
    member = group.members[req.member_id]
    if group.state is EMPTY:
        return err(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.state is PREPARING:
        return err(ErrorCode.REBALANCE_IN_PROGRESS)
    member.heartbeat_deadline = manager.now() + member.session_timeout_ms
    if group.state is STABLE:
        return CoordinatorResult([], _resolved(_sync_ok(group, member)))
    # CompletingRebalance: park until the leader's assignment is durable
    if member.awaiting_sync:
        _complete(member.sync_waiter, sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
    fut = _future()
    member.sync_waiter = fut
    if not group.is_leader(req.member_id) or group.awaiting_persist == group.generation:
        return CoordinatorResult([], fut)
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    full = {mid: assignments.get(mid, b"") for mid in group.members}
    group.awaiting_persist = group.generation
    group.pending_assignment = full
    generation = group.generation

    def failed() -> None:
        if group.state is COMPLETING and group.generation == generation:
            _reset_and_propagate(group, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            manager.deferred_records.extend(_prepare_rebalance(manager, group))

    return CoordinatorResult([group_record(group, full)], fut, on_failure=failed)


def _sync_ok(group: ClassicGroup, member: Member) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=0, protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                             assignment=member.assignment)


def on_assignment_durable(group: ClassicGroup, generation: int, wall_ms: int, now: int) -> None:
    """The leader's assignment of ``generation`` is in the log: hand it out and become Stable. Each member answered
    here gets a fresh session from now (Kafka's propagateAssignment): it may have waited for the leader longer
    than its session timeout."""
    if group.state is not COMPLETING or group.generation != generation or group.awaiting_persist != generation:
        return
    for mid, m in group.members.items():
        m.assignment = group.pending_assignment.get(mid, b"")
    group.awaiting_persist = None
    group.pending_assignment = {}
    group.transition_to(STABLE, wall_ms)
    log.info("group %s: generation %d stable, assignment sizes %s", group.group_id, generation,
             {mid: len(m.assignment) for mid, m in group.members.items()})
    for m in group.members.values():
        if m.awaiting_sync:
            _complete(m.sync_waiter, _sync_ok(group, m))
            m.heartbeat_deadline = now + m.session_timeout_ms


# ---------------------------------------------------------------------------------------------------- heartbeat
def heartbeat(manager: GroupMetadataManager, group_id: str, generation: int, member_id: str,
              instance_id: str | None) -> CoordinatorResult[Any]:
    def resp(code: int) -> CoordinatorResult[Any]:
        return CoordinatorResult([], HeartbeatResponse(error_code=code))

    group = manager.groups.get(group_id)
    if group is None:
        return resp(ErrorCode.UNKNOWN_MEMBER_ID)
    if group.state is DEAD:
        return resp(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code = _validate_member(group, member_id, instance_id)
    if code:
        return resp(code)
    if generation != group.generation:
        return resp(ErrorCode.ILLEGAL_GENERATION)
    if group.state is EMPTY:
        return resp(ErrorCode.UNKNOWN_MEMBER_ID)
    member = group.members[member_id]
    member.heartbeat_deadline = manager.now() + member.session_timeout_ms
    if group.state is PREPARING:
        return resp(ErrorCode.REBALANCE_IN_PROGRESS)
    return resp(ErrorCode.NONE)


# ---------------------------------------------------------------------------------------------------- leave
def leave_group(manager: GroupMetadataManager, group_id: str, members: list[MemberIdentity]) -> CoordinatorResult[Any]:
    group = manager.groups.get(group_id)
    if group is None:
        return CoordinatorResult([], LeaveGroupResponse(error_code=0, members=[
            MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                           error_code=ErrorCode.UNKNOWN_MEMBER_ID) for m in members]))
    if group.state is DEAD:
        return CoordinatorResult([], LeaveGroupResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
    out: list[MemberResponse] = []
    leaving: list[str] = []
    pending_left = False
    for ident in members:
        code = ErrorCode.NONE
        if ident.group_instance_id is not None:
            existing = group.static_member_id(ident.group_instance_id)
            if existing is None:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif ident.member_id and ident.member_id != existing:
                code = ErrorCode.FENCED_INSTANCE_ID
            else:
                leaving.append(existing)
        elif ident.member_id in group.pending_members:
            del group.pending_members[ident.member_id]
            pending_left = True
        elif group.has_member(ident.member_id):
            leaving.append(ident.member_id)
        else:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        out.append(MemberResponse(member_id=ident.member_id, group_instance_id=ident.group_instance_id,
                                  error_code=code))
    records: list[Record] = []
    for mid in dict.fromkeys(leaving):
        records += _remove_member_and_update(manager, group, mid)
    if pending_left and not leaving:
        records += _maybe_complete_join(manager, group)
    return CoordinatorResult(records, LeaveGroupResponse(error_code=0, members=out))


# ---------------------------------------------------------------------------------------------------- timers
def expire(manager: GroupMetadataManager, group: ClassicGroup, now: int) -> list[Record]:
    """Fire every deadline of ``group`` that has passed: pending member ids, member sessions, the join phase
    (rebalance timeout or the initial delay) and the sync phase."""
    records: list[Record] = []
    for mid, deadline in list(group.pending_members.items()):
        if now >= deadline:
            del group.pending_members[mid]
            records += _maybe_complete_join(manager, group)
    for m in group.all_members():
        if m.member_id in group.members and not m.heartbeat_satisfied_until(now):
            records += _remove_member_and_update(manager, group, m.member_id)
    while group.state is PREPARING and now >= group.join_deadline:
        if group.initial_join and group.new_member_added and group.initial_remaining_ms > 0:
            # members arrived during the initial delay: wait another delay (bounded by the rebalance timeout)
            delay = min(manager.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.new_member_added = False
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            group.join_deadline = now + delay
        else:
            group.initial_join = False
            records += complete_join(manager, group)
            break
    if group.state in (COMPLETING, STABLE) and group.pending_sync and now >= group.sync_deadline:
        for mid in list(group.pending_sync):
            remove_member(group, mid)
        group.pending_sync.clear()
        records += _prepare_rebalance(manager, group) if group.state in (STABLE, COMPLETING) else []
    return records
