"""Kafka's StickyAssignor (KIP-54) and CooperativeStickyAssignor (KIP-341, KIP-429).

Goals, in order: a balanced assignment (member counts within one when every member subscribes to the same
topics; otherwise as even as the subscriptions allow), then keeping as many previously owned partitions as
possible. Ownership claims are generation-aware: when two members claim a partition, the newer generation wins,
and a partition claimed by two members of the same generation is kept by neither.

Two algorithms, as in Kafka's ``AbstractStickyAssignor``. When all subscriptions are equal,
``_constrained_assign`` follows Kafka 3.x's ConstrainedAssignmentBuilder (racks aside), visiting members in the
order of Java's HashMap of member ids (:func:`java_hash_map_order`), so it gives Kafka's result for the same
input (same member order in the JoinGroup response). Otherwise ``_general_assign`` keeps valid ownership, hands
out the rest to the least-loaded eligible member, then rebalances along chains of moves, cheapest in previously
owned partitions first, until no chain can even out two members. That general case is our own search rather
than a transcription of Java's: on random groups it is never less balanced than kafka-python's port of Java's
algorithm and almost always moves as few or fewer owned partitions (tests/unit/protocol/test_assignors_sticky.py).

The cooperative variant then withholds every partition that changes owner: the old owner revokes it after this
rebalance and rejoins, and the follow-up rebalance gives it to the new owner.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._model import Assignment, Subscription, TopicPartition
from .base import Assignor, sorted_members

__all__ = ["CooperativeStickyAssignor", "StickyAssignor", "decode_sticky_user_data", "encode_sticky_user_data"]

DEFAULT_GENERATION = -1
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


@dataclass
class MemberData:
    partitions: list[TopicPartition]
    generation: int | None  # None: the member did not say


# ------------------------------------------------------------------------------------ StickyAssignor user data


def encode_sticky_user_data(partitions: Sequence[TopicPartition], generation: int) -> bytes:
    """Java StickyAssignor's user data v1: [topic string, [int32 partition]] then int32 generation."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    out = bytearray(_I32.pack(len(by_topic)))
    for topic, ps in by_topic.items():
        raw = topic.encode()
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(ps))
        out += b"".join(_I32.pack(p) for p in ps)
    out += _I32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> MemberData:
    """Parse v1 (with generation) or v0 (without); unreadable or empty data means "owns nothing"."""
    if not data:
        return MemberData([], None)
    try:
        pos = 0
        (n_topics,) = _I32.unpack_from(data, pos)
        pos += 4
        partitions: list[TopicPartition] = []
        for _ in range(n_topics):
            (n,) = _I16.unpack_from(data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                raise ValueError("bad topic length")
            topic = data[pos : pos + n].decode()
            pos += n
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
            if count < 0 or pos + 4 * count > len(data):
                raise ValueError("bad partition count")
            partitions.extend((topic, p) for (p,) in _I32.iter_unpack(data[pos : pos + 4 * count]))
            pos += 4 * count
    except (struct.error, ValueError, UnicodeDecodeError):
        return MemberData([], None)
    if pos + 4 <= len(data):
        return MemberData(partitions, _I32.unpack_from(data, pos)[0])
    return MemberData(partitions, None)  # v0


# -------------------------------------------------------------------------------------------- the algorithms


def _all_partitions(partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    return sorted((t, p) for t, n in partitions_per_topic.items() for p in range(n))


def java_hash_map_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, ?>`` filled with ``keys`` in this order.

    Kafka's assignors iterate hash maps keyed by member id where ties are broken by that order: buckets by
    ``String.hashCode`` spread as ``h ^ (h >>> 16)`` over the final table size (16, doubled while more than 3/4
    full), insertion order within a bucket."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = 0
        units = key.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)


def _owned_if_all_equal(
    order: list[str],
    subscriptions: Mapping[str, Subscription],
    data: Mapping[str, MemberData],
    existing: set[TopicPartition],
) -> tuple[dict[str, list[TopicPartition]], set[TopicPartition]] | None:
    """If all subscriptions are equal: each member's valid owned partitions, and the partitions claimed by two
    members of the same generation (kept by neither); else None. A claim of a newer generation beats an older
    one; claims nobody contests are kept whatever their generation (Kafka's allSubscriptionsEqual)."""
    topics: set[str] | None = None
    owned: dict[str, list[TopicPartition]] = {}
    owner_of: dict[TopicPartition, str] = {}
    generation: dict[str, int] = {}
    contested: set[TopicPartition] = set()
    for m in order:
        sub_topics = set(subscriptions[m].topics)
        if topics is None:
            topics = sub_topics
        elif sub_topics != topics:
            return None
        md = data[m]
        gen = generation[m] = DEFAULT_GENERATION if md.generation is None else md.generation
        mine: list[TopicPartition] = owned.setdefault(m, [])
        for tp in dict.fromkeys(md.partitions):
            if tp not in existing:
                continue
            other = owner_of.get(tp)
            if other is None or gen > generation[other]:
                if other is not None and tp in owned[other]:
                    owned[other].remove(tp)
                mine.append(tp)
                owner_of[tp] = m
            elif gen == generation[other]:
                contested.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = m
    return {m: [tp for tp in ps if tp not in contested] for m, ps in owned.items()}, contested


def _constrained_assign(
    all_partitions: list[TopicPartition], order: list[str], owned: Mapping[str, list[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    """Kafka's ConstrainedAssignmentBuilder (without racks). ``order``: Java's hash map order of the members,
    which decides who of several members owning maxQuota or more keeps maxQuota."""
    min_quota, expected_over = divmod(len(all_partitions), len(order))
    max_quota = min_quota + (1 if expected_over else 0)
    over = 0  # members given more than minQuota so far
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    under: list[str] = []  # members below minQuota
    at_min: list[str] = []  # members at minQuota that may still get one more

    # 1. keep owned partitions (lowest partition numbers first) up to the member's quota
    for m in order:
        mine = sorted(owned[m], key=lambda tp: (tp[1], tp[0]))
        if len(mine) < min_quota:
            assignment[m].extend(mine)
            under.append(m)
        elif len(mine) >= max_quota and over < expected_over:
            over += 1
            if over == expected_over:
                at_min.clear()
            assignment[m].extend(mine[:max_quota])
        else:
            assignment[m].extend(mine[:min_quota])
            if over < expected_over:
                at_min.append(m)
    taken = {tp for ps in assignment.values() for tp in ps}
    unassigned = [tp for tp in all_partitions if tp not in taken]

    # 2. round robin over the members under minQuota, then one more each to members at minQuota
    under.sort()
    at_min.sort()
    queue = deque(at_min)
    i = 0  # position of the iterator over ``under``
    for tp in unassigned:
        from_under = True
        if i < len(under):
            m = under[i]
        elif under:
            i = 0
            m = under[0]
        elif queue:
            m = queue.popleft()
            from_under = False
        else:
            raise AssertionError("sticky assignor: partitions left but every member is at its quota")
        assignment[m].append(tp)
        count = len(assignment[m])
        if count == min_quota and from_under:
            under.pop(i)
            queue.append(m)
            continue
        if from_under:
            i += 1
        if count == max_quota:
            over += 1
            if over == expected_over:
                queue.clear()
    if any(len(assignment[m]) != min_quota for m in under):
        raise AssertionError("sticky assignor: a member ended below minQuota")
    return assignment


def _general_assign(
    all_partitions: list[TopicPartition],
    members: list[str],
    subscriptions: Mapping[str, Subscription],
    data: Mapping[str, MemberData],
) -> dict[str, list[TopicPartition]]:
    existing = set(all_partitions)
    eligible: dict[TopicPartition, list[str]] = {tp: [] for tp in all_partitions}
    member_topics = {m: set(subscriptions[m].topics) for m in members}
    for m in members:
        for tp in all_partitions:
            if tp[0] in member_topics[m]:
                eligible[tp].append(m)

    # newest generation's claim wins; the same generation twice: the first claim (by member id) wins
    claim: dict[TopicPartition, tuple[int, str]] = {}
    for m in members:
        md = data[m]
        gen = DEFAULT_GENERATION if md.generation is None else md.generation
        for tp in md.partitions:
            if tp not in existing or tp[0] not in member_topics[m]:
                continue
            prev = claim.get(tp)
            if prev is None or gen > prev[0]:
                claim[tp] = (gen, m)
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    owner: dict[TopicPartition, str] = {}
    for tp in all_partitions:
        if tp in claim:
            m = claim[tp][1]
            assignment[m].append(tp)
            owner[tp] = m

    # hand out the rest: partitions with the fewest candidates first, each to the least-loaded candidate
    for tp in sorted((tp for tp in all_partitions if tp not in owner), key=lambda tp: (len(eligible[tp]), tp)):
        if not eligible[tp]:
            continue
        m = min(eligible[tp], key=lambda c: (len(assignment[c]), c))
        assignment[m].append(tp)
        owner[tp] = m

    # balance: while some member could end up with one more partition and a member with at least two more
    # than it with one fewer, through a chain of moves (each member in the chain takes a partition of its topics
    # from the next), make the cheapest such chain's moves. Each round strictly lowers the sum of squared member
    # sizes, and when no chain is left the sizes are as balanced as the subscriptions allow.
    kept = {tp: m for tp, (_, m) in claim.items()}
    takeable = {m: [tp for tp in all_partitions if tp[0] in member_topics[m]] for m in members}
    while True:
        path = _shortest_improving_chain(members, takeable, assignment, owner, kept)
        if path is None:
            return assignment
        for taker, tp in path:
            assignment[owner[tp]].remove(tp)
            assignment[taker].append(tp)
            owner[tp] = taker


def _shortest_improving_chain(
    members: list[str],
    takeable: Mapping[str, list[TopicPartition]],
    assignment: Mapping[str, list[TopicPartition]],
    owner: Mapping[TopicPartition, str],
    kept: Mapping[TopicPartition, str],
) -> list[tuple[str, TopicPartition]] | None:
    """The cheapest improving chain as [(taker, partition it takes), ...], else None.

    Searched from each member over "can take a partition of", cheapest first: moving a partition handed out in
    this assignment is free, moving a previously owned one costs 1 (0-1 BFS). A chain ends at a member with at
    least two more partitions than its start; the cheapest wins, then the one from the least-loaded start to the
    fullest end."""
    found: tuple[tuple[int, int, int, str, str], list[tuple[str, TopicPartition]]] | None = None
    largest = max(len(ps) for ps in assignment.values())
    for start in sorted(members, key=lambda c: (len(assignment[c]), c)):
        size = len(assignment[start])
        if size + 2 > largest or (found is not None and found[0][0] == 0):
            break  # no member can give to this one, or a free chain from a less-loaded member was found
        cost = {start: 0}
        via: dict[str, tuple[str, TopicPartition]] = {}  # member reached -> (taker, partition taken from it)
        queue: deque[str] = deque([start])
        done: set[str] = set()
        while queue:
            taker = queue.popleft()
            if taker in done:
                continue
            done.add(taker)
            choices: dict[str, TopicPartition] = {}  # holder -> the partition to take from it
            for tp in takeable[taker]:
                holder = owner.get(tp)
                if holder is None or holder in done:
                    continue
                best = choices.get(holder)
                if best is None or (kept.get(best) == holder and kept.get(tp) != holder):
                    choices[holder] = tp
            for holder, tp in choices.items():
                step = 1 if kept.get(tp) == holder else 0
                if holder not in cost or cost[taker] + step < cost[holder]:
                    cost[holder] = cost[taker] + step
                    via[holder] = (taker, tp)
                    if step:
                        queue.append(holder)
                    else:
                        queue.appendleft(holder)
        donors = [h for h in cost if len(assignment[h]) >= size + 2]
        if not donors:
            continue
        end = min(donors, key=lambda h: (cost[h], -len(assignment[h]), h))
        rank = (cost[end], size, -len(assignment[end]), start, end)
        if found is not None and found[0] <= rank:
            continue
        path: list[tuple[str, TopicPartition]] = []
        node = end
        while node != start:
            taker, tp = via[node]
            path.append((taker, tp))
            node = taker
        found = (rank, path)
    return None if found is None else found[1]


class _AbstractSticky(Assignor):
    def member_data(self, sub: Subscription) -> MemberData:
        raise NotImplementedError

    def sticky_assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> tuple[dict[str, list[TopicPartition]], set[TopicPartition]]:
        """The assignment, and the partitions claimed by several members of one generation."""
        members = sorted_members(subscriptions)
        if not members:
            return {}, set()
        subscribed = {t for s in subscriptions.values() for t in s.topics}
        ppt = {t: n for t, n in partitions_per_topic.items() if t in subscribed}
        all_partitions = _all_partitions(ppt)
        data = {m: self.member_data(subscriptions[m]) for m in members}
        order = java_hash_map_order(list(subscriptions))
        found = _owned_if_all_equal(order, subscriptions, data, set(all_partitions))
        if found is not None:
            owned, contested = found
            return _constrained_assign(all_partitions, order, owned), contested
        return _general_assign(all_partitions, members, subscriptions, data), set()

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        result, _ = self.sticky_assign(partitions_per_topic, subscriptions)
        return {m: Assignment(partitions=sorted(ps)) for m, ps in sorted(result.items())}


class StickyAssignor(_AbstractSticky):
    """Eager sticky: ownership and generation travel in the subscription's user data (Java's format)."""

    name = "sticky"
    rebalance_protocols = ("eager",)

    def subscription_user_data(
        self, topics: Sequence[str], owned_partitions: Sequence[TopicPartition], generation_id: int
    ) -> bytes | None:
        if generation_id == DEFAULT_GENERATION and not owned_partitions:
            return None  # never assigned yet
        return encode_sticky_user_data(owned_partitions, generation_id)

    def member_data(self, sub: Subscription) -> MemberData:
        return decode_sticky_user_data(sub.user_data)


class CooperativeStickyAssignor(_AbstractSticky):
    """Cooperative sticky: ownership from the subscription's owned partitions, generation from its field
    (v2+) or the 4-byte user data of older members; a partition changing owner waits one rebalance."""

    name = "cooperative-sticky"
    rebalance_protocols = ("eager", "cooperative")

    def subscription_user_data(
        self, topics: Sequence[str], owned_partitions: Sequence[TopicPartition], generation_id: int
    ) -> bytes | None:
        return _I32.pack(generation_id)

    def member_data(self, sub: Subscription) -> MemberData:
        if sub.generation_id >= 0:
            return MemberData(list(sub.owned_partitions), sub.generation_id)
        if sub.user_data is None:
            generation: int | None = None
        elif len(sub.user_data) >= 4:
            generation = _I32.unpack_from(sub.user_data, 0)[0]
        else:
            generation = DEFAULT_GENERATION
        return MemberData(list(sub.owned_partitions), generation)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        result, contested = self.sticky_assign(partitions_per_topic, subscriptions)
        # withhold partitions moving to a new member while some other member still owns them, and partitions
        # claimed by several members of one generation (Kafka's partitionsTransferringOwnership)
        added: dict[TopicPartition, str] = {}
        revoked: set[TopicPartition] = set(contested)
        for m, ps in result.items():
            owned = set(subscriptions[m].owned_partitions)
            assigned = set(ps)
            added.update((tp, m) for tp in assigned - owned)
            revoked |= owned - assigned
        transferring = {tp for tp in added if tp in revoked} | contested
        return {
            m: Assignment(partitions=sorted(tp for tp in ps if tp not in transferring))
            for m, ps in sorted(result.items())
        }
