"""GroupCommitFlusher: which thread runs a round, and that nothing appended is left behind.

The partitions here are stand-ins with a log whose ``flush`` records the thread it ran on; the flusher only ever
calls ``partition.log.flush()`` and reads ``partition.deleted``."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from oncelog.broker import durability
from oncelog.broker.durability import INLINE_FLUSH_MAX_BYTES, GroupCommitFlusher


class _Log:
    def __init__(self) -> None:
        self.end = 0
        self.flushes: list[tuple[str, int]] = []  # (thread name, durable offset returned)
        self.gate: threading.Event | None = None  # when set, flush waits for it (a slow disk)
        self.entered = threading.Event()

    def flush(self) -> int:
        end = self.end  # a flush covers what was appended before it began
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        self.flushes.append((threading.current_thread().name, end))
        return end


class _Partition:
    def __init__(self, name: str) -> None:
        self.topic, self.index, self.deleted = name, 0, False
        self.log = _Log()

    def append(self, n: int = 1) -> None:
        self.log.end += n


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


async def _until(cond: Any) -> None:
    while not cond():
        await asyncio.sleep(0.001)


def _flusher() -> tuple[GroupCommitFlusher, list[tuple[Any, int]]]:
    durable: list[tuple[Any, int]] = []
    return GroupCommitFlusher(lambda p, off: durable.append((p, off))), durable


def test_small_round_is_fsynced_on_the_event_loop() -> None:
    async def main() -> None:
        f, durable = _flusher()
        f.start()
        a, b = _Partition("a"), _Partition("b")
        a.append(), b.append(2)
        f.mark_dirty(a, 100)
        f.mark_dirty(b, 200)  # same loop iteration: joins the same round
        assert durable == []  # decided after the callbacks already queued, not inside mark_dirty
        await _until(lambda: len(durable) == 2)
        assert sorted((p.topic, off) for p, off in durable) == [("a", 1), ("b", 2)]
        # the loop fsyncs one partition itself, a helper thread the other one in parallel, and the loop waits
        assert threading.current_thread().name in {a.log.flushes[0][0], b.log.flushes[0][0]}
        assert (f.rounds, f.inline_rounds) == (1, 1)
        await f.close()
    _run(main())


def test_large_or_unknown_round_goes_to_the_flusher_thread() -> None:
    async def main() -> None:
        f, durable = _flusher()
        f.start()
        big, unknown = _Partition("big"), _Partition("unknown")
        big.append()
        f.mark_dirty(big, INLINE_FLUSH_MAX_BYTES + 1)
        await _until(lambda: len(durable) == 1)
        unknown.append()
        f.mark_dirty(unknown)  # the periodic background flush does not know the size
        await _until(lambda: len(durable) == 2)
        assert big.log.flushes[0][0] == "oncelog-group-commit"
        assert unknown.log.flushes[0][0] == "oncelog-group-commit"
        assert (f.rounds, f.inline_rounds) == (2, 0)
        await f.close()
    _run(main())


def test_appends_during_a_thread_round_wait_for_the_next_round_then_small_rounds_return_to_the_loop() -> None:
    async def main() -> None:
        f, durable = _flusher()
        f.start()
        slow, late = _Partition("slow"), _Partition("late")
        slow.log.gate = threading.Event()
        slow.append()
        f.mark_dirty(slow, 10 * INLINE_FLUSH_MAX_BYTES)
        await asyncio.get_running_loop().run_in_executor(None, slow.log.entered.wait, 10)
        late.append()
        f.mark_dirty(late, 10)  # small, but the thread is mid-round: it must not be fsynced on the loop now
        slow.append()
        f.mark_dirty(slow, 10)  # appended after the round took its offsets
        for _ in range(20):
            await asyncio.sleep(0.001)
        assert late.log.flushes == [] and durable == []
        slow.log.gate.set()
        await _until(lambda: len(durable) == 3)
        assert [(p.topic, off) for p, off in durable[:1]] == [("slow", 1)]
        assert sorted((p.topic, off) for p, off in durable[1:]) == [("late", 1), ("slow", 2)]
        # the second round covers both partitions, fsynced in parallel by the flusher and a helper thread
        assert [off for _, off in late.log.flushes] == [1] and slow.log.flushes[-1][1] == 2
        assert {late.log.flushes[0][0], slow.log.flushes[-1][0]} <= {"oncelog-group-commit", "oncelog-fsync_0"}
        await _until(lambda: f.rounds == 2)
        # the thread went idle: a small append is fsynced on the loop again
        while True:  # wait until the thread has given the dirty set back (it re-checks after publishing)
            with f._cond:
                if not f._thread_owns:
                    break
            await asyncio.sleep(0.001)
        late.append()
        f.mark_dirty(late, 10)
        await _until(lambda: f.inline_rounds == 1)
        assert late.log.flushes[-1] == (threading.current_thread().name, 2)
        await f.close()
    _run(main())


def test_close_flushes_what_is_dirty() -> None:
    async def main() -> None:
        f, durable = _flusher()
        f.start()
        p = _Partition("p")
        p.append(5)
        f.mark_dirty(p, 10)
        await f.close()  # before the loop ran the decision
        await asyncio.sleep(0)
        assert p.log.flushes and p.log.flushes[-1][1] == 5
        assert durable and durable[-1][1] == 5
    _run(main())


def test_a_failing_fsync_is_reported_not_published() -> None:
    async def main() -> None:
        f, durable = _flusher()
        f.start()
        p = _Partition("p")

        def broken() -> int:
            raise OSError(5, "Input/output error")
        p.log.flush = broken  # type: ignore[method-assign]
        f.mark_dirty(p, 10)
        t0 = time.monotonic()
        await _until(lambda: f.rounds == 1)
        assert durable == [] and time.monotonic() - t0 < 5
        await f.close()
    _run(main())


def test_lazy_append_joins_the_next_round_or_gets_one_after_a_delay(monkeypatch: Any) -> None:
    """A record nobody waits for (a transaction's Complete record) starts no round of its own: the next round,
    started by an append that is waited for, covers it in the same fsync; alone, it is flushed after a delay."""
    monkeypatch.setattr(durability, "LAZY_FLUSH_DELAY_S", 0.05)

    async def main() -> None:
        f, durable = _flusher()
        f.start()
        coord, data = _Partition("coord"), _Partition("data")
        coord.append()
        f.mark_dirty(coord, 100, lazy=True)
        await asyncio.sleep(0.01)
        assert durable == [] and coord.log.flushes == []  # no round of its own
        data.append()
        f.mark_dirty(data, 100)
        await _until(lambda: len(durable) == 2)
        assert sorted(p.topic for p, _ in durable) == ["coord", "data"] and f.rounds == 1  # one round for both
        durable.clear()
        coord.append()
        f.mark_dirty(coord, 100, lazy=True)
        await asyncio.sleep(0.01)
        assert durable == []
        await _until(lambda: len(durable) == 1)  # the delayed round
        assert durable == [(coord, 2)] and f.rounds == 2
        await f.close()
    _run(main())


def test_a_slow_fsync_on_the_loop_sends_rounds_to_the_thread_for_a_while(monkeypatch: Any) -> None:
    """A disk that stalls must not stall the event loop (fetches, heartbeats): after an inline round slower than
    INLINE_STALL_S, small rounds go to the thread until INLINE_BACKOFF_S has passed."""
    monkeypatch.setattr(durability, "INLINE_STALL_S", 0.01)
    monkeypatch.setattr(durability, "INLINE_BACKOFF_S", 0.3)

    async def main() -> None:
        f, durable = _flusher()
        f.start()
        p = _Partition("p")
        real_flush = p.log.flush

        def slow_once() -> int:
            p.log.flush = real_flush  # type: ignore[method-assign]
            time.sleep(0.03)
            return real_flush()

        p.log.flush = slow_once  # type: ignore[method-assign]
        p.append()
        f.mark_dirty(p, 10)
        await _until(lambda: len(durable) == 1)
        assert (f.inline_rounds, f.inline_stalls) == (1, 1)
        p.append()
        f.mark_dirty(p, 10)  # small, but inside the back-off: the thread
        await _until(lambda: len(durable) == 2)
        assert p.log.flushes[-1][0] == "oncelog-group-commit" and f.inline_rounds == 1
        await asyncio.sleep(0.35)
        p.append()
        f.mark_dirty(p, 10)  # back-off over: the loop again
        await _until(lambda: len(durable) == 3)
        assert f.inline_rounds == 2 and f.inline_stalls == 1
        await f.close()
    _run(main())
