"""CoordinatorRuntime: append durably, then replay, then answer; serial per partition, concurrent across;
transactional writes and end-of-transaction markers through the queue; loading and unloading with an epoch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from oncelog.coordinator.runtime import (
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    LoadedMarker,
    LoadedRecord,
)
from oncelog.protocol.errors import ErrorCode

from .runtime_fakes import ListShard, ManualLog, NotLeader
from .txn_fakes import FakeLog


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_append_then_replay_then_respond() -> None:
    async def main() -> None:
        log = FakeLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        await rt.load(0, 0, [LoadedRecord(b"k0", b"v0", 0)])
        shard = rt.shard(0)
        assert shard is not None and shard.replayed == [(b"k0", b"v0", 0)]

        def op(s: ListShard) -> CoordinatorResult[str]:
            assert log.total() == 0  # nothing written yet
            return CoordinatorResult([(b"a", b"1"), (b"b", None)], "done")

        assert await rt.run(0, op) == "done"
        assert log.partitions[0] == [(b"a", b"1", 0), (b"b", None, 1)]
        assert shard.replayed[1:] == [(b"a", b"1", 0), (b"b", None, 1)]
        # no records: no append
        assert await rt.run(0, lambda s: CoordinatorResult([], 5)) == 5
        assert log.appends == 1
        await rt.close()
    run(main())


def test_failed_append_calls_on_failure_and_maps_error() -> None:
    async def main() -> None:
        log = FakeLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        await rt.load(0, 0, [])
        shard = rt.shard(0)
        assert shard is not None

        def op(s: ListShard) -> CoordinatorResult[str]:
            s.pending = True
            return CoordinatorResult([(b"a", b"1")], "x", on_failure=lambda: setattr(s, "pending", False))

        for code, expected in [(ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
                               (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
                               (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
                               (ErrorCode.PRODUCER_FENCED, ErrorCode.PRODUCER_FENCED)]:
            log.fail_next, log.fail_code = 1, code
            with pytest.raises(CoordinatorError) as e:
                await rt.run(0, op)
            assert e.value.code is expected
            assert shard.pending is False and shard.replayed == []

        # a plain exception without a code is "not available", whether the write or its durability fails
        class Boom:
            def __init__(self, at_write: bool) -> None:
                self.at_write = at_write

            def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
                       producer_id: int = -1, producer_epoch: int = -1, lazy: bool = False
                       ) -> tuple[int, asyncio.Future[None]]:
                if self.at_write:
                    raise OSError("disk")
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                fut.get_loop().call_soon(fut.set_exception, OSError("fsync"))
                return 0, fut

        for at_write in (True, False):
            rt2: CoordinatorRuntime[ListShard] = CoordinatorRuntime(Boom(at_write), ListShard)
            await rt2.load(1, 0, [])
            with pytest.raises(CoordinatorError) as e:
                await rt2.run(1, op)
            assert e.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert await rt2.run(1, lambda s: CoordinatorResult([], "next")) == "next"  # the queue goes on
            await rt2.close()
        await rt.close()
    run(main())


def test_serial_within_partition_concurrent_across() -> None:
    async def main() -> None:
        log = FakeLog()
        log.gate = asyncio.Event()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        await rt.load(0, 0, [])
        await rt.load(1, 0, [])
        started: list[tuple[int, int]] = []

        def op(p: int, i: int):  # type: ignore[no-untyped-def]
            def f(s: ListShard) -> CoordinatorResult[int]:
                started.append((p, i))
                return CoordinatorResult([(f"{p}-{i}".encode(), b"")], i)
            return f

        tasks = [asyncio.create_task(rt.run(p, op(p, i))) for i in range(3) for p in (0, 1)]
        for _ in range(10):
            await asyncio.sleep(0)
        # the first op of each partition started; the others wait for its append to finish
        assert sorted(started) == [(0, 0), (1, 0)]
        log.gate.set()
        assert await asyncio.gather(*tasks) == [0, 0, 1, 1, 2, 2]
        assert [k for k, _, _ in log.partitions[0]] == [b"0-0", b"0-1", b"0-2"]
        assert [(p, i) for p, i in started if p == 1] == [(1, 0), (1, 1), (1, 2)]
        await rt.close()
    run(main())


def test_cancelled_caller_does_not_desync_memory_from_log() -> None:
    async def main() -> None:
        log = FakeLog()
        log.gate = asyncio.Event()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        await rt.load(0, 0, [])
        task = asyncio.create_task(rt.run(0, lambda s: CoordinatorResult([(b"k", b"v")], 1)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        log.gate.set()
        assert await rt.run(0, lambda s: CoordinatorResult([], 2)) == 2
        shard = rt.shard(0)
        assert shard is not None
        assert log.partitions[0] == [(b"k", b"v", 0)] and shard.replayed == [(b"k", b"v", 0)]
        await rt.close()
    run(main())


def test_unloaded_and_loading_partitions() -> None:
    async def main() -> None:
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(FakeLog(), ListShard)
        with pytest.raises(CoordinatorError) as e:
            await rt.run(3, lambda s: CoordinatorResult([], 0))
        assert e.value.code is ErrorCode.NOT_COORDINATOR
        assert await rt.load(3, 0, []) is not None
        assert await rt.load(3, 0, []) is None  # already held at that epoch: ignored
        assert rt.unload(3)
        assert rt.shard(3) is None and rt.epoch(3) is None
        with pytest.raises(CoordinatorError):
            await rt.run(3, lambda s: CoordinatorResult([], 0))
        await rt.close()
    run(main())


def test_background_tasks_and_wait_idle() -> None:
    async def main() -> None:
        slept: list[float] = []

        async def fake_sleep(s: float) -> None:
            slept.append(s)

        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(FakeLog(), ListShard, sleep=fake_sleep)
        done: list[int] = []

        async def work() -> int:
            await rt.sleep(1.5)
            done.append(1)
            return 7

        t = rt.spawn(work())
        await rt.wait_idle()
        assert done == [1] and slept == [1.5] and t.result() == 7
        await rt.close()
    run(main())


# ---------------------------------------------------------------------- transactional writes and markers
def test_transactional_write_carries_the_producer_to_the_log_and_to_replay() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 4, [])
        assert shard is not None
        t = asyncio.ensure_future(rt.run_transactional(0, 42, 7, lambda s: CoordinatorResult([(b"o", b"1")], "ok")))
        await asyncio.sleep(0)
        assert log.writes == [(0, 4, 42, 7, False)]  # the partition's epoch and the producer go with the write
        assert shard.entries == []  # not replayed before it is durable
        log.make_durable()
        assert await t == "ok"
        assert shard.entries == [("r", b"o", b"1", 0, 42, 7)]
        # a plain write carries no producer
        t2 = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"p", b"2")], "plain")))
        await asyncio.sleep(0)
        log.make_durable()
        assert await t2 == "plain" and shard.entries[-1] == ("r", b"p", b"2", 1, -1, -1)
        await rt.close()
    run(main())


def test_end_transaction_marker_is_replayed_in_queue_order() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        assert shard is not None
        txn = asyncio.ensure_future(rt.run_transactional(0, 5, 0, lambda s: CoordinatorResult([(b"o", b"1")], 1)))
        await asyncio.sleep(0)
        marker = asyncio.ensure_future(rt.replay_end_transaction_marker(0, 5, 0, True, offset=1))
        await asyncio.sleep(0)
        assert not marker.done() and shard.entries == []  # behind the write in flight
        log.make_durable()
        await txn
        await marker
        assert shard.entries == [("r", b"o", b"1", 0, 5, 0), ("m", 5, 0, True)]
        # a partition not held here refuses it (whoever loads the partition reads the marker from the log)
        with pytest.raises(CoordinatorError) as e:
            await rt.replay_end_transaction_marker(9, 5, 0, True, offset=3)
        assert e.value.code is ErrorCode.NOT_COORDINATOR
        await rt.close()
    run(main())


def test_loading_replays_records_and_markers_through_the_same_path() -> None:
    async def main() -> None:
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(ManualLog(), ListShard)
        shard = await rt.load(2, 1, [LoadedRecord(b"a", b"1", 0), LoadedRecord(b"o", b"2", 1, 9, 3),
                                     LoadedMarker(9, 3, False, 2), LoadedRecord(b"b", None, 3)])
        assert shard is not None
        assert shard.entries == [("r", b"a", b"1", 0, -1, -1), ("r", b"o", b"2", 1, 9, 3), ("m", 9, 3, False),
                                 ("r", b"b", None, 3, -1, -1)]
        # the broker reports a marker the load already read: not replayed twice; a later one is
        await rt.replay_end_transaction_marker(2, 9, 3, False, offset=2)
        assert len(shard.entries) == 4
        await rt.replay_end_transaction_marker(2, 9, 3, True, offset=4)
        assert shard.entries[-1] == ("m", 9, 3, True)
        await rt.close()
    run(main())


# ---------------------------------------------------------------------- ownership: load and unload with an epoch
def test_writes_carry_the_epoch_and_a_refused_write_answers_not_coordinator() -> None:
    async def main() -> None:
        log = ManualLog()
        log.epochs = {0: 5}
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 5, [])
        assert shard is not None
        t = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"k", b"v")], "ok")))
        await asyncio.sleep(0)
        log.make_durable()
        assert await t == "ok" and log.writes[0][1] == 5
        # leadership moved: the log refuses writes of epoch 5 (NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR)
        log.epochs = {0: 6}
        failed: list[bool] = []

        def op(s: ListShard) -> CoordinatorResult[str]:
            return CoordinatorResult([(b"k2", b"v")], "never", on_failure=lambda: failed.append(True))

        with pytest.raises(CoordinatorError) as e:
            await rt.run(0, op)
        assert e.value.code is ErrorCode.NOT_COORDINATOR and failed == [True]
        assert shard.replayed == [(b"k", b"v", 0)]
        await rt.close()
    run(main())


def test_unload_fails_queued_and_in_flight_operations_and_never_replays_into_the_dropped_shard() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        old = await rt.load(0, 1, [])
        assert old is not None
        reverted: list[str] = []
        inflight = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult(
            [(b"k1", b"v")], 1, on_failure=lambda: reverted.append("k1"))))
        queued = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"k2", b"v")], 2)))
        marker = asyncio.ensure_future(rt.replay_end_transaction_marker(0, 3, 0, True, offset=7))
        await asyncio.sleep(0)
        assert not rt.unload(0, epoch=1)  # a stale notice (the epoch held is not older): ignored
        assert rt.unload(0, epoch=2)
        for t in (inflight, queued, marker):
            with pytest.raises(CoordinatorError) as e:
                await t
            assert e.value.code is ErrorCode.NOT_COORDINATOR
        log.make_durable()  # the write in flight completes after the unload
        await asyncio.sleep(0)
        assert old.entries == [] and reverted == ["k1"]  # its pending state is dropped, nothing replayed
        assert log.records == [(b"k1", b"v")]  # the queued operation never ran
        # becoming coordinator again (a newer epoch) loads the partition from the log, the late write included
        new = await rt.load(0, 3, [LoadedRecord(k, v, i) for i, (k, v) in enumerate(log.records)])
        assert new is not None and new is not old and new.replayed == [(b"k1", b"v", 0)]
        assert rt.epoch(0) == 3
        await rt.close()
    run(main())


def test_load_with_a_newer_epoch_replaces_the_shard_and_an_older_one_is_ignored() -> None:
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        first = await rt.load(0, 2, [LoadedRecord(b"a", b"1", 0)])
        assert first is not None
        assert await rt.load(0, 1, []) is None and rt.shard(0) is first  # older epoch: ignored
        t = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"b", b"2")], "b")))
        await asyncio.sleep(0)
        second = await rt.load(0, 4, [LoadedRecord(b"a", b"1", 0), LoadedRecord(b"b", b"2", 1)])
        with pytest.raises(CoordinatorError) as e:
            await t  # held by the old shard: answered NOT_COORDINATOR, the client retries on the new one
        assert e.value.code is ErrorCode.NOT_COORDINATOR
        assert second is not None and second is not first and rt.shard(0) is second and rt.epoch(0) == 4
        assert second.replayed == [(b"a", b"1", 0), (b"b", b"2", 1)]
        log.make_durable()
        await asyncio.sleep(0)
        assert first.replayed == [(b"a", b"1", 0)]  # the old shard gets nothing more
        assert await rt.run(0, lambda s: CoordinatorResult([], "served")) == "served"
        assert rt.owns(0, 4) and not rt.owns(0, 2)
        await rt.close()
    run(main())


# ---------------------------------------------------------------------- write timeout
class Timers:
    """``call_later`` and ``monotonic`` for the runtime: time moves when the test says, firing what is due."""

    class Handle:
        def __init__(self, due: float, callback: Callable[[], None]) -> None:
            self.due, self.callback, self.cancelled = due, callback, False

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self) -> None:
        self.now = 0.0
        self.handles: list[Timers.Handle] = []

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timers.Handle:
        h = Timers.Handle(self.now + delay, callback)
        self.handles.append(h)
        return h

    def live(self) -> list[Timers.Handle]:
        return [h for h in self.handles if not h.cancelled and h.due >= self.now]

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while True:
            due = sorted((h for h in self.handles if not h.cancelled and h.due <= self.now), key=lambda h: h.due)
            if not due:
                return
            due[0].cancelled = True
            due[0].callback()


def runtime_with(log: ManualLog, timers: Timers, timeout_ms: int) -> CoordinatorRuntime[ListShard]:
    return CoordinatorRuntime(log, ListShard, write_timeout_ms=timeout_ms, call_later=timers.call_later,
                              monotonic=timers.monotonic)


def test_a_write_not_durable_in_time_answers_not_available_and_is_still_replayed_when_it_completes() -> None:
    async def main() -> None:
        log, timers = ManualLog(), Timers()
        rt = runtime_with(log, timers, 250)
        shard = await rt.load(0, 0, [])
        assert shard is not None
        applied: list[str] = []
        first = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult(
            [(b"k1", b"v")], 1, on_applied=lambda: applied.append("k1"))))
        queued_ran: list[bool] = []

        def second_op(s: ListShard) -> CoordinatorResult[int]:
            queued_ran.append(True)
            return CoordinatorResult([(b"k2", b"v")], 2)

        await asyncio.sleep(0)
        timers.advance(0.1)
        second = asyncio.ensure_future(rt.run(0, second_op))
        await asyncio.sleep(0)
        assert [h.due for h in timers.live()] == [0.25]  # one timer per partition, at the earliest deadline
        timers.advance(0.15)
        with pytest.raises(CoordinatorError) as e:
            await first
        assert e.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert not second.done() and [h.due for h in timers.live()] == [0.35]  # re-armed for the queued one
        timers.advance(0.1)
        for t in (first, second):
            with pytest.raises(CoordinatorError) as e:
                await t
            assert e.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        # the write in flight completes later: replayed, its follow-up runs; the queued one was dropped unrun
        log.make_durable()
        await asyncio.sleep(0)
        assert shard.replayed == [(b"k1", b"v", 0)] and applied == ["k1"]
        assert queued_ran == [] and log.records == [(b"k1", b"v")]
        # answered in time: the timer that fires later finds nothing to do and is not re-armed
        t3 = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"k3", b"v")], 3)))
        await asyncio.sleep(0)
        log.make_durable()
        assert await t3 == 3
        timers.advance(1)
        assert timers.live() == []
        await rt.close()
    run(main())


def test_a_timed_out_write_that_fails_later_reverts_its_pending_state() -> None:
    async def main() -> None:
        log, timers = ManualLog(), Timers()
        rt = runtime_with(log, timers, 100)
        shard = await rt.load(0, 0, [])
        assert shard is not None

        def op(s: ListShard) -> CoordinatorResult[str]:
            s.pending = True
            return CoordinatorResult([(b"k", b"v")], "x", on_failure=lambda: setattr(s, "pending", False))

        t = asyncio.ensure_future(rt.run(0, op))
        await asyncio.sleep(0)
        timers.advance(0.1)
        with pytest.raises(CoordinatorError):
            await t
        assert shard.pending is True  # still in flight
        log.waiting[0].set_exception(OSError("fsync failed"))
        await asyncio.sleep(0)
        assert shard.pending is False and shard.replayed == []
        await rt.close()
    run(main())


def test_the_runtimes_own_work_never_times_out() -> None:
    async def main() -> None:
        log, timers = ManualLog(), Timers()
        rt = runtime_with(log, timers, 100)
        shard = await rt.load(0, 0, [])
        assert shard is not None
        t = asyncio.ensure_future(rt.run_transactional(0, 8, 0, lambda s: CoordinatorResult([(b"o", b"1")], 1)))
        await asyncio.sleep(0)
        marker = asyncio.ensure_future(rt.replay_end_transaction_marker(0, 8, 0, True, offset=1))
        await asyncio.sleep(0)
        timers.advance(10)  # the caller's operation times out; the marker queued behind it does not
        with pytest.raises(CoordinatorError):
            await t
        assert not marker.done()
        log.make_durable()
        await marker
        assert shard.entries == [("r", b"o", b"1", 0, 8, 0), ("m", 8, 0, True)]
        await rt.close()
    run(main())


# ---------------------------------------------------------------------------------------------------- raising hooks
class HookBroke(RuntimeError):
    pass


def _raise(exc: BaseException) -> Callable[[], None]:
    def hook() -> None:
        raise exc
    return hook


def test_an_on_failure_hook_that_raises_still_answers_and_the_queued_operation_runs() -> None:
    """A failed write whose ``on_failure`` raised used to leave its caller unanswered and the partition's queue
    stalled forever (the exception escaped the durability callback before the next operation was started)."""
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        assert shard is not None
        reverted: list[int] = []

        def failing_op(s: ListShard) -> CoordinatorResult[str]:
            def on_failure() -> None:
                reverted.append(1)
                raise HookBroke("revert broke")
            return CoordinatorResult([(b"k1", b"v")], "first", on_failure=on_failure)

        first = asyncio.ensure_future(rt.run(0, failing_op))
        second = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"k2", b"v")], "second")))
        third = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([], "third")))
        await asyncio.sleep(0)
        assert log.records == [(b"k1", b"v")]  # the first write is in flight, the others queued behind it
        log.fail_durability(NotLeader(0, 0))
        with pytest.raises(CoordinatorError) as e:
            await asyncio.wait_for(first, 1)
        assert e.value.code is ErrorCode.NOT_COORDINATOR and reverted == [1]  # the mapped code, not the hook's error
        await asyncio.sleep(0)
        assert log.records == [(b"k1", b"v"), (b"k2", b"v")]  # the queued operation ran
        log.make_durable()
        assert await asyncio.wait_for(second, 1) == "second"
        assert await asyncio.wait_for(third, 1) == "third"
        assert shard.replayed == [(b"k2", b"v", 1)]

        # the same when the write is refused at once (the hook runs in the caller's call)
        log.fail = NotLeader(0, 0)
        with pytest.raises(CoordinatorError) as e:
            await asyncio.wait_for(rt.run(0, failing_op), 1)
        assert e.value.code is ErrorCode.NOT_COORDINATOR and reverted == [1, 1]
        log.fail = None
        assert await asyncio.wait_for(rt.run(0, lambda s: CoordinatorResult([], "after")), 1) == "after"

        # and when the partition was unloaded while the write was in flight
        inflight = asyncio.ensure_future(rt.run(0, failing_op))
        await asyncio.sleep(0)
        assert rt.unload(0)
        with pytest.raises(CoordinatorError):
            await asyncio.wait_for(inflight, 1)
        log.make_durable()  # the late completion runs the hook, which raises into nobody
        await asyncio.sleep(0)
        assert reverted == [1, 1, 1]
        await rt.close()
    run(main())


def test_hooks_and_replays_that_raise_anything_never_stall_the_partition() -> None:
    """``on_applied`` raising something that is not an Exception (a CancelledError of a future it read), and a
    replay raising, answer the caller and let the next queued operation run."""
    async def main() -> None:
        log = ManualLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        shard = await rt.load(0, 0, [])
        assert shard is not None

        first = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult(
            [(b"k1", b"v")], "first", on_applied=_raise(asyncio.CancelledError()))))
        second = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult(
            [(b"k2", b"v")], "second", on_failure=_raise(asyncio.CancelledError()))))
        third = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([], "third")))
        await asyncio.sleep(0)
        log.make_durable()
        assert await asyncio.wait_for(first, 1) == "first"  # applied: the hook's error does not undo the answer
        await asyncio.sleep(0)
        log.fail_durability(OSError("fsync"))
        with pytest.raises(CoordinatorError) as e:
            await asyncio.wait_for(second, 1)
        assert e.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await asyncio.wait_for(third, 1) == "third"

        def broken_replay(key: bytes | None, value: bytes | None, offset: int, pid: int, epoch: int) -> None:
            raise HookBroke("replay broke")

        shard.replay = broken_replay  # type: ignore[method-assign]
        fourth = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([(b"k4", b"v")], "fourth")))
        fifth = asyncio.ensure_future(rt.run(0, lambda s: CoordinatorResult([], "fifth")))
        await asyncio.sleep(0)
        log.make_durable()
        with pytest.raises(HookBroke):
            await asyncio.wait_for(fourth, 1)
        assert await asyncio.wait_for(fifth, 1) == "fifth"
        await rt.close()
    run(main())
