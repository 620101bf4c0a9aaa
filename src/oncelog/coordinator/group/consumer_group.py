"""A consumer group of the KIP-848 protocol and its members, as Kafka's ``ConsumerGroup`` / ``ConsumerGroupMember``
keep them (group-coordinator module, ``modern/consumer``).

Everything here is *persisted* state: it changes only by replaying the group's records (``consumer_records.py``
calls :meth:`ConsumerGroup.update_member`, :meth:`ConsumerGroup.remove_member`, :meth:`ConsumerGroup.set_target`
...), so loading the partition rebuilds exactly what the live coordinator had. The indexes derived from it
(static members, the owner epoch of every partition, subscription counts, the inverted target assignment) are kept
by those same methods. Only :class:`ConsumerGroup` fields marked *soft* (deadlines, the last regex refresh) are set
by operations directly, as Kafka keeps its timers outside the timeline.

A member's assignment is a mapping topic id -> frozenset of partitions, treated as immutable: a change builds a
new mapping, so members compare by value (Kafka's ``ConsumerGroupMember.equals``) and a record is written only for
a member that changed.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from oncelog.protocol.errors import ErrorCode

from .topic_image import TopicInfo

__all__ = [
    "EMPTY_ASSIGNMENT",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "GroupError",
    "MemberState",
    "ResolvedRegex",
    "assignment_union",
    "is_subset",
]

#: a member's partitions: topic id -> partitions (immutable by convention: changes build a new mapping)
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}

#: ConsumerGroupHeartbeat's member epochs with a meaning (Kafka's ConsumerGroupHeartbeatRequest)
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class GroupError(Exception):
    """An operation is refused with ``code`` (Kafka's ApiException of that code); ``message`` goes to the client."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message or None


class MemberState(IntEnum):
    """Kafka's MemberState: where a member is in reconciling its assignment with its target (CurrentAssignmentBuilder
    moves it; the value is what ConsumerGroupCurrentMemberAssignmentValue.State stores)."""

    STABLE = 0  # fully reconciled with the target assignment of its epoch
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before it can move to the next epoch
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions other members still own
    UNKNOWN = 127  # a state of a newer version: the member is fenced and reconciled from scratch

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(Enum):
    """Kafka's ConsumerGroup.ConsumerGroupState, as DescribeGroups/ListGroups/ConsumerGroupDescribe show it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"  # the group epoch is ahead of the target assignment epoch
    RECONCILING = "Reconciling"  # some member has not reached the target assignment
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def display_name(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a member of the classic protocol in a consumer group also has (KIP-848's online migration)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, ConsumerProtocolSubscription) in the member's preference


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A subscription regular expression resolved against the topics (Kafka's ResolvedRegularExpression)."""

    topics: frozenset[str]
    version: int  # the topic image version it was resolved with (we record the refresh count)
    timestamp: int  # wall ms of the resolution


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str = ""  # "" when none
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerGroupMember:
        """The member moved to ``epoch`` (Kafka's Builder.updateMemberEpoch: the old one becomes the previous)."""
        return dataclasses.replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch,
                                   **changes)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> ConsumerGroupMember:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def is_subset(owned: Mapping[uuid.UUID, frozenset[int] | set[int]] | None, target: Assignment) -> bool:
    """Kafka's isSubset: every partition the member says it owns is in ``target`` (False when unknown)."""
    if owned is None:
        return False
    for topic_id, parts in owned.items():
        assigned = target.get(topic_id)
        if assigned is None:
            if parts:
                return False
            continue
        if not set(parts) <= assigned:
            return False
    return True


