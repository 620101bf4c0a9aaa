"""The coordinator runtime: one serial queue per internal-topic partition (Kafka ``CoordinatorRuntime``).

An operation is a plain function of the partition's shard. It validates, may mark pending state, and returns a
:class:`CoordinatorResult` (records to write + the response). The runtime appends the records through the
injected :class:`CoordinatorLog`, which returns once they are durable, then replays each record into the shard
(``shard.replay(key, value, offset)`` — the same function start-up loading uses) and only then completes the
caller's future with the response. If the append fails, ``on_failure`` runs (to drop a pending marker) and the
caller gets :class:`CoordinatorError` with a coordinator error code.

Operations of one partition run strictly one after another. An operation submitted to an idle partition runs at
once in the caller's call (no hop through a worker task); one submitted while another is in flight waits in the
partition's queue and is started by the callback that finishes its predecessor. The append's durability and the
replay are driven by callbacks, not by the caller: a caller that is cancelled while its append is in flight cannot
leave memory behind the log. A log that offers ``append_nowait(partition, records) -> (base_offset, durable
future)`` is written synchronously and its durability future is watched directly (one event-loop hop fewer per
operation); any other log's ``append`` coroutine runs as a task. Different partitions run concurrently.

An operation may say its records need no durability before anyone acts on them (``await_durable=False``: a
transaction's Complete* record, whose loss in a crash only means the completion is redone at load). With a log
that offers ``append_nowait`` such records are written ``lazy`` (no fsync round of their own), replayed and
answered at once, and the partition's next operation runs without waiting; since every later record of the
partition is durable only after them (one log, fsynced in order), nothing durable can depend on them being lost.
The runtime also owns the coordinator's background tasks (marker retries) and its sleeping, so the
coordinator modules need no asyncio of their own and tests can make backoff instant.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from oncelog.protocol.errors import ErrorCode

__all__ = [
    "CoordinatorError",
    "CoordinatorLog",
    "CoordinatorResult",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "Record",
    "append_error_code",
]

log = logging.getLogger("oncelog.coordinator.runtime")

Record = tuple[bytes, "bytes | None"]
T = TypeVar("T")
S = TypeVar("S", bound="CoordinatorShard")


class CoordinatorLog(Protocol):
    async def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append the records as one batch; return its base offset once durable; raise on failure."""
        ...


