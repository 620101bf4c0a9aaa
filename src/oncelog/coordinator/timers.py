"""Named timers keyed by deadline (Kafka's ``CoordinatorTimer``): one deadline per key, on a heap.

A coordinator shard schedules a timer per thing that can expire (a member's session, a group's join phase, a
transaction's timeout, ...); scheduling a key again replaces its deadline. The shard asks for the earliest deadline
and pops the keys that are due at ``now``; nothing here looks at a key that is not due. Deadlines are integers on
whatever clock the owner uses (the injected clock's milliseconds). Nothing here sleeps: the broker arms one
``call_later`` at :meth:`DeadlineTimers.next_deadline`, and ``on_earliest`` tells it when a key scheduled later
becomes the earliest one, so it can re-arm sooner.

Costs: ``schedule``/``cancel`` are O(log n) (cancel and rescheduling leave the old heap entry behind; it is skipped
when it reaches the top, and the heap is rebuilt when such entries outnumber the live ones), ``next_deadline`` is
O(1) amortised, ``pop_due`` O(k log n) for k due keys.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["DeadlineTimers"]

K = TypeVar("K", bound=Hashable)

_COMPACT_SLACK = 1024


class DeadlineTimers(Generic[K]):
    def __init__(self, on_earliest: Callable[[int], None] | None = None) -> None:
        self._deadlines: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []  # (deadline, sequence, key); stale when the dict disagrees
        self._seq = itertools.count()
        #: called with the new deadline when a schedule makes it the earliest one
        self.on_earliest = on_earliest

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: K) -> bool:
        return key in self._deadlines

    def deadline(self, key: K) -> int | None:
        return self._deadlines.get(key)

    def schedule(self, key: K, deadline: int) -> None:
        """Fire ``key`` at ``deadline``, replacing the deadline it had."""
        if self._deadlines.get(key) == deadline:
            return
        earliest = self.next_deadline()
        self._deadlines[key] = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        if len(self._heap) > 2 * len(self._deadlines) + _COMPACT_SLACK:
            self._compact()
        if self.on_earliest is not None and (earliest is None or deadline < earliest):
            self.on_earliest(deadline)

    def schedule_if_earlier(self, key: K, deadline: int) -> None:
        """Fire ``key`` at ``deadline`` unless it is already scheduled at or before it."""
        current = self._deadlines.get(key)
        if current is None or deadline < current:
            self.schedule(key, deadline)

    def cancel(self, key: K) -> None:
        self._deadlines.pop(key, None)

    def next_deadline(self) -> int | None:
        """The earliest deadline of a scheduled key (None: nothing scheduled)."""
        heap = self._heap
        while heap:
            deadline, _, key = heap[0]
            if self._deadlines.get(key) == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def pop_due(self, now: int) -> list[K]:
        """Unschedule and return every key whose deadline is at or before ``now``, earliest first."""
        heap, due = self._heap, []
        while heap and heap[0][0] <= now:
            deadline, _, key = heapq.heappop(heap)
            if self._deadlines.get(key) == deadline:
                del self._deadlines[key]
                due.append(key)
        return due

    def _compact(self) -> None:
        self._heap = [(d, next(self._seq), k) for k, d in self._deadlines.items()]
        heapq.heapify(self._heap)
