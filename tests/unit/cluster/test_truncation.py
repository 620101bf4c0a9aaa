"""KIP-101/KIP-279 truncation: each case of Kafka's getOffsetTruncationState, and the loop converging on the last
offset two logs agree on after quick successive leader changes (checked against the logs themselves)."""

from __future__ import annotations

from bisect import bisect_right

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.truncation import UNDEFINED_EPOCH, UNDEFINED_OFFSET, Truncation, truncation_for


def cache_lookup(entries: list[tuple[int, int]], log_end: int):  # type: ignore[no-untyped-def]
    """Kafka's LeaderEpochFileCache.endOffsetFor over (epoch, start offset) entries of a log ending at log_end."""
    def end_offset_for(epoch: int) -> tuple[int, int] | None:
        epochs = [e for e, _ in entries]
        i = bisect_right(epochs, epoch)
        if i == 0:
            return None
        found = entries[i - 1][0]
        end = entries[i][1] if i < len(entries) else log_end
        return found, end
    return end_offset_for


def test_each_case() -> None:
    look = cache_lookup([(0, 0), (2, 50), (4, 80)], 100)
    assert truncation_for(3, 70, log_start=0, log_end=100, high_watermark=40, end_offset_for=look) == Truncation(80, False)
    assert truncation_for(4, 90, log_start=0, log_end=100, high_watermark=40, end_offset_for=look) == Truncation(90, True)
    assert truncation_for(4, 120, log_start=0, log_end=100, high_watermark=40, end_offset_for=look) == Truncation(100, True)
    assert truncation_for(2, 60, log_start=0, log_end=100, high_watermark=40, end_offset_for=look) == Truncation(60, True)
    assert truncation_for(2, 90, log_start=0, log_end=100, high_watermark=40, end_offset_for=look) == Truncation(80, True)
    assert truncation_for(5, UNDEFINED_OFFSET, log_start=0, log_end=100, high_watermark=40,
                          end_offset_for=look) == Truncation(40, True)
    assert truncation_for(UNDEFINED_EPOCH, 70, log_start=0, log_end=100, high_watermark=40,
                          end_offset_for=look) == Truncation(70, True)
    late = cache_lookup([(3, 10)], 30)
    assert truncation_for(1, 5, log_start=10, log_end=30, high_watermark=0, end_offset_for=late) == Truncation(10, True)


# A log as a list of record epochs (record i has epoch log[i]); a cache derived from it.
def entries_of(log: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i, e in enumerate(log):
        if not out or out[-1][0] != e:
            out.append((e, i))
    return out


@st.composite
def diverged_logs(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """Two logs (record i has epoch log[i]) as elections leave them: a shared prefix; then each may hold more
    records of the last shared epoch (written by that epoch's one leader, so they agree as far as both go); then
    records of epochs the other log never saw (an epoch has one leader: two logs share an epoch's records or, past
    the point one stopped, have none of the other's). Returns (follower, leader, length they agree on)."""
    common: list[int] = []
    epoch = 0
    for n in draw(st.lists(st.integers(0, 3), max_size=6)):
        common += [epoch] * n
        epoch += draw(st.integers(1, 2))
    last = common[-1] if common else 0
    more_f, more_l = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    later = draw(st.lists(st.integers(last + 1, last + 12), unique=True, max_size=6))
    split = draw(st.integers(0, len(later)))
    own_f, own_l = sorted(later[:split]), sorted(later[split:])

    def tail(own: list[int]) -> list[int]:
        return [e for e in own for _ in range(draw(st.integers(1, 3)))]

    follower = common + [last] * more_f + tail(own_f)
    leader = common + [last] * more_l + tail(own_l)
    agree = len(common) + min(more_f, more_l) if common else 0
    if not common:  # no shared epoch at all: they agree on nothing beyond what both hold of epoch 0 (none here)
        follower, leader = tail(own_f), tail(own_l)
    return follower, leader, agree


@settings(max_examples=1000, deadline=None)
@given(diverged_logs())
def test_the_loop_truncates_to_exactly_what_both_logs_agree_on(logs: tuple[list[int], list[int], int]) -> None:
    follower, leader, agree = logs
    lead_look = cache_lookup(entries_of(leader), len(leader))
    for _ in range(50):
        f_entries = entries_of(follower)
        if not f_entries:
            break
        answer = lead_look(f_entries[-1][0])
        leader_epoch, leader_end = answer if answer is not None else (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        if answer is None:  # the leader has no epoch at or below ours: Kafka's leader answers (UNDEFINED, UNDEFINED)
            leader_end = UNDEFINED_OFFSET
        t = truncation_for(leader_epoch, leader_end, log_start=0, log_end=len(follower), high_watermark=0,
                           end_offset_for=cache_lookup(f_entries, len(follower)))
        follower = follower[:t.offset]
        if t.done:
            break
    else:
        raise AssertionError("the truncation loop did not converge")
    assert follower == leader[:len(follower)]  # nothing divergent is kept
    assert len(follower) == agree              # and nothing both logs agree on is lost
