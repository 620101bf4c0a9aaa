"""The leader's replica bookkeeping: Kafka's caught-up rule, ISR shrink/expand proposals, the high watermark over
the maximal ISR, min ISR. Pure: time is a number passed in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.replica import UNKNOWN_OFFSET, LeaderReplicas

LAG = 30_000


def leader(isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 1, start: int = 0, now: int = 1_000_000,
           **kw: object) -> LeaderReplicas:
    return LeaderReplicas(1, (1, 2, 3), isr, leader_epoch=5, partition_epoch=7, epoch_start_offset=start,
                          now_ms=now, max_lag_ms=LAG, min_isr=min_isr, **kw)  # type: ignore[arg-type]


def test_high_watermark_is_the_minimum_over_the_isr_and_waits_for_members_that_never_fetched() -> None:
    r = leader()
    now = 1_000_000
    assert r.high_watermark(100, now) == UNKNOWN_OFFSET  # followers 2 and 3 have not fetched at this epoch
    r.on_fetch(2, 100, 0, 100, now)
    assert r.high_watermark(100, now) == UNKNOWN_OFFSET
    r.on_fetch(3, 60, 0, 100, now)
    assert r.high_watermark(100, now) == 60
    r.on_fetch(3, 100, 0, 100, now)
    assert r.high_watermark(100, now) == 100
    assert r.high_watermark(80, now) == 80  # the leader's own (durable) end counts too


def test_caught_up_as_of_the_previous_fetch() -> None:
    """Kafka's Replica.updateFetchStateOrThrow: reaching the leader end seen at the previous fetch means the
    follower was caught up at that previous fetch's time, not now."""
    r = leader()
    t0 = 1_000_000
    r.on_fetch(2, 50, 0, 100, t0)           # behind; the leader's end was 100
    f = r.followers[2]
    caught_at_reset = f.last_caught_up_ms
    r.on_fetch(2, 100, 0, 150, t0 + 500)    # reached 100: caught up as of t0
    assert f.last_caught_up_ms == max(caught_at_reset, t0)
    r.on_fetch(2, 150, 0, 150, t0 + 900)    # reached the end: caught up now
    assert f.last_caught_up_ms == t0 + 900


def test_a_stuck_follower_is_proposed_out_and_the_old_isr_holds_the_high_watermark_until_committed() -> None:
    now = 1_000_000
    r = leader(now=now)
    r.on_fetch(2, 100, 0, 100, now)
    r.on_fetch(3, 100, 0, 100, now)
    assert r.propose_shrink(now + LAG, 100) is None  # nobody lagged for longer than the limit yet
    later = now + LAG + 1
    r.on_fetch(2, 200, 0, 200, later)                # 2 keeps up, 3 is stuck at 100
    change = r.propose_shrink(later, 200)
    assert change is not None and change.isr == (1, 2) and change.removed == {3} and change.partition_epoch == 7
    assert r.propose_shrink(later, 200) is None      # one change in flight at a time
    assert r.high_watermark(200, later) == 100       # pending shrink: 3 still counts
    r.on_metadata((1, 2, 3), (1, 2), 8)              # the shrink is committed
    assert r.pending is None and r.isr == {1, 2}
    assert r.high_watermark(200, later) == 200


def test_expansion_needs_the_high_watermark_the_epoch_start_and_the_live_broker_epoch() -> None:
    now = 1_000_000
    r = leader(isr=(1, 2), start=120, now=now)
    r.on_fetch(2, 150, 0, 150, now)
    r.on_fetch(3, 110, 0, 150, now, broker_epoch=40)
    assert r.propose_expand(3, 110, live_broker_epoch=40) is None   # below this leader epoch's start offset
    r.on_fetch(3, 150, 0, 150, now + 10, broker_epoch=40)
    assert r.propose_expand(3, 150, live_broker_epoch=41) is None   # fetched under an older registration
    assert r.propose_expand(3, 150, live_broker_epoch=None) is None  # not alive
    change = r.propose_expand(3, 150, live_broker_epoch=40)
    assert change is not None and change.isr == (1, 2, 3) and change.added == 3
    assert r.maximal_isr == {1, 2, 3}                 # counts at once: waiting for one more is safe
    r.change_failed()
    assert r.pending is None and r.maximal_isr == {1, 2}


