"""Completing a prepared transaction: its COMMIT/ABORT markers, then its Complete* record.

Kafka's TransactionMarkerChannelManager (markers queued per destination broker, re-routed after a leader change)
and TransactionMarkerRequestCompletionHandler (what each partition's answer means). The coordinator decides
(``operations.py``); this module delivers. How markers reach a partition's leader is a :class:`MarkerChannel`: a
single node writes them into its own partitions (``oncelog.broker.coordinators.markers``); a cluster sends WriteTxnMarkers to
the leaders over the network.

For every transaction in PrepareCommit/PrepareAbort there is one completion (a background task of the runtime, so a
client that goes away does not stop it and a retried EndTxn finds it): look up each partition's leader, send each
leader one marker for its partitions, and act on each partition's error code, as Kafka's completion handler does:

* NONE: done. UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION: the producer cannot have written there; done.
* INVALID_PRODUCER_EPOCH (PRODUCER_FENCED) / TRANSACTION_COORDINATOR_FENCED: the partition has seen a newer
  producer or coordinator epoch, so this coordinator is stale; stop without completing (the newer coordinator
  finishes the transaction). Waiters get NOT_COORDINATOR.
* anything else (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, UNKNOWN_TOPIC_OR_PARTITION, a timeout, a storage
  error, a request that failed as a whole): retry with backoff, after looking the leader up again. A partition
  whose topic no longer exists (the lookup finds no leader) needs no marker and is dropped.

Before each retry the completion checks that this coordinator still holds the transaction's partition with the epoch
the markers carry; a coordinator that lost it stops (Kafka's removeMarkersForTxn). Once every partition is done the
Complete* record is written (retried until written or the partition is lost).

Markers to this broker are written inside the call that starts the completion (no event-loop hop before the
write); markers to other brokers are gathered per destination for one loop iteration and sent as one request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, NamedTuple, Protocol

from oncelog.protocol.errors import ErrorCode

from ..runtime import CoordinatorError, CoordinatorRuntime
from .metadata import TopicPartition

__all__ = ["MarkerChannel", "MarkerDriver", "MarkerResults", "PendingCompletion", "TxnMarker"]

log = logging.getLogger("oncelog.coordinator.transaction")


class TxnMarker(NamedTuple):
    """One entry of a WriteTxnMarkers request (Kafka's TxnMarkerEntry)."""
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


#: the answer to one WriteTxnMarkers request: per marker, in request order, each partition's error code
MarkerResults = list[dict[TopicPartition, int]]


class MarkerChannel(Protocol):
    """How markers reach the leaders of a transaction's partitions."""

    #: the id of this broker: markers for it are written in the ``send`` call itself
    local_node: int

    def leader(self, tp: TopicPartition) -> int | None:
        """The broker leading ``tp`` now (asked again before every retry), or None if the partition no longer
        exists (its topic was deleted): then no marker is needed."""
        ...

    def send(self, broker: int, markers: Sequence[TxnMarker]) -> Awaitable[MarkerResults]:
        """Write ``markers`` on ``broker`` as one WriteTxnMarkers request, fenced there by each marker's coordinator
        epoch. The awaitable resolves once the written markers are durable (committed) on that broker, with each
        partition's error code; it raises if the request failed as a whole (connection lost, timed out), and then
        every partition of the request is retried."""
        ...


class PendingCompletion(NamedTuple):
    """A prepared transaction to complete (Kafka's PendingCompleteTxn)."""
    partition: int  # of __transaction_state
    coordinator_epoch: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]

    @property
    def result(self) -> str:
        return "COMMIT" if self.commit else "ABORT"


# marker error codes: the partition needs no marker (done)
_DONE = {ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION}
# this coordinator is stale: stop completing
_FENCED = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
# retried as Kafka does; anything not listed anywhere is retried too, but said louder
_RETRIABLE = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
              ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
              ErrorCode.UNKNOWN_TOPIC_ID}


def _code(raw: int) -> ErrorCode:
    try:
        return ErrorCode(int(raw))
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class _Attempt:
    """One round of sends for a completion: the partitions without a leader, and per destination the partitions
    sent there with the awaitable answer and this marker's index in its request."""

    __slots__ = ("gone", "sends")

    def __init__(self) -> None:
        self.gone: list[TopicPartition] = []
        self.sends: list[tuple[list[TopicPartition], Awaitable[MarkerResults] | BaseException, int]] = []


