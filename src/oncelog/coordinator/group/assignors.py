"""The server-side assignors of consumer groups (KIP-848): ``uniform`` (the default) and ``range``, under Kafka's
names (``group.consumer.assignors``; a member asks for one with ``group.remote.assignor``).

An assignor is a pure function of the members (their subscribed topic ids, instance id, rack and current target
assignment) and the subscribed topics' partition counts; it returns every member's new target assignment.

``uniform`` (Kafka's UniformAssignor, our own algorithm with its two properties): the assignment is balanced —
every member gets the same number of partitions, give or take one, among the topics it subscribes to — and sticky:
a partition stays with the member that has it whenever balance allows, so a member joining or leaving moves only
the partitions it must. With identical subscriptions, the members that already hold the most keep the extra
partition; the rest are handed out interleaving topics (partition 0 of every topic first) so each member's share
is spread over the topics. With different subscriptions, partitions are first kept where they are, then the free
ones go (the most constrained first) to the least loaded member subscribed to their topic, then chains of moves
(each to a member subscribed to the moved partition's topic) go from a member to one holding two or more fewer
until no such chain is left.

``range`` (Kafka's RangeAssignor): per topic, contiguous ranges of partitions to its subscribed members in the
order static members (by instance id) then dynamic ones (by member id), the first members getting one more; with
identical subscriptions and partition counts the members get the same partition numbers of every topic
(co-partitioning, for joins).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .consumer_group import Assignment

__all__ = ["ASSIGNORS", "MemberSpec", "RangeAssignor", "ServerAssignor", "UniformAssignor", "assignors_by_name"]

TP = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member (Kafka's MemberSubscriptionAndAssignmentImpl)."""

    topics: frozenset[uuid.UUID]
    instance_id: str | None = None
    rack_id: str | None = None
    assignment: Assignment = field(default_factory=dict)  # the member's current target assignment


class ServerAssignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSpec],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        """Every member's new target assignment; ``partitions`` has each subscribed topic's partition count."""
        ...


