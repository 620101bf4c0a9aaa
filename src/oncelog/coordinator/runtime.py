"""The coordinator runtime: one serial queue per internal-topic partition (Kafka ``CoordinatorRuntime``).

Contract, for every coordinator built on it (transactions over ``__transaction_state``, groups over
``__consumer_offsets``):

* **Operations.** An operation is a plain function of the partition's shard. It validates, may mark pending state,
  and returns a :class:`CoordinatorResult` (records to write + the response). The runtime writes the records through
  the injected :class:`CoordinatorLog` as one batch, waits until the batch is durable, replays each record into the
  shard (``shard.replay(key, value, offset, producer_id, producer_epoch)`` — the same function loading uses), and
  only then answers the caller. If the write fails, ``on_failure`` runs (to drop a pending marker) and the caller
  gets :class:`CoordinatorError` with a coordinator error code (:func:`append_error_code`). Whatever a hook
  (``on_failure``, ``on_applied``) or a replay raises is logged with the partition and goes no further: the caller
  is still answered and the partition's next queued operation still runs.
* **Transactional writes** (Kafka ``scheduleTransactionalWriteOperation``): :meth:`CoordinatorRuntime.run_transactional`
  writes the operation's records as a transactional batch of a producer id/epoch; the log refuses it if the producer
  is fenced. The records replay with that producer id, so the shard keeps them pending until the transaction's
  COMMIT/ABORT marker, which the broker reports with :meth:`CoordinatorRuntime.replay_end_transaction_marker`
  once the marker is durable on the partition: ``shard.replay_end_transaction_marker`` runs on the queue, like any
  operation (Kafka ``replayEndTransactionMarker``).
* **Loading** is the same replay path: :meth:`CoordinatorRuntime.load` replays every entry of the partition in log
  order — records (with their producer id when transactional) and markers — through the queue. Nothing reaches a
  shard by any other way.
* **Write timeout** (Kafka's ``offsets.commit.timeout.ms`` for groups, ``request.timeout.ms`` for transaction state):
  a caller of ``run`` / ``run_transactional`` not answered within ``write_timeout_ms`` of submitting gets
  COORDINATOR_NOT_AVAILABLE (Kafka maps its REQUEST_TIMED_OUT so). An operation still queued then is dropped without
  running (nothing written); one whose write is in flight stays in flight: when the write completes its records are
  replayed (or ``on_failure`` runs), so memory follows the log whether or not anybody still waits — the caller just
  does not wait. The runtime's own work (loading, replaying a marker) never times out. One timer per partition, at
  the earliest deadline of an operation waiting on it, serves them all: an operation answered in time costs none.
* **Ownership and epochs.** A partition is loaded when this broker becomes leader of the internal partition and
  unloaded when it loses it; its epoch (the coordinator epoch) is that partition's leader epoch. Every write carries
  the epoch, so the log refuses writes of a coordinator that has lost its partition (NOT_LEADER_OR_FOLLOWER, which
  the caller sees as NOT_COORDINATOR). Unloading fails every queued operation and the one in flight with
  NOT_COORDINATOR and drops the shard: a write that completes later is not replayed into anything, and a reload reads
  it back from the log. Loading with a newer epoch replaces the shard by a fresh load (Kafka keeps an active shard;
  we reload, so a shard never survives a leadership change it may have missed).

Scheduling. Operations of one partition run strictly one after another. An operation submitted to an idle partition
runs at once in the caller's call (no hop through a worker task); one submitted while another is in flight waits in
the partition's queue and is started by the callback that finishes its predecessor. The log writes synchronously and
hands back a future done once the batch is durable; the runtime watches that future itself (no task per write), and
when it is already done (the log does not wait for the disk) the operation completes inline. The durability and the
replay are driven by callbacks, not by the caller: a caller that is cancelled while its write is in flight cannot
leave memory behind the log. Different partitions run concurrently.

An operation may say its records need no durability before anyone acts on them (``await_durable=False``: a
transaction's Complete* record, whose loss in a crash only means the completion is redone at load). Such records are
written ``lazy`` (no fsync round of their own), replayed and answered at once, and the partition's next operation
runs without waiting; since every later record of the partition is durable only after them (one log, fsynced in
order), nothing durable can depend on them being lost.

The runtime also owns the coordinator's background tasks (marker retries) and its sleeping, so the coordinator
modules need no asyncio of their own and tests can make backoff instant.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from oncelog.protocol.errors import ErrorCode

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "CallLater",
    "CoordinatorError",
    "CoordinatorLog",
    "CoordinatorResult",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "LoadedMarker",
    "LoadedRecord",
    "LogEntry",
    "Record",
    "append_error_code",
]

log = logging.getLogger("oncelog.coordinator.runtime")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

Record = tuple[bytes, "bytes | None"]
T = TypeVar("T")
S = TypeVar("S", bound="CoordinatorShard")


class LoadedRecord(NamedTuple):
    """A record read back from a coordinator partition. ``producer_id`` is set only for a transactional batch."""

    key: bytes | None
    value: bytes | None
    offset: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class LoadedMarker(NamedTuple):
    """A COMMIT/ABORT control batch read back from a coordinator partition."""

    producer_id: int
    producer_epoch: int
    commit: bool
    offset: int


LogEntry = LoadedRecord | LoadedMarker


class CoordinatorLog(Protocol):
    """Where a runtime writes: the internal topic's partitions, led by this broker."""

    def append(self, partition: int, epoch: int, records: Sequence[Record], producer_id: int = NO_PRODUCER_ID,
               producer_epoch: int = NO_PRODUCER_EPOCH, lazy: bool = False) -> tuple[int, asyncio.Future[None]]:
        """Write ``records`` now as one batch — transactional if ``producer_id`` is set — and return its base offset
        and a future done once the batch is durable (failed if it cannot be made durable). Raise (an exception with
        an ``error_code``) if it cannot be written: NOT_LEADER_OR_FOLLOWER when ``epoch`` is not the partition's
        current leader epoch here, a producer-state error when the producer is fenced. ``lazy``: nobody waits for
        the future now, so the write starts no fsync round of its own."""
        ...