def test_min_isr_stops_the_high_watermark_and_flags_acknowledged_writes() -> None:
    now = 1_000_000
    r = leader(isr=(1,), min_isr=2, now=now)
    assert r.under_min_isr and r.high_watermark(100, now) is None
    assert not r.enough_replicas()
    r.on_fetch(2, 100, 0, 100, now, broker_epoch=3)
    r.propose_expand(2, 0, live_broker_epoch=3)
    assert r.enough_replicas()                        # the maximal ISR (pending expansion) reaches min ISR
    assert r.high_watermark(100, now) is None         # but the committed ISR does not: HW waits for the commit
    r.on_metadata((1, 2, 3), (1, 2), 8)
    assert r.high_watermark(100, now) is not None


def test_caught_up_followers_outside_the_isr_hold_the_high_watermark_so_they_can_join() -> None:
    now = 1_000_000
    r = leader(isr=(1, 2), now=now)
    r.on_fetch(2, 100, 0, 100, now)
    r.on_fetch(3, 90, 0, 100, now, broker_epoch=9)   # caught up as of its previous fetch? first fetch: no
    r.on_fetch(3, 100, 0, 105, now + 5, broker_epoch=9)
    assert r.high_watermark(105, now + 5, {2: 1, 3: 9}) == 100
    assert r.high_watermark(105, now + 5, {2: 1}) == 100     # 3 not alive: only the ISR counts (2 is at 100)
    r.on_fetch(2, 105, 0, 105, now + 6)
    assert r.high_watermark(105, now + 6, {2: 1}) == 105


def test_a_new_epoch_of_the_same_leader_keeps_what_it_knew_of_its_followers() -> None:
    now = 1_000_000
    first = leader(now=now)
    first.on_fetch(2, 70, 0, 80, now, broker_epoch=4)
    second = LeaderReplicas(1, (1, 2, 3), (1, 2, 3), leader_epoch=6, partition_epoch=9, epoch_start_offset=80,
                            now_ms=now + 1, max_lag_ms=LAG, min_isr=1, previous=first)
    assert second.followers[2].end_offset == 70 and second.followers[3].end_offset == UNKNOWN_OFFSET
    other = LeaderReplicas(2, (1, 2, 3), (1, 2, 3), leader_epoch=6, partition_epoch=9, epoch_start_offset=80,
                           now_ms=now + 1, max_lag_ms=LAG, min_isr=1, previous=first)
    assert other.followers[1].end_offset == UNKNOWN_OFFSET  # another leader starts from nothing


def test_reassignment_adds_and_removes_follower_states_and_stale_views_are_ignored() -> None:
    r = leader()
    r.on_metadata((1, 2, 3, 4), (1, 2, 3), 8)
    assert set(r.followers) == {2, 3, 4}
    r.on_metadata((1, 2, 4), (1, 2, 4), 9)
    assert set(r.followers) == {2, 4}
    r.on_metadata((1, 2, 3), (1, 2, 3), 6)            # older than what we know: ignored
    assert r.partition_epoch == 9 and set(r.followers) == {2, 4}
    assert not r.on_fetch(3, 10, 0, 10, 0)            # not a replica any more


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([2, 3]), st.integers(0, 40), st.integers(0, 5_000)), max_size=60))
def test_the_high_watermark_never_passes_a_maximal_isr_member(steps: list[tuple[int, int, int]]) -> None:
    now = 1_000_000
    r = leader(now=now)
    end = 0
    for node, grow, dt in steps:
        now += dt
        end += grow
        f = r.followers[node]
        fetch = min(end, max(f.end_offset, 0) + grow)
        r.on_fetch(node, fetch, 0, end, now)
        change = r.propose_shrink(now, end)
        if change is not None and dt % 2:
            r.on_metadata(r.replicas, change.isr, change.partition_epoch + 1)
        hw = r.high_watermark(end, now)
        assert hw is not None and hw <= end
        for m in r.maximal_isr - {1}:
            assert hw <= r.followers[m].end_offset
