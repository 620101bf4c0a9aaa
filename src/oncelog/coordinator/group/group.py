"""A classic group and its members, as Kafka's ``ClassicGroup`` / ``ClassicGroupMember`` keep them.

Plain data plus the small queries the join/sync/heartbeat paths ask (protocol vote, leader, who has rejoined).
A member's pending JoinGroup / SyncGroup answer is an ``asyncio.Future`` created by the operation that parks the
member; nothing here awaits or sleeps. Times are the injected clock's milliseconds (monotonic for deadlines,
wall for the state timestamp that offset retention counts from).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .consumer_protocol import parse_subscription_topics
from .state import GroupState, check_transition

__all__ = ["NEW_MEMBER_JOIN_TIMEOUT_MS", "ClassicGroup", "Member"]

# How long a member that joined for the first time may wait for the join phase before it is dropped
# (Kafka's ClassicGroupMember newMemberJoinTimeoutMs / GroupCoordinator NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future[Any] | None = None
    sync_waiter: asyncio.Future[Any] | None = None
    is_new: bool = False
    heartbeat_deadline: int = 0  # monotonic ms after which a silent member is removed

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (in its preference order) that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def heartbeat_satisfied_until(self, now: int) -> bool:
        """Kafka's hasSatisfiedHeartbeat: a member parked in a join or sync is not timed out by its session
        (the rebalance timeout governs it) unless it is new and never finished a join."""
        if not self.is_new and (self.awaiting_join or self.awaiting_sync):
            return True
        return now < self.heartbeat_deadline


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1  # wall ms of the last state change (offset retention of Empty groups)
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # insertion ordered: the first is the fallback leader
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline (MEMBER_ID_REQUIRED)
    pending_sync: set[str] = field(default_factory=set)  # members that must SyncGroup before sync_deadline
    sync_deadline: int = 0
    join_deadline: int = 0
    initial_join: bool = False  # the join phase is the delayed first one (group.initial.rebalance.delay.ms)
    initial_remaining_ms: int = 0
    new_member_added: bool = False
    awaiting_persist: int | None = None  # generation whose leader assignment is being written
    pending_assignment: dict[str, bytes] = field(default_factory=dict)

    # ------------------------------------------------------------------ state
    def transition_to(self, target: GroupState, wall_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp = wall_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # ------------------------------------------------------------------ members
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a static member a new member id, keeping its place (and leadership) in the group."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        existing = self.static_member_id(instance_id)
        return existing is not None and existing != member_id

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def all_members(self) -> Iterator[Member]:
        return iter(list(self.members.values()))

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_joined_leader(self) -> bool:
        """If the leader has not rejoined, make the first member that has the leader (Kafka's
        maybeElectNewJoinedLeader). False when nobody has rejoined."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    # ------------------------------------------------------------------ protocols
    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Kafka's ClassicGroup.supportsProtocols: an empty group takes any non-empty type and list; otherwise the
        type must match and one of the names must be supported by every current member."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        n = len(self.members)
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in set(m.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return any(counts.get(name, 0) == n for name in names)

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The protocol vote (Kafka's ClassicGroup.selectProtocol): every member votes for its most preferred
        protocol that all members support; the most votes wins. Ties go to the protocol the leader prefers
        (Kafka leaves ties to a hash map's order; any choice every member supports is correct)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for group {self.group_id}: it has no members")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in leader.protocol_names():
            if votes.get(name) == best:
                return name
        return min(n for n, v in votes.items() if v == best)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only), None when unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics
