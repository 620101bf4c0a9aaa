"""``AsyncProducer`` (asyncio) and ``Producer`` (confluent-kafka-like sync facade).

Idempotence is on by default (``enable.idempotence``); with ``transactional.id`` the producer is transactional:
``init_transactions()``, then ``begin_transaction()`` ... ``commit_transaction()`` / ``abort_transaction()``.
The requests are done by :class:`.transaction_manager.TransactionManager`.

KIP-939 two-phase commit (``transaction.two.phase.commit.enable=true``, and the same setting on the broker):
``prepare_transaction()`` flushes and returns a :class:`PreparedTxnState`; the transaction stays open at the broker
(it never times out) even after ``close()`` or a crash. A new producer with the same ``transactional.id`` calls
``init_transactions(keep_prepared_txn=True)``, reads ``prepared_transaction()`` and calls
``complete_transaction(state)``, which commits the kept transaction if ``state`` matches it and aborts it otherwise.

``close()`` never aborts an open transaction: a 2PC one must survive, a plain one is aborted by the broker after
``transaction.timeout.ms`` (Kafka's behaviour) or when the next producer with the same id initialises.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from time import time_ns as _time_ns
from typing import Any, Self

from oncelog.protocol.errors import ErrorCode

from .._sync import LoopThread
from ..cluster import Cluster
from ..config import ProducerConfig, parse_producer_config
from ..errors import ConfigError, KafkaError, KafkaTimeoutError
from ..message import Header, Message
from ..metadata import ClusterMetadata, list_topics
from .accumulator import BatchMessage, DeliveryCallback, ProducerBatch, RecordAccumulator
from .bulk import BulkAppender
from .partitioner import Partitioner
from .sender import Reports, Sender
from .transaction_manager import OffsetsLike, TransactionManager
from .txn_state import IllegalTxnStateError, PreparedTxnState, TxnState, TxnStateMachine

__all__ = ["AsyncProducer", "BatchMessage", "HeadersLike", "Producer"]

HeadersLike = Mapping[str, "str | bytes | None"] | Sequence[tuple[str, "str | bytes | None"]] | None


def _as_bytes(what: str, v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes, str or None, got {type(v).__name__}")


def _headers(h: HeadersLike) -> list[Header]:
    if not h:
        return []
    items = h.items() if isinstance(h, Mapping) else h
    return [(str(k), _as_bytes("header value", v)) for k, v in items]


class AsyncProducer:
    """Batching producer on the running event loop. ``await start()``, ``produce()``, ``await flush()``."""

    def __init__(self, conf: Mapping[str, Any] | ProducerConfig, *,
                 deliver: Callable[[Reports], None] | None = None, report_successes: bool = True) -> None:
        """``deliver``: takes the delivery reports (default: run their callbacks on the loop);
        ``report_successes=False``: only failures are reported (for callers whose callbacks want errors only)."""
        self.config = conf if isinstance(conf, ProducerConfig) else parse_producer_config(conf)
        self._report_successes = report_successes
        c = self.config
        self.cluster = Cluster.from_config(c, allow_auto_topic_creation=c.allow_auto_create_topics)
        self.accumulator = RecordAccumulator(c.batch_size, c.linger_ms, c.compression)
        self.partitioner = Partitioner(self.accumulator.batch_open)
        self._sticky = self.partitioner.sticky
        self._deliver = deliver or self._run_reports
        self.sender: Sender | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.txn: TransactionManager | None = None
        if c.enable_idempotence:
            self.txn = TransactionManager(self.cluster, c, self._wakeup)
        self._transactional = c.transactional_id is not None
        self.max_bytes = c.message_max_bytes
        self._bulk = BulkAppender(self.cluster, self.partitioner, self.accumulator, c)
        self._partitions: dict[str, tuple[Any, list[int], list[int]]] = {}
        #: topic -> the open batch of its sticky partition, where keyless records go (Producer.produce's shortcut)
        self.sticky_batches: dict[str, ProducerBatch] = {}

    def _wakeup(self) -> None:
        if self.sender is not None:
            self.sender.wakeup()

    async def start(self) -> None:
        if self.sender is None:
            self._loop = asyncio.get_running_loop()
            await self.cluster.bootstrap()
            if self.txn is not None and not self._transactional and not self.txn.pid.valid:
                await self.txn.init_idempotent()
            self.sender = Sender(self.cluster, self.accumulator, self.config, self._deliver, txn=self.txn,
                                 report_successes=self._report_successes)
            self.sender.start()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @staticmethod
    def _run_reports(reports: Reports) -> None:
        for cb, err, msg in reports:
            cb(err, msg)

    async def ensure_topic(self, topic: str) -> None:
        """Load metadata for ``topic`` (auto-creating it if the broker and ``allow.auto.create.topics`` allow)."""
        if self.cluster.topic(topic) is None:
            await self.cluster.wait_for_topic(topic, self.config.delivery_timeout_ms / 1000)

    def append(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
               headers: HeadersLike = None, on_complete: DeliveryCallback | None = None,
               timestamp: int | None = None) -> bool:
        """Queue one record (topic metadata must be loaded). Thread-safe; returns whether the sender needs a wake-up.

        Raises KafkaError UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or partition, MESSAGE_TOO_LARGE for a
        record above ``message.max.bytes``.
        """
        txn = self.txn
        if txn is not None:
            txn.check_can_send()
        # hot path: bytes pass through untouched, the partition lists are cached per metadata version
        k = key if key is None or key.__class__ is bytes else _as_bytes("key", key)
        v = value if value is None or value.__class__ is bytes else _as_bytes("value", value)
        hs = _headers(headers) if headers else ()
        size = (len(k) if k else 0) + (len(v) if v else 0)
        if size > self.max_bytes:
            raise KafkaError(10, f"record of {size} bytes for {topic!r} exceeds message.max.bytes="
                                 f"{self.config.message_max_bytes}")
        info = self.cluster.topics.get(topic)
        if info is None:
            raise KafkaError(3, f"topic {topic!r} is unknown (call ensure_topic first or create it)")
        cached = self._partitions.get(topic)
        if cached is None or cached[0] is not info:
            cached = self._partitions[topic] = (info, sorted(info.partitions),
                                                self.cluster.available_partitions_for(topic))
        parts = cached[1]
        sticky = False
        if partition is None:
            if k is None:  # the sticky partition while its batch is open (the partitioner's first check)
                partition = self._sticky.get(topic)
                if partition is None or not self.accumulator.batch_open(topic, partition):
                    partition = self.partitioner.partition(topic, k, parts, cached[2])
                sticky = True
            else:
                partition = self.partitioner.partition(topic, k, parts, cached[2])
        elif partition not in info.partitions:
            raise KafkaError(3, f"partition {partition} of {topic!r} does not exist (it has {len(parts)})")
        ts = _time_ns() // 1_000_000 if timestamp is None else timestamp
        full, new = self.accumulator.append((topic, partition), ts, k, v, hs, on_complete)
        if sticky:
            batch = self.accumulator.open_batch((topic, partition))
            if batch is not None:
                self.sticky_batches[topic] = batch
        return full or new

    async def produce(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                      headers: HeadersLike = None, on_delivery: DeliveryCallback | None = None,
                      timestamp: int | None = None) -> asyncio.Future[Message]:
        """Queue a record; returns a future resolved with the delivered :class:`Message` (or its KafkaError).

        ``on_delivery(err, msg)`` is called on the event loop when the record is acknowledged or fails.
        """
        await self.start()
        await self.ensure_topic(topic)
        assert self._loop is not None and self.sender is not None
        fut: asyncio.Future[Message] = self._loop.create_future()

        def done(err: KafkaError | None, msg: Message) -> None:
            if not fut.done():
                if err is None:
                    fut.set_result(msg)
                else:
                    fut.set_exception(err)
                    fut.exception()  # a caller relying on on_delivery may never await the future
            if on_delivery is not None:
                on_delivery(err, msg)

        if self.append(topic, value, key, partition, headers, done, timestamp):
            self.sender.wakeup()
        return fut

    def append_batch(self, topic: str, values: Any, keys: Any = None, *, partition: Any = None,
                     timestamps: Any = None, headers: Sequence[HeadersLike] | None = None,
                     on_complete: DeliveryCallback | None = None) -> int:
        """Encode records given as columns into record batches and queue them (topic metadata must be loaded);
        returns how many batches. Thread-safe. The work is column-wise (:mod:`.bulk`).

        ``values`` (and ``keys``): pyarrow binary/large_binary arrays or sequences of bytes/None; ``partition``:
        one partition for all records, one per record (an int array; negative: not given), or None; a record
        without a partition goes where Kafka's default partitioner puts its key (murmur2, as :meth:`append`),
        or, with a null key, to the topic's sticky partition. ``timestamps``: None (now), one int for all
        records, or one per record; ``headers``: None or one header list per record (those records are encoded
        one by one). Each partition's records are split into batches of at most ``message.max.bytes``
        (uncompressed estimate), each built by :func:`oncelog.protocol.record_batch_columnar.build_batch_columnar`
        with ``compression.type``, queued after what was appended to the partition before, and given its
        producer id, epoch and sequences by the sender as any batch. ``on_complete(err, msg)`` runs once per
        batch with a :class:`BatchMessage`. Needs numpy (the ``spark`` extra). Raises KafkaError
        UNKNOWN_TOPIC_OR_PARTITION / MESSAGE_TOO_LARGE (a record above ``message.max.bytes``) before anything
        is queued.
        """
        hs = None if headers is None else [_headers(h) for h in headers]
        txn = self.txn
        if txn is not None and (self._transactional or txn.has_error):
            txn.check_can_send()
        return self._bulk.append(topic, values, keys, partition, timestamps, hs, on_complete)

    async def produce_batch(self, topic: str, values: Any, keys: Any = None, *, partition: Any = None,
                            timestamps: Any = None, headers: Sequence[HeadersLike] | None = None,
                            on_delivery: DeliveryCallback | None = None) -> int:
        """:meth:`append_batch` after loading the topic's metadata; wakes the sender. Returns the number of
        batches; ``on_delivery(err, msg)`` runs on the event loop once per batch (a :class:`BatchMessage`)."""
        await self.start()
        await self.ensure_topic(topic)
        assert self.sender is not None
        count = self.append_batch(topic, values, keys, partition=partition, timestamps=timestamps,
                                  headers=headers, on_complete=on_delivery)
        self.sender.wakeup()
        return count

    def __len__(self) -> int:
        return self.accumulator.pending_records

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for its acknowledgements; returns records still pending (0 = all)."""
        if self.sender is None:
            return len(self)
        deadline = None if timeout is None else time.monotonic() + timeout
        self.accumulator.begin_flush()
        try:
            self.sender.wakeup()
            while len(self):
                left = 1.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                await self.sender.wait_progress(min(left, 1.0))
        finally:
            self.accumulator.end_flush()
        return len(self)

    # ------------------------------------------------------------------ transactions

    def _tm(self, what: str) -> TransactionManager:
        if self.txn is None or not self._transactional:
            raise IllegalTxnStateError(f"{what} needs a transactional producer: set transactional.id")
        return self.txn

    @property
    def transaction_state(self) -> TxnState | None:
        """The client-side transaction state (None for a non-transactional producer)."""
        return self.txn.state if self.txn is not None and self._transactional else None

    async def init_transactions(self, timeout: float | None = None, keep_prepared_txn: bool = False) -> None:
        """Get the producer id and epoch of ``transactional.id``, fencing older producers with it.

        A previous instance's unfinished transaction is aborted by the broker, unless ``keep_prepared_txn=True``
        (KIP-939, needs ``transaction.two.phase.commit.enable``): then it is kept, and
        :meth:`prepared_transaction` tells which one it is, for :meth:`complete_transaction`.
        """
        await self.start()
        await self._tm("init_transactions()").init_transactions(timeout, keep_prepared_txn)

    def begin_transaction(self) -> None:
        self._tm("begin_transaction()").begin_transaction()

    async def send_offsets_to_transaction(self, offsets: OffsetsLike, group_metadata: Any,
                                          timeout: float | None = None) -> None:
        """Commit consumer offsets as part of the transaction (KIP-447 fencing by generation and member id).

        ``offsets``: ``{(topic, partition): offset}`` or ``[(topic, partition, offset), ...]`` (the offset of the
        next record to consume). ``group_metadata``: ``consumer.consumer_group_metadata()`` or a group id string.
        """
        await self._tm("send_offsets_to_transaction()").send_offsets(offsets, group_metadata, timeout)

    async def _flush_for_txn(self, tm: TransactionManager, what: str, timeout: float | None) -> None:
        left = await self.flush(timeout)
        if left:
            raise KafkaTimeoutError(f"{what}: {left} records were still not delivered within the timeout")
        tm.fsm.require(what, TxnState.IN_TRANSACTION, TxnState.PREPARED_TRANSACTION)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit. An abortable error (e.g. a record that failed) raises: call abort_transaction()."""
        tm = self._tm("commit_transaction()")
        if tm.state is not TxnState.COMMITTING_TRANSACTION:  # else: retrying a commit that timed out
            tm.fsm.require("commit_transaction()", TxnState.IN_TRANSACTION, TxnState.PREPARED_TRANSACTION)
            await self._flush_for_txn(tm, "commit_transaction()", timeout)
            tm.fsm.transition(TxnState.COMMITTING_TRANSACTION)
        await tm.end_transaction(True, timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent fail, those written are hidden from read_committed."""
        tm = self._tm("abort_transaction()")
        if tm.state is not TxnState.ABORTING_TRANSACTION:
            tm.fsm.require("abort_transaction()", TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                           TxnState.PREPARED_TRANSACTION)
            tm.fsm.transition(TxnState.ABORTING_TRANSACTION)
            if self.sender is not None:
                self.sender.fail_queued(KafkaError(ErrorCode.TRANSACTION_ABORTABLE, "the transaction was aborted "
                                                   "before this record was sent", retriable=False))
                await self.flush(timeout)  # wait for the batches in flight
        await tm.end_transaction(False, timeout)

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 phase one: flush and return the transaction's :class:`PreparedTxnState`. The transaction stays
        open at the broker (no timeout) until some producer with this ``transactional.id`` completes it."""
        tm = self._tm("prepare_transaction()")
        tm.fsm.require("prepare_transaction()", TxnState.IN_TRANSACTION)
        if not self.config.transaction_two_phase_commit_enable:
            return tm.prepare()  # raises with the configuration hint
        await self._flush_for_txn(tm, "prepare_transaction()", None)
        return tm.prepare()

    def prepared_transaction(self) -> PreparedTxnState | None:
        """The transaction kept by ``init_transactions(keep_prepared_txn=True)``, or one this producer prepared;
        None if there is none."""
        tm = self._tm("prepared_transaction()")
        if tm.prepared is not None:
            return tm.prepared
        if tm.state is TxnState.PREPARED_TRANSACTION:
            return PreparedTxnState(tm.pid.producer_id, tm.pid.epoch)
        return None

    async def complete_transaction(self, state: PreparedTxnState, timeout: float | None = None) -> bool:
        """KIP-939 phase two: commit the prepared transaction if ``state`` is it, abort it otherwise.

        Returns True if it committed. With no prepared transaction this is a no-op returning False: the
        transaction was already completed (e.g. this is a retry after a crash) or there was none.
        """
        tm = self._tm("complete_transaction()")
        current = self.prepared_transaction()
        if current is None:
            tm.fsm.require("complete_transaction()", TxnState.READY, TxnState.PREPARED_TRANSACTION)
            return False
        if state == current:
            await self.commit_transaction(timeout)
            return True
        await self.abort_transaction(timeout)
        return False

    async def close(self, timeout: float | None = 30.0) -> None:
        """Flush (up to ``timeout``), fail what is left with a timeout error, and close connections.
        An open transaction is left to the broker (never aborted here; see the module docstring)."""
        if self.sender is not None:
            await self.flush(timeout)
            await self.sender.close()
            self.sender = None
        if self.txn is not None:
            await self.txn.close()
        left = self.accumulator.abort_all()
        reports: Reports = []
        for b in left:
            self.accumulator.done(b)
            reports += b.complete(-1, -1, KafkaTimeoutError(f"producer closed before {b.tp} was delivered"))
        if reports:
            self._deliver(reports)
        await self.cluster.close()


#: ``Producer.flush()`` runs the delivery callbacks of what was delivered at least this often (seconds)
_FLUSH_STEP = 0.05

#: a record queued by ``Producer.produce()`` while its topic's metadata is looked up: value, key, partition,
#: headers, delivery callback, timestamp
_Waiting = tuple[bytes | None, bytes | None, "int | None", list[Header], "DeliveryCallback | None", "int | None"]


class Producer:
    """Blocking producer in the style of confluent-kafka: ``produce()`` queues, delivery callbacks run in
    ``poll()``/``flush()`` on the caller's thread. An event loop thread does the batching and the network.

    ``produce()`` never waits for the network: records of a topic whose metadata is not known yet wait (in order)
    while it is looked up, and if the topic does not appear within ``topic.metadata.propagation.max.ms`` (it does
    not exist and is not auto-created) they fail through their delivery callback with UNKNOWN_TOPIC_OR_PARTITION,
    as with confluent-kafka."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._reports: collections.deque[tuple[DeliveryCallback, KafkaError | None, Message]] = collections.deque()
        config = conf if isinstance(conf, ProducerConfig) else parse_producer_config(conf)
        # delivery.report.only.error: a delivered record's report would be dropped by poll(), so none is built
        self._async = AsyncProducer(config, deliver=self._reports.extend,
                                    report_successes=not config.delivery_report_only_error)
        self._runner = LoopThread("oncelog-producer")
        self._closed = False
        self._lock = threading.Lock()
        self._waiting: dict[str, list[_Waiting]] = {}  # topic -> records waiting for its metadata (under _lock)
        self._lookups: set[asyncio.Task[None]] = set()
        self._default_cb: DeliveryCallback | None = self._async.config.on_delivery
        self._only_errors = self._async.config.delivery_report_only_error
        a, txn = self._async, self._async.txn  # what produce()'s shortcut reads, at hand
        self._append_value, self._sticky_batches, self._max_bytes = a.accumulator.append_value, a.sticky_batches, a.max_bytes
        self._txn_fsm: TxnStateMachine | None = txn.fsm if txn is not None else None
        self._sending_state: TxnState | None = txn.sending_state if txn is not None else None
        try:
            self._runner.run(self._async.start(), self._async.config.request_timeout_ms / 1000 + 5)
        except BaseException:
            self._runner.stop()
            raise

    @property
    def config(self) -> ProducerConfig:
        return self._async.config

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                on_delivery: DeliveryCallback | None = None, timestamp: int | None = None,
                headers: HeadersLike = None, *, callback: DeliveryCallback | None = None) -> None:
        """Queue one record (confluent-kafka's arguments: ``partition`` -1 or None: by key, ``timestamp`` 0 or None:
        now). ``on_delivery(err, msg)`` (or ``callback=``, or the ``on_delivery`` configuration) runs in a later
        ``poll()``/``flush()`` call."""
        on_delivery = on_delivery if on_delivery is not None else callback or self._default_cb
        if key is None and value.__class__ is bytes and (partition is None or partition < 0) and not timestamp \
                and not headers and not self._waiting:  # the common call: into the sticky partition's open batch
            batch = self._sticky_batches.get(topic)
            if batch is not None and len(value) <= self._max_bytes and not self._closed:
                fsm = self._txn_fsm
                if fsm is not None and fsm.state is not self._sending_state and self._async.txn is not None:
                    self._async.txn.check_can_send()
                full = self._append_value(batch, _time_ns() // 1_000_000, value, on_delivery)
                if full is not None:
                    if full:
                        self._wake_sender()
                    return
        if self._closed:
            raise ConfigError("producer is closed")
        a = self._async
        if partition is not None and partition < 0:
            partition = None
        if not timestamp:
            timestamp = None
        with self._lock:
            waiting = self._waiting.get(topic) if self._waiting else None
            if waiting is None and topic in a.cluster.topics:
                wake = a.append(topic, value, key, partition, headers, on_delivery, timestamp)
            else:
                txn = a.txn
                if txn is not None:
                    txn.check_can_send()  # an illegal call fails here, as it would once the topic is known
                k, v = _as_bytes("key", key), _as_bytes("value", value)
                size = (len(k) if k else 0) + (len(v) if v else 0)
                if size > a.config.message_max_bytes:
                    raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, f"record of {size} bytes for {topic!r} exceeds "
                                     f"message.max.bytes={a.config.message_max_bytes}")
                if waiting is None:
                    waiting = self._waiting[topic] = []
                    self._runner.call_soon(self._look_up, topic)
                waiting.append((v, k, partition, _headers(headers), on_delivery, timestamp))
                return
        if wake:
            self._wake_sender()

    def _wake_sender(self) -> None:
        sender = self._async.sender
        if sender is not None:
            self._runner.call_soon(sender.wakeup)

    def produce_batch(self, topic: str, values: Any, keys: Any = None, *, partition: Any = None,
                      timestamps: Any = None, headers: Sequence[HeadersLike] | None = None,
                      on_delivery: DeliveryCallback | None = None) -> int:
        """Queue records given as columns (values, keys: pyarrow binary arrays or sequences of bytes/None) for
        ``partition`` (one for all, one per record, or None: by key as :meth:`produce`), encoded column-wise into batches of at most ``message.max.bytes`` (see
        :meth:`AsyncProducer.append_batch`); they follow every record produced to the partition before, with
        the same idempotent/transactional sequences as records produced one by one. Returns the number of
        batches; ``on_delivery(err, msg)`` runs in ``poll()``/``flush()`` once per batch, ``msg`` a
        :class:`BatchMessage` (first offset, record count). Blocks while the topic's metadata is looked up."""
        if self._closed:
            raise ConfigError("producer is closed")
        a = self._async
        wait = a.config.topic_metadata_propagation_max_ms / 1000
        while True:
            with self._lock:
                if topic not in self._waiting and a.cluster.topic(topic) is not None:
                    count = a.append_batch(topic, values, keys, partition=partition, timestamps=timestamps,
                                           headers=headers, on_complete=on_delivery)
                    break
            # records produced before wait for this topic's metadata: let them be queued first
            self._runner.run(self._topic_settled(topic, wait), wait + 10)
        if count and a.sender is not None:
            self._runner.call_soon(a.sender.wakeup)
        return count

    async def _topic_settled(self, topic: str, wait: float) -> None:
        """Wait until ``topic``'s metadata is known (KafkaError if not within ``wait``) and no record of it waits."""
        a = self._async
        if a.cluster.topic(topic) is None:
            try:
                await a.cluster.wait_for_topic(topic, wait)
            except KafkaError as e:
                if e.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise KafkaError(e.code(), f"topic {topic!r} does not exist and was not created within "
                                     f"topic.metadata.propagation.max.ms={a.config.topic_metadata_propagation_max_ms}"
                                     ) from e
                raise
        while topic in self._waiting:
            await asyncio.sleep(0.01)

    def _look_up(self, topic: str) -> None:
        """On the loop: find ``topic`` (or let the broker create it), then queue its waiting records in order."""
        task = asyncio.get_running_loop().create_task(self._resolve(topic), name=f"metadata-{topic}")
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    async def _resolve(self, topic: str) -> None:
        a = self._async
        err: KafkaError | None = None
        try:
            await a.cluster.wait_for_topic(topic, a.config.topic_metadata_propagation_max_ms / 1000)
        except KafkaError as e:
            err = e
            if e.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                err = KafkaError(e.code(), f"topic {topic!r} does not exist and was not created within "
                                 f"topic.metadata.propagation.max.ms={a.config.topic_metadata_propagation_max_ms} "
                                 f"(is auto.create.topics.enable off on the broker?)")
        self._release(topic, err)

    def _release(self, topic: str, err: KafkaError | None, fail_txn: bool = True) -> None:
        """Queue (or, with ``err``, fail) the records waiting for ``topic``. A record that fails inside a transaction
        makes the transaction abortable (``fail_txn``), as a failed batch does: it must never be committed
        without them."""
        a = self._async
        failed: list[tuple[DeliveryCallback, KafkaError | None, Message]] = []
        first_error: KafkaError | None = None
        with self._lock:  # the topic leaves _waiting last: produce()'s shortcut takes no lock, and waits till then
            for v, k, partition, headers, cb, ts in self._waiting.get(topic, []):
                e = err
                if e is None:
                    try:
                        a.append(topic, v, k, partition, headers, cb, ts)
                        continue
                    except KafkaError as append_error:
                        e = append_error
                first_error = first_error or e
                if cb is not None:
                    failed.append((cb, e, Message(topic, -1 if partition is None else partition, -1, k, v, headers,
                                                  -1 if ts is None else ts, e)))
            self._waiting.pop(topic, None)
        if first_error is not None and fail_txn and a.txn is not None:
            a.txn.batch_failed(first_error)
        self._reports.extend(failed)
        if a.sender is not None:
            a.sender.wakeup()

    async def _settle_waiting(self, timeout: float | None) -> None:
        """Wait until no record waits for metadata (or ``timeout``), then fail those still waiting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._waiting and (deadline is None or time.monotonic() < deadline):
            await asyncio.sleep(0.02)
        for topic in list(self._waiting):
            self._release(topic, KafkaTimeoutError(f"the producer was closed while looking up topic {topic!r}"))

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        """Partitions of ``topic``, loading its metadata (KafkaError UNKNOWN_TOPIC_OR_PARTITION if it does not exist
        and is not auto-created within ``timeout``, default delivery.timeout.ms)."""
        a = self._async
        wait = a.config.delivery_timeout_ms / 1000 if timeout is None else timeout
        self._runner.run(a.cluster.wait_for_topic(topic, wait), wait + 10)
        return a.cluster.partitions_for(topic)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """confluent-kafka's: fresh metadata of every topic, or of ``topic`` (see :mod:`oncelog.client.metadata`)."""
        result: ClusterMetadata = self._runner.run(list_topics(self._async.cluster, topic),
                                                   self._async.config.request_timeout_ms / 1000 + 5
                                                   if timeout < 0 else timeout)
        return result

    def poll(self, timeout: float = 0.0) -> int:
        """Run pending delivery callbacks (waiting up to ``timeout`` s for one); returns how many ran."""
        if not self._reports and timeout > 0 and len(self._async):
            sender = self._async.sender
            if sender is not None:
                self._runner.run(sender.wait_progress(timeout), timeout + 5)
        n = 0
        only_errors = self._only_errors
        while self._reports:
            cb, err, msg = self._reports.popleft()
            if cb is not _ignore and (err is not None or not only_errors):
                cb(err, msg)
                n += 1
        return n

    def flush(self, timeout: float | None = None) -> int:
        """Deliver everything queued; returns the number of records still pending (0 = all delivered). Delivery
        callbacks run while it waits, as reports come in (as confluent-kafka's), not all at the end: the
        reports of a large backlog are not all kept until then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _FLUSH_STEP if deadline is None else max(0.0, min(_FLUSH_STEP, deadline - time.monotonic()))
            left: int = self._runner.run(self._flush(step), step + 5)
            self.poll(0)
            if not left or (deadline is not None and time.monotonic() >= deadline):
                return left

    async def _flush(self, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._waiting and (deadline is None or time.monotonic() < deadline):
            await asyncio.sleep(0.02)  # records waiting for their topic's metadata are not in the accumulator yet
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return await self._async.flush(left) + sum(len(w) for w in self._waiting.values())

    def __len__(self) -> int:
        return len(self._async) + sum(len(w) for w in self._waiting.values())

    # ------------------------------------------------------------------ transactions (see AsyncProducer)

    def _wait(self, timeout: float | None) -> float | None:
        t = self.config.max_block_ms / 1000 if timeout is None else timeout
        return t + 10

    def init_transactions(self, timeout: float | None = None, keep_prepared_txn: bool = False) -> None:
        self._runner.run(self._async.init_transactions(timeout, keep_prepared_txn), self._wait(timeout))

    def begin_transaction(self) -> None:
        self._async.begin_transaction()

    def send_offsets_to_transaction(self, offsets: OffsetsLike, group_metadata: Any,
                                    timeout: float | None = None) -> None:
        self._runner.run(self._async.send_offsets_to_transaction(offsets, group_metadata, timeout),
                         self._wait(timeout))

    async def _queued(self, what: str, timeout: float | None) -> None:
        """Before a commit or prepare: every record produced so far is in the accumulator (records waiting for their
        topic's metadata are queued or failed first), so the flush that follows covers them all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._waiting and (deadline is None or time.monotonic() < deadline):
            await asyncio.sleep(0.02)
        if self._waiting:
            raise KafkaTimeoutError(f"{what} timed out: records still wait for the metadata of topic(s) "
                                    f"{', '.join(sorted(self._waiting))}; retry, or abort the transaction")

    async def _commit(self, timeout: float | None) -> None:
        await self._queued("commit_transaction()", timeout)
        await self._async.commit_transaction(timeout)

    async def _abort(self, timeout: float | None) -> None:
        for topic in list(self._waiting):  # never sent: they fail with the transaction
            self._release(topic, KafkaError(ErrorCode.OPERATION_NOT_ATTEMPTED, "the transaction was aborted "
                                            f"before topic {topic!r} was known"), fail_txn=False)
        await self._async.abort_transaction(timeout)

    async def _prepare(self) -> PreparedTxnState:
        await self._queued("prepare_transaction()", self.config.max_block_ms / 1000)
        return await self._async.prepare_transaction()

    def commit_transaction(self, timeout: float | None = None) -> None:
        try:
            self._runner.run(self._commit(timeout), self._wait(timeout))
        finally:
            self.poll(0)

    def abort_transaction(self, timeout: float | None = None) -> None:
        try:
            self._runner.run(self._abort(timeout), self._wait(timeout))
        finally:
            self.poll(0)

    def prepare_transaction(self) -> PreparedTxnState:
        try:
            return self._runner.run(self._prepare(), self._wait(None))
        finally:
            self.poll(0)

    def prepared_transaction(self) -> PreparedTxnState | None:
        return self._async.prepared_transaction()

    def complete_transaction(self, state: PreparedTxnState, timeout: float | None = None) -> bool:
        return self._runner.run(self._async.complete_transaction(state, timeout), self._wait(timeout))

    @property
    def transaction_state(self) -> TxnState | None:
        return self._async.transaction_state

    def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._settle_waiting(timeout), None if timeout is None else timeout + 10)
            self._runner.run(self._async.close(timeout), None if timeout is None else timeout + 10)
            self.poll(0)
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ignore(err: KafkaError | None, msg: Message) -> None:
    return None
