"""KIP-848's online migration between the classic and the consumer group protocol, and the classic protocol's
requests served by a consumer group (Kafka's GroupMetadataManager: convertToConsumerGroup, convertToClassicGroup,
classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup,
classicGroupLeaveToConsumerGroup), under ``group.consumer.migration.policy``.

Upgrade: the first member joining a classic group of the consumer protocol with ConsumerGroupHeartbeat turns it
into a consumer group. The classic group's tombstone is written, then the records of a consumer group at the
classic generation whose members are the classic ones, each Stable with the partitions of its last classic
assignment (its target too). The join then goes on as any: the group epoch is bumped, a target assignment
computed, and the classic members, told REBALANCE_IN_PROGRESS by their next Heartbeat, rejoin with JoinGroup.

Classic members of a consumer group keep their protocol: JoinGroup is answered at once (no join phase, nobody
leads: the assignment is the broker's), with the member's epoch as generation; SyncGroup hands out its current
assignment in the embedded consumer protocol; Heartbeat answers REBALANCE_IN_PROGRESS while the member has to
rejoin (its epoch is behind the group's, it has partitions to revoke, or partitions it waited for were released);
LeaveGroup fences. An eager member rejoins owning nothing, a cooperative one with what it keeps
(ownedPartitions), and the consumer group's reconciliation does the rest.

Downgrade: when the last member of the consumer protocol leaves a group whose other members use the classic one,
the consumer group's tombstones are written with a classic group's GroupMetadata (its members, their target
assignments), which then starts a rebalance.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from oncelog.coordinator.runtime import CoordinatorResult
from oncelog.protocol.assignors import Assignment as ProtocolAssignment
from oncelog.protocol.assignors import decode_assignment, decode_subscription, encode_assignment
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.heartbeat_response import HeartbeatResponse
from oncelog.protocol.messages.join_group_request import JoinGroupRequest
from oncelog.protocol.messages.join_group_response import JoinGroupResponse
from oncelog.protocol.messages.leave_group_request import MemberIdentity
from oncelog.protocol.messages.leave_group_response import LeaveGroupResponse, MemberResponse
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest
from oncelog.protocol.messages.sync_group_response import SyncGroupResponse

from . import consumer_records as rec
from . import membership
from .consumer_admin import tombstone_records
from .consumer_group import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    GroupError,
    MemberState,
)
from .consumer_membership import ConsumerGroupManager, fence_members, update_member
from .group import ClassicGroup, Member
from .membership import GroupMetadataManager
from .records import group_record, group_tombstone
from .state import GroupState

__all__ = ["classic_heartbeat", "classic_join", "classic_leave", "classic_sync", "install"]

log = logging.getLogger("oncelog.coordinator.group")
Record = tuple[bytes, "bytes | None"]
CONSUMER = "consumer"


def install(cm: ConsumerGroupManager, classic: GroupMetadataManager) -> None:
    """Let ``cm`` upgrade classic groups and downgrade consumer groups as its migration policy allows."""
    policy = cm.config.consumer_migration_policy
    if policy in ("upgrade", "bidirectional"):
        cm.upgrade = lambda group, records: upgrade(cm, group, records)
    if policy in ("downgrade", "bidirectional"):
        cm.downgrade = lambda group, leaving: downgrade(cm, classic, group, leaving)


# -------------------------------------------------------------------------------------------- embedded protocol
def _to_ids(cm: ConsumerGroupManager, partitions: list[tuple[str, int]]) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for topic, p in partitions:
        info = cm.topics.by_name(topic)
        if info is not None:
            out.setdefault(info.topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def _encode(cm: ConsumerGroupManager, assignment: Assignment, metadata: bytes) -> bytes:
    """The assignment in the embedded consumer protocol, in the version of the member's subscription."""
    partitions = []
    for topic_id, parts in assignment.items():
        info = cm.topics.by_id(topic_id)
        if info is not None:
            partitions += [(info.name, p) for p in sorted(parts)]
    version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
    try:
        return encode_assignment(ProtocolAssignment(sorted(partitions)), max(0, version))
    except Exception:  # noqa: BLE001 - a version newer than ours: our newest
        return encode_assignment(ProtocolAssignment(sorted(partitions)))


