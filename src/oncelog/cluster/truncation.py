"""Where a follower truncates its log before fetching from a new leader (KIP-101, KIP-279).

The follower asks the leader (OffsetForLeaderEpoch) for the end offset of the follower's latest leader epoch. The
leader answers the largest epoch it has at or below the one asked, and where that epoch ended in its log. Kafka's
``AbstractFetcherThread.getOffsetTruncationState``:

- the leader knows no offset for it (``end_offset`` undefined): truncate to the fetch offset the follower would
  have started from (its high watermark), and stop;
- the follower has no epoch at or below the answered one: every record it holds disagrees with the leader's
  (below the leader's end offset the leader's records have epochs at or below the answer, the follower's are all
  newer; above it the leader's are newer than anything the follower has), so truncate to the follower's log start.
  Kafka truncates to the leader's end offset here, reasoning that the follower predates epoch tracking; every
  oncelog log tracks epochs from its start, and the leader's end offset would keep a diverging record in one
  reachable history (a follower that led an epoch alone, with nothing committed, after a newer leader kept an
  older uncommitted record at the same offset: found by the property test of this module);
- the follower's largest epoch at or below the answer *is* the answered epoch: both agree on it; truncate to the
  smaller of the two end offsets for it, and stop;
- otherwise the follower does not know the answered epoch: truncate to its own end of the largest epoch below it,
  and ask again with its (now smaller) latest epoch — the loop of KIP-279 that finds the last offset where the two
  logs agree even after several quick leader changes.

Never past the follower's own log end. Pure: the follower's epoch cache is passed in as a lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "Truncation", "truncation_for"]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class Truncation:
    offset: int  # truncate the log to this offset (everything at or after it goes)
    done: bool  # False: ask the leader again with the latest epoch left after truncating


def truncation_for(leader_epoch: int, leader_end_offset: int, *, log_start: int, log_end: int,
                   high_watermark: int, end_offset_for: Callable[[int], tuple[int, int] | None]) -> Truncation:
    """``leader_epoch``/``leader_end_offset``: the leader's answer. ``end_offset_for(epoch)``: the follower's
    (largest epoch <= epoch, its end offset) from its leader-epoch cache, None if it has no such epoch."""
    if leader_end_offset == UNDEFINED_OFFSET:
        return Truncation(min(high_watermark, log_end), True)
    if leader_epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader_end_offset, log_end), True)
    mine = end_offset_for(leader_epoch)
    if mine is None:
        return Truncation(min(log_start, log_end), True)
    my_epoch, my_end = mine
    if my_epoch != leader_epoch:
        return Truncation(min(my_end, log_end), False)
    return Truncation(min(my_end, leader_end_offset, log_end), True)
