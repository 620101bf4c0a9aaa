"""Sticky and cooperative-sticky assignors (KIP-54, KIP-341, KIP-429): documented examples, generations,
Java's user data format, and properties (validity, balance, minimal movement, cooperative two-phase moves)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from oncelog.protocol.assignors import Subscription, get_assignor
from oncelog.protocol.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data

TP = tuple[str, int]
STICKY = ("sticky", "cooperative-sticky")


def sub(name: str, topics: Sequence[str], owned: Sequence[TP] = (), generation: int = -1) -> Subscription:
    a = get_assignor(name)
    return Subscription(list(topics), a.subscription_user_data(topics, list(owned), generation), list(owned),
                        generation)


def run(name: str, ppt: Mapping[str, int], subs: Mapping[str, Subscription]) -> dict[str, list[TP]]:
    return {m: sorted(a.partitions) for m, a in get_assignor(name).assign(ppt, subs).items()}


def tps(spec: str) -> list[TP]:
    return sorted((t, int(p)) for t, p in (x.rsplit("p", 1) for x in spec.split()))


FOUR_TOPICS = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
ALL4 = ["t0", "t1", "t2", "t3"]


def test_kafka_javadoc_example_all_subscribed() -> None:
    # StickyAssignor javadoc: C0..C2 subscribe t0..t3 (2 partitions each): the initial assignment is round robin
    for name in STICKY:
        got = run(name, FOUR_TOPICS, {c: sub(name, ALL4) for c in ("C0", "C1", "C2")})
        assert got == {"C0": tps("t0p0 t1p1 t3p0"), "C1": tps("t0p1 t2p0 t3p1"), "C2": tps("t1p0 t2p1")}


def test_kafka_javadoc_example_member_leaves_keeps_everything_else() -> None:
    # ... then C1 leaves: C0 and C2 keep all they had and split C1's three partitions 2/1 or 1/2 (4 each)
    before = {"C0": tps("t0p0 t1p1 t3p0"), "C2": tps("t1p0 t2p1")}
    for name in STICKY:
        got = run(name, FOUR_TOPICS, {c: sub(name, ALL4, ps, 1) for c, ps in before.items()})
        assert {len(v) for v in got.values()} == {4}
        assert set(before["C0"]) <= set(got["C0"]) and set(before["C2"]) <= set(got["C2"])


def test_kafka_javadoc_example_unequal_subscriptions() -> None:
    # javadoc: t0/t1/t2 with 1/2/3 partitions; C0: t0; C1: t0,t1; C2: t0,t1,t2 -> sticky is balanced where
    # round robin is not; when C0 leaves, only t0p0 moves
    ppt = {"t0": 1, "t1": 2, "t2": 3}
    topics = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    got = run("sticky", ppt, {c: sub("sticky", ts) for c, ts in topics.items()})
    assert got == {"C0": tps("t0p0"), "C1": tps("t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}
    del topics["C0"]
    again = run("sticky", ppt, {c: sub("sticky", ts, got[c], 1) for c, ts in topics.items()})
    assert again == {"C1": tps("t0p0 t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}


def test_older_generation_claims_lose() -> None:
    # C1 still claims t0p0 from generation 3, C0 owns it in generation 4: C0 keeps it
    for name in STICKY:
        subs = {"C0": sub(name, ["t0"], [("t0", 0), ("t0", 1)], 4), "C1": sub(name, ["t0"], [("t0", 0)], 3),
                "C2": sub(name, ["t0"], [], -1)}
        got = run(name, {"t0": 3}, subs)
        assert got["C0"] == [("t0", 0)] and ("t0", 0) not in got["C1"]
        given = sorted(tp for v in got.values() for tp in v)
        # cooperative: t0p1 leaves C0 and waits for the follow-up rebalance
        assert given == (tps("t0p0 t0p1 t0p2") if name == "sticky" else tps("t0p0 t0p2"))


def test_double_claim_in_same_generation_is_resolved() -> None:
    subs = {"A": sub("sticky", ["t"], [("t", 0), ("t", 1)], 5), "B": sub("sticky", ["t"], [("t", 1), ("t", 2)], 5)}
    got = run("sticky", {"t": 4}, subs)
    assert sorted(got["A"] + got["B"]) == tps("tp0 tp1 tp2 tp3")
    assert ("t", 0) in got["A"] and ("t", 2) in got["B"] and len(got["A"]) == len(got["B"]) == 2


def test_sticky_user_data_is_javas_format() -> None:
    data = encode_sticky_user_data([("ab", 1), ("ab", 3), ("c", 0)], 7)
    assert data == (b"\x00\x00\x00\x02" + b"\x00\x02ab\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x03"
                    + b"\x00\x01c\x00\x00\x00\x01\x00\x00\x00\x00" + b"\x00\x00\x00\x07")
    md = decode_sticky_user_data(data)
    assert md.partitions == [("ab", 1), ("ab", 3), ("c", 0)] and md.generation == 7
    v0 = decode_sticky_user_data(data[:-4])
    assert v0.partitions == md.partitions and v0.generation is None
    assert decode_sticky_user_data(b"\x00\x00\x00\x05garbage").partitions == []
    assert decode_sticky_user_data(None).generation is None
    assert get_assignor("sticky").subscription_user_data(["t"], [], -1) is None
    assert get_assignor("cooperative-sticky").subscription_user_data(["t"], [], 12) == b"\x00\x00\x00\x0c"


def test_cooperative_withholds_then_hands_over() -> None:
    # A owns all 4; B joins. Round 1: A keeps 2, B gets nothing (its two are still A's). Round 2: B gets them.
    name = "cooperative-sticky"
    r1 = run(name, {"t": 4}, {"A": sub(name, ["t"], tps("tp0 tp1 tp2 tp3"), 1), "B": sub(name, ["t"])})
    assert len(r1["A"]) == 2 and r1["B"] == []
    r2 = run(name, {"t": 4}, {"A": sub(name, ["t"], r1["A"], 2), "B": sub(name, ["t"], [], 2)})
    assert r2["A"] == r1["A"] and sorted(r2["A"] + r2["B"]) == tps("tp0 tp1 tp2 tp3")
    # eager sticky would move them at once
    e1 = run("sticky", {"t": 4}, {"A": sub("sticky", ["t"], tps("tp0 tp1 tp2 tp3"), 1), "B": sub("sticky", ["t"])})
    assert len(e1["B"]) == 2


# ------------------------------------------------------------------------------------------------- properties

members_st = st.lists(st.text("abcdefghij", min_size=1, max_size=2), min_size=1, max_size=7, unique=True)
topic_names = ["t0", "t1", "t2"]
ppt_st = st.fixed_dictionaries({"t0": st.integers(0, 8), "t1": st.integers(1, 8), "t2": st.integers(1, 3)})


def _all(ppt: Mapping[str, int], topics: set[str]) -> list[TP]:
    return sorted((t, p) for t, n in ppt.items() if t in topics for p in range(n))


@st.composite
def group_st(draw: st.DrawFn, same_topics: bool) -> tuple[dict[str, int], dict[str, list[str]], dict[str, list[TP]]]:
    ppt = draw(ppt_st)
    members = draw(members_st)
    if same_topics:
        ts = draw(st.lists(st.sampled_from(topic_names), min_size=1, max_size=3, unique=True))
        topics = {m: list(ts) for m in members}
    else:
        topics = {m: draw(st.lists(st.sampled_from(topic_names), min_size=1, max_size=3, unique=True))
                  for m in members}
    # a previous assignment: disjoint owned sets, possibly of partitions the member no longer subscribes to
    owned: dict[str, list[TP]] = {m: [] for m in members}
    for tp in _all(ppt, set(topic_names)):
        who = draw(st.sampled_from([None, *members]))
        if who is not None:
            owned[who].append(tp)
    return ppt, topics, owned


def _check_valid(result: Mapping[str, list[TP]], ppt: Mapping[str, int], topics: Mapping[str, list[str]],
                 complete: bool) -> None:
    seen = [tp for ps in result.values() for tp in ps]
    assert len(seen) == len(set(seen)), "a partition given twice"
    for m, ps in result.items():
        assert all(t in topics[m] and p < ppt[t] for t, p in ps), "a partition of an unsubscribed topic"
    if complete:
        assert sorted(seen) == _all(ppt, {t for ts in topics.values() for t in ts})


@settings(max_examples=200, deadline=None)
@given(group_st(same_topics=False), st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"]))
def test_every_partition_exactly_once(group: tuple[dict[str, int], dict[str, list[str]], dict[str, list[TP]]],
                                      name: str) -> None:
    ppt, topics, owned = group
    result = run(name, ppt, {m: sub(name, topics[m], owned[m], 1) for m in topics})
    assert sorted(result) == sorted(topics)
    _check_valid(result, ppt, topics, complete=name != "cooperative-sticky")
    if name == "cooperative-sticky":  # only partitions still owned by another member may be missing
        missing = set(_all(ppt, {t for ts in topics.values() for t in ts})) - {tp for v in result.values() for tp in v}
        assert missing <= {tp for ps in owned.values() for tp in ps}
        for m, ps in result.items():
            others = {tp for o, ops in owned.items() if o != m for tp in ops}
            assert not set(ps) & others, "cooperative: given to a new owner while the old one still owns it"
    if name in STICKY:  # general case: nothing can move to a member with two fewer
        for m, ps in result.items():
            for o, ops in result.items():
                if len(ops) >= len(ps) + 2 and name == "sticky":
                    assert not any(t in topics[m] for t, _ in ops), (m, o)


@settings(max_examples=200, deadline=None)
@given(group_st(same_topics=True), st.sampled_from(["roundrobin", "sticky", "cooperative-sticky"]))
def test_balanced_within_one_when_subscriptions_are_equal(
    group: tuple[dict[str, int], dict[str, list[str]], dict[str, list[TP]]], name: str,
) -> None:
    ppt, topics, owned = group
    subs = {m: sub(name, topics[m], owned[m], 1) for m in topics}
    result = run(name, ppt, subs)
    if name == "cooperative-sticky":  # after the follow-up rebalance
        result = run(name, ppt, {m: sub(name, topics[m], result[m], 2) for m in topics})
    _check_valid(result, ppt, topics, complete=True)
    sizes = [len(v) for v in result.values()]
    assert max(sizes) - min(sizes) <= 1


def _minimum_moves(prev: Mapping[str, list[TP]], survivors: list[str], n_partitions: int) -> int:
    """Fewest partitions that must leave surviving members for a balanced result."""
    lo, extra = divmod(n_partitions, len(survivors))
    sizes = sorted((len(prev.get(m, [])) for m in survivors), reverse=True)
    kept = sum(min(s, lo + 1) if i < extra else min(s, lo) for i, s in enumerate(sizes))
    return sum(sizes) - kept


@settings(max_examples=200, deadline=None)
@given(group_st(same_topics=True), st.sampled_from(STICKY), st.booleans(), st.data())
def test_minimal_movement_when_members_join_or_leave(
    group: tuple[dict[str, int], dict[str, list[str]], dict[str, list[TP]]], name: str, add: bool,
    data: st.DataObject,
) -> None:
    ppt, topics, _ = group
    ts = next(iter(topics.values()))
    members = sorted(topics)
    first = run(name, ppt, {m: sub(name, ts) for m in members})  # a fresh, balanced assignment
    if add:
        survivors = [*members, "zz-new"]
    else:
        assume(len(members) > 1)
        gone = data.draw(st.sampled_from(members))
        survivors = [m for m in members if m != gone]
    second = run(name, ppt, {m: sub(name, ts, first.get(m, []), 1) for m in survivors})
    if name == "cooperative-sticky":
        second = run(name, ppt, {m: sub(name, ts, second[m], 2) for m in survivors})
    moved = sum(1 for m in survivors for tp in first.get(m, []) if tp not in second[m])
    n = len(_all(ppt, set(ts)))
    assert moved == _minimum_moves(first, survivors, n)


@settings(max_examples=200, deadline=None)
@given(group_st(same_topics=True), st.sampled_from(STICKY))
def test_minimal_movement_from_any_previous_assignment(
    group: tuple[dict[str, int], dict[str, list[str]], dict[str, list[TP]]], name: str,
) -> None:
    ppt, topics, owned = group
    ts = next(iter(topics.values()))
    owned = {m: [tp for tp in ps if tp[0] in ts] for m, ps in owned.items()}
    result = run(name, ppt, {m: sub(name, ts, owned[m], 1) for m in topics})
    if name == "cooperative-sticky":
        result = run(name, ppt, {m: sub(name, ts, result[m], 2) for m in topics})
    moved = sum(1 for m in topics for tp in owned[m] if tp not in result[m])
    assert moved == _minimum_moves(owned, sorted(topics), len(_all(ppt, set(ts))))


# ------------------------------------------------- general case vs kafka-python's port of Java's StickyAssignor


class _Cluster:
    """Partition counts in the shape kafka-python's assignors read (the oracle's input, not a broker)."""

    def __init__(self, ppt: Mapping[str, int]) -> None:
        self.ppt = ppt

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.ppt[topic])) if topic in self.ppt else None

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return set(self.ppt)


@dataclass
class _Member:
    member_id: str
    metadata: object
    group_instance_id: None = None


def _balance_score(sizes: list[int]) -> int:
    return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])


@settings(max_examples=150, deadline=None)
@given(group_st(same_topics=False))
def test_general_case_is_at_least_as_balanced_as_kafka_python(
    group: tuple[dict[str, int], dict[str, list[str]], dict[str, list[TP]]],
) -> None:
    """kafka-python ports Java's general-case sticky algorithm (its user data carries a version prefix Java's
    does not, so each side gets its own encoding of the same previous assignment)."""
    from kafka.coordinator.assignors.sticky.sticky_assignor import (  # type: ignore[import-untyped]
        StickyAssignorUserData,
        StickyPartitionAssignor,
    )
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription  # type: ignore[import-untyped]

    ppt, topics, owned = group
    owned = {m: [tp for tp in ps if tp[0] in topics[m]] for m, ps in owned.items()}
    ours = run("sticky", ppt, {m: sub("sticky", topics[m], owned[m], 1) for m in topics})

    def kp_user_data(ps: list[TP]) -> bytes:
        by_topic: dict[str, list[int]] = {}
        for t, p in ps:
            by_topic.setdefault(t, []).append(p)
        return bytes(StickyAssignorUserData(list(by_topic.items()), 1).encode()) if ps else b""

    members = [_Member(m, ConsumerProtocolSubscription(topics=topics[m], user_data=kp_user_data(owned[m]), version=0))
               for m in sorted(topics)]
    theirs = StickyPartitionAssignor().assign(_Cluster(ppt), members)
    their_sizes = [sum(len(ps) for _, ps in a.assigned_partitions) for a in theirs.values()]
    assert _balance_score(sorted(len(v) for v in ours.values())) <= _balance_score(sorted(their_sizes))


def test_large_unequal_group_is_fast_and_valid() -> None:
    """100 members with different subscriptions over 900 partitions: fresh assignment, then one member leaves."""
    import random
    import time

    rng = random.Random(7)
    names = [f"t{i}" for i in range(30)]
    ppt = {t: 30 for t in names}
    topics = {f"m{i:03d}": rng.sample(names, rng.randint(1, 30)) for i in range(100)}
    t0 = time.perf_counter()
    first = run("sticky", ppt, {m: sub("sticky", ts) for m, ts in topics.items()})
    del topics["m000"]
    second = run("sticky", ppt, {m: sub("sticky", ts, first[m], 1) for m, ts in topics.items()})
    assert time.perf_counter() - t0 < 20  # about 0.3 s on an idle core
    _check_valid(second, ppt, topics, complete=True)
    moved = sum(1 for m in topics for tp in first[m] if tp not in second[m])
    assert moved == 0  # only the leaver's partitions had to find new members


def test_java_hash_map_order() -> None:
    from oncelog.protocol.assignors.sticky import java_hash_map_order

    # "Aa" and "BB" share String.hashCode 2112: one bucket, insertion order
    assert java_hash_map_order(["BB", "Aa"]) == ["BB", "Aa"] and java_hash_map_order(["Aa", "BB"]) == ["Aa", "BB"]
    # "hello".hashCode() == 99162322 lands in bucket 11 only through HashMap's h ^ (h >>> 16) spread; "C" is in 3
    assert java_hash_map_order(["hello", "C"]) == ["C", "hello"]
    # 13 keys: the table has grown to 32 buckets ("C0".."C9" hash 2125..2134, "D0".."D2" 2156..2158)
    keys = [f"C{i}" for i in range(10)] + ["D0", "D1", "D2"]
    assert java_hash_map_order(keys) == sorted(keys, key=lambda k: (67 if k[0] == "C" else 68) * 31 + ord(k[1]) & 31)


def test_who_keeps_max_quota_follows_javas_member_order() -> None:
    # 7 partitions, 3 members: one member may keep 3. "hello" and "C" both own 3; "C" comes first in Java's
    # HashMap order, keeps its 3, and "hello" keeps its lowest 2 (by partition number, then topic)
    ppt = {"t": 7}
    owned = {"hello": tps("tp0 tp1 tp2"), "C": tps("tp3 tp4 tp5"), "z": tps("tp6")}
    got = run("sticky", ppt, {m: sub("sticky", ["t"], ps, 3) for m, ps in owned.items()})
    assert got == {"C": tps("tp3 tp4 tp5"), "hello": tps("tp0 tp1"), "z": tps("tp2 tp6")}
