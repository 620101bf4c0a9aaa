"""The controller's decisions, one event at a time (Kafka's ReplicationControlManager cases)."""

from __future__ import annotations

from dataclasses import replace

from oncelog.cluster.api_error import NO_ERROR
from oncelog.cluster.controller import (
    ControllerConfig,
    ElectionType,
    OngoingReassignment,
    alter_reassignments,
    broker_back,
    broker_gone,
    controlled_shutdown,
    elect_leaders,
    leads_nothing,
    list_reassignments,
    rebalance_leaders,
    reconcile,
    unclean_election_enabled,
)
from oncelog.cluster.model import NO_LEADER, ClusterView, ControllerInfo, PartitionState, VersionedPartition
from oncelog.cluster.partition_change import expand_isr
from oncelog.cluster.partition_map import PartitionMap
from oncelog.cluster.store import PartitionChange
from oncelog.protocol.errors import ErrorCode

from .views import apply, check_change, make_view, ps

CFG = ControllerConfig()


def by_tp(changes: list[PartitionChange]) -> dict[tuple[str, int], PartitionState]:
    assert len({c.tp for c in changes}) == len(changes)
    return {c.tp: c.state for c in changes}


def without(view: ClusterView, *gone: int) -> ClusterView:
    return replace(view, brokers={b: i for b, i in view.brokers.items() if b not in gone}, revision=view.revision + 1)


# ------------------------------------------------------------------------------------------------- broker gone
def test_broker_gone_moves_leadership_in_replica_order_and_leaves_isrs() -> None:
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3], isr=[3, 1, 2], leader=1, le=4, pe=6),
                                 ("t", 1): ps([2, 1, 3], le=2, pe=2),
                                 ("t", 2): ps([2, 3], le=1, pe=1)})
    changes = broker_gone(without(view, 1), 1, CFG)
    out = by_tp(changes)
    assert set(out) == {("t", 0), ("t", 1)}  # t-2 does not involve broker 1
    assert (out["t", 0].leader, out["t", 0].isr, out["t", 0].leader_epoch, out["t", 0].partition_epoch) == \
        (2, (3, 2), 5, 7)  # 2 comes before 3 in replica order
    assert (out["t", 1].leader, out["t", 1].isr, out["t", 1].leader_epoch) == (2, (2, 3), 2)
    for c in changes:
        assert c.expected_mod_revision == view.partitions[c.tp].mod_revision
        check_change(view.partitions[c.tp].state, c.state)


def test_last_isr_member_gone_leaves_the_partition_leaderless_with_that_member() -> None:
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3], isr=[1], le=3, pe=5)})
    out = by_tp(broker_gone(without(view, 1), 1, CFG))
    assert (out["t", 0].leader, out["t", 0].isr, out["t", 0].leader_epoch) == (NO_LEADER, (1,), 4)


def test_unclean_election_by_topic_or_cluster_default() -> None:
    parts = {("t", 0): ps([1, 2, 3], isr=[1])}
    for topic_cfg, cluster_cfg, static, expect in [
            ({}, {}, False, NO_LEADER), ({"unclean.leader.election.enable": "true"}, {}, False, 2),
            ({}, {"unclean.leader.election.enable": "true"}, False, 2), ({}, {}, True, 2),
            ({"unclean.leader.election.enable": "false"}, {"unclean.leader.election.enable": "true"}, True, NO_LEADER)]:
        view = make_view([1, 2, 3], parts, topic_configs={"t": topic_cfg}, cluster_configs=cluster_cfg)
        cfg = ControllerConfig(unclean_leader_election_enable=static)
        assert unclean_election_enabled(view, "t", cfg) == (expect != NO_LEADER)
        out = by_tp(broker_gone(without(view, 1), 1, cfg))
        assert out["t", 0].leader == expect, (topic_cfg, cluster_cfg, static)
        assert out["t", 0].isr == ((1,) if expect == NO_LEADER else (2,))



