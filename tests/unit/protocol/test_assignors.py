"""Range and RoundRobin assignors: the examples of Kafka's RangeAssignor and RoundRobinAssignor javadoc, and
aiokafka's implementations of the same Java algorithms as an independent oracle."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from aiokafka.coordinator.assignors.range import RangePartitionAssignor  # type: ignore[import-untyped]
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor  # type: ignore[import-untyped]
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.assignors import ASSIGNOR_NAMES, Subscription, get_assignor

TP = tuple[str, int]


def run(name: str, ppt: Mapping[str, int], topics: Mapping[str, list[str]]) -> dict[str, list[TP]]:
    result = get_assignor(name).assign(ppt, {m: Subscription(list(ts)) for m, ts in topics.items()})
    return {m: sorted(a.partitions) for m, a in result.items()}


def tps(spec: str) -> list[TP]:
    """'t0p0 t1p2' -> [('t0', 0), ('t1', 2)]"""
    out = []
    for item in spec.split():
        t, p = item.rsplit("p", 1)
        out.append((t, int(p)))
    return sorted(out)


def test_names_and_protocols() -> None:
    assert ASSIGNOR_NAMES == ("range", "roundrobin", "sticky", "cooperative-sticky")
    for name in ASSIGNOR_NAMES:
        a = get_assignor(name)
        assert a.name == name
    assert get_assignor("cooperative-sticky").rebalance_protocols == ("eager", "cooperative")
    assert get_assignor("range").rebalance_protocols == ("eager",)


def test_unknown_assignor_names_the_choices() -> None:
    with pytest.raises(ValueError, match="range, roundrobin, sticky, cooperative-sticky"):
        get_assignor("rangee")


def test_range_example() -> None:
    # RangeAssignor's javadoc: C0, C1 subscribe t0 and t1, 3 partitions each
    got = run("range", {"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert got == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t1p2")}


def test_roundrobin_same_subscriptions_is_even() -> None:
    # identical subscriptions -> even; RoundRobinAssignor's javadoc example for this input
    got = run("roundrobin", {"t0": 3, "t1": 3}, {"C0": ["t0", "t1"], "C1": ["t0", "t1"]})
    assert got == {"C0": tps("t0p0 t0p2 t1p1"), "C1": tps("t0p1 t1p0 t1p2")}


def test_roundrobin_unequal_subscriptions() -> None:
    # a member not subscribed to a topic gets none of it, so the result may be uneven
    # (Kafka's javadoc: t0 1 partition, t1 2, t2 3; C0: t0; C1: t0,t1; C2: t0,t1,t2)
    got = run("roundrobin", {"t0": 1, "t1": 2, "t2": 3}, {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]})
    assert got == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1 t2p0 t2p1 t2p2")}


def test_range_uneven_topics_and_missing_metadata() -> None:
    got = run("range", {"t0": 5, "t1": 1}, {"b": ["t0", "t1", "gone"], "a": ["t0"], "c": ["t0", "t1"]})
    assert got == {"a": tps("t0p0 t0p1"), "b": tps("t0p2 t0p3 t1p0"), "c": tps("t0p4")}


def test_members_with_nothing_get_an_empty_assignment() -> None:
    for name in ASSIGNOR_NAMES:
        got = run(name, {"t": 1}, {"a": ["t"], "b": ["t"], "c": ["other"]})
        assert sorted(got) == ["a", "b", "c"]
        assert sum(len(v) for v in got.values()) == 1 and got["c"] == []


class _Cluster:
    """Partition counts in the shape aiokafka's assignors read (the oracle's input, not a broker)."""

    def __init__(self, ppt: Mapping[str, int]) -> None:
        self.ppt = ppt

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.ppt[topic])) if topic in self.ppt else None


subscriptions_st = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.lists(st.sampled_from(["t0", "t1", "t2", "t3"]), min_size=1, max_size=4, unique=True),
    min_size=1,
    max_size=7,
)
ppt_st = st.fixed_dictionaries({"t0": st.integers(0, 9), "t1": st.integers(1, 9), "t2": st.integers(1, 4)})


@settings(max_examples=300, deadline=None)
@given(ppt_st, subscriptions_st)
def test_range_and_roundrobin_match_aiokafka(ppt: dict[str, int], subs: dict[str, list[str]]) -> None:
    meta = {m: ConsumerProtocolMemberMetadata(0, ts, b"") for m, ts in subs.items()}
    for name, oracle in (("range", RangePartitionAssignor), ("roundrobin", RoundRobinPartitionAssignor)):
        expected = {
            m: sorted((t, p) for t, ps in a.assignment for p in ps)
            for m, a in oracle.assign(_Cluster(ppt), meta).items()
        }
        assert run(name, ppt, subs) == expected, name
