"""ConsumerGroupHeartbeat: joining, heartbeating in and leaving a consumer group of the KIP-848 protocol, and the
fencing of members whose session or rebalance timeout expired.

Kafka's GroupMetadataManager.consumerGroupHeartbeat and its helpers, as functions of a
:class:`ConsumerGroupManager`. One heartbeat, in Kafka's three steps:

1. the member is created or updated (ConsumerGroupMemberMetadata record when it changed); its regular expression,
   if new, is resolved now against the topics (ConsumerGroupRegularExpression record); the group's subscription
   metadata (ConsumerGroupPartitionMetadata) is recomputed, and the group epoch bumped (ConsumerGroupMetadata) when
   the subscriptions or the subscribed topics changed;
2. when the group epoch is ahead of the target assignment epoch, the assignor computes a new target assignment
   (ConsumerGroupTargetAssignmentMember records for the members whose target changed, then
   ConsumerGroupTargetAssignmentMetadata);
3. the member is reconciled towards its target (:func:`.reconciliation.reconcile`; ConsumerGroupCurrentMemberAssignment
   when its state changed), and the answer carries its epoch and, when needed, its assignment.

An operation only reads the group and returns records; the group changes when they are replayed
(``consumer_records.replay``), so every later operation sees them. Deadlines (sessions, rebalance timeouts) are soft
state of the manager, as Kafka's timers are.

Where oncelog goes beyond Kafka (each only makes a rebalance converge sooner; none changes what members get): a
member removed by a leave or an expired session gets its group's new target assignment computed in the same
operation (Kafka waits for the next heartbeat of some member); regular expressions are resolved in the heartbeat
itself (Kafka resolves them in the background and bumps the epoch when the result is back); and while a group is
reconciling (a member behind its target, revoking, or waiting for a partition another member still owns), its
members are told to heartbeat every ``RECONCILING_HEARTBEAT_INTERVAL_MS`` (or their usual interval, if shorter)
instead of every ``group.consumer.heartbeat.interval.ms``: a revocation, the hand-over of the released partition
and the next epoch of a group still growing (autoscaling) then each take a fraction of a second instead of an
interval (5 s by default). Clients take the interval from every answer (HeartbeatIntervalMs), so a Stable group
is back to the usual rate at its members' next heartbeat.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.clock import Clock
from oncelog.coordinator.runtime import CoordinatorResult
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import consumer_group_heartbeat_response as hb
from oncelog.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from oncelog.protocol.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse

from . import consumer_records as rec
from .assignors import MemberSpec, ServerAssignor, assignors_by_name
from .config import GroupConfig
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    GroupError,
    MemberState,
    ResolvedRegex,
    is_subset,
)
from .reconciliation import reconcile
from .topic_image import MemoryTopicImage, TopicImage, TopicInfo

__all__ = ["RECONCILING_HEARTBEAT_INTERVAL_MS", "REGEX_REFRESH_MIN_INTERVAL_MS", "ConsumerGroupManager", "expire", "fence_members", "heartbeat",
           "rebalance_timer", "response_assignment"]

log = logging.getLogger("oncelog.coordinator.group")
Record = tuple[bytes, "bytes | None"]

#: Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: a group's regular expressions are re-resolved at most this often
REGEX_REFRESH_MIN_INTERVAL_MS = 10_000
#: the heartbeat interval given to the members of a group that is reconciling (oncelog's, see the module docstring)
RECONCILING_HEARTBEAT_INTERVAL_MS = 500


class ConsumerGroupManager:
    """The consumer groups of one ``__consumer_offsets`` partition and what their operations read: the settings,
    the clock, the topics, the classic groups of the partition (a group id is one or the other) and the deadlines."""

    def __init__(self, clock: Clock, config: GroupConfig, topics: TopicImage | None = None,
                 classic_groups: Mapping[str, Any] | None = None,
                 group_overrides: Callable[[str], Mapping[str, str]] | None = None) -> None:
        self.clock = clock
        self.config = config
        self.topics: TopicImage = topics if topics is not None else MemoryTopicImage()
        self.classic_groups: Mapping[str, Any] = classic_groups if classic_groups is not None else {}
        #: a group's dynamic configs (ConfigResource GROUP): consumer.session.timeout.ms, consumer.heartbeat...
        self.group_overrides = group_overrides
        self.groups: dict[str, ConsumerGroup] = {}
        self.assignors: dict[str, ServerAssignor] = assignors_by_name(config.consumer_assignors)
        self.default_assignor = next(iter(self.assignors))
        # soft state: deadlines (monotonic ms) by (group, member), the last regex refresh by group
        self.sessions: dict[tuple[str, str], int] = {}
        self.rebalances: dict[tuple[str, str], tuple[int, int]] = {}  # -> (deadline, member epoch)
        self.regex_refreshed: dict[str, int] = {}
        #: deadlines an operation set, for the shard to put timers on (it drains this after each operation)
        self.touched: set[tuple[str, str]] = set()
        #: groups an operation turned into classic groups (their timers are the classic ones: the shard schedules)
        self.converted: set[str] = set()
        #: ``downgrade(group, leaving member ids) -> records or None``: the online downgrade to a classic group
        #: when the last member of the consumer protocol leaves (``migration.py``; None: never)
        self.downgrade: Callable[[ConsumerGroup, set[str]], list[Record] | None] | None = None
        #: ``upgrade(classic group, records) -> consumer group or None``: the online upgrade of a classic group of
        #: the consumer protocol when a member joins with the KIP-848 protocol (``migration.py``; None: never)
        self.upgrade: Callable[[Any, list[Record]], ConsumerGroup | None] | None = None

    def set_session(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        """The member's session runs from now (``timeout_ms``: its classic session timeout, else the group's)."""
        timeout = timeout_ms if timeout_ms is not None else self.session_timeout_ms(group_id)
        self.sessions[(group_id, member_id)] = self.now() + timeout
        self.touched.add((group_id, member_id))

    def now(self) -> int:
        return self.clock.monotonic_ms()

    def _override(self, group_id: str, name: str) -> int | None:
        if self.group_overrides is None:
            return None
        raw = self.group_overrides(group_id).get(name)
        return None if raw is None else int(raw)

    def session_timeout_ms(self, group_id: str) -> int:
        """``consumer.session.timeout.ms`` of the group, else ``group.consumer.session.timeout.ms``."""
        v = self._override(group_id, "consumer.session.timeout.ms")
        return self.config.consumer_session_timeout_ms if v is None else v

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """``consumer.heartbeat.interval.ms`` of the group, else ``group.consumer.heartbeat.interval.ms``."""
        v = self._override(group_id, "consumer.heartbeat.interval.ms")
        return self.config.consumer_heartbeat_interval_ms if v is None else v

    # ------------------------------------------------------------------ replay
    def replay(self, key: object, value: bytes | None, on_group_removed: Callable[[str], None],
               drop_classic: Callable[[str], None]) -> None:
        def group_for(group_id: str) -> ConsumerGroup:
            group = self.groups.get(group_id)
            if group is None:
                drop_classic(group_id)  # a simple (offsets only) classic group of that id gives way
                group = self.groups[group_id] = ConsumerGroup(group_id)
            return group

        def removed(group_id: str) -> None:
            for key_ in [k for k in self.sessions if k[0] == group_id]:
                del self.sessions[key_]
            for key_ in [k for k in self.rebalances if k[0] == group_id]:
                del self.rebalances[key_]
            self.regex_refreshed.pop(group_id, None)
            on_group_removed(group_id)

        rec.replay(self.groups, group_for, key, value, removed)

    def forget_member(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)
        self.rebalances.pop((group_id, member_id), None)

    # ------------------------------------------------------------------ subscriptions
    def member_topics(self, m: ConsumerGroupMember, resolved: Mapping[str, ResolvedRegex]) -> set[str]:
        topics = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            r = resolved.get(m.subscribed_topic_regex)
            if r is not None:
                topics |= r.topics
        return topics

    def subscription_metadata(self, members: Mapping[str, ConsumerGroupMember],
                              resolved: Mapping[str, ResolvedRegex]) -> dict[str, TopicInfo]:
        """The existing topics the members subscribe to (Kafka's computeSubscriptionMetadata)."""
        names: set[str] = set()
        for m in members.values():
            names |= self.member_topics(m, resolved)
        out: dict[str, TopicInfo] = {}
        for name in names:
            info = self.topics.by_name(name)
            if info is not None and info.num_partitions > 0:
                out[name] = info
        return out

    def resolve_regex(self, regex: str, describable: Callable[[str], bool] | None) -> frozenset[str]:
        """The topics a subscription regex matches (Kafka's TopicRegexResolver: a full match, topics the member may
        describe only)."""
        try:
            pattern = re.compile(regex)
        except re.error as e:
            log.error("regular expression %r does not compile (%s); it matches nothing", regex, e)
            return frozenset()
        return frozenset(t for t in self.topics.names()
                         if pattern.fullmatch(t) and (describable is None or describable(t)))

    def compute_target(self, group: ConsumerGroup, epoch: int, members: Mapping[str, ConsumerGroupMember],
                       metadata: Mapping[str, TopicInfo], resolved: Mapping[str, ResolvedRegex],
                       assignor_name: str | None, carried: Mapping[str, str] | None = None,
                       ) -> tuple[dict[str, Assignment], list[Record]]:
        """Kafka's TargetAssignmentBuilder: every member's target assignment at ``epoch`` and the records of the
        ones that changed, then the assignment epoch. ``carried`` maps a new member id to the member it replaces
        (a static member rejoining), whose target it starts from."""
        name = assignor_name if assignor_name in self.assignors else self.default_assignor
        assignor = self.assignors[name]
        partitions = {t.topic_id: t.num_partitions for t in metadata.values()}
        specs: dict[str, MemberSpec] = {}
        for mid, m in members.items():
            topics = frozenset(metadata[n].topic_id for n in self.member_topics(m, resolved) if n in metadata)
            current = group.target.get(mid)
            if current is None and carried and mid in carried:
                current = group.target.get(carried[mid])
            specs[mid] = MemberSpec(topics, m.instance_id, m.rack_id, current or {})
        new = assignor.assign(specs, partitions)
        records: list[Record] = []
        for mid in sorted(specs):
            assignment = new.get(mid, {})
            if group.target.get(mid) != assignment:
                records.append(rec.target_record(group.group_id, mid, assignment))
        records.append(rec.target_epoch_record(group.group_id, epoch))
        log.info("group %s: target assignment of epoch %d by the %s assignor for %d member(s)", group.group_id,
                 epoch, name, len(specs))
        return new, records


# -------------------------------------------------------------------------------------------- heartbeat
@dataclass(slots=True)
class _Request:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    names: list[str] | None
    regex: str | None
    assignor: str | None
    owned: dict[uuid.UUID, frozenset[int]] | None


def _owned(req: ConsumerGroupHeartbeatRequest) -> dict[uuid.UUID, frozenset[int]] | None:
    if req.topic_partitions is None:
        return None
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in req.topic_partitions:
        out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _validate(mgr: ConsumerGroupManager, req: ConsumerGroupHeartbeatRequest, version: int) -> _Request:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    def invalid(msg: str) -> GroupError:
        return GroupError(ErrorCode.INVALID_REQUEST, msg)

    regex = req.subscribed_topic_regex if version >= 1 else None
    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    epoch = req.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or any(tp.partitions for tp in req.topic_partitions):
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not regex:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not req.member_id:
            raise invalid("MemberId can't be empty.")
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in mgr.assignors:
        raise GroupError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(mgr.assignors)}.")
    if regex:
        try:
            re.compile(regex)
        except re.error as e:
            raise GroupError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.") from None
    return _Request(req.group_id, req.member_id or str(uuid.uuid4()), epoch, req.instance_id, req.rack_id,
                    req.rebalance_timeout_ms, req.subscribed_topic_names, regex, req.server_assignor, _owned(req))


