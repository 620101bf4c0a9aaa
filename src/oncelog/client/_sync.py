"""The sync facades' engine: one event loop in a daemon thread per client object.

Why a background loop rather than ``asyncio.run`` per call: a producer must keep batching and sending while the
caller is not inside a call (linger.ms timers, in-flight requests), and connections plus the metadata cache
should live as long as the client. ``asyncio.run`` per call would tear all of that down every time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .errors import KafkaTimeoutError

__all__ = ["LoopThread"]

log = logging.getLogger("oncelog.client")

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it; on timeout cancel it and raise KafkaTimeoutError."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync client method was called from its own event loop thread (a callback?)")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise KafkaTimeoutError(f"operation did not finish within {timeout:g} s") from None

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Cancel whatever is still running on the loop (as ``asyncio.run`` does at its end), then stop it.

        A client's close() normally leaves nothing behind; this covers a close() that failed or timed out and a
        constructor that failed half way. Stopping a loop with pending tasks would leave them to be garbage
        collected as "Task was destroyed but it is pending!"."""
        if self.loop.is_closed():
            return
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_cancel_pending(self._thread.name), self.loop).result(5)
            except (concurrent.futures.TimeoutError, RuntimeError):  # a task ignoring cancellation; loop stopped
                log.warning("%s: tasks still pending after 5 s of cancellation; stopping the loop anyway",
                            self._thread.name)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(10)


async def _cancel_pending(name: str) -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if not tasks:
        return
    log.debug("%s: cancelling %d task(s) left at shutdown: %s", name, len(tasks),
              ", ".join(sorted(t.get_name() for t in tasks)))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