# -------------------------------------------------------------------------------------------- upgrade
def upgrade(cm: ConsumerGroupManager, classic: ClassicGroup, records: list[Record]) -> ConsumerGroup | None:
    """Kafka's validateOnlineUpgrade + convertToConsumerGroup: the consumer group the records appended make of
    ``classic`` (not stored: their replay creates it), or None when it cannot be converted."""
    gid = classic.group_id
    if classic.protocol_type != CONSUMER or len(classic.members) > cm.config.consumer_max_size:
        log.info("group %s: cannot upgrade the classic group to a consumer group (protocol type %s, %d members)",
                 gid, classic.protocol_type, len(classic.members))
        return None
    group = ConsumerGroup(gid)
    gen = classic.generation
    group.group_epoch = group.assignment_epoch = gen
    members: list[ConsumerGroupMember] = []
    for m in classic.members.values():
        metadata = m.metadata(classic.protocol_name) if classic.protocol_name else (m.protocols or [("", b"")])[0][1]
        try:
            sub = decode_subscription(metadata)
            owned = decode_assignment(m.assignment).partitions if m.assignment else []
        except Exception:  # noqa: BLE001 - malformed embedded protocol: the group stays classic
            log.warning("group %s: cannot upgrade, member %s has a malformed consumer protocol", gid, m.member_id)
            return None
        assigned = _to_ids(cm, owned)
        members.append(ConsumerGroupMember(
            m.member_id, member_epoch=gen, previous_member_epoch=gen, state=MemberState.STABLE,
            instance_id=m.group_instance_id, rack_id=sub.rack_id, rebalance_timeout_ms=m.rebalance_timeout_ms,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=frozenset(sub.topics),
            assigned=assigned, classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols))))
    # the classic members parked in a join or sync rejoin the consumer group
    for cm_ in classic.members.values():
        if cm_.join_waiter is not None and not cm_.join_waiter.done():
            cm_.join_waiter.set_result(membership.join_error(ErrorCode.REBALANCE_IN_PROGRESS, cm_.member_id))
        if cm_.sync_waiter is not None and not cm_.sync_waiter.done():
            cm_.sync_waiter.set_result(membership.sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
    records.append(group_tombstone(gid))
    records += [rec.member_record(gid, new) for new in members]
    records.append(rec.epoch_record(gid, gen))
    records += [rec.target_record(gid, new.member_id, new.assigned) for new in members]
    records.append(rec.target_epoch_record(gid, gen))
    records += [rec.current_assignment_record(gid, new) for new in members]
    for new in members:
        group.update_member(new)
        group.set_target(new.member_id, new.assigned)
        assert new.classic is not None
        cm.set_session(gid, new.member_id, new.classic.session_timeout_ms)
    log.info("group %s: classic group of generation %d upgraded to a consumer group with %d member(s)", gid, gen,
             len(members))
    return group


# -------------------------------------------------------------------------------------------- downgrade
def downgrade(cm: ConsumerGroupManager, classic_mgr: GroupMetadataManager, group: ConsumerGroup,
              leaving: set[str]) -> list[Record] | None:
    """Kafka's validateOnlineDowngradeWithFencedMember + convertToClassicGroup: when the members left after
    ``leaving`` all use the classic protocol, the records turning the group into a classic group (put in place at
    once, as Kafka does, and rebalancing), else None."""
    gid = group.group_id
    remaining = [m for mid, m in group.members.items() if mid not in leaving]
    if not remaining or any(m.classic is None for m in remaining) or len(remaining) > classic_mgr.config.max_size:
        return None
    records = tombstone_records(group)
    now, wall = cm.now(), cm.clock.wall_ms()
    classic = ClassicGroup(gid, state=GroupState.STABLE, state_timestamp=wall, generation=group.group_epoch,
                           protocol_type=CONSUMER)
    for m in remaining:
        assert m.classic is not None
        classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                           m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else m.classic.session_timeout_ms,
                           m.classic.session_timeout_ms, CONSUMER, list(m.classic.protocols),
                           heartbeat_deadline=now + m.classic.session_timeout_ms))
    classic.protocol_name = classic.select_protocol()
    for member in classic.members.values():
        member.assignment = _encode(cm, group.target_of(member.member_id), member.metadata(classic.protocol_name))
    records.append(group_record(classic))
    classic_mgr.groups[gid] = classic
    records += membership.prepare_rebalance(classic_mgr, classic)
    cm.converted.add(gid)
    log.info("group %s: the last member of the consumer protocol left; downgraded to a classic group of "
             "generation %d with %d member(s)", gid, classic.generation, len(remaining))
    return records