def test_unclean_election_by_the_controllers_own_dynamic_config() -> None:
    """Kafka's order: the topic's setting, the controller node's dynamic config, the cluster-wide default, static."""
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3], isr=[1])})
    on = {"unclean.leader.election.enable": "true"}
    off = {"unclean.leader.election.enable": "false"}
    for controller, configs, expect in [(2, {2: on}, True), (3, {2: on}, False), (2, {2: off, None: on}, False),
                                        (None, {2: on}, False), (3, {None: on}, True)]:
        v = replace(view, controller=None if controller is None else ControllerInfo(controller, 1),
                    broker_configs=configs)
        assert unclean_election_enabled(v, "t", CFG) is expect, (controller, configs)


# -------------------------------------------------------------------------------------------------- broker back
def test_broker_back_leads_leaderless_partitions_whose_isr_holds_it_and_rejoins_no_isr() -> None:
    parts = {("t", 0): ps([1, 2, 3], isr=[1], leader=NO_LEADER, le=4, pe=6),
             ("t", 1): ps([1, 2, 3], isr=[2], leader=2),
             ("t", 2): ps([1, 3], isr=[3], leader=NO_LEADER)}  # 3 stays dead
    back = make_view([1, 2], parts)
    out = by_tp(broker_back(back, 1, CFG))
    assert set(out) == {("t", 0)}  # t-1 keeps ISR [2]: its leader adds 1 when it has caught up
    assert (out["t", 0].leader, out["t", 0].isr, out["t", 0].leader_epoch) == (1, (1,), 5)
    unclean = make_view([1, 2], parts, topic_configs={"t": {"unclean.leader.election.enable": "true"}})
    out = by_tp(broker_back(unclean, 1, CFG))
    assert out["t", 2].leader == 1 and out["t", 2].isr == (1,)  # out of the ISR, but allowed


# --------------------------------------------------------------------------------------------- controlled shutdown
def test_controlled_shutdown_moves_leadership_first() -> None:
    parts = {("t", 0): ps([1, 2, 3]), ("t", 1): ps([2, 1, 3]), ("t", 2): ps([1, 2], isr=[1])}
    view = make_view([1, 2, 3], parts, shutting_down=[1])
    out = by_tp(controlled_shutdown(view, 1, CFG))
    assert (out["t", 0].leader, out["t", 0].isr) == (2, (2, 3))
    assert (out["t", 1].leader, out["t", 1].isr) == (2, (2, 3))
    assert (out["t", 2].leader, out["t", 2].isr) == (NO_LEADER, (1,))  # sole ISR member: offline, as KRaft
    assert not leads_nothing(view, 1)
    assert leads_nothing(apply(view, controlled_shutdown(view, 1, CFG)), 1)


# --------------------------------------------------------------------------------------------------- elections
def test_elect_preferred_leaders() -> None:
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3], leader=2, le=3), ("t", 1): ps([1, 2, 3]),
                                 ("t", 2): ps([1, 2, 3], isr=[2, 3], leader=2)})
    d = elect_leaders(view, ElectionType.PREFERRED, [("t", 0), ("t", 1), ("t", 2), ("t", 9), ("u", 0)], CFG)
    assert d.results["t", 0] == NO_ERROR
    assert d.results["t", 1].code is ErrorCode.ELECTION_NOT_NEEDED
    assert d.results["t", 2].code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert d.results["t", 9].code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert d.results["u", 0].code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert [(c.tp, c.state.leader, c.state.leader_epoch) for c in d.changes] == [(("t", 0), 1, 4)]
    everything = elect_leaders(view, ElectionType.PREFERRED, None, CFG)
    assert set(everything.results) == {("t", 0), ("t", 2)}  # ELECTION_NOT_NEEDED is left out for "all"


def test_elect_unclean_leaders() -> None:
    view = make_view([2, 3], {("t", 0): ps([1, 2, 3], isr=[1], leader=NO_LEADER), ("t", 1): ps([2, 3]),
                              ("t", 2): ps([1, 4], isr=[1], leader=NO_LEADER)})
    d = elect_leaders(view, ElectionType.UNCLEAN, [("t", 0), ("t", 1), ("t", 2)], CFG)
    assert d.results["t", 0] == NO_ERROR
    assert d.results["t", 1].code is ErrorCode.ELECTION_NOT_NEEDED
    assert d.results["t", 2].code is ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    (change,) = d.changes
    assert (change.state.leader, change.state.isr) == (2, (2,))


