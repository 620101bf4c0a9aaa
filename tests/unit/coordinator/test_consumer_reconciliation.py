"""The KIP-848 member state machine (Kafka's CurrentAssignmentBuilder) and the server-side assignors, as pure
functions."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from oncelog.coordinator.group.assignors import MemberSpec, RangeAssignor, UniformAssignor, assignors_by_name
from oncelog.coordinator.group.consumer_group import ConsumerGroupMember, GroupError, MemberState
from oncelog.coordinator.group.reconciliation import reconcile
from oncelog.protocol.errors import ErrorCode

T1, T2, T3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def a(**topics: list[int]) -> dict[uuid.UUID, frozenset[int]]:
    ids = {"t1": T1, "t2": T2, "t3": T3}
    return {ids[k]: frozenset(v) for k, v in topics.items() if v}


def free(topic: uuid.UUID, partition: int) -> int:
    return -1


def owned_by_other(*tps: tuple[uuid.UUID, int]) -> object:
    def epoch(topic: uuid.UUID, partition: int) -> int:
        return 7 if (topic, partition) in tps else -1
    return epoch


def member(epoch: int = 5, state: MemberState = MemberState.STABLE, **kw: object) -> ConsumerGroupMember:
    return ConsumerGroupMember("m", member_epoch=epoch, previous_member_epoch=epoch - 1, state=state,
                               **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ reconciliation
def test_stable_member_at_target_epoch_is_unchanged() -> None:
    m = member(assigned=a(t1=[0, 1]))
    assert reconcile(m, 5, a(t1=[0, 1]), free, None) is m


def test_new_partitions_only_assigned_move_to_target_epoch() -> None:
    m = member(assigned=a(t1=[0]))
    n = reconcile(m, 6, a(t1=[0, 1]), free, a(t1=[0]))
    assert (n.member_epoch, n.previous_member_epoch, n.state) == (6, 5, MemberState.STABLE)
    assert n.assigned == a(t1=[0, 1]) and n.pending_revocation == {}


def test_revocation_comes_before_assignment() -> None:
    m = member(assigned=a(t1=[0, 1]))
    target = a(t1=[0], t2=[0])
    n = reconcile(m, 6, target, free, a(t1=[0, 1]))
    # still owns t1-1: stays at epoch 5, given only what it keeps, nothing new yet
    assert (n.member_epoch, n.state) == (5, MemberState.UNREVOKED_PARTITIONS)
    assert n.assigned == a(t1=[0]) and n.pending_revocation == a(t1=[1])
    # a heartbeat still reporting t1-1: no progress
    assert reconcile(n, 6, target, free, a(t1=[0, 1])) is n
    # it reports t1-1 revoked: it moves to epoch 6 and gets t2-0
    done = reconcile(n, 6, target, free, a(t1=[0]))
    assert (done.member_epoch, done.state) == (6, MemberState.STABLE)
    assert done.assigned == target and done.pending_revocation == {}


def test_unknown_owned_partitions_count_as_still_owned() -> None:
    m = member(assigned=a(t1=[0, 1]))
    n = reconcile(m, 6, a(t1=[0]), free, None)
    assert n.state is MemberState.UNREVOKED_PARTITIONS
    assert reconcile(n, 6, a(t1=[0]), free, None) is n


def test_partitions_still_owned_by_another_member_are_unreleased() -> None:
    m = member(assigned=a(t1=[0]))
    target = a(t1=[0, 1, 2])
    n = reconcile(m, 6, target, owned_by_other((T1, 1)), a(t1=[0]))  # type: ignore[arg-type]
    assert (n.member_epoch, n.state) == (6, MemberState.UNRELEASED_PARTITIONS)
    assert n.assigned == a(t1=[0, 2])
    # the other member released t1-1
    done = reconcile(n, 6, target, free, a(t1=[0, 2]))
    assert (done.state, done.assigned) == (MemberState.STABLE, target)


def test_own_partition_pending_revocation_is_not_unreleased() -> None:
    m = member(state=MemberState.UNREVOKED_PARTITIONS, assigned=a(t1=[0]), pending_revocation=a(t1=[1]))
    # the target gives t1-1 back while the member revoked it already; its own epoch still marks it owned
    n = reconcile(m, 7, a(t1=[0, 1]), owned_by_other((T1, 1)), a(t1=[0]))  # type: ignore[arg-type]
    assert (n.member_epoch, n.state, n.assigned) == (7, MemberState.STABLE, a(t1=[0, 1]))


def test_unsubscribed_topic_is_revoked_even_at_the_target_epoch() -> None:
    m = member(assigned=a(t1=[0], t2=[0]))
    n = reconcile(m, 5, a(t1=[0], t2=[0]), free, a(t1=[0], t2=[0]), frozenset({T1}), subscription_changed=True)
    assert (n.member_epoch, n.state) == (5, MemberState.UNREVOKED_PARTITIONS)
    assert n.assigned == a(t1=[0]) and n.pending_revocation == a(t2=[0])


def test_unknown_state_fences_a_member_that_owns_partitions() -> None:
    m = member(state=MemberState.UNKNOWN, assigned=a(t1=[0]))
    with pytest.raises(GroupError) as e:
        reconcile(m, 6, a(t1=[0]), free, a(t1=[0]))
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    n = reconcile(m, 6, a(t1=[0]), free, {})
    assert (n.member_epoch, n.state) == (6, MemberState.STABLE)


# ------------------------------------------------------------------------------------------ assignors
def _counts(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(p) for p in parts.values()) for m, parts in result.items()}


def _all(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> Counter[tuple[uuid.UUID, int]]:
    return Counter((t, p) for parts in result.values() for t, ps in parts.items() for p in ps)


def test_uniform_is_balanced_complete_and_sticky() -> None:
    u = UniformAssignor()
    parts = {T1: 7, T2: 5}
    specs = {m: MemberSpec(frozenset({T1, T2})) for m in ("a", "b", "c")}
    r1 = u.assign(specs, parts)
    assert sorted(_counts(r1).values()) == [4, 4, 4]
    assert set(_all(r1).values()) == {1} and len(_all(r1)) == 12
    # d joins: each old member gives up one partition, keeps the rest
    specs2 = {m: MemberSpec(frozenset({T1, T2}), assignment=r1[m]) for m in r1}
    specs2["d"] = MemberSpec(frozenset({T1, T2}))
    r2 = u.assign(specs2, parts)
    assert sorted(_counts(r2).values()) == [3, 3, 3, 3]
    for m in ("a", "b", "c"):
        assert len(set(_all({m: r2[m]})) & set(_all({m: r1[m]}))) == 3
    # b leaves: only b's partitions move
    specs3 = {m: MemberSpec(frozenset({T1, T2}), assignment=r2[m]) for m in ("a", "c", "d")}
    r3 = u.assign(specs3, parts)
    assert sorted(_counts(r3).values()) == [4, 4, 4]
    for m in ("a", "c", "d"):
        assert set(_all({m: r2[m]})) <= set(_all({m: r3[m]}))


def test_uniform_different_subscriptions_balance_within_what_each_subscribes() -> None:
    u = UniformAssignor()
    parts = {T1: 6, T2: 6, T3: 2}
    specs = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2})),
             "c": MemberSpec(frozenset({T2, T3})), "d": MemberSpec(frozenset({T3}))}
    r = u.assign(specs, parts)
    assert set(_all(r).values()) == {1} and len(_all(r)) == 14
    for m, spec in specs.items():
        assert set(r[m]) <= spec.topics
    counts = _counts(r)
    assert max(counts[m] for m in "abc") - min(counts[m] for m in "abc") <= 1
    assert counts["d"] >= 1


def test_range_co_partitions_and_orders_static_members_first() -> None:
    rng = RangeAssignor()
    parts = {T1: 3, T2: 3}
    specs = {"m0": MemberSpec(frozenset({T1, T2})), "m1": MemberSpec(frozenset({T1, T2}), instance_id="i1")}
    r = rng.assign(specs, parts)
    assert r["m1"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert r["m0"] == {T1: frozenset({2}), T2: frozenset({2})}


def test_assignor_names_follow_kafka() -> None:
    names = assignors_by_name(["org.apache.kafka.coordinator.group.assignor.RangeAssignor", "uniform"])
    assert list(names) == ["range", "uniform"]
    with pytest.raises(ValueError):
        assignors_by_name(["sticky"])
