"""CoordinatorRuntime: append durably, then replay, then answer; serial per partition, concurrent across."""

from __future__ import annotations

import asyncio

import pytest

from oncelog.coordinator.runtime import CoordinatorError, CoordinatorResult, CoordinatorRuntime
from oncelog.protocol.errors import ErrorCode

from .txn_fakes import FakeLog


class ListShard:
    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.replayed: list[tuple[bytes | None, bytes | None, int]] = []
        self.pending = False

    def replay(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        self.replayed.append((key, value, offset))


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_append_then_replay_then_respond() -> None:
    async def main() -> None:
        log = FakeLog()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        await rt.load(0, [(b"k0", b"v0", 0)])
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
        await rt.load(0, [])
        shard = rt.shard(0)
        assert shard is not None

        def op(s: ListShard) -> CoordinatorResult[str]:
            s.pending = True
            return CoordinatorResult([(b"a", b"1")], "x", on_failure=lambda: setattr(s, "pending", False))

        for code, expected in [(ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
                               (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
                               (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR)]:
            log.fail_next, log.fail_code = 1, code
            with pytest.raises(CoordinatorError) as e:
                await rt.run(0, op)
            assert e.value.code is expected
            assert shard.pending is False and shard.replayed == []
        # a plain exception without a code is "not available"
        class Boom:
            async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
                raise OSError("disk")
        rt2: CoordinatorRuntime[ListShard] = CoordinatorRuntime(Boom(), ListShard)
        await rt2.load(1, [])
        with pytest.raises(CoordinatorError) as e:
            await rt2.run(1, op)
        assert e.value.code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        await rt.close()
        await rt2.close()
    run(main())


def test_serial_within_partition_concurrent_across() -> None:
    async def main() -> None:
        log = FakeLog()
        log.gate = asyncio.Event()
        rt: CoordinatorRuntime[ListShard] = CoordinatorRuntime(log, ListShard)
        await rt.load(0, [])
        await rt.load(1, [])
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
        await rt.load(0, [])
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
        await rt.load(3, [])
        with pytest.raises(RuntimeError):
            await rt.load(3, [])
        rt.unload(3)
        assert rt.shard(3) is None
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