def test_rebalance_by_imbalance_percentage() -> None:
    # broker 1 prefers 10 partitions; 2 of them led by broker 2 = 20% > 10%: both move back
    parts = {("t", i): ps([1, 2], leader=2 if i < 2 else 1) for i in range(10)}
    parts["t", 9] = ps([1, 2], isr=[2], leader=2)  # preferred not in sync: never moved
    view = make_view([1, 2], parts)
    changes, more = rebalance_leaders(view, CFG)
    assert not more and sorted((c.tp, c.state.leader) for c in changes) == [(("t", 0), 1), (("t", 1), 1)]
    parts["t", 1] = ps([1, 2])  # 2 of 10 elsewhere, one of them not eligible: 20% still > 10%
    view = make_view([1, 2], parts)
    assert [c.tp for c in rebalance_leaders(view, CFG)[0]] == [("t", 0)]
    parts["t", 9] = ps([1, 2])  # now 1 of 10 = 10%: not above the threshold
    view = make_view([1, 2], parts)
    assert rebalance_leaders(view, CFG)[0] == []
    assert len(rebalance_leaders(view, replace(CFG, leader_imbalance_per_broker_percentage=0))[0]) == 1
    capped = replace(CFG, leader_imbalance_per_broker_percentage=0, max_elections_per_imbalance=1)
    parts["t", 9] = ps([1, 2], leader=2)
    changes, more = rebalance_leaders(make_view([1, 2], parts), capped)
    assert len(changes) == 1 and more


# ------------------------------------------------------------------------------------------------ reassignment
def test_reassignment_start_progress_complete() -> None:
    view = make_view([1, 2, 3, 4], {("t", 0): ps([1, 2, 3], le=2, pe=5)})
    d = alter_reassignments(view, [(("t", 0), [2, 3, 4])], CFG)
    assert d.results["t", 0] == NO_ERROR
    (c,) = d.changes
    assert (c.state.replicas, c.state.adding, c.state.removing, c.state.isr, c.state.leader, c.state.leader_epoch) \
        == ((2, 3, 4, 1), (4,), (1,), (1, 2, 3), 1, 2)
    view = apply(view, d.changes)
    assert list_reassignments(view) == {("t", 0): OngoingReassignment((2, 3, 4, 1), (4,), (1,))}
    assert list_reassignments(view, [("t", 0), ("t", 5), ("nope", 0)]) == list_reassignments(view)
    # nothing to do until 4 is in sync
    assert reconcile(view, view, CFG) == []
    # the leader adds 4 to the ISR; the controller sees it and completes the reassignment, moving the leader off 1
    state = view.partitions["t", 0].state
    grown = expand_isr(state, 1, state.leader_epoch, [4])
    assert grown is not None
    after = apply(view, [PartitionChange(("t", 0), view.partitions["t", 0].mod_revision, grown)])
    (done,) = reconcile(view, after, CFG)
    assert (done.state.replicas, done.state.isr, done.state.leader, done.state.adding, done.state.removing) == \
        ((2, 3, 4), (2, 3, 4), 2, (), ())
    check_change(grown, done.state)
    assert list_reassignments(apply(after, [done])) == {}


def test_reassignment_reorder_completes_at_once_and_same_target_is_a_no_op() -> None:
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3])})
    (c,) = alter_reassignments(view, [(("t", 0), [3, 2, 1])], CFG).changes
    assert (c.state.replicas, c.state.adding, c.state.removing, c.state.leader) == ((3, 2, 1), (), (), 1)
    d = alter_reassignments(view, [(("t", 0), [1, 2, 3])], CFG)
    assert d.changes == () and d.results["t", 0] == NO_ERROR