def assignment_union(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    out = dict(a)
    for t, parts in b.items():
        out[t] = out.get(t, frozenset()) | parts
    return out


class ConsumerGroup:
    """A consumer group: its epochs, members, target assignment and subscription metadata, plus the indexes the
    coordinator reads (Kafka's ConsumerGroup / ModernGroup)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0  # the epoch of the target assignment
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        self.inverted_target: dict[uuid.UUID, dict[int, str]] = {}  # topic id -> partition -> member id
        self.partition_epochs: dict[uuid.UUID, dict[int, int]] = {}  # owner's member epoch of owned partitions
        #: ConsumerGroupPartitionMetadataValue: the subscribed topics as the group last recorded them (name -> topic)
        self.subscription_metadata: dict[str, TopicInfo] = {}
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self.subscribed_regexes: dict[str, int] = {}  # regex -> members subscribed with it
        self.server_assignors: dict[str, int] = {}  # assignor name -> members asking for it
        self.classic_members = 0  # members using the classic protocol
        #: member id -> (topic id, partition) -> the member epoch at which the member got the partition and has owned
        #: it since (KIP-1251's assignment epoch; after a reload, the epoch of the member's first replayed record)
        self.assignment_epochs: dict[str, dict[tuple[uuid.UUID, int], int]] = {}
        # soft state (set by operations, not by replay)
        self.session_deadlines: dict[str, int] = {}  # member id -> monotonic ms
        self.rebalance_deadlines: dict[str, tuple[int, int]] = {}  # member id -> (monotonic ms, member epoch)
        self.regex_refreshed_ms = -1  # monotonic ms of the last resolution of the group's regexes (-1: never)

    # ------------------------------------------------------------------ queries
    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ConsumerGroup.maybeUpdateGroupState, computed from the persisted state."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if not m.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def member_or_error(self, member_id: str) -> ConsumerGroupMember:
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {self.group_id}.")
        return member

    def owned_since(self, member_id: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """The epoch since which the member has owned the partition (KIP-1251), None when it does not own it."""
        return self.assignment_epochs.get(member_id, {}).get((topic_id, partition))

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, EMPTY_ASSIGNMENT)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The member epoch of the partition's current owner, -1 when no member owns it (Kafka's
        currentPartitionEpoch; a partition pending revocation is still owned)."""
        parts = self.partition_epochs.get(topic_id)
        return -1 if parts is None else parts.get(partition, -1)

    def member_topics(self, member: ConsumerGroupMember) -> set[str]:
        """The topic names a member subscribes to: by name, plus what its regular expression resolved to."""
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            resolved = self.resolved_regexes.get(member.subscribed_topic_regex)
            if resolved is not None:
                topics |= resolved.topics
        return topics

    def preferred_server_assignor(self, old: ConsumerGroupMember | None = None,
                                  new: ConsumerGroupMember | None = None) -> str | None:
        """The assignor most members ask for, counting ``new`` in place of ``old`` (Kafka's
        computePreferredServerAssignor); None when no member names one. Ties go to the smaller name."""
        counts = dict(self.server_assignors)
        if old is not None and old.server_assignor is not None:
            counts[old.server_assignor] = counts.get(old.server_assignor, 0) - 1
        if new is not None and new.server_assignor is not None:
            counts[new.server_assignor] = counts.get(new.server_assignor, 0) + 1
        best = [(n, name) for name, n in counts.items() if n > 0]
        if not best:
            return None
        top = max(n for n, _ in best)
        return min(name for n, name in best if n == top)

    # ------------------------------------------------------------------ replay
    def update_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member, keeping every index (Kafka's ConsumerGroup.updateMember)."""
        old = self.members.get(member.member_id)
        self._unindex(old)
        self.members[member.member_id] = member
        self._index(member)
        before = self.assignment_epochs.get(member.member_id, {})
        epochs: dict[tuple[uuid.UUID, int], int] = {}
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, parts in assignment.items():
                for p in parts:
                    epochs[(topic_id, p)] = before.get((topic_id, p), member.member_epoch)
        self.assignment_epochs[member.member_id] = epochs

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        old = self.members.pop(member_id, None)
        self._unindex(old)
        self.assignment_epochs.pop(member_id, None)
        self.session_deadlines.pop(member_id, None)
        self.rebalance_deadlines.pop(member_id, None)
        return old

    def _index(self, m: ConsumerGroupMember) -> None:
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        if m.subscribed_topic_regex:
            self.subscribed_regexes[m.subscribed_topic_regex] = \
                self.subscribed_regexes.get(m.subscribed_topic_regex, 0) + 1
        if m.server_assignor is not None:
            self.server_assignors[m.server_assignor] = self.server_assignors.get(m.server_assignor, 0) + 1
        if m.classic is not None:
            self.classic_members += 1
        for assignment in (m.assigned, m.pending_revocation):
            for topic_id, parts in assignment.items():
                epochs = self.partition_epochs.setdefault(topic_id, {})
                for p in parts:
                    epochs[p] = m.member_epoch

    def _unindex(self, m: ConsumerGroupMember | None) -> None:
        if m is None:
            return
        if m.instance_id is not None and self.static_members.get(m.instance_id) == m.member_id:
            del self.static_members[m.instance_id]
        if m.subscribed_topic_regex:
            _dec(self.subscribed_regexes, m.subscribed_topic_regex)
        if m.server_assignor is not None:
            _dec(self.server_assignors, m.server_assignor)
        if m.classic is not None:
            self.classic_members -= 1
        for assignment in (m.assigned, m.pending_revocation):
            for topic_id, parts in assignment.items():
                epochs = self.partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                for p in parts:
                    if epochs.get(p) == m.member_epoch:
                        del epochs[p]
                if not epochs:
                    del self.partition_epochs[topic_id]

    def set_target(self, member_id: str, assignment: Assignment | None) -> None:
        """A member's target assignment (None: removed), keeping the inverted index."""
        old = self.target.pop(member_id, None)
        if old is not None:
            for topic_id, parts in old.items():
                owners = self.inverted_target.get(topic_id)
                if owners is None:
                    continue
                for p in parts:
                    if owners.get(p) == member_id:
                        del owners[p]
                if not owners:
                    del self.inverted_target[topic_id]
        if assignment is not None:
            self.target[member_id] = assignment
            for topic_id, parts in assignment.items():
                owners = self.inverted_target.setdefault(topic_id, {})
                for p in parts:
                    owners[p] = member_id

    def set_resolved_regex(self, regex: str, resolved: ResolvedRegex | None) -> None:
        if resolved is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = resolved


def _dec(counts: dict[str, int], key: str) -> None:
    n = counts.get(key, 0) - 1
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)
