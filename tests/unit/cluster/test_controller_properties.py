"""Property tests: every decision of the controller keeps the partition invariants, on random clusters.

For any view of valid partition states and any event: leader in ISR, ISR a non-empty subset of replicas (or
NO_LEADER); the partition epoch grows by one on every change, the leader epoch when and only when the leader changes
or replicas are dropped; a new leader is alive, not shutting down, and from the ISR unless unclean election is
allowed; each change names the mod_revision it was decided from, once per partition; partitions an event does not
concern are left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.controller import (
    ControllerConfig,
    ElectionType,
    alter_reassignments,
    broker_back,
    broker_gone,
    controlled_shutdown,
    elect_leaders,
    is_active,
    rebalance_leaders,
    reconcile,
    unclean_election_enabled,
)
from oncelog.cluster.model import NO_LEADER, ClusterView, PartitionState, TopicPartition
from oncelog.cluster.store import PartitionChange

from .views import apply, check_change, make_view

BROKERS = list(range(1, 7))


@st.composite
def partition_states(draw: st.DrawFn) -> PartitionState:
    replicas = tuple(draw(st.permutations(BROKERS))[:draw(st.integers(1, 4))])
    isr = tuple(draw(st.permutations(replicas))[:draw(st.integers(1, len(replicas)))])
    leader = draw(st.sampled_from((NO_LEADER, *isr)))
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    if len(replicas) > 1 and draw(st.booleans()):  # a reassignment in progress: target first, removed after
        cut = draw(st.integers(1, len(replicas) - 1))
        removing = tuple(sorted(replicas[cut:]))
        adding = tuple(sorted(r for r in replicas[:cut] if draw(st.booleans())))
    return PartitionState(replicas, isr, leader, draw(st.integers(0, 5)), draw(st.integers(0, 9)), adding, removing)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterView:
    alive = draw(st.sets(st.sampled_from(BROKERS)))
    leaving = draw(st.sets(st.sampled_from(sorted(alive)))) if alive else set()
    n = draw(st.integers(1, 8))
    parts = {("t" if i % 2 else "u", i // 2): draw(partition_states()) for i in range(n)}
    unclean = {"t": {"unclean.leader.election.enable": "true"}} if draw(st.booleans()) else None
    return make_view(sorted(alive), parts, shutting_down=leaving, topic_configs=unclean)


def check(view: ClusterView, changes: list[PartitionChange] | tuple[PartitionChange, ...], *,
          concerned: Callable[[TopicPartition, PartitionState], bool] = lambda tp, s: True,
          unclean: bool | None = None) -> None:
    assert len({c.tp for c in changes}) == len(changes), "two changes to one partition in a decision"
    for c in changes:
        vp = view.partitions[c.tp]
        assert c.expected_mod_revision == vp.mod_revision
        assert concerned(c.tp, vp.state), f"{c.tp} changed but the event does not concern it: {vp.state}"
        allowed = unclean_election_enabled(view, c.tp[0], CFG) if unclean is None else unclean
        check_change(vp.state, c.state, unclean_allowed=allowed)
        if c.state.leader != vp.state.leader and c.state.leader != NO_LEADER:
            assert is_active(view, c.state.leader), f"elected {c.state.leader}, which is gone or leaving"


CFG = ControllerConfig()


@settings(max_examples=300, deadline=None)
@given(view=clusters(), broker=st.sampled_from(BROKERS))
def test_broker_gone(view: ClusterView, broker: int) -> None:
    view = replace(view, brokers={b: i for b, i in view.brokers.items() if b != broker})
    check(view, broker_gone(view, broker, CFG), concerned=lambda tp, s: broker in s.isr or s.leader == broker)


@settings(max_examples=300, deadline=None)
@given(view=clusters(), broker=st.sampled_from(BROKERS))
def test_controlled_shutdown(view: ClusterView, broker: int) -> None:
    if broker in view.brokers:
        view = replace(view, brokers={**view.brokers, broker: replace(view.brokers[broker], shutting_down=True)})
    changes = controlled_shutdown(view, broker, CFG)
    check(view, changes, concerned=lambda tp, s: broker in s.isr or s.leader == broker)
    after = apply(view, changes)
    assert all(broker not in vp.state.isr or vp.state.isr == (broker,) for vp in after.partitions.values())
    assert all(vp.state.leader != broker for vp in after.partitions.values())


@settings(max_examples=300, deadline=None)
@given(view=clusters(), broker=st.sampled_from(BROKERS))
def test_broker_back(view: ClusterView, broker: int) -> None:
    changes = broker_back(view, broker, CFG)
    check(view, changes, concerned=lambda tp, s: s.leader == NO_LEADER)
    for c in changes:  # never put back into an ISR it was not in (beyond what an unclean election does)
        old = view.partitions[c.tp].state
        assert set(c.state.isr) <= set(old.isr) or c.state.isr == (c.state.leader,)


@settings(max_examples=300, deadline=None)
@given(view=clusters(), preferred=st.booleans(), pick=st.lists(st.integers(0, 9)))
def test_elect_leaders(view: ClusterView, preferred: bool, pick: list[int]) -> None:
    tps = sorted(view.partitions)
    asked = None if not pick else [tps[i % len(tps)] for i in pick]
    kind = ElectionType.PREFERRED if preferred else ElectionType.UNCLEAN
    d = elect_leaders(view, kind, asked, CFG)
    check(view, d.changes, unclean=not preferred)
    for c in d.changes:
        assert d.results[c.tp].ok
        if preferred:
            assert c.state.leader == c.state.replicas[0] or view.partitions[c.tp].state.leader == NO_LEADER


@settings(max_examples=300, deadline=None)
@given(view=clusters(), pct=st.integers(0, 100))
def test_rebalance(view: ClusterView, pct: int) -> None:
    changes, _ = rebalance_leaders(view, ControllerConfig(leader_imbalance_per_broker_percentage=pct))
    check(view, changes, concerned=lambda tp, s: s.leader != s.preferred_leader)
    assert all(c.state.leader == c.state.preferred_leader for c in changes)


@settings(max_examples=300, deadline=None)
@given(view=clusters(), data=st.data())
def test_alter_reassignments(view: ClusterView, data: st.DataObject) -> None:
    tps = sorted(view.partitions)
    requests = [(data.draw(st.sampled_from(tps)),
                 data.draw(st.none() | st.lists(st.sampled_from(BROKERS), min_size=0, max_size=4)))
                for _ in range(data.draw(st.integers(1, 4)))]
    d = alter_reassignments(view, requests, CFG)
    check(view, d.changes, concerned=lambda tp, s: any(tp == r[0] for r in requests))


def settle(before: ClusterView | None, view: ClusterView) -> ClusterView:
    """Apply reconcile until it changes nothing (checking every decision on the way); the settled view."""
    for _ in range(4):
        changes = reconcile(before, view, CFG)
        check(view, changes)
        if not changes:
            return view
        before, view = view, apply(view, changes)
    raise AssertionError(f"reconcile did not settle: {view}")


def check_settled(view: ClusterView) -> None:
    """No broker that is gone or leaving leads or is in the ISR of a partition with a leader; a partition is
    leaderless only when nothing qualifies."""
    assert reconcile(None, view, CFG) == []
    for tp, vp in view.partitions.items():
        s = vp.state
        assert s.leader == NO_LEADER or is_active(view, s.leader)
        if s.leader != NO_LEADER:
            assert all(is_active(view, r) for r in s.isr), s
        else:  # the ISR members that were in sync when the last of them went stay, so one may come back
            assert not any(is_active(view, r) for r in s.isr)
            if unclean_election_enabled(view, tp[0], CFG):
                assert not any(is_active(view, r) for r in s.replicas)


@settings(max_examples=300, deadline=None)
@given(view=clusters())
def test_first_view_settles(view: ClusterView) -> None:
    check_settled(settle(None, view))


@settings(max_examples=300, deadline=None)
@given(start=clusters(), later=clusters(), bounced=st.sets(st.sampled_from(BROKERS)))
def test_changes_between_views_settle_as_a_full_check_would(start: ClusterView, later: ClusterView,
                                                            bounced: set[int]) -> None:
    """From a settled view, brokers come, go, bounce (new epoch) and start shutting down; reconciling only the
    difference reaches a state the full check of a new controller has nothing to add to."""
    settled = settle(None, start)
    brokers = {b: replace(i, epoch=settled.revision + 1 + b if b in bounced else i.epoch)
               for b, i in later.brokers.items()}
    moved = replace(settled, brokers=brokers, revision=settled.revision + 10)
    check_settled(settle(settled, moved))
