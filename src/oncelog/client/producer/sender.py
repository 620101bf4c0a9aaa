"""The sender task: turns ready batches into Produce requests, one request per leader, and completes them.

Up to ``max.in.flight.requests.per.connection`` batches per partition are in flight (then the partition is
*muted*). Order per partition still holds across retries, as in Kafka's Sender: a batch to retry goes back into its
partition's queue ahead of the batches sent after it (which fail too, or come back OUT_OF_ORDER_SEQUENCE_NUMBER
and are retried as well), and a partition whose next batch is a retry is muted until nothing of it is in flight,
so the retries go out one by one in their original order, each with its original sequence number.

A batch the broker rejected for good (e.g. MESSAGE_TOO_LARGE) was not written: its sequence numbers are given again
to the next batch, and batches of the partition already in flight behind it (bound to fail OUT_OF_ORDER) are
re-sent with new sequences once they come back (Kafka's adjustSequencesDueToFailedBatch).

With idempotence a :class:`TransactionManager` gives each drained batch its producer id/epoch/sequence, decides
which partitions may be drained (transactions V1: only those added with AddPartitionsToTxn; V2: any, the broker adds
them) and the Produce version (v12 only for transactions V2), and learns of batches that failed for good
(abortable/fatal transaction errors, KIP-360 epoch bumps of the idempotent producer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData

from ..cluster import Cluster
from ..config import ProducerConfig
from ..errors import KafkaError, KafkaTimeoutError
from ..message import Message
from .accumulator import DeliveryCallback, ProducerBatch, RecordAccumulator, TopicPartition
from .transaction_manager import TransactionManager

__all__ = ["Reports", "Sender"]

log = logging.getLogger(__name__)
Reports = list[tuple[DeliveryCallback, KafkaError | None, Message]]
_SEQUENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                              ErrorCode.INVALID_PRODUCER_EPOCH})


class Sender:
    def __init__(self, cluster: Cluster, accumulator: RecordAccumulator, config: ProducerConfig,
                 deliver: Callable[[Reports], None], *, monotonic: Callable[[], float] = time.monotonic,
                 txn: TransactionManager | None = None, report_successes: bool = True) -> None:
        self.cluster = cluster
        #: False: a delivered batch reports nothing (no Message per record is built), only failures are reported
        self._report_successes = report_successes
        self.txn = txn
        self.acc = accumulator
        self.config = config
        self._deliver = deliver
        self._monotonic = monotonic
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._inflight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._max_inflight = config.max_in_flight
        self._send_counter = 0
        self._node_locks: dict[int, asyncio.Lock] = {}
        self._requests: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._refreshing: asyncio.Task[Any] | None = None
        self._backoff = config.retry_backoff_ms / 1000
        self._delivery_timeout = config.delivery_timeout_ms / 1000

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="oncelog-producer-sender")

    def wakeup(self) -> None:
        self._wake.set()

    async def wait_progress(self, timeout: float) -> None:
        """Return when some batch completed (or after ``timeout``)."""
        self._progress.clear()
        try:
            await asyncio.wait_for(self._progress.wait(), timeout)
        except TimeoutError:
            pass

    async def _run(self) -> None:
        txn = self.txn
        while True:
            self._wake.clear()
            if txn is not None:
                if txn.has_error:
                    self.fail_queued(txn.current_error())
                elif txn.bump_requested:
                    self._expire_queued()
                    if not self._requests:
                        await self._bump_epoch(txn)
                    else:
                        await self._wake.wait()
                    continue
            ready, delay = self.acc.ready(self._muted())
            if txn is not None and ready:
                ready = txn.sendable(ready)
            if ready:
                self._send(ready)
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    def _muted(self) -> set[TopicPartition]:
        """Partitions not to drain now: at the in-flight limit, or with a retry (or re-sequencing) waiting for
        the batches in flight before it."""
        limit, acc = self._max_inflight, self.acc
        return {tp for tp, fl in self._inflight.items()
                if len(fl) >= limit or acc.head_is_retry(tp) or any(b.restamp for b in fl)}

    async def _bump_epoch(self, txn: TransactionManager) -> None:
        """KIP-360 for the idempotent producer: nothing is in flight; get a new epoch, sequences restart at 0."""
        try:
            await txn.init_idempotent()
        except KafkaError as e:
            log.warning("could not bump the idempotent producer's epoch: %s", e)
            if txn.has_error:
                return
            await asyncio.sleep(self._backoff)

    def _expire_queued(self) -> None:
        """Nothing is sent while the producer waits for a new epoch: the queued batches past delivery.timeout.ms
        fail here, as they would after their last attempt (its bound holds even if no broker can be reached)."""
        reports: Reports = []
        for b in self.acc.expire(self._monotonic(), self._delivery_timeout):
            err = KafkaTimeoutError(f"expiring {b.record_count} record(s) for {b.tp[0]}[{b.tp[1]}]: "
                                    f"{self.config.delivery_timeout_ms} ms has passed since batch creation "
                                    f"(delivery.timeout.ms) while the producer waited for a new epoch")
            reports += self._finish(b, -1, -1, err)
            if self.txn is not None and b.base_sequence >= 0:
                self.txn.batch_failed(err, unresolved_sequence=True)
        if reports:
            self._deliver(reports)

    def fail_queued(self, err: KafkaError) -> None:
        reports: Reports = []
        for b in self.acc.abort_all():
            reports += self._finish(b, -1, -1, err)
        if reports:
            self._deliver(reports)

    def _refresh_metadata(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._safe_refresh())

    async def _safe_refresh(self) -> None:
        try:
            await self.cluster.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed: %s", e)
        except Exception:  # noqa: BLE001 - a background refresh must not die unseen ("exception never retrieved")
            log.warning("metadata refresh failed unexpectedly; the sender retries with the metadata it has",
                        exc_info=True)

    def _send(self, ready: list[TopicPartition]) -> None:
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        no_leader: list[tuple[TopicPartition, KafkaError]] = []
        for tp in ready:
            try:
                by_node[self.cluster.leader_for(*tp)].append(tp)
            except KafkaError as e:
                no_leader.append((tp, e))
        if no_leader:
            self._refresh_metadata()
            for (tp, err), batch in zip(no_leader, self.acc.drain([tp for tp, _ in no_leader])):
                self._retry_or_fail(batch, err)
        for node, tps in by_node.items():
            batches = self.acc.drain(tps)
            if self.txn is not None:
                self._stamp(self.txn, batches)
            for b in batches:
                if b.send_order < 0:
                    self._send_counter += 1
                    b.send_order = self._send_counter
                self._inflight.setdefault(b.tp, []).append(b)
            task = asyncio.get_running_loop().create_task(self._send_node(node, batches))
            self._requests.add(task)
            task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._requests.discard(task)
        self._wake.set()  # e.g. an epoch bump waits for nothing to be in flight

    @staticmethod
    def _stamp(txn: TransactionManager, batches: list[ProducerBatch]) -> None:
        pid = txn.pid
        if not pid.valid:
            return
        for b in batches:
            if b.base_sequence < 0 or b.restamp or b.producer_epoch != pid.epoch or b.producer_id != pid.producer_id:
                b.restamp = False
                b.set_producer(pid.producer_id, pid.epoch, txn.sequences.assign(b.tp, b.record_count),
                               txn.transactional)

    async def _send_node(self, node: int, batches: list[ProducerBatch]) -> None:
        by_topic: dict[str, list[PartitionProduceData]] = defaultdict(list)
        for b in batches:
            b.attempts += 1
            by_topic[b.tp[0]].append(PartitionProduceData(index=b.tp[1], records=b.build()))
        acks = self.config.acks
        req = ProduceRequest(transactional_id=self.txn.transactional_id if self.txn else None, acks=acks, timeout_ms=self.config.request_timeout_ms,
                             topic_data=[TopicProduceData(name=t, partition_data=ps) for t, ps in by_topic.items()])
        results: dict[TopicPartition, Any] = {}
        failure: KafkaError | None = None
        try:
            # Requests reach the wire in drain order: a request drained later must not overtake one still
            # waiting for the (re)connection, or the broker sees sequence gaps. The lock is FIFO, and the send
            # task's first step (which writes the request) runs before this task resumes.
            async with self._node_locks.setdefault(node, asyncio.Lock()):
                conn = await self.cluster.connection(node)
                version = self.txn.produce_version(conn) if self.txn is not None else None
                sending = asyncio.ensure_future(conn.send(req, version=version, expect_response=acks != 0))
                await asyncio.sleep(0)
            resp = await sending
            if resp is not None:
                for t in resp.responses:
                    for p in t.partition_responses:
                        results[(t.name, p.index)] = p
        except KafkaError as e:
            failure = e
        except Exception as e:  # noqa: BLE001 - an encoding bug must fail the records, not kill the sender silently
            failure = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}", retriable=False)
        reports: Reports = []
        for b in batches:
            fl = self._inflight.get(b.tp)
            if fl is not None:
                if b in fl:
                    fl.remove(b)
                if not fl:
                    del self._inflight[b.tp]
            where = f"produce to {b.tp[0]}[{b.tp[1]}]"
            err: KafkaError
            # the request may or may not have been written: a batch failed for good in that case leaves its
            # sequence unresolved (the idempotent producer bumps its epoch, as Kafka does), else the next batch
            # of the partition meets a gap (OUT_OF_ORDER_SEQUENCE_NUMBER) or a duplicate the broker cannot see
            outcome_unknown = failure is not None
            if failure is not None:
                err = KafkaError(int(failure.code()), f"{where}: {failure.message}",
                                                    retriable=failure.retriable())
            elif acks == 0:
                reports += self._finish(b, -1, -1, None)
                continue
            else:
                p = results.get(b.tp)
                if p is None:
                    err = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{where}: the broker did not answer for it",
                                     retriable=False)
                    outcome_unknown = True
                elif p.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and b.base_sequence >= 0:
                    reports += self._finish(b, -1, -1, None)  # an earlier attempt was written: delivered
                    continue
                elif p.error_code:
                    err = KafkaError(p.error_code, f"{where}: {p.error_message or ErrorCode(p.error_code).name}")
                    if p.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (
                            b.restamp or self.acc.retry_queued_before(b.tp, b.send_order)):
                        # an earlier batch is being retried or was rejected: this one follows it (as in Kafka,
                        # OUT_OF_ORDER for the next expected batch is a real error, handled below)
                        reports += self._retry_or_fail(b, KafkaError(p.error_code, err.message, retriable=True))
                        continue
                    if p.error_code in _SEQUENCE_ERRORS and self.txn is not None:
                        why = ("the epoch is stale: a newer producer with this transactional.id fenced it"
                               if p.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
                               else "records may be lost or the broker expired the producer state")
                        err = KafkaError(p.error_code, f"{where}: the broker rejected sequence {b.base_sequence} "
                                         f"of producer {b.producer_id} epoch {b.producer_epoch} "
                                         f"({ErrorCode(p.error_code).name}); {why}", retriable=False)
                        reports += self._finish(b, -1, -1, err)
                        self.txn.batch_failed(err, unresolved_sequence=True)
                        continue
                    if not err.retriable() and self.txn is not None and b.base_sequence >= 0:
                        self._rejected(self.txn, b)
                else:
                    reports += self._finish(b, p.base_offset, p.log_append_time_ms, None)
                    continue
            if err.retriable():
                if int(err.code()) in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION):
                    self._refresh_metadata()
                reports += self._retry_or_fail(b, err)
            else:
                reports += self._finish(b, -1, -1, err)
                if self.txn is not None:
                    self.txn.batch_failed(err, unresolved_sequence=outcome_unknown and b.base_sequence >= 0)
        if reports:
            self._deliver(reports)
        self._progress.set()
        self._wake.set()

    def _rejected(self, txn: TransactionManager, b: ProducerBatch) -> None:
        """``b`` was rejected, not written: its sequences go to the next batch; the batches of the partition in
        flight behind it are re-sequenced when they come back."""
        if b.producer_epoch != txn.pid.epoch or b.producer_id != txn.pid.producer_id:
            return
        txn.sequences.rewind(b.tp, b.base_sequence)
        for later in self._inflight.get(b.tp, ()):
            later.restamp = True

    def _retry_or_fail(self, batch: ProducerBatch, err: KafkaError) -> Reports:
        now = self._monotonic()
        if batch.attempts <= self.config.retries and now - batch.created + self._backoff < self._delivery_timeout:
            log.debug("retrying %s: %s", batch.tp, err)
            self.acc.reenqueue(batch, now + self._backoff)
            return []
        if now - batch.created + self._backoff >= self._delivery_timeout:
            err = KafkaTimeoutError(f"{err.message} (gave up after delivery.timeout.ms="
                                    f"{self.config.delivery_timeout_ms})")
        reports = self._finish(batch, -1, -1, err)
        self._deliver(reports)
        if self.txn is not None:
            # the last attempt may have been written: its sequence is unresolved
            self.txn.batch_failed(err, unresolved_sequence=batch.base_sequence >= 0)
        return []

    def _finish(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                err: KafkaError | None) -> Reports:
        self.acc.done(batch)
        self._progress.set()
        if err is None and not self._report_successes:
            return []
        return batch.complete(base_offset, log_append_time, err)

    async def close(self) -> None:
        tasks = [t for t in (self._task, self._refreshing) if t is not None]
        for t in tasks:
            t.cancel()
        if self._requests:
            await asyncio.gather(*self._requests, return_exceptions=True)
        # a cancellation can be lost (asyncio.wait_for before Python 3.12, CPython gh-86296: a connection refused
        # at the moment it came), and the loop would go on retrying an epoch bump: cancel until it ends
        while pending := [t for t in tasks if not t.done()]:
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=0.5)
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