def test_reassignment_cancel_and_errors() -> None:
    view = make_view([1, 2, 3, 4], {("t", 0): ps([4, 2, 3, 1], isr=[1, 2, 3], leader=1, adding=[4], removing=[1]),
                                    ("t", 1): ps([1, 2])})
    d = alter_reassignments(view, [(("t", 0), None), (("t", 1), None), (("t", 2), [1]), (("u", 0), [1]),
                                   (("t", 1), [1, 1]), (("t", 1), [1, 9])], CFG)
    assert d.results["t", 0] == NO_ERROR
    assert d.results["t", 2].code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert d.results["u", 0].code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (c,) = d.changes
    assert (c.state.replicas, c.state.isr, c.state.leader, c.state.adding, c.state.removing) == \
        ((2, 3, 1), (1, 2, 3), 1, (), ())
    for target, code in [(None, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS), ([1, 1], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                         ([1, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT), ([], ErrorCode.INVALID_REPLICA_ASSIGNMENT)]:
        assert alter_reassignments(view, [(("t", 1), target)], CFG).results["t", 1].code is code


def test_cancel_needing_an_unclean_election_is_refused_unless_allowed() -> None:
    parts = {("t", 0): ps([4, 5, 1], isr=[4, 5], leader=4, adding=[4, 5], removing=[1])}
    refused = alter_reassignments(make_view([1, 4, 5], parts), [(("t", 0), None)], CFG)
    assert refused.results["t", 0].code is ErrorCode.INVALID_REPLICA_ASSIGNMENT and not refused.changes
    allowed = make_view([1, 4, 5], parts, topic_configs={"t": {"unclean.leader.election.enable": "true"}})
    (c,) = alter_reassignments(allowed, [(("t", 0), None)], CFG).changes
    assert (c.state.replicas, c.state.isr, c.state.leader) == ((1,), (1,), 1)


# ------------------------------------------------------------------------------------------------- reconcile
def test_first_view_of_a_new_controller_is_checked_whole() -> None:
    parts = {("t", 0): ps([1, 2, 3], leader=1),  # led by a broker already gone
             ("t", 1): ps([2, 3], isr=[2, 3]),  # fine
             ("t", 2): ps([3, 2], isr=[3, 2]),  # 3 is shutting down
             ("t", 3): ps([1, 2], isr=[1], leader=NO_LEADER)}  # offline: stays so
    view = make_view([2, 3], parts, shutting_down=[3])
    out = by_tp(reconcile(None, view, CFG))
    assert set(out) == {("t", 0), ("t", 1), ("t", 2)}
    assert (out["t", 0].leader, out["t", 0].isr) == (2, (2,))
    assert (out["t", 1].leader, out["t", 1].isr) == (2, (2,))
    assert (out["t", 2].leader, out["t", 2].isr) == (2, (2,))
    assert reconcile(None, apply(view, reconcile(None, view, CFG)), CFG) == []  # a fixed point


def test_bounced_broker_is_gone_then_back() -> None:
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3]), ("t", 1): ps([2, 1]), ("t", 2): ps([2, 3])})
    bounced = replace(view, revision=view.revision + 5,
                      brokers={**view.brokers, 1: replace(view.brokers[1], epoch=view.revision + 3)})
    out = by_tp(reconcile(view, bounced, CFG))
    assert set(out) == {("t", 0), ("t", 1)}
    assert (out["t", 0].leader, out["t", 0].isr, out["t", 0].leader_epoch) == (2, (2, 3), 1)
    assert (out["t", 1].leader, out["t", 1].isr) == (2, (2,))
    # the same bounce seen by a new controller that never saw the old registration: its epoch is newer than the
    # partitions' last writes, so it is dropped from their ISRs as well
    assert by_tp(reconcile(None, bounced, CFG)) == out


def test_a_process_registered_again_after_its_lease_expired_is_not_a_bounce() -> None:
    """etcd stalled past the session timeout: every lease expired, every broker registered again with a new broker
    epoch but the same incarnation. Its log is intact: nothing to re-elect, for the controller that saw the old
    registrations and for a new one that did not."""
    view = make_view([1, 2, 3], {("t", 0): ps([1, 2, 3]), ("t", 1): ps([2, 1]), ("t", 2): ps([2, 3])})
    again = {b: replace(i, epoch=view.revision + 3 + b, incarnation=i.epoch) for b, i in view.brokers.items()}
    after = replace(view, revision=view.revision + 7, brokers=again)
    assert all(i.process_epoch == view.brokers[b].process_epoch for b, i in again.items())
    assert reconcile(view, after, CFG) == []
    assert reconcile(None, after, CFG) == []
    # a new process (a restart) has a new incarnation: that is a bounce, as before
    restarted = replace(after, brokers={**again, 1: replace(again[1], incarnation=-1)})
    out = by_tp(reconcile(view, restarted, CFG))
    assert set(out) == {("t", 0), ("t", 1)} and out["t", 0].leader == 2


