"""One event-loop timer at a coordinator's earliest deadline (instead of polling it).

The coordinators keep their timers keyed by deadline on the injected clock and sleep nowhere
(``oncelog.coordinator.timers``). :class:`DeadlineDriver` arms a single ``call_later`` at the earliest deadline; the
coordinator calls :meth:`DeadlineDriver.wake` whenever a deadline sooner than every other one is scheduled, which
re-arms the timer sooner. When it fires, the driver runs the coordinator's ``fire`` (which fires what is due, through
the coordinator runtime's queues), then arms for the next deadline. Nothing is polled: with no deadline due, no
timer fires.

``max_wait_ms`` bounds one wait, for deadlines on the wall clock (transaction timeouts): the event loop's timer
runs on the monotonic clock, so a wall-clock step forward is noticed within ``max_wait_ms``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from oncelog.coordinator.runtime import CallLater

__all__ = ["DeadlineDriver"]

log = logging.getLogger("oncelog.broker.timers")


class DeadlineDriver:
    def __init__(self, name: str, now_ms: Callable[[], int], next_deadline: Callable[[], int | None],
                 fire: Callable[[], Awaitable[Any]], *, max_wait_ms: int | None = None, retry_ms: int = 100,
                 call_later: CallLater | None = None) -> None:
        self.name = name
        self._now = now_ms
        self._next = next_deadline
        self._fire = fire
        self._max_wait = max_wait_ms
        self._retry_ms = retry_ms
        self._call_later = call_later
        self._handle: Any = None
        self._armed: int | None = None  # the deadline the handle fires at
        self._task: asyncio.Task[None] | None = None
        self._again = False  # the timer fired while ``fire`` ran: run it once more
        self._closed = False
        self.fired = 0  # how many times ``fire`` ran (tests, diagnostics)

    @property
    def armed(self) -> int | None:
        """The deadline the timer is armed for (None: not armed)."""
        return self._armed

    def start(self) -> None:
        """Arm for whatever is scheduled already (what loading scheduled before the driver listened)."""
        deadline = self._next()
        if deadline is not None:
            self.wake(deadline)

    def wake(self, deadline: int) -> None:
        """A deadline was scheduled: arm the timer for it unless it is armed at or before it already."""
        if self._closed:
            return
        now = self._now()
        if self._max_wait is not None:
            deadline = min(deadline, now + self._max_wait)
        if self._handle is not None and self._armed is not None and self._armed <= deadline:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._armed = deadline
        delay = max(deadline - now, 0) / 1000
        call_later = self._call_later or asyncio.get_running_loop().call_later
        self._handle = call_later(delay, self._expired)

    def _expired(self) -> None:
        self._handle = None
        self._armed = None
        if self._closed:
            return
        if self._task is not None:  # still firing: once more when it is done
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        try:
            while True:
                self._again = False
                self.fired += 1
                try:
                    await self._fire()
                except Exception:
                    log.exception("%s failed; retrying in %d ms", self.name, self._retry_ms)
                    self._task = None
                    self.wake(self._now() + self._retry_ms)
                    return
                if not self._again or self._closed:
                    break
        finally:
            self._task = None
        deadline = self._next()
        if deadline is not None:
            self.wake(deadline)

    async def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._armed = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
