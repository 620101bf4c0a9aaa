"""Replica placement for CreateTopics / CreatePartitions (Kafka's StripedReplicaPlacer) and manual assignments."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.api_error import ApiError
from oncelog.cluster.model import BrokerInfo, PartitionState
from oncelog.cluster.placement import new_partitions, new_topic_partitions, place_replicas
from oncelog.protocol.errors import ErrorCode

from .views import check_state, make_view, ps


def brokers(racks: dict[int, str | None]) -> list[BrokerInfo]:
    return [BrokerInfo(b, "h", 1, r) for b, r in racks.items()]


def states(result: list[PartitionState] | ApiError) -> list[PartitionState]:
    assert not isinstance(result, ApiError), result
    return result


def test_replication_factor_above_live_brokers_is_refused_with_a_message() -> None:
    view = make_view([1, 2], {})
    err = new_topic_partitions(view, 3, 3, rng=random.Random(1))
    assert isinstance(err, ApiError) and err.code is ErrorCode.INVALID_REPLICATION_FACTOR
    assert err.message is not None and "replication factor of 3" in err.message and "only 2 broker(s)" in err.message
    # a broker in controlled shutdown does not count
    err = new_topic_partitions(make_view([1, 2, 3], {}, shutting_down=[3]), 1, 3, rng=random.Random(1))
    assert isinstance(err, ApiError) and err.code is ErrorCode.INVALID_REPLICATION_FACTOR
    for rf, code in [(0, ErrorCode.INVALID_REPLICATION_FACTOR), (-2, ErrorCode.INVALID_REPLICATION_FACTOR)]:
        err = new_topic_partitions(view, 1, rf, rng=random.Random(1))
        assert isinstance(err, ApiError) and err.code is code
    err = new_topic_partitions(view, 0, 1, rng=random.Random(1))
    assert isinstance(err, ApiError) and err.code is ErrorCode.INVALID_PARTITIONS


def test_defaults_and_initial_state() -> None:
    view = make_view([1, 2, 3], {})
    out = states(new_topic_partitions(view, -1, -1, rng=random.Random(3), default_num_partitions=6,
                                      default_replication_factor=3))
    assert len(out) == 6
    for s in out:
        assert len(s.replicas) == 3 and s.isr == s.replicas and s.leader == s.replicas[0]
        assert (s.leader_epoch, s.partition_epoch) == (0, 0)
    assert Counter(s.leader for s in out) == {1: 2, 2: 2, 3: 2}


def test_leaders_and_replicas_spread_evenly_without_racks() -> None:
    placed = place_replicas(brokers({b: None for b in range(1, 6)}), 20, 3, random.Random(7))
    assert not isinstance(placed, ApiError)
    assert set(Counter(r[0] for r in placed).values()) == {4}  # 20 partitions over 5 brokers: 4 leaders each
    assert set(Counter(b for r in placed for b in r).values()) == {12}
    assert len(set(placed)) > 5  # striped and shuffled: not the same few replica sets over and over


def test_rack_aware_one_replica_per_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placed = place_replicas(brokers(racks), 12, 3, random.Random(11))
    assert not isinstance(placed, ApiError)
    for r in placed:
        assert {racks[b] for b in r} == {"a", "b", "c"}, r
    assert set(Counter(r[0] for r in placed).values()) == {2}


def test_brokers_without_a_rack_form_a_group_of_their_own() -> None:
    # Kafka's KRaft placer: no error when only some brokers name a rack (see placement's docstring)
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: None, 4: None}
    placed = place_replicas(brokers(racks), 8, 2, random.Random(5))
    assert not isinstance(placed, ApiError)
    for r in placed:
        assert {racks[b] for b in r} == {"a", None}, r


def test_same_seed_same_placement() -> None:
    bs = brokers({1: None, 2: None, 3: None, 4: None})
    assert place_replicas(bs, 10, 2, random.Random(42)) == place_replicas(bs, 10, 2, random.Random(42))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 9), rf=st.integers(1, 9), parts=st.integers(1, 40), num_racks=st.integers(0, 4),
       seed=st.integers(0, 2**32))
def test_placement_properties(n: int, rf: int, parts: int, num_racks: int, seed: int) -> None:
    racks = {b: (None if num_racks == 0 else f"r{b % num_racks}") for b in range(1, n + 1)}
    placed = place_replicas(brokers(racks), parts, rf, random.Random(seed))
    if rf > n:
        assert isinstance(placed, ApiError) and placed.code is ErrorCode.INVALID_REPLICATION_FACTOR
        return
    assert not isinstance(placed, ApiError) and len(placed) == parts
    distinct_racks = len(set(racks.values()))
    for r in placed:
        assert len(r) == rf and len(set(r)) == rf and set(r) <= set(racks)
        assert len({racks[b] for b in r}) == min(rf, distinct_racks), (r, racks)
    if num_racks <= 1 or n % num_racks == 0:  # racks of equal size: leaders even to one, replicas close
        leaders = Counter(r[0] for r in placed)
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1, leaders
        load = Counter(b for r in placed for b in r)
        assert max(load.values()) - min(load.get(b, 0) for b in racks) <= rf + 1, load


def test_two_racks_of_two_leaders_even() -> None:
    # Kafka's StripedReplicaPlacer gives every leader of a rack to the same broker here (one cursor per rack for
    # leaders and followers alike); ours keeps a leader cursor per rack
    placed = place_replicas(brokers({1: "a", 2: "a", 3: "b", 4: "b"}), 4, 2, random.Random(0))
    assert not isinstance(placed, ApiError)
    assert sorted(r[0] for r in placed) == [1, 2, 3, 4]


def test_manual_assignment_validation() -> None:
    view = make_view([1, 2, 3], {}, shutting_down=[3])
    rng = random.Random(0)

    def err(assignments: list[tuple[int, list[int]]], rf: int = -1, n: int = -1) -> ApiError:
        out = new_topic_partitions(view, n, rf, assignments, rng=rng)
        assert isinstance(out, ApiError)
        return out

    assert err([(0, [1, 1])]).code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "more than once" in (err([(0, [1, 1])]).message or "")
    assert "broker 7" in (err([(0, [1, 7])]).message or "")
    assert "empty replica list" in (err([(0, [])]).message or "")
    assert "not consistent" in (err([(0, [1, 2]), (1, [2])]).message or "")
    assert "multiple manual partition assignments" in (err([(0, [1]), (0, [2])]).message or "")
    assert "consecutive" in (err([(0, [1]), (2, [2])]).message or "")
    assert "shutting down" in (err([(0, [3])]).message or "")
    assert err([(0, [1])], rf=1).code is ErrorCode.INVALID_REQUEST
    assert err([(0, [1])], n=1).code is ErrorCode.INVALID_REQUEST
    out = states(new_topic_partitions(view, -1, -1, [(1, [3, 2]), (0, [2, 1])], rng=rng))
    assert out[0] == PartitionState((2, 1), (2, 1), 2)
    assert out[1] == PartitionState((3, 2), (2,), 2)  # 3 is shutting down: not in the ISR, not the leader
    for s in out:
        check_state(s)


def test_create_partitions() -> None:
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2]), ("t", 1): ps([2, 3])})
    rng = random.Random(9)
    added = states(new_partitions(view, "t", 5, rng=rng))
    assert len(added) == 3 and all(len(s.replicas) == 2 for s in added)
    manual = states(new_partitions(view, "t", 3, [[3, 1]], rng=rng))
    assert manual == [PartitionState((3, 1), (3, 1), 3)]
    cases = [("t", 2, None, ErrorCode.INVALID_PARTITIONS), ("t", 1, None, ErrorCode.INVALID_PARTITIONS),
             ("nope", 3, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
             ("t", 4, [[1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
             ("t", 3, [[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT)]
    for topic, count, assignments, code in cases:
        out = new_partitions(view, topic, count, assignments, rng=rng)
        assert isinstance(out, ApiError) and out.code is code, (topic, count, assignments, out)