def _freeze(parts: Mapping[uuid.UUID, set[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in parts.items() if ps}


class UniformAssignor:
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        if not members:
            return {}
        specs = list(members.values())
        if all(s.topics == specs[0].topics for s in specs):
            return self._homogeneous(members, partitions)
        return self._heterogeneous(members, partitions)

    @staticmethod
    def _kept(members: Mapping[str, MemberSpec], partitions: Mapping[uuid.UUID, int]) -> dict[str, list[TP]]:
        """Each member's current partitions that are still valid for it (subscribed, existing, not claimed by a
        member earlier in id order), sorted."""
        claimed: set[TP] = set()
        kept: dict[str, list[TP]] = {}
        for mid in sorted(members):
            spec = members[mid]
            mine: list[TP] = []
            for topic_id, parts in spec.assignment.items():
                n = partitions.get(topic_id, -1)
                if topic_id not in spec.topics or n < 0:
                    continue
                for p in parts:
                    if p < n and (topic_id, p) not in claimed:
                        claimed.add((topic_id, p))
                        mine.append((topic_id, p))
            mine.sort()
            kept[mid] = mine
        return kept

    def _homogeneous(self, members: Mapping[str, MemberSpec],
                     partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        topics = sorted(t for t in next(iter(members.values())).topics if partitions.get(t, -1) >= 0)
        total = sum(partitions[t] for t in topics)
        kept = self._kept(members, partitions)
        base, extra = divmod(total, len(members))
        # the members holding the most keep the extra partitions: fewer moves
        order = sorted(members, key=lambda m: (-len(kept[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
        result: dict[str, set[TP]] = {}
        taken: set[TP] = set()
        for m in order:
            mine = kept[m][:quota[m]]
            result[m] = set(mine)
            taken.update(mine)
        free = sorted(((t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken),
                      key=lambda tp: (tp[1], tp[0]))
        i = 0
        for m in sorted(members):
            need = quota[m] - len(result[m])
            if need > 0:
                result[m].update(free[i:i + need])
                i += need
        return {m: _by_topic(tps) for m, tps in result.items()}

    def _heterogeneous(self, members: Mapping[str, MemberSpec],
                       partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        kept = self._kept(members, partitions)
        owner: dict[TP, str] = {tp: m for m, tps in kept.items() for tp in tps}
        count = {m: len(tps) for m, tps in kept.items()}
        eligible: dict[uuid.UUID, list[str]] = {}
        for m in sorted(members):
            for t in members[m].topics:
                if partitions.get(t, -1) >= 0:
                    eligible.setdefault(t, []).append(m)
        free = [(t, p) for t in eligible for p in range(partitions[t]) if (t, p) not in owner]
        free.sort(key=lambda tp: (len(eligible[tp[0]]), tp[1], tp[0]))
        for tp in free:
            best = min(eligible[tp[0]], key=lambda m: (count[m], m))
            owner[tp] = best
            count[best] += 1
        by_member: dict[str, set[TP]] = {m: set() for m in members}
        for tp, m in owner.items():
            by_member[m].add(tp)
        kept_sets = {m: set(tps) for m, tps in kept.items()}
        while self._rebalance_once(members, eligible, by_member, count, kept_sets):
            pass
        return {m: _by_topic(tps) for m, tps in by_member.items()}


    @staticmethod
    def _rebalance_once(members: Mapping[str, MemberSpec], eligible: Mapping[uuid.UUID, list[str]],
                        by_member: dict[str, set[TP]], count: dict[str, int], kept: Mapping[str, set[TP]]) -> bool:
        """One step towards balance: from the most loaded member that can give, a chain of moves (each to a member
        subscribed to the partition's topic) ending at a member holding at least two fewer: the first loses one
        partition, the last gains one, the others keep their count. False when no such chain exists. Each step
        lowers the sum of squares of the counts, so repeating it ends. A partition the member held before this
        assignment is moved only when it has no other of that topic."""
        for start in sorted(members, key=lambda x: (-count[x], x)):
            parent: dict[str, tuple[str, uuid.UUID]] = {}
            queue = [start]
            seen = {start}
            end: str | None = None
            while queue and end is None:
                x = queue.pop(0)
                for topic in sorted({t for t, _ in by_member[x]}):
                    for y in eligible[topic]:
                        if y in seen:
                            continue
                        seen.add(y)
                        parent[y] = (x, topic)
                        if count[y] <= count[start] - 2:
                            end = y
                            break
                        queue.append(y)
                    if end is not None:
                        break
            if end is None:
                continue
            y = end
            while y != start:
                x, topic = parent[y]
                mine = sorted(tp for tp in by_member[x] if tp[0] == topic)
                fresh = [tp for tp in mine if tp not in kept.get(x, ())]
                tp = (fresh or mine)[-1]
                by_member[x].discard(tp)
                by_member[y].add(tp)
                y = x
            count[start] -= 1
            count[end] += 1
            return True
        return False


class RangeAssignor:
    name = "range"

    def assign(self, members: Mapping[str, MemberSpec],
               partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        order = sorted(members, key=lambda m: (members[m].instance_id is None, members[m].instance_id or "", m))
        subscribers: dict[uuid.UUID, list[str]] = {}
        for m in order:
            for t in members[m].topics:
                if partitions.get(t, -1) >= 0:
                    subscribers.setdefault(t, []).append(m)
        result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
        for t, subs in subscribers.items():
            base, extra = divmod(partitions[t], len(subs))
            start = 0
            for i, m in enumerate(subs):
                size = base + (1 if i < extra else 0)
                if size:
                    result[m][t] = set(range(start, start + size))
                start += size
        return {m: _freeze(parts) for m, parts in result.items()}


def _by_topic(tps: set[TP]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return _freeze(out)


#: Kafka's group.consumer.assignors names -> assignor
ASSIGNORS: dict[str, ServerAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def assignors_by_name(names: list[str]) -> dict[str, ServerAssignor]:
    """The assignors named (Kafka's names, or its class names), in order: the first is the default."""
    out: dict[str, ServerAssignor] = {}
    for name in names:
        short = name.strip().rsplit(".", 1)[-1].lower().removesuffix("assignor")
        assignor = ASSIGNORS.get(short)
        if assignor is None:
            raise ValueError(f"unknown consumer group assignor {name!r}: oncelog has {', '.join(ASSIGNORS)}")
        out[assignor.name] = assignor
    return out