def heartbeat(mgr: ConsumerGroupManager, req: ConsumerGroupHeartbeatRequest, version: int, client_id: str,
              client_host: str, describable: Callable[[str], bool] | None = None,
              ) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]:
    """One ConsumerGroupHeartbeat (join, heartbeat or leave). ``describable(topic)``: may the member's principal
    describe the topic (what its regular expression may match)."""
    try:
        r = _validate(mgr, req, version)
        if r.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return _leave(mgr, r)
        return _heartbeat(mgr, r, client_id, client_host, describable)
    except GroupError as e:
        return CoordinatorResult([], ConsumerGroupHeartbeatResponse(error_code=e.code, error_message=e.message))


def _group_for_join(mgr: ConsumerGroupManager, group_id: str, create: bool, records: list[Record]) -> ConsumerGroup:
    """Kafka's getOrMaybeCreateConsumerGroup: the group, a new one (not stored: the records create it), or an error.
    An Empty classic group of that id is deleted (its tombstone) and replaced."""
    group = mgr.groups.get(group_id)
    if group is not None:
        return group
    classic = mgr.classic_groups.get(group_id)
    if classic is not None and classic.state.display_name != "Dead":
        if create and not classic.members:  # Empty (a member id handed out but not joined yet does not count)
            from .records import group_tombstone  # the classic group's record (a cycle at import time otherwise)

            records.append(group_tombstone(group_id))
            return ConsumerGroup(group_id)
        converted = mgr.upgrade(classic, records) if create and mgr.upgrade is not None else None
        if converted is not None:
            return converted
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    if not create:
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
    return ConsumerGroup(group_id)