class CoordinatorShard(Protocol):
    """The state of one coordinator partition, changed only by replaying its log."""

    def replay(self, key: bytes | None, value: bytes | None, offset: int, producer_id: int,
               producer_epoch: int) -> None:
        """Apply one record (``producer_id`` is NO_PRODUCER_ID unless it was written transactionally)."""
        ...

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The transaction of ``producer_id`` ended on this partition: what it wrote becomes visible or goes."""
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


class _Cancellable(Protocol):
    def cancel(self) -> None:
        ...


#: ``call_later(delay_seconds, callback) -> handle with cancel()`` (the event loop's by default)
CallLater = Callable[[float, Callable[[], None]], _Cancellable]


class _WriteTimedOut(Exception):
    error_code = ErrorCode.REQUEST_TIMED_OUT


class _Op:
    """One submitted operation: the function, its caller's future, the producer of a transactional write, and the
    time by which its caller must be answered (None: no write timeout; the runtime's own work)."""

    __slots__ = ("fn", "fut", "producer_id", "producer_epoch", "timeout", "deadline")

    def __init__(self, fn: Callable[[Any], Any], fut: asyncio.Future[Any], producer_id: int,
                 producer_epoch: int, timeout: float | None) -> None:
        self.fn = fn
        self.fut = fut
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.timeout = timeout
        self.deadline: float | None = None  # set once the operation waits (queued, or its write in flight)

    def fail(self, exc: BaseException) -> None:
        if not self.fut.done():
            self.fut.set_exception(exc)


class _Partition:
    def __init__(self, shard: Any, epoch: int) -> None:
        self.shard = shard
        self.epoch = epoch
        self.pending: deque[_Op] = deque()  # operations waiting for the one in flight
        self.inflight: _Op | None = None  # the operation between its write and its replay
        self.loading = True
        self.loaded_through = -1  # offset of the last entry the load replayed
        self.timer: _Cancellable | None = None  # fires at the earliest deadline of a waiting operation (or later)


class CoordinatorRuntime(Generic[S]):
    def __init__(self, log: CoordinatorLog, shard_factory: Callable[[int], S],
                 sleep: Callable[[float], Awaitable[None]] | None = None, write_timeout_ms: int | None = None,
                 call_later: CallLater | None = None, monotonic: Callable[[], float] | None = None) -> None:
        self._log = log
        self._factory = shard_factory
        self._partitions: dict[int, _Partition] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sleep = sleep or asyncio.sleep
        self._write_timeout = None if write_timeout_ms is None else write_timeout_ms / 1000
        self._write_timeout_ms = write_timeout_ms
        self._call_later = call_later
        self._monotonic = monotonic  # seconds; the event loop's clock by default (with its call_later)
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

    def epoch(self, partition: int) -> int | None:
        """The coordinator epoch this runtime holds the partition with (None: not loaded here)."""
        p = self._partitions.get(partition)
        return None if p is None else p.epoch

    def owns(self, partition: int, epoch: int | None = None) -> bool:
        """Whether the partition is loaded (and, if ``epoch`` is given, still with that epoch)."""
        p = self._partitions.get(partition)
        return p is not None and not p.loading and (epoch is None or p.epoch == epoch)

    async def load(self, partition: int, epoch: int, entries: Iterable[LogEntry]) -> S | None:
        """Become the coordinator of ``partition`` at ``epoch`` (Kafka ``scheduleLoadOperation``): create its shard
        and replay every entry of the partition, in log order, through the queue. Returns the shard, or None when
        ignored because the partition is already held with this or a newer epoch. A newer epoch than the one held
        unloads the old shard first (its queued operations get NOT_COORDINATOR) and loads afresh."""
        current = self._partitions.get(partition)
        if current is not None:
            if current.epoch >= epoch:
                log.info("coordinator partition %d: load at epoch %d ignored, already held at epoch %d", partition,
                         epoch, current.epoch)
                return None
            self._drop(partition, current, f"reloaded at epoch {epoch}")
        p = _Partition(self._factory(partition), epoch)
        self._partitions[partition] = p

        def replay_all(shard: S) -> CoordinatorResult[None]:
            last = -1
            for entry in entries:
                if type(entry) is LoadedRecord:
                    shard.replay(entry.key, entry.value, entry.offset, entry.producer_id, entry.producer_epoch)
                else:
                    assert isinstance(entry, LoadedMarker)
                    shard.replay_end_transaction_marker(entry.producer_id, entry.producer_epoch, entry.commit)
                last = entry.offset
            p.loaded_through = last
            return CoordinatorResult([], None)

        try:
            await self._submit(partition, p, replay_all)
        except BaseException:
            if self._partitions.get(partition) is p:
                self._drop(partition, p, "loading failed")
            raise
        if self._partitions.get(partition) is not p:  # unloaded (or reloaded) while loading
            return None
        p.loading = False
        return p.shard  # type: ignore[no-any-return]

    def unload(self, partition: int, epoch: int | None = None) -> bool:
        """Stop serving a partition (Kafka ``scheduleUnloadOperation``): ``epoch`` is the epoch of the new leader
        (None: the partition is gone). Ignored when the partition is held with that epoch or a newer one (a stale
        notice). Queued operations and the one in flight fail with NOT_COORDINATOR; the shard is dropped."""
        p = self._partitions.get(partition)
        if p is None:
            return False
        if epoch is not None and p.epoch >= epoch:
            log.info("coordinator partition %d: unload for epoch %d ignored, held at epoch %d", partition, epoch,
                     p.epoch)
            return False
        self._drop(partition, p, "unloaded")
        return True

    def _drop(self, partition: int, p: _Partition, why: str) -> None:
        del self._partitions[partition]
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        err = CoordinatorError(ErrorCode.NOT_COORDINATOR, f"coordinator partition {partition} was {why}")
        if p.inflight is not None:
            p.inflight.fail(err)  # its write completes or fails later; nothing is replayed into the dropped shard
        while p.pending:
            p.pending.popleft().fail(err)

    # ------------------------------------------------------------------ operations
    async def run(self, partition: int, op: Callable[[S], CoordinatorResult[T]]) -> T:
        """Run ``op`` on the partition's queue; its records are written as plain records."""
        p = self._partitions.get(partition)
        if p is None or p.loading or self._closed:
            raise self._refusal(partition, p)
        fut = self._submit(partition, p, op, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, self._write_timeout)
        if fut.done():  # answered in this call (its write needed no wait): no shield to build
            return fut.result()  # type: ignore[no-any-return]
        # shielded: a cancelled caller (its client's connection closed) neither drops its queued operation nor
        # touches the future the runtime answers; the operation runs as if the caller still waited
        return await asyncio.shield(fut)

    async def run_transactional(self, partition: int, producer_id: int, producer_epoch: int,
                                op: Callable[[S], CoordinatorResult[T]]) -> T:
        """Run ``op`` on the partition's queue; its records are written as a transactional batch of the producer
        (Kafka ``scheduleTransactionalWriteOperation``) and replayed with its id, pending until its marker."""
        p = self._partitions.get(partition)
        if p is None or p.loading or self._closed:
            raise self._refusal(partition, p)
        fut = self._submit(partition, p, op, producer_id, producer_epoch, self._write_timeout)
        if fut.done():
            return fut.result()  # type: ignore[no-any-return]
        return await asyncio.shield(fut)  # shielded: as in run

    async def replay_end_transaction_marker(self, partition: int, producer_id: int, producer_epoch: int,
                                            commit: bool, offset: int) -> None:
        """The broker made a COMMIT/ABORT marker of ``producer_id`` durable at ``offset`` of the partition: replay it
        into the shard, in queue order. A marker the partition's load already read is not replayed twice. Fails with
        NOT_COORDINATOR when the partition is not held here (whoever loads it later reads the marker from the log)."""
        p = self._partitions.get(partition)
        if p is None or self._closed:
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR, f"coordinator partition {partition} is not held here")

        def replay(shard: S) -> CoordinatorResult[None]:
            if offset > p.loaded_through:
                shard.replay_end_transaction_marker(producer_id, producer_epoch, commit)
            return CoordinatorResult([], None)

        await self._submit(partition, p, replay)  # queued behind a load in progress, not refused

    def _refusal(self, partition: int, p: _Partition | None) -> CoordinatorError:
        if p is None or self._closed:
            return CoordinatorError(ErrorCode.NOT_COORDINATOR, f"coordinator partition {partition} is not held here")
        return CoordinatorError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def _submit(self, partition: int, p: _Partition, fn: Callable[[Any], Any], producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, timeout: float | None = None) -> asyncio.Future[Any]:
        """Run the operation now if the partition is idle (no hop through a worker task), else queue it behind the
        operation in flight. Its write and replay are driven by callbacks, not by the caller, so a caller that is
        cancelled while its write is in flight cannot leave memory behind the log."""
        op = _Op(fn, asyncio.get_running_loop().create_future(), producer_id, producer_epoch, timeout)
        if p.inflight is not None or p.pending:
            p.pending.append(op)
            if timeout is not None:
                self._waits(partition, p, op)
        else:
            self._start(partition, p, op)
        return op.fut

    def _drain(self, partition: int, p: _Partition) -> None:
        while p.inflight is None and p.pending and self._partitions.get(partition) is p:
            op = p.pending.popleft()
            if op.fut.done():  # timed out before its operation started: nothing was written
                continue
            self._start(partition, p, op)

    def _start(self, partition: int, p: _Partition, op: _Op) -> None:
        """Run the operation and start its write. Returns with ``p.inflight`` set iff the write is in flight."""
        try:
            result = op.fn(p.shard)
            if not isinstance(result, CoordinatorResult):
                raise TypeError(f"a coordinator operation must return a CoordinatorResult, not {type(result)!r}")
        except BaseException as e:
            if not isinstance(getattr(e, "code", None), ErrorCode):  # not a refusal with a code: a failure
                log.error("an operation on coordinator partition %d raised %r; its caller gets the exception",
                          partition, e, exc_info=e)
            op.fail(e)
            return
        if not result.records:
            self._run_hook(partition, "on_applied", result.on_applied)
            if not op.fut.done():
                op.fut.set_result(result.response)
            return
        records = result.records
        lazy = not result.await_durable
        try:
            base, durable = self._log.append(partition, p.epoch, records, op.producer_id, op.producer_epoch, lazy)
        except Exception as e:
            self._failed(partition, result, op, e)
            return
        if lazy or (durable.done() and not durable.cancelled() and durable.exception() is None):
            if lazy and not (durable.done() and not durable.cancelled() and durable.exception() is None):
                durable.add_done_callback(lambda d: self._lazy_durable(partition, d))  # (nothing to say if durable)
            self._apply(partition, p, result, op, base)
            return
        p.inflight = op
        if op.timeout is not None and op.deadline is None:
            self._waits(partition, p, op)
        durable.add_done_callback(lambda d: self._written(partition, p, result, op, base, d))

    def _failed(self, partition: int, result: CoordinatorResult[Any], op: _Op, e: BaseException) -> None:
        """The write failed: run ``on_failure`` (guarded: whatever it raises, the caller is still answered), then
        answer the caller with the mapped code. Never raises, so the partition's next operation still starts."""
        try:
            self._run_hook(partition, "on_failure", result.on_failure)
        finally:
            if isinstance(e, Exception):
                code = append_error_code(e)
                if not op.fut.done():
                    log.warning("append to coordinator partition %d failed (%s): answering %s", partition, e,
                                code.name)
                err = CoordinatorError(code, str(e))
                err.__cause__ = e
                op.fail(err)
            else:
                op.fail(CoordinatorError(ErrorCode.NOT_COORDINATOR))

    def _written(self, partition: int, p: _Partition, result: CoordinatorResult[Any], op: _Op, base: int,
                 durable: asyncio.Future[None]) -> None:
        """The write is durable (or failed): replay the records, then answer; then the next operation."""
        p.inflight = None
        if self._partitions.get(partition) is not p:  # unloaded meanwhile: the shard is gone
            self._run_hook(partition, "on_failure", result.on_failure)
            op.fail(CoordinatorError(ErrorCode.NOT_COORDINATOR))
            return
        try:
            if durable.cancelled():
                self._failed(partition, result, op, asyncio.CancelledError())
            elif durable.exception() is not None:
                self._failed(partition, result, op, durable.exception())  # type: ignore[arg-type]
            else:
                self._apply(partition, p, result, op, base)
        finally:  # whatever happened above, the operations queued behind this one run
            self._drain(partition, p)

    def _apply(self, partition: int, p: _Partition, result: CoordinatorResult[Any], op: _Op, offset: int) -> None:
        """Replay the written records into the shard, run the follow-up hook, answer the caller."""
        shard = p.shard
        pid, epoch = op.producer_id, op.producer_epoch
        try:
            for key, value in result.records:
                shard.replay(key, value, offset, pid, epoch)
                offset += 1
        except BaseException as e:
            log.error("replaying a written record at offset %d into coordinator partition %d failed; the partition's "
                      "memory may now lag its log (a reload reads it back)", offset, partition, exc_info=e)
            op.fail(e)
        else:
            self._run_hook(partition, "on_applied", result.on_applied)
            if not op.fut.done():
                op.fut.set_result(result.response)

    def _waits(self, partition: int, p: _Partition, op: _Op) -> None:
        """``op`` starts waiting (queued, or its write in flight): its caller must be answered by its deadline."""
        assert op.timeout is not None
        op.deadline = (self._monotonic or asyncio.get_running_loop().time)() + op.timeout
        if p.timer is None:
            self._arm_timer(partition, p, op.deadline)

    def _arm_timer(self, partition: int, p: _Partition, deadline: float) -> None:
        """One timer per partition, at the earliest deadline of an operation waiting on it. Operations answered in
        time cost nothing (the timer, when it fires, finds them done and re-arms for the next waiting one)."""
        loop = asyncio.get_running_loop()
        delay = max(deadline - (self._monotonic or loop.time)(), 0.0)
        p.timer = (self._call_later or loop.call_later)(delay, lambda: self._expire(partition, p))

    def _expire(self, partition: int, p: _Partition) -> None:
        p.timer = None
        if self._partitions.get(partition) is not p:
            return
        now = (self._monotonic or asyncio.get_running_loop().time)()
        waiting = [p.inflight] if p.inflight is not None else []
        waiting += p.pending
        next_deadline: float | None = None
        for op in waiting:
            if op.deadline is None or op.fut.done():
                continue
            if op.deadline <= now:
                log.warning("an operation on coordinator partition %d was not durable within %d ms; answering "
                            "COORDINATOR_NOT_AVAILABLE (its write, if started, still completes)", partition,
                            self._write_timeout_ms)
                err = _WriteTimedOut(f"not durable within the coordinator write timeout of "
                                     f"{self._write_timeout_ms} ms")
                op.fut.set_exception(CoordinatorError(append_error_code(err), str(err)))
            elif next_deadline is None or op.deadline < next_deadline:
                next_deadline = op.deadline
        if next_deadline is not None:
            self._arm_timer(partition, p, next_deadline)

    @staticmethod
    def _lazy_durable(partition: int, durable: asyncio.Future[None]) -> None:
        if not durable.cancelled() and durable.exception() is not None:
            log.error("a record of coordinator partition %d, already applied, could not be made durable (%s); "
                      "after a restart its operation is redone from the partition's log", partition,
                      durable.exception())

    @staticmethod
    def _run_hook(partition: int, name: str, hook: Callable[[], None] | None) -> None:
        """Run an operation's ``on_failure`` / ``on_applied`` hook. Whatever it raises is logged and goes no
        further: the caller is answered all the same (the write's outcome decides the answer, not the hook) and
        the partition's next operation runs; a hook that raised out of the runtime's callbacks would leave the
        caller unanswered and every later operation of the partition queued forever. Only KeyboardInterrupt and
        SystemExit pass (the callers' ``finally`` still starts the next operation)."""
        if hook is None:
            return
        try:
            hook()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:
            log.exception("the %s hook of an operation on coordinator partition %d raised; ignored, the caller is "
                          "answered and the partition's next operation runs", name, partition)

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

    async def shield(self, task: asyncio.Future[T]) -> T:
        """Await a background task without cancelling it if the caller is cancelled."""
        return await asyncio.shield(task)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for partition in list(self._partitions):
            self.unload(partition)
