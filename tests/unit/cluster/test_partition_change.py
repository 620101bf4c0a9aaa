"""change_partition (Kafka's PartitionChangeBuilder), the reassignment arithmetic, and the leader's ISR helpers."""

from __future__ import annotations

import pytest

from oncelog.cluster.model import NO_LEADER
from oncelog.cluster.replica import LeaderReplicas
from oncelog.cluster.partition_change import (
    Election,
    apply_isr_change,
    change_partition,
    complete_reassignment,
    expand_isr,
    reassignment_replicas,
    revert_reassignment,
    shrink_isr,
)

from .views import check_change, ps


def alive(*brokers: int):  # type: ignore[no-untyped-def]
    return lambda r: r in brokers


def test_no_change_is_none() -> None:
    s = ps([1, 2, 3], le=4, pe=7)
    assert change_partition(s, alive(1, 2, 3)) is None
    assert change_partition(s, alive(1, 2, 3), isr=[1, 2, 3]) is None
    assert change_partition(s, alive(1, 2, 3), election=Election.PREFERRED) is None


def test_leader_kept_while_it_qualifies_isr_shrink_keeps_leader_epoch() -> None:
    s = ps([1, 2, 3], le=4, pe=7)
    new = change_partition(s, alive(1, 2), isr=[1, 2])
    assert new is not None and (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (1, (1, 2), 4, 8)


def test_new_leader_is_first_isr_member_in_replica_order() -> None:
    s = ps([1, 2, 3], isr=[3, 2, 1], leader=1, le=4, pe=7)
    new = change_partition(s, alive(2, 3), isr=[3, 2])
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (2, (3, 2), 5)
    check_change(s, new)


def test_last_isr_member_stays_and_partition_goes_leaderless() -> None:
    s = ps([1, 2, 3], isr=[1], le=2, pe=3)
    new = change_partition(s, alive(2, 3), isr=[])
    assert new is not None and (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (NO_LEADER, (1,), 3, 4)
    # ... and an ONLINE election never takes an out-of-sync replica
    assert change_partition(new, alive(2, 3)) is None


def test_unclean_election_takes_any_live_replica_and_resets_isr() -> None:
    s = ps([1, 2, 3], isr=[1], leader=NO_LEADER, le=3, pe=4)
    new = change_partition(s, alive(3), election=Election.UNCLEAN)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (3, (3,), 4)
    check_change(s, new, unclean_allowed=True)
    # an ISR member that is alive wins over an unclean choice
    s2 = ps([1, 2, 3], isr=[2], leader=NO_LEADER)
    new2 = change_partition(s2, alive(1, 2, 3), election=Election.UNCLEAN)
    assert new2 is not None and (new2.leader, new2.isr) == (2, (2,))
    assert change_partition(s, alive(), election=Election.UNCLEAN) is None


def test_preferred_election() -> None:
    s = ps([1, 2, 3], isr=[1, 2, 3], leader=2, le=5)
    new = change_partition(s, alive(1, 2, 3), election=Election.PREFERRED)
    assert new is not None and (new.leader, new.leader_epoch) == (1, 6)
    # preferred not in the ISR: the current leader stays (no change)
    assert change_partition(ps([1, 2, 3], isr=[2, 3], leader=2), alive(1, 2, 3), election=Election.PREFERRED) is None
    # preferred dead, current leader dead: the next qualifying replica
    new = change_partition(ps([1, 2, 3], isr=[1, 2, 3], leader=2), alive(3), election=Election.PREFERRED)
    assert new is not None and new.leader == 3


def test_reassignment_completes_when_targets_in_sync_and_moves_a_removed_leader() -> None:
    # replicas = target (4, 2, 3) + removing (1); 4 joined the ISR
    s = ps([4, 2, 3, 1], isr=[1, 2, 3, 4], leader=1, le=3, pe=9, adding=[4], removing=[1])
    new = change_partition(s, alive(1, 2, 3, 4))
    assert new is not None
    assert (new.replicas, new.isr, new.leader, new.adding, new.removing) == ((4, 2, 3), (2, 3, 4), 4, (), ())
    assert (new.leader_epoch, new.partition_epoch) == (4, 10)
    check_change(s, new)


def test_completion_that_drops_a_follower_bumps_the_leader_epoch_with_the_same_leader() -> None:
    s = ps([2, 3, 1], isr=[2, 3, 1], leader=2, le=3, pe=9, removing=[1])
    new = change_partition(s, alive(1, 2, 3))
    assert new is not None and (new.replicas, new.isr, new.leader, new.leader_epoch) == ((2, 3), (2, 3), 2, 4)


def test_reassignment_waits_while_a_target_is_out_of_sync() -> None:
    s = ps([4, 2, 3, 1], isr=[1, 2, 3], leader=1, adding=[4], removing=[1])
    assert complete_reassignment(s.replicas, s.adding, s.removing, s.isr) is None
    assert change_partition(s, alive(1, 2, 3, 4)) is None


def test_reassignment_replicas_order() -> None:
    r = reassignment_replicas([1, 2, 3], [3, 4, 5])
    assert (r.replicas, r.adding, r.removing) == ((3, 4, 5, 1, 2), (4, 5), (1, 2))
    r = reassignment_replicas([1, 2, 3], [3, 2, 1])
    assert (r.replicas, r.adding, r.removing) == ((3, 2, 1), (), ())


def test_revert() -> None:
    s = ps([4, 2, 3, 1], isr=[1, 2, 3], leader=1, adding=[4], removing=[1])
    rv = revert_reassignment(s)
    assert (rv.replicas, rv.isr, rv.unclean) == ((2, 3, 1), (1, 2, 3), False)
    # only the replicas being added are in sync: reverting needs an unclean ISR of the first original replica
    s = ps([4, 5, 1], isr=[4, 5], leader=4, adding=[4, 5], removing=[1])
    rv = revert_reassignment(s)
    assert (rv.replicas, rv.isr, rv.unclean) == ((1,), (1,), True)


def test_shrink_and_expand_isr_fenced_by_leader_and_epoch() -> None:
    s = ps([1, 2, 3], le=5, pe=8)
    shrunk = shrink_isr(s, 1, 5, [3])
    assert shrunk is not None and (shrunk.isr, shrunk.leader_epoch, shrunk.partition_epoch) == ((1, 2), 5, 9)
    assert shrink_isr(s, 1, 4, [3]) is None  # stale leader epoch
    assert shrink_isr(s, 2, 5, [3]) is None  # not the leader
    assert shrink_isr(s, 1, 5, [4]) is s  # nothing to drop
    with pytest.raises(ValueError, match="cannot drop itself"):
        shrink_isr(s, 1, 5, [1])
    grown = expand_isr(shrunk, 1, 5, [3, 9])
    assert grown is not None and (grown.isr, grown.leader_epoch, grown.partition_epoch) == ((1, 2, 3), 5, 10)
    assert expand_isr(shrunk, 1, 5, [3], eligible={1, 2}) is shrunk  # 3 is gone or shutting down
    assert expand_isr(shrunk, 1, 4, [3]) is None
    assert expand_isr(s, 1, 5, [2]) is s


def test_apply_a_leader_replicas_proposal() -> None:
    s = ps([1, 2, 3], le=5, pe=8)
    lr = LeaderReplicas(1, s.replicas, s.isr, leader_epoch=5, partition_epoch=8, epoch_start_offset=0, now_ms=0,
                        max_lag_ms=30_000, min_isr=1)
    for r in (2, 3):
        lr.on_fetch(r, 10, 0, 10, 1_000)
    lr.on_fetch(2, 20, 0, 20, 40_000)  # 2 is caught up; 3 has not fetched for 39 s
    change = lr.propose_shrink(40_000, 20)
    assert change is not None
    new = apply_isr_change(s, 1, 5, change.partition_epoch, change.isr)
    assert new is not None and (new.isr, new.leader_epoch, new.partition_epoch) == ((1, 2), 5, 9)
    assert apply_isr_change(new, 1, 5, change.partition_epoch, change.isr) is None  # decided from epoch 8: stale
    assert apply_isr_change(s, 2, 5, 8, (1, 2)) is None and apply_isr_change(s, 1, 6, 8, (1, 2)) is None
    assert apply_isr_change(s, 1, 5, 8, (1, 2, 3)) is s
    for bad in [(2, 3), (1, 4), (1, 1)]:
        with pytest.raises(ValueError, match="invalid ISR"):
            apply_isr_change(s, 1, 5, 8, bad)