def _check_epoch(member: ConsumerGroupMember, received: int, owned: Mapping[uuid.UUID, frozenset[int]] | None) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid (epoch 0 is a rejoin and always valid)."""
    if received == 0:
        return
    if received > member.member_epoch:
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                         f"({received}) than the one known by the group coordinator ({member.member_epoch}). The "
                         "member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and (received != member.previous_member_epoch
                                           or not is_subset(owned, member.assigned)):
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                         f"({received}) than the one known by the group coordinator ({member.member_epoch}). The "
                         "member must abandon all its partitions and rejoin.")


def _member_for(mgr: ConsumerGroupManager, group: ConsumerGroup, r: _Request,
                records: list[Record]) -> tuple[ConsumerGroupMember, str | None]:
    """The member (new, existing, or a rejoining static member taking over its instance's place) and the id of the
    member it replaces (static), with the records of the replacement."""
    joining = r.member_epoch == 0
    if r.instance_id is None:
        member = group.members.get(r.member_id)
        if member is None:
            if not joining:
                raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {r.member_id} is not a member of group {group.group_id}.")
            log.info("group %s: member %s joins with the consumer protocol", group.group_id, r.member_id)
            return ConsumerGroupMember(r.member_id), None
        _check_epoch(member, r.member_epoch, r.owned)
        return member, None
    existing = group.static_member(r.instance_id)
    if joining:
        if existing is None:
            member = group.members.get(r.member_id)
            if member is not None:
                return member, None
            log.info("group %s: static member %s (instance %s) joins", group.group_id, r.member_id, r.instance_id)
            return ConsumerGroupMember(r.member_id), None
        if existing.member_id == r.member_id:
            return existing, None
        if not existing.uses_classic_protocol and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                             f"Static member {r.member_id} with instance id {r.instance_id} cannot join the group "
                             f"because the instance id is owned by {existing.member_id} member.")
        new = existing.replace(member_id=r.member_id, member_epoch=0, previous_member_epoch=0)
        records += [rec.current_assignment_tombstone(group.group_id, existing.member_id),
                    rec.target_tombstone(group.group_id, existing.member_id),
                    rec.member_tombstone(group.group_id, existing.member_id),
                    rec.member_record(group.group_id, new),
                    rec.target_record(group.group_id, new.member_id, group.target_of(existing.member_id)),
                    rec.current_assignment_record(group.group_id, new)]
        mgr.forget_member(group.group_id, existing.member_id)
        log.info("group %s: static member %s (instance %s) rejoins, replacing member %s", group.group_id,
                 r.member_id, r.instance_id, existing.member_id)
        return new, existing.member_id
    if existing is None:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
    if existing.member_id != r.member_id:
        raise GroupError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {r.member_id} with instance id "
                         f"{r.instance_id} was fenced by member {existing.member_id}.")
    _check_epoch(existing, r.member_epoch, r.owned)
    return existing, None


def _heartbeat(mgr: ConsumerGroupManager, r: _Request, client_id: str, client_host: str,
               describable: Callable[[str], bool] | None) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]:
    records: list[Record] = []
    gid = r.group_id
    group = _group_for_join(mgr, gid, r.member_epoch == 0, records)
    if len(group.members) >= mgr.config.consumer_max_size and r.member_id not in group.members:
        raise GroupError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of "
                         f"{mgr.config.consumer_max_size} members.")
    member, replaced = _member_for(mgr, group, r, records)
    updated = member.replace(
        instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
        rack_id=r.rack_id if r.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=r.rebalance_timeout_ms if r.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
        server_assignor=r.assignor if r.assignor is not None else member.server_assignor,
        subscribed_topic_names=frozenset(r.names) if r.names is not None else member.subscribed_topic_names,
        subscribed_topic_regex=r.regex if r.regex is not None else member.subscribed_topic_regex,
        client_id=client_id, client_host=client_host, classic=None)
    reconciled, in_flux = update_member(mgr, group, member, updated, replaced, r.owned, describable, records)
    mgr.set_session(gid, reconciled.member_id)
    interval = mgr.heartbeat_interval_ms(gid)
    if in_flux:
        interval = min(interval, RECONCILING_HEARTBEAT_INTERVAL_MS)
    resp = ConsumerGroupHeartbeatResponse(member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
                                          heartbeat_interval_ms=interval)
    full = r.rebalance_timeout_ms != -1 and (r.names is not None or r.regex is not None) and r.owned is not None
    if r.member_epoch == 0 or full or reconciled.assigned != member.assigned:
        resp.assignment = response_assignment(reconciled.assigned)
    return CoordinatorResult(records, resp)


def update_member(mgr: ConsumerGroupManager, group: ConsumerGroup, member: ConsumerGroupMember,
                  updated: ConsumerGroupMember, replaced: str | None,
                  owned: Mapping[uuid.UUID, frozenset[int]] | None, describable: Callable[[str], bool] | None,
                  records: list[Record]) -> tuple[ConsumerGroupMember, bool]:
    """Kafka's three steps of a heartbeat (or of a classic member's JoinGroup) once the member is known: ``member``
    as it was (a new one: only its id), ``updated`` with what the request says, ``replaced`` the member id a static
    member takes over. Appends the records; returns the reconciled member and whether the group is still
    reconciling after this (then its members heartbeat faster)."""
    gid = group.group_id
    names_changed = False
    if updated != member:
        records.append(rec.member_record(gid, updated))
        names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
    resolved, regex_changed, bump = _update_regexes(mgr, group, member, updated, describable, records)
    members = {mid: m for mid, m in group.members.items() if mid != replaced}
    members[updated.member_id] = updated
    metadata = mgr.subscription_metadata(members, resolved)
    bump = bump or group.group_epoch == 0 or names_changed
    if metadata != group.subscription_metadata:
        records.append(rec.subscription_metadata_record(gid, metadata))
        bump = True
    group_epoch = group.group_epoch
    if bump:
        group_epoch += 1
        records.append(rec.epoch_record(gid, group_epoch))
        log.info("group %s: epoch %d (member %s)", gid, group_epoch, updated.member_id)
    if group_epoch > group.assignment_epoch:
        carried = {updated.member_id: replaced} if replaced else None
        targets, target_records = mgr.compute_target(group, group_epoch, members, metadata, resolved,
                                                     group.preferred_server_assignor(member, updated), carried)
        records += target_records
        target_epoch, target = group_epoch, targets.get(updated.member_id, {})
    else:
        target_epoch = group.assignment_epoch
        target = group.target.get(updated.member_id) or (group.target_of(replaced) if replaced else {})
    subscription_changed = names_changed or regex_changed
    reconciled = updated
    if subscription_changed or not updated.is_reconciled_to(target_epoch):
        subscribed = frozenset(metadata[n].topic_id for n in mgr.member_topics(updated, resolved) if n in metadata)
        reconciled = reconcile(updated, target_epoch, target, group.current_partition_epoch, owned, subscribed,
                               subscription_changed)
    if reconciled != updated or replaced is not None:
        records.append(rec.current_assignment_record(gid, reconciled))
        rebalance_timer(mgr, gid, reconciled)
    members[reconciled.member_id] = reconciled
    in_flux = any(not m.is_reconciled_to(target_epoch) for m in members.values())
    return reconciled, in_flux


def response_assignment(assigned: Assignment) -> hb.Assignment:
    return hb.Assignment(topic_partitions=[hb.TopicPartitions(topic_id=t, partitions=sorted(parts))
                                           for t, parts in sorted(assigned.items(), key=lambda kv: str(kv[0]))
                                           if parts])


def rebalance_timer(mgr: ConsumerGroupManager, group_id: str, m: ConsumerGroupMember) -> None:
    """A member with partitions to revoke has its rebalance timeout to do it (Kafka's
    scheduleConsumerGroupRebalanceTimeout); any other state cancels it."""
    key = (group_id, m.member_id)
    if m.state is MemberState.UNREVOKED_PARTITIONS and not m.uses_classic_protocol:
        timeout = m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else mgr.session_timeout_ms(group_id)
        mgr.rebalances[key] = (mgr.now() + timeout, m.member_epoch)
        mgr.touched.add(key)
    else:
        mgr.rebalances.pop(key, None)


def _update_regexes(mgr: ConsumerGroupManager, group: ConsumerGroup, member: ConsumerGroupMember,
                    updated: ConsumerGroupMember, describable: Callable[[str], bool] | None,
                    records: list[Record]) -> tuple[dict[str, ResolvedRegex], bool, bool]:
    """Kafka's maybeUpdateRegularExpressions, resolving synchronously: (the group's resolved regexes as they will be,
    whether the member's regex changed, whether the group epoch must be bumped for it)."""
    gid = group.group_id
    resolved = dict(group.resolved_regexes)
    old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
    counts = dict(group.subscribed_regexes)
    now, wall = mgr.now(), mgr.clock.wall_ms()
    changed = old != new
    bump = False
    fresh: set[str] = set()
    if changed:
        if old:
            counts[old] = counts.get(old, 0) - 1 if member.member_id in group.members else counts.get(old, 0)
            if counts.get(old, 0) <= 0:
                counts.pop(old, None)
                if old in resolved:
                    records.append(rec.regex_tombstone(gid, old))
                    del resolved[old]
            bump = True
        if new:
            counts[new] = counts.get(new, 0) + 1
            if new not in resolved:
                resolved[new] = ResolvedRegex(mgr.resolve_regex(new, describable), 0, wall)
                records.append(rec.regex_record(gid, new, resolved[new]))
                fresh.add(new)
                mgr.regex_refreshed[gid] = now
            bump = True
    last = mgr.regex_refreshed.get(gid)
    if counts and (last is None or now > last + REGEX_REFRESH_MIN_INTERVAL_MS):
        for regex in sorted(counts):
            if regex in fresh:
                continue
            topics = mgr.resolve_regex(regex, describable)
            previous = resolved.get(regex)
            if previous is None or previous.topics != topics:
                resolved[regex] = ResolvedRegex(topics, 0, wall)
                records.append(rec.regex_record(gid, regex, resolved[regex]))
                bump = True
        mgr.regex_refreshed[gid] = now
    return resolved, changed, bump


