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
import weakref
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
    """An event loop in a daemon thread. It is stopped by :meth:`stop` (a client's close()), when the object is
    garbage collected, or at interpreter exit (``weakref.finalize``): a client the program never closed leaves
    no "Task was destroyed but it is pending!" behind, as a confluent-kafka client leaves nothing."""

    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=_main, args=(self.loop,), name=name, daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self.loop, self._thread)

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
        except BaseException:  # KeyboardInterrupt while waiting: the call ends with the caller
            fut.cancel()
            raise

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Cancel whatever is still running on the loop (as ``asyncio.run`` does at its end), then stop it.

        A client's close() normally leaves nothing behind; this covers a close() that failed or timed out, a
        constructor that failed half way, and a client never closed. Stopping a loop with pending tasks would
        leave them to be garbage collected as "Task was destroyed but it is pending!"."""
        self._finalizer()


def _main(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _shutdown(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    if loop.is_closed():
        return
    if threading.current_thread() is not thread and thread.is_alive():
        try:
            asyncio.run_coroutine_threadsafe(_cancel_pending(thread.name), loop).result(5)
        except (concurrent.futures.TimeoutError, RuntimeError):  # a task ignoring cancellation; loop stopped
            log.warning("%s: tasks still pending after 5 s of cancellation; stopping the loop anyway", thread.name)
    try:
        loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:  # closed in the meantime
        return
    if threading.current_thread() is not thread:
        thread.join(10)


async def _cancel_pending(name: str) -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if not tasks:
        return
    log.debug("%s: cancelling %d task(s) left at shutdown: %s", name, len(tasks),
              ", ".join(sorted(t.get_name() for t in tasks)))
    # again until each ends: a cancellation can be lost (asyncio.wait_for before Python 3.12, CPython gh-86296,
    # when what it waits for completes at the same moment, e.g. a refused connection)
    while pending := [t for t in tasks if not t.done()]:
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=0.2)
    await asyncio.gather(*tasks, return_exceptions=True)