class CoordinatorShard(Protocol):
    def replay(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        ...


@dataclass
class CoordinatorResult(Generic[T]):
    """What an operation decided: records to append, the caller's answer, and two hooks. ``on_failure`` runs if
    the append fails (drop a pending marker). ``on_applied`` runs once the records are replayed, before the caller
    is answered and before the partition's next operation: follow-up work that must start even if the caller has
    gone away meanwhile (a transaction's markers after its Prepare record). ``await_durable=False``: the records
    are replayed and answered as soon as they are written (see the module docstring for when that is safe)."""

    records: list[tuple[bytes, bytes | None]]
    response: T
    on_failure: Callable[[], None] | None = None
    on_applied: Callable[[], None] | None = None
    await_durable: bool = True


class CoordinatorError(Exception):
    """An operation could not be completed; ``code`` is what the client should be told."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


def append_error_code(exc: BaseException) -> ErrorCode:
    """Kafka's mapping of a failed internal-topic append to the code a client gets
    (TransactionStateManager.appendTransactionToLog / CoordinatorRuntime)."""
    raw = getattr(exc, "error_code", None)
    try:
        code = ErrorCode(int(raw)) if raw is not None else None
    except ValueError:
        code = None
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
                None):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    assert code is not None
    return code


_Item = tuple[Callable[[Any], Any], "asyncio.Future[Any]"]


class _Partition:
    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.pending: deque[_Item] = deque()  # operations waiting for the one in flight
        self.busy = False  # an operation is between running and its replay
        self.inflight: tuple[asyncio.Future[Any], asyncio.Future[Any]] | None = None  # (caller, durable)
        self.loading = True


class CoordinatorRuntime(Generic[S]):
    def __init__(self, log: CoordinatorLog, shard_factory: Callable[[int], S],
                 sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        self._log = log
        self._append_nowait: Callable[..., tuple[int, asyncio.Future[Any]]] | None = \
            getattr(log, "append_nowait", None)
        self._factory = shard_factory
        self._partitions: dict[int, _Partition] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sleep = sleep or asyncio.sleep
        self._closed = False

    # ------------------------------------------------------------------ partitions
    def shard(self, partition: int) -> S | None:
        p = self._partitions.get(partition)
        return None if p is None or p.loading else p.shard

    def shards(self) -> dict[int, S]:
        return {i: p.shard for i, p in self._partitions.items() if not p.loading}

    def is_loading(self, partition: int) -> bool:
        p = self._partitions.get(partition)
        return p is not None and p.loading

    async def load(self, partition: int, records: Iterable[tuple[bytes | None, bytes | None, int]]) -> S:
        """Create the partition's shard and replay every record of the partition into it, through the queue."""
        if partition in self._partitions:
            raise RuntimeError(f"coordinator partition {partition} is already loaded")
        p = _Partition(self._factory(partition))
        self._partitions[partition] = p

        def replay_all(shard: S) -> CoordinatorResult[None]:
            for key, value, offset in records:
                shard.replay(key, value, offset)
            return CoordinatorResult([], None)

        try:
            await self._submit(partition, p, replay_all)
        except BaseException:
            self.unload(partition)
            raise
        p.loading = False
        return p.shard  # type: ignore[no-any-return]

    def unload(self, partition: int) -> None:
        """Stop serving a partition: queued operations and the one in flight fail with NOT_COORDINATOR."""
        p = self._partitions.pop(partition, None)
        if p is None:
            return
        if p.inflight is not None:
            fut, durable = p.inflight
            if not fut.done():
                fut.set_exception(CoordinatorError(ErrorCode.NOT_COORDINATOR))
            if isinstance(durable, asyncio.Task):
                durable.cancel()
        while p.pending:
            _, fut = p.pending.popleft()
            if not fut.done():
                fut.set_exception(CoordinatorError(ErrorCode.NOT_COORDINATOR))

    # ------------------------------------------------------------------ operations
    async def run(self, partition: int, op: Callable[[S], CoordinatorResult[T]]) -> T:
        p = self._partitions.get(partition)
        if p is None or self._closed:
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR, f"partition {partition} is not loaded here")
        if p.loading:
            raise CoordinatorError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return await self._submit(partition, p, op)  # type: ignore[no-any-return]

    def _submit(self, partition: int, p: _Partition, op: Callable[[Any], Any]) -> asyncio.Future[Any]:
        """Run ``op`` now if the partition is idle (no hop through a worker task), else queue it behind the
        operation in flight. Its append and replay are driven by callbacks, not by the caller, so a caller that
        is cancelled while its append is in flight cannot leave memory behind the log."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if p.busy or p.pending:
            p.pending.append((op, fut))
        else:
            self._start(partition, p, op, fut)
        return fut

    def _drain(self, partition: int, p: _Partition) -> None:
        while not p.busy and p.pending and self._partitions.get(partition) is p:
            op, fut = p.pending.popleft()
            if fut.done():  # the caller gave up before its operation started: nothing was written
                continue
            self._start(partition, p, op, fut)

    def _start(self, partition: int, p: _Partition, op: Callable[[Any], Any], fut: asyncio.Future[Any]) -> None:
        """Run the operation and start its append. Returns with ``p.busy`` set iff the append is in flight."""
        try:
            result = op(p.shard)
            if not isinstance(result, CoordinatorResult):
                raise TypeError(f"a coordinator operation must return a CoordinatorResult, not {type(result)!r}")
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
            return
        if not result.records:
            self._run_applied_hook(partition, result)
            if not fut.done():
                fut.set_result(result.response)
            return
        records = list(result.records)
        base: int | None
        lazy = not result.await_durable and self._append_nowait is not None
        try:
            if lazy:
                assert self._append_nowait is not None
                base, durable = self._append_nowait(partition, records, lazy=True)
            elif self._append_nowait is not None:  # written now; the future is done once it is durable
                base, durable = self._append_nowait(partition, records)
            else:
                base, durable = None, asyncio.ensure_future(self._log.append(partition, records))
        except Exception as e:
            self._failed(partition, result, fut, e)
            return
        if lazy:
            assert base is not None
            durable.add_done_callback(lambda d: self._lazy_durable(partition, d))
            self._apply(partition, p, result, records, base, fut)
            return
        p.busy = True
        p.inflight = (fut, durable)
        durable.add_done_callback(
            lambda d: self._appended(partition, p, result, records, base, fut, d))  # type: ignore[misc,unused-ignore]

    def _failed(self, partition: int, result: CoordinatorResult[Any], fut: asyncio.Future[Any],
                e: BaseException) -> None:
        if result.on_failure is not None:
            result.on_failure()
        if fut.done():
            return
        if isinstance(e, Exception):
            code = append_error_code(e)
            log.warning("append to coordinator partition %d failed (%s): answering %s", partition, e, code.name)
            err = CoordinatorError(code, str(e))
            err.__cause__ = e
            fut.set_exception(err)
        else:
            fut.set_exception(CoordinatorError(ErrorCode.NOT_COORDINATOR))

    def _appended(self, partition: int, p: _Partition, result: CoordinatorResult[Any],
                  records: list[tuple[bytes, bytes | None]], base: int | None, fut: asyncio.Future[Any],
                  durable: asyncio.Future[Any]) -> None:
        """The append is durable (or failed): replay the records, then answer; then the next operation."""
        p.inflight = None
        p.busy = False
        if self._partitions.get(partition) is not p:  # unloaded meanwhile: the shard is gone
            if result.on_failure is not None:
                result.on_failure()
            if not fut.done():
                fut.set_exception(CoordinatorError(ErrorCode.NOT_COORDINATOR))
            return
        if durable.cancelled():
            self._failed(partition, result, fut, asyncio.CancelledError())
        elif durable.exception() is not None:
            self._failed(partition, result, fut, durable.exception())  # type: ignore[arg-type]
        else:
            self._apply(partition, p, result, records, base if base is not None else durable.result(), fut)
        self._drain(partition, p)

    def _apply(self, partition: int, p: _Partition, result: CoordinatorResult[Any],
               records: list[tuple[bytes, bytes | None]], offset: int, fut: asyncio.Future[Any]) -> None:
        """Replay the written records into the shard, run the follow-up hook, answer the caller."""
        try:
            for i, (key, value) in enumerate(records):
                p.shard.replay(key, value, offset + i)
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
        else:
            self._run_applied_hook(partition, result)
            if not fut.done():
                fut.set_result(result.response)

    @staticmethod
    def _lazy_durable(partition: int, durable: asyncio.Future[Any]) -> None:
        if not durable.cancelled() and durable.exception() is not None:
            log.error("a record of coordinator partition %d, already applied, could not be made durable (%s); "
                      "after a restart its operation is redone from the partition's log", partition,
                      durable.exception())

    @staticmethod
    def _run_applied_hook(partition: int, result: CoordinatorResult[Any]) -> None:
        if result.on_applied is None:
            return
        try:
            result.on_applied()
        except Exception:  # the records are applied: the operation succeeded; its follow-up is retried elsewhere
            log.exception("follow-up of an operation on coordinator partition %d failed", partition)

    # ------------------------------------------------------------------ background work
    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("coordinator background task %s failed", task.get_name(), exc_info=task.exception())

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    async def wait_idle(self) -> None:
        """Wait until no background task is left (tests; orderly shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def shield(self, task: asyncio.Task[T]) -> T:
        """Await a background task without cancelling it if the caller is cancelled."""
        return await asyncio.shield(task)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for partition in list(self._partitions):
            self.unload(partition)