# -------------------------------------------------------------------------------------------- leave / fence
def _leave(mgr: ConsumerGroupManager, r: _Request) -> CoordinatorResult[ConsumerGroupHeartbeatResponse]:
    """Kafka's consumerGroupLeave: epoch -1 leaves for good (fenced), -2 is a static member leaving for a while
    (it keeps its partitions and place until it rejoins or its session expires)."""
    gid = r.group_id
    group = mgr.groups.get(gid)
    if group is None:
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
    resp = ConsumerGroupHeartbeatResponse(member_id=r.member_id, member_epoch=r.member_epoch)
    if r.instance_id is None:
        member = group.member_or_error(r.member_id)
        log.info("group %s: member %s left the consumer group", gid, member.member_id)
        return CoordinatorResult(fence_members(mgr, group, [member.member_id]), resp)
    member_or_none = group.static_member(r.instance_id)
    if member_or_none is None:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
    if member_or_none.member_id != r.member_id:
        raise GroupError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {r.member_id} with instance id "
                         f"{r.instance_id} was fenced by member {member_or_none.member_id}.")
    if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        log.info("group %s: static member %s (instance %s) left for now", gid, r.member_id, r.instance_id)
        leaving = member_or_none.replace(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
        mgr.rebalances.pop((gid, r.member_id), None)
        return CoordinatorResult([rec.current_assignment_record(gid, leaving)], resp)
    log.info("group %s: static member %s (instance %s) left the consumer group", gid, r.member_id, r.instance_id)
    return CoordinatorResult(fence_members(mgr, group, [r.member_id]), resp)


def fence_members(mgr: ConsumerGroupManager, group: ConsumerGroup, member_ids: list[str]) -> list[Record]:
    """Remove members (left, or their session or rebalance timeout expired; Kafka's consumerGroupFenceMember), bump
    the group epoch and compute the remaining members' new target assignment."""
    gid = group.group_id
    records: list[Record] = []
    gone = [m for m in (group.members.get(mid) for mid in dict.fromkeys(member_ids)) if m is not None]
    if not gone:
        return records
    if mgr.downgrade is not None:
        converted = mgr.downgrade(group, {m.member_id for m in gone})
        if converted is not None:
            for m in gone:
                mgr.forget_member(gid, m.member_id)
            return converted
    for m in gone:
        records += [rec.current_assignment_tombstone(gid, m.member_id), rec.target_tombstone(gid, m.member_id),
                    rec.member_tombstone(gid, m.member_id)]
        mgr.forget_member(gid, m.member_id)
    counts = dict(group.subscribed_regexes)
    resolved = dict(group.resolved_regexes)
    for m in gone:
        if m.subscribed_topic_regex:
            counts[m.subscribed_topic_regex] = counts.get(m.subscribed_topic_regex, 0) - 1
    for regex, n in counts.items():
        if n <= 0 and regex in resolved:
            records.append(rec.regex_tombstone(gid, regex))
            del resolved[regex]
    ids = {m.member_id for m in gone}
    remaining = {mid: m for mid, m in group.members.items() if mid not in ids}
    metadata = mgr.subscription_metadata(remaining, resolved)
    if metadata != group.subscription_metadata:
        records.append(rec.subscription_metadata_record(gid, metadata))
    epoch = group.group_epoch + 1
    records.append(rec.epoch_record(gid, epoch))
    if remaining:
        _, target_records = mgr.compute_target(group, epoch, remaining, metadata, resolved,
                                               _preferred(remaining))
        records += target_records
    log.info("group %s: member(s) %s removed, epoch %d", gid, sorted(ids), epoch)
    return records


def _preferred(members: Mapping[str, ConsumerGroupMember]) -> str | None:
    counts: dict[str, int] = {}
    for m in members.values():
        if m.server_assignor is not None:
            counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    return min(name for name, n in counts.items() if n == top)


def expire(mgr: ConsumerGroupManager, group: ConsumerGroup, now: int) -> list[Record]:
    """Fence the members of ``group`` whose session expired, or whose rebalance timeout expired while they still
    had not revoked at the epoch it was set for (Kafka's session and rebalance timeout timers)."""
    gid = group.group_id
    fenced: list[str] = []
    for mid, m in group.members.items():
        deadline = mgr.sessions.get((gid, mid))
        if deadline is not None and now >= deadline:
            log.info("group %s: member %s fenced, its session expired", gid, mid)
            fenced.append(mid)
            continue
        rebalance = mgr.rebalances.get((gid, mid))
        if rebalance is not None and now >= rebalance[0]:
            if m.member_epoch == rebalance[1]:
                log.info("group %s: member %s fenced, it did not revoke its partitions at epoch %d within its "
                         "rebalance timeout", gid, mid, rebalance[1])
                fenced.append(mid)
            else:
                mgr.rebalances.pop((gid, mid), None)
    return fence_members(mgr, group, fenced)