# -------------------------------------------------------------------------------------------- classic members
def _supports(group: ConsumerGroup, protocol_type: str, names: list[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and (unless the group is
    empty) a protocol every classic member supports."""
    if protocol_type != CONSUMER or not names:
        return False
    classic = [m for m in group.members.values() if m.classic is not None]
    if not classic:
        return True
    return any(all(name in {n for n, _ in m.classic.protocols} for m in classic if m.classic) for name in names)


def classic_join(cm: ConsumerGroupManager, group: ConsumerGroup, req: JoinGroupRequest, version: int,
                 client_id: str, client_host: str) -> CoordinatorResult[Any]:
    """JoinGroup of a classic member into a consumer group, answered at once with its epoch as generation."""
    def err(code: int, member_id: str = req.member_id) -> CoordinatorResult[Any]:
        return CoordinatorResult([], membership.resolved(membership.join_error(code, member_id)))

    gid = group.group_id
    cfg = cm.config
    if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
        return err(ErrorCode.INVALID_SESSION_TIMEOUT)
    instance_id = req.group_instance_id if version >= 5 else None
    protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
    if len(group.members) >= cfg.consumer_max_size and req.member_id not in group.members:
        return err(ErrorCode.GROUP_MAX_SIZE_REACHED, "")
    if not _supports(group, req.protocol_type, [n for n, _ in protocols]):
        return err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    member_id = req.member_id or f"{client_id}-{uuid.uuid4()}"
    if not req.member_id and instance_id is None and version >= 4:
        return err(ErrorCode.MEMBER_ID_REQUIRED, member_id)
    records: list[Record] = []
    replaced: str | None = None
    existing = group.static_member(instance_id)
    if existing is not None and existing.member_id != member_id:
        if req.member_id:
            return err(ErrorCode.FENCED_INSTANCE_ID)
        replaced = existing.member_id
        member = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
        records += [rec.current_assignment_tombstone(gid, replaced), rec.target_tombstone(gid, replaced),
                    rec.member_tombstone(gid, replaced), rec.member_record(gid, member),
                    rec.target_record(gid, member_id, group.target_of(replaced)),
                    rec.current_assignment_record(gid, member)]
        cm.forget_member(gid, replaced)
    else:
        member = group.members.get(member_id) or ConsumerGroupMember(member_id)
    try:
        sub = decode_subscription(protocols[0][1])
    except Exception:  # noqa: BLE001 - not the consumer protocol's embedded subscription
        return err(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    rebalance = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
    updated = member.replace(instance_id=instance_id, rack_id=sub.rack_id, rebalance_timeout_ms=rebalance,
                             subscribed_topic_names=frozenset(sub.topics), subscribed_topic_regex="",
                             client_id=client_id, client_host=client_host,
                             classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(protocols)))
    owned = _to_ids(cm, sub.owned_partitions)
    reconciled, _ = update_member(cm, group, member, updated, replaced, owned, None, records)
    cm.set_session(gid, member_id, req.session_timeout_ms)
    resp = JoinGroupResponse(error_code=0, generation_id=reconciled.member_epoch, protocol_type=CONSUMER,
                             protocol_name=protocols[0][0], leader="", member_id=member_id, members=[])
    return CoordinatorResult(records, membership.resolved(resp))


def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.member_or_error(member_id)
    else:
        found = group.static_member(instance_id)
        if found is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
        if found.member_id != member_id:
            raise GroupError(ErrorCode.FENCED_INSTANCE_ID)
        member = found
    if member.classic is None:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
    return member


def _waiting_on_unreleased(group: ConsumerGroup, m: ConsumerGroupMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target another member still owns."""
    if m.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    for topic_id, parts in group.target_of(m.member_id).items():
        mine = m.assigned.get(topic_id, frozenset())
        if any(p not in mine and group.current_partition_epoch(topic_id, p) != -1 for p in parts):
            return True
    return False


def classic_sync(cm: ConsumerGroupManager, group: ConsumerGroup, req: SyncGroupRequest,
                 version: int) -> CoordinatorResult[Any]:
    """SyncGroup of a classic member of a consumer group: its current assignment."""
    try:
        member = _classic_member(group, req.member_id, req.group_instance_id if version >= 3 else None)
        if req.generation_id != member.member_epoch:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
        assert member.classic is not None
        name, metadata = member.classic.protocols[0]
        if version >= 5 and ((req.protocol_type is not None and req.protocol_type != CONSUMER)
                             or (req.protocol_name is not None and req.protocol_name != name)):
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS)
    except GroupError as e:
        return CoordinatorResult([], membership.resolved(membership.sync_error(e.code)))
    cm.set_session(group.group_id, member.member_id, member.classic.session_timeout_ms)
    resp = SyncGroupResponse(error_code=0, protocol_type=CONSUMER, protocol_name=name,
                             assignment=_encode(cm, member.assigned, metadata))
    return CoordinatorResult([], membership.resolved(resp))


def classic_heartbeat(cm: ConsumerGroupManager, group: ConsumerGroup, member_id: str, generation: int,
                      instance_id: str | None) -> CoordinatorResult[Any]:
    """Heartbeat of a classic member of a consumer group: REBALANCE_IN_PROGRESS while it must rejoin."""
    try:
        member = _classic_member(group, member_id, instance_id)
        if generation != member.member_epoch:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION)
    except GroupError as e:
        return CoordinatorResult([], HeartbeatResponse(error_code=e.code))
    assert member.classic is not None
    cm.set_session(group.group_id, member.member_id, member.classic.session_timeout_ms)
    rejoin = (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
              or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member)))
    return CoordinatorResult([], HeartbeatResponse(
        error_code=ErrorCode.REBALANCE_IN_PROGRESS if rejoin else ErrorCode.NONE))


def classic_leave(cm: ConsumerGroupManager, group: ConsumerGroup,
                  identities: list[MemberIdentity]) -> CoordinatorResult[Any]:
    """LeaveGroup of classic members of a consumer group: each valid one is fenced."""
    out: list[MemberResponse] = []
    leaving: list[str] = []
    for ident in identities:
        try:
            if ident.group_instance_id is None:
                member = _classic_member(group, ident.member_id, None)
            else:
                found = group.static_member(ident.group_instance_id)
                if found is None:
                    raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID)
                member = _classic_member(group, ident.member_id or found.member_id, ident.group_instance_id)
            leaving.append(member.member_id)
            out.append(MemberResponse(member_id=member.member_id, group_instance_id=ident.group_instance_id))
        except GroupError as e:
            out.append(MemberResponse(member_id=ident.member_id, group_instance_id=ident.group_instance_id,
                                      error_code=e.code))
    records = fence_members(cm, group, leaving) if leaving else []
    return CoordinatorResult(records, LeaveGroupResponse(error_code=0, members=out))

