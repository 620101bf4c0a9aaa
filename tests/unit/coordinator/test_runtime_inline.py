"""CoordinatorRuntime fast path: an idle partition runs the operation inline; the log is written synchronously and
its durability future drives the replay (not the caller)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oncelog.coordinator.runtime import CoordinatorError, CoordinatorResult, CoordinatorRuntime
from oncelog.protocol.errors import ErrorCode

from .runtime_fakes import ListShard, ManualLog


def test_idle_partition_runs_inline_and_waits_for_durability() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        ran: list[int] = []

        def op(i: int) -> Any:
            def f(s: ListShard) -> CoordinatorResult[int]:
                ran.append(i)
                return CoordinatorResult([(b"k%d" % i, b"v")], i)
            return f

        t1 = asyncio.ensure_future(rt.run(0, op(1)))
        t2 = asyncio.ensure_future(rt.run(0, op(2)))
        await asyncio.sleep(0)
        # the first ran and is written, not replayed; the second waits behind it
        assert ran == [1] and log.records == [(b"k1", b"v")] and shard.replayed == []
        log.make_durable()
        assert await t1 == 1
        assert shard.replayed == [(b"k1", b"v", 0)]
        await asyncio.sleep(0)
        assert ran == [1, 2] and shard.replayed == [(b"k1", b"v", 0)]  # written, not durable yet
        log.make_durable()
        assert await t2 == 2 and shard.replayed[-1] == (b"k2", b"v", 1)
        # an operation without records answers without waiting for anything
        assert await rt.run(0, lambda s: CoordinatorResult([], "x")) == "x"
        await rt.close()
    asyncio.run(main())


def test_cancelled_caller_still_replays_and_next_op_follows() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        task = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"k", b"v")], 1)))
        await asyncio.sleep(0)
        queued_ran: list[bool] = []

        def queued(s: ListShard) -> CoordinatorResult[int]:
            queued_ran.append(True)
            return CoordinatorResult([], 2)

        t2 = asyncio.ensure_future(rt.run(0, queued))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        assert not queued_ran  # still behind the append in flight
        log.make_durable()
        assert await t2 == 2
        assert shard.replayed == [(b"k", b"v", 0)] and queued_ran == [True]
        await rt.close()
    asyncio.run(main())


def test_write_failure_and_unload_in_flight() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])

        def op(s: ListShard) -> CoordinatorResult[int]:
            s.pending = True
            return CoordinatorResult([(b"k", b"v")], 1, on_failure=lambda: setattr(s, "pending", False))

        log.fail = OSError("disk")
        with pytest.raises(CoordinatorError) as e:
            await rt.run(0, op)
        assert e.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE and shard.pending is False
        log.fail = None
        task = asyncio.ensure_future(rt.run(0, op))
        queued = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([], 2)))
        await asyncio.sleep(0)
        assert shard.pending is True
        rt.unload(0)
        for t in (task, queued):
            with pytest.raises(CoordinatorError) as e:
                await t
            assert e.value.code is ErrorCode.NOT_COORDINATOR
        log.make_durable()
        await asyncio.sleep(0)
        assert shard.pending is False and shard.replayed == []  # the dropped shard is not replayed into
        await rt.close()
    asyncio.run(main())


def test_on_applied_runs_after_replay_before_the_answer_and_the_next_operation_even_if_the_caller_left() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        events: list[str] = []

        def first(s: ListShard) -> CoordinatorResult[str]:
            return CoordinatorResult([(b"k", b"v")], "first",
                                     on_applied=lambda: events.append(f"applied after {len(s.replayed)} replayed"))

        def second(s: ListShard) -> CoordinatorResult[str]:
            events.append("second ran")
            return CoordinatorResult([], "second")

        def failing_hook(s: ListShard) -> CoordinatorResult[str]:
            def hook() -> None:
                raise RuntimeError("follow-up failed")
            return CoordinatorResult([(b"k2", None)], "applied anyway", on_applied=hook)

        t1 = asyncio.ensure_future(rt.run(0, first))
        t2 = asyncio.ensure_future(rt.run(0, second))
        await asyncio.sleep(0)
        t1.cancel()  # the caller goes away while its append is in flight
        await asyncio.sleep(0)
        log.make_durable()
        assert await t2 == "second"
        assert events == ["applied after 1 replayed", "second ran"]
        assert t1.cancelled()
        # a hook that raises is logged; the operation itself succeeded (its records are applied)
        t3 = asyncio.ensure_future(rt.run(0, failing_hook))
        await asyncio.sleep(0)
        log.make_durable()
        assert await t3 == "applied anyway" and shard.replayed[-1] == (b"k2", None, 1)
        await rt.close()
    asyncio.run(main())


def test_records_that_need_no_durability_are_applied_at_once_and_the_next_operation_follows(
        caplog: pytest.LogCaptureFixture) -> None:
    """await_durable=False (a transaction's Complete* record): written lazy, replayed and answered without
    waiting, and the partition's next operation runs at once (its own durability covers the earlier record)."""
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        hooked: list[int] = []

        def complete(s: ListShard) -> CoordinatorResult[str]:
            return CoordinatorResult([(b"complete", b"v")], "done", on_applied=lambda: hooked.append(len(s.replayed)),
                                     await_durable=False)

        assert await asyncio.wait_for(rt.run(0, complete), 1) == "done"
        assert shard.replayed == [(b"complete", b"v", 0)] and hooked == [1] and log.lazy == [True]
        nxt = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"next", b"v")], "next")))
        await asyncio.sleep(0)
        assert log.records[-1] == (b"next", b"v") and log.lazy == [True, False]  # not queued behind the first
        assert not nxt.done()  # an ordinary record still waits for durability
        log.waiting[0].set_exception(OSError("disk gone"))  # the lazy record's fsync fails: said, not hidden
        await asyncio.sleep(0)
        assert "could not be made durable" in caplog.text
        log.make_durable()
        assert await nxt == "next"
        await rt.close()
    asyncio.run(main())