class _Batch:
    __slots__ = ("markers", "answer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.markers: list[TxnMarker] = []
        self.answer: asyncio.Future[MarkerResults] = loop.create_future()


class MarkerDriver:
    """Runs the completion of every prepared transaction of a coordinator."""

    def __init__(self, channel: MarkerChannel, runtime: CoordinatorRuntime[Any],
                 write_completion: Callable[[PendingCompletion], Awaitable[ErrorCode]],
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 5_000) -> None:
        self.channel = channel
        self._runtime = runtime
        self._write_completion = write_completion
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self._completions: dict[tuple[int, str], asyncio.Task[ErrorCode]] = {}
        self._batches: dict[int, _Batch] = {}  # destination broker -> markers gathered for it this iteration

    # ------------------------------------------------------------------ completions
    def running(self, partition: int, transactional_id: str) -> asyncio.Task[ErrorCode] | None:
        """The completion of ``transactional_id``'s transaction in progress, if any."""
        return self._completions.get((partition, transactional_id))

    def ensure(self, pc: PendingCompletion) -> asyncio.Task[ErrorCode]:
        """The completion of ``pc``'s transaction: the running one, or a new one. Call only once its Prepare*
        record is durable: the first markers are sent right here."""
        key = (pc.partition, pc.transactional_id)
        existing = self._completions.get(key)
        if existing is not None:
            return existing
        first = self._send_all(pc, pc.partitions) if self._holds(pc) else None
        task = self._runtime.spawn(self._complete(pc, first), name=f"txn-complete-{pc.transactional_id}")

        def done(_: asyncio.Task[ErrorCode]) -> None:
            if self._completions.get(key) is task:
                del self._completions[key]

        task.add_done_callback(done)
        self._completions[key] = task
        return task

    async def wait(self, task: asyncio.Future[ErrorCode]) -> ErrorCode:
        """The outcome of a completion; a caller that is cancelled does not stop it."""
        try:
            if task.done():
                return task.result()
            return await self._runtime.shield(task)
        except CoordinatorError as e:
            return e.code

    def forget(self, partition: int) -> None:
        """The coordinator lost ``partition``: its completions stop at their next step (they check ownership)."""
        for key in [k for k in self._completions if k[0] == partition]:
            self._completions.pop(key, None)

    def _holds(self, pc: PendingCompletion) -> bool:
        return self._runtime.owns(pc.partition, pc.coordinator_epoch)

    def _backoff(self, attempt: int) -> float:
        return float(min(self.retry_backoff_ms * (2 ** min(attempt, 16)), self.retry_backoff_max_ms)) / 1000.0

    async def _complete(self, pc: PendingCompletion, attempt: _Attempt | None) -> ErrorCode:
        """Markers until every partition has its marker durably (``attempt``: the first round, already sent by
        ``ensure``), then the Complete* record."""
        remaining = list(pc.partitions)
        tries = 0
        while remaining:
            if attempt is None:
                if not self._holds(pc):
                    log.info("%s: no longer coordinator of its partition %d at epoch %d; stopped sending its "
                             "markers", pc.transactional_id, pc.partition, pc.coordinator_epoch)
                    return ErrorCode.NOT_COORDINATOR
                attempt = self._send_all(pc, remaining)
            for tp in attempt.gone:
                log.info("%s: partition %s-%d no longer exists; no marker needed", pc.transactional_id, *tp)
            retry: list[TopicPartition] = []
            for i, (tps, answer, index) in enumerate(attempt.sends):
                try:
                    if isinstance(answer, BaseException):
                        raise answer
                    results = (await answer)[index]
                except Exception as e:  # noqa: BLE001 - the request failed as a whole: retried
                    log.warning("%s: sending %s markers to %s failed (%s); retrying", pc.transactional_id,
                                pc.result, _names(tps), e)
                    retry += tps
                    continue
                for tp in tps:
                    raw = results.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                    if raw == 0:
                        continue
                    code = _code(raw)
                    if code in _DONE:
                        log.info("%s: %s-%d answered %s; no marker needed there", pc.transactional_id, *tp,
                                 code.name)
                    elif code in _FENCED:
                        log.warning("%s: %s marker for %s-%d refused with %s: this coordinator (epoch %d) is "
                                    "stale; a newer one completes the transaction", pc.transactional_id, pc.result,
                                    tp[0], tp[1], code.name, pc.coordinator_epoch)
                        _abandon(attempt.sends[i + 1:])
                        return ErrorCode.NOT_COORDINATOR
                    else:
                        (log.info if code in _RETRIABLE else log.error)(
                            "%s: %s marker for %s-%d failed with %s; retrying after looking its leader up again",
                            pc.transactional_id, pc.result, tp[0], tp[1], code.name)
                        retry.append(tp)
            attempt = None
            remaining = retry
            if remaining:
                await self._runtime.sleep(self._backoff(tries))
                tries += 1
        return await self._write_complete(pc)

    async def _write_complete(self, pc: PendingCompletion) -> ErrorCode:
        tries = 0
        while True:
            if not self._holds(pc):
                return ErrorCode.NOT_COORDINATOR
            try:
                return await self._write_completion(pc)
            except CoordinatorError as e:
                if e.code is ErrorCode.NOT_COORDINATOR:
                    return ErrorCode.NOT_COORDINATOR
                log.warning("%s: writing Complete%s failed (%s); retrying", pc.transactional_id,
                            "Commit" if pc.commit else "Abort", e.code.name)
            await self._runtime.sleep(self._backoff(tries))
            tries += 1

    # ------------------------------------------------------------------ sending
    def _send_all(self, pc: PendingCompletion, partitions: Sequence[TopicPartition]) -> _Attempt:
        """Look up each partition's leader and send each leader one marker for its partitions."""
        attempt = _Attempt()
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            leader = self.channel.leader(tp)
            if leader is None:
                attempt.gone.append(tp)
            else:
                by_broker.setdefault(leader, []).append(tp)
        for broker, tps in by_broker.items():
            marker = TxnMarker(pc.producer_id, pc.producer_epoch, pc.commit, pc.coordinator_epoch, tuple(tps))
            if broker == self.channel.local_node:
                try:
                    attempt.sends.append((tps, self.channel.send(broker, [marker]), 0))
                except Exception as e:  # noqa: BLE001 - retried like a failed request
                    attempt.sends.append((tps, e, 0))
            else:
                batch, index = self._enqueue(broker, marker)
                attempt.sends.append((tps, batch.answer, index))
        return attempt

    def _enqueue(self, broker: int, marker: TxnMarker) -> tuple[_Batch, int]:
        """Gather markers for ``broker`` until the next loop iteration; they leave as one request."""
        batch = self._batches.get(broker)
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = self._batches[broker] = _Batch(loop)
            loop.call_soon(self._flush, broker)
        batch.markers.append(marker)
        return batch, len(batch.markers) - 1

    def _flush(self, broker: int) -> None:
        batch = self._batches.pop(broker)
        self._runtime.spawn(self._deliver(broker, batch), name=f"txn-markers-to-{broker}")

    async def _deliver(self, broker: int, batch: _Batch) -> None:
        try:
            results = await self.channel.send(broker, batch.markers)
            if len(results) != len(batch.markers):
                raise RuntimeError(f"broker {broker} answered {len(results)} of {len(batch.markers)} markers")
        except asyncio.CancelledError:
            batch.answer.cancel()
            raise
        except Exception as e:  # noqa: BLE001 - every completion in the batch retries its partitions
            batch.answer.set_exception(e)
            batch.answer.exception()  # marks it retrieved: the completions waiting on it each read it
        else:
            batch.answer.set_result(results)


def _abandon(sends: Sequence[tuple[list[TopicPartition], Awaitable[MarkerResults] | BaseException, int]]) -> None:
    """Answers nobody will read: let them finish (or fail) without a warning."""
    for _, answer, _ in sends:
        if isinstance(answer, Coroutine):
            answer.close()
        elif isinstance(answer, asyncio.Future):
            answer.add_done_callback(lambda f: None if f.cancelled() else f.exception())


def _names(tps: Sequence[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)