def test_sole_isr_member_bounce_goes_offline_then_returns_with_new_epochs() -> None:
    view = make_view([1, 2], {("t", 0): ps([1, 2], isr=[1], le=7)})
    bounced = replace(view, revision=view.revision + 5,
                      brokers={**view.brokers, 1: replace(view.brokers[1], epoch=view.revision + 3)})
    (offline,) = reconcile(view, bounced, CFG)
    assert (offline.state.leader, offline.state.isr, offline.state.leader_epoch) == (NO_LEADER, (1,), 8)
    after = apply(bounced, [offline])
    (back,) = reconcile(bounced, after, CFG)
    assert (back.state.leader, back.state.isr, back.state.leader_epoch) == (1, (1,), 9)


def test_reconcile_reacts_to_config_changes_and_to_isr_writes_with_ineligible_brokers() -> None:
    view = make_view([2, 3], {("t", 0): ps([1, 2, 3], isr=[1], leader=NO_LEADER), ("t", 1): ps([2, 3])})
    assert reconcile(view, replace(view, revision=view.revision + 1), CFG) == []
    unclean = replace(view, revision=view.revision + 1,
                      broker_configs={None: {"unclean.leader.election.enable": "true"}})
    (c,) = reconcile(view, unclean, CFG)
    assert c.tp == ("t", 0) and (c.state.leader, c.state.isr) == (2, (2,))
    # a leader with a stale view re-adds broker 1, which is gone: the controller takes it out again
    readded = ps([1, 2, 3], isr=[2, 1], leader=2, pe=3)
    view2 = make_view([2, 3], {("t", 0): ps([1, 2, 3], isr=[2], leader=2, pe=2)})
    after = apply(view2, [PartitionChange(("t", 0), view2.partitions["t", 0].mod_revision, readded)])
    (fix,) = reconcile(view2, after, CFG)
    assert (fix.state.isr, fix.state.leader) == ((2,), 2)


def test_bounced_last_isr_member_of_an_offline_partition_is_elected() -> None:
    # offline with ISR [1]; broker 1 comes back with a registration newer than the partition's last write: the
    # "gone" half of the bounce changes nothing (the ISR cannot be emptied), so the "back" half elects it
    view = make_view([2], {("t", 0): ps([1, 2], isr=[1], leader=NO_LEADER, le=3)})
    back = replace(view, revision=view.revision + 2,
                   brokers={**view.brokers, 1: replace(view.brokers[2], node_id=1, epoch=view.revision + 1)})
    for prev in (view, None):
        (c,) = reconcile(prev, back, CFG)
        assert (c.state.leader, c.state.isr, c.state.leader_epoch) == (1, (1,), 4)


def test_reconcile_after_its_own_writes_looks_at_changed_buckets_only_and_decides_the_same() -> None:
    """With copy-on-write partition maps the controller skips buckets a new view shares with the last one it acted
    on; it must decide exactly what a look at every partition decides (here: ISR writes by leaders, one re-adding
    a broker that is gone, among 1,000 partitions)."""
    parts = {("t", i): ps([1, 2, 3], leader=1 + i % 2) for i in range(1000)}
    full = make_view([1, 2], parts)
    cow = replace(full, partitions=PartitionMap.build(full.partitions.items()))
    writes = [PartitionChange(("t", 7), 107, ps([1, 2, 3], isr=[2, 3], leader=2, pe=2)),   # 3 is gone: out again
              PartitionChange(("t", 900), 1000, ps([1, 2, 3], isr=[1, 2], leader=1, pe=2))]
    after_full = apply(full, writes)
    rev = after_full.revision
    after_cow = replace(after_full, partitions=cow.partitions.updated(  # type: ignore[attr-defined]
        {c.tp: VersionedPartition(c.state, rev) for c in writes}, []))
    expected = reconcile(full, after_full, CFG)
    assert [c.tp for c in expected] == [("t", 7)] and expected[0].state.isr == (2,)
    assert reconcile(cow, after_cow, CFG) == expected
