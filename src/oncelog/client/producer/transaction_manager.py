"""The async driver of idempotence and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn. The state itself lives in the sans-I/O :class:`TxnStateMachine`; the sender asks
:meth:`TransactionManager.sendable` which ready partitions may be drained (those already added to the transaction)
and reports batch failures through :meth:`TransactionManager.batch_failed`.

Coordinator requests are retried after ~20 ms (Kafka's retry backoff for these) on CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS and friends, looking the coordinator up again after NOT_COORDINATOR or a broken
connection, until the operation's deadline.

Transactions V2 (KIP-890 part 2) are used when the transaction coordinator's broker finalizes ``transaction.version``
2 (ApiVersions v3+) and serves EndTxn v5, as Kafka's TransactionManager decides (``isTransactionV2Enabled``), looked
at again before every transaction: no AddPartitionsToTxn (Produce v12 adds its partitions), no AddOffsetsToTxn
(TxnOffsetCommit v5 adds the offsets partition), and EndTxn v5, whose answer gives the producer id and epoch of the
next transaction (every sequence starts again at 0). Otherwise transactions V1, with Produce at most v11,
TxnOffsetCommit at most v4 and EndTxn at most v4.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from oncelog.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from oncelog.protocol.messages.end_txn_request import EndTxnRequest
from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest
from oncelog.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from ..cluster import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, Cluster
from ..config import ProducerConfig
from ..connection import BrokerConnection
from ..errors import KafkaError, KafkaTimeoutError, UnsupportedVersionError
from ..topic_partition import split
from .idempotence import ProducerIdAndEpoch, SequenceNumbers
from .txn_state import PreparedTxnState, TxnState, TxnStateMachine, classify

__all__ = ["OffsetsLike", "TransactionManager", "normalize_offsets", "supports_transactions_v2"]

log = logging.getLogger(__name__)
S = TxnState
TopicPartition = tuple[str, int]
#: [TopicPartition] (confluent-kafka's), [(topic, partition, offset)], or {(topic, partition) or TopicPartition: offset}
OffsetsLike = Mapping[Any, int] | Iterable[Any]
_BACKOFF = 0.02
_REFIND = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION})
_PRODUCE, _INIT_PRODUCER_ID, _END_TXN, _TXN_OFFSET_COMMIT = 0, 22, 26, 28
#: the last versions of transactions V1: Produce, EndTxn, TxnOffsetCommit (Kafka's "useTransactionV1Version")
_V1_MAX = {_PRODUCE: 11, _END_TXN: 4, _TXN_OFFSET_COMMIT: 4}
TRANSACTION_VERSION = "transaction.version"


def supports_transactions_v2(conn: BrokerConnection) -> bool:
    """The broker finalizes ``transaction.version`` 2 and serves EndTxn v5 (transactions V2, KIP-890 part 2)."""
    return conn.finalized_features.get(TRANSACTION_VERSION, 0) >= 2 and conn.versions.get(_END_TXN, 0) >= 5


def normalize_offsets(offsets: OffsetsLike) -> dict[TopicPartition, int]:
    """``{(topic, partition): offset}`` or ``[(topic, partition, offset), ...]`` (or objects with .topic,
    .partition, .offset) -> ``{(topic, partition): offset}``."""
    if isinstance(offsets, Mapping):
        return {split(k)[0]: int(o) for k, o in offsets.items()}
    out: dict[TopicPartition, int] = {}
    for item in offsets:
        if isinstance(item, tuple):
            t, p, o = item
        else:
            t, p, o = item.topic, item.partition, item.offset  # TopicPartition-like objects
        out[(str(t), int(p))] = int(o)
    return out


class TransactionManager:
    """Producer id/epoch, sequences and (with ``transactional.id``) the transaction of one producer."""

    def __init__(self, cluster: Cluster, config: ProducerConfig,
                 wakeup: Callable[[], None] = lambda: None) -> None:
        self.cluster = cluster
        self.config = config
        self.transactional_id = config.transactional_id
        self.fsm = TxnStateMachine(self.transactional_id)
        self.sequences = SequenceNumbers()
        self.prepared: PreparedTxnState | None = None  # KIP-939: the kept transaction found by init
        self.added: set[TopicPartition] = set()
        self.txn_started = False  # a partition or the offsets of a group were added at the coordinator
        self._pending_add: set[TopicPartition] = set()
        self._add_task: asyncio.Task[None] | None = None
        self._coordinator: BrokerConnection | None = None
        self.wakeup = wakeup
        self.bump_requested = False  # idempotent producer: re-init the producer id once nothing is in flight
        #: transactions V2 for the current transaction (decided from the coordinator's broker at init and after
        #: every EndTxn)
        self.v2 = False
        #: a state in which records may always be sent (check_can_send() decides in the others)
        self.sending_state = S.READY if self.transactional_id is None else S.IN_TRANSACTION

    # ------------------------------------------------------------------ queries

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def pid(self) -> ProducerIdAndEpoch:
        return self.sequences.pid

    @property
    def state(self) -> TxnState:
        return self.fsm.state

    @property
    def has_error(self) -> bool:
        return self.fsm.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    def current_error(self) -> KafkaError:
        return self.fsm.fatal_error() if self.fsm.state is S.FATAL_ERROR else self.fsm.abortable_error()

    def check_can_send(self) -> None:
        """Raise unless a record may be appended now (transactional: only inside a transaction)."""
        if self.transactional:
            if self.fsm.state is not S.IN_TRANSACTION:
                self.fsm.require("send records", S.IN_TRANSACTION)
        elif self.fsm.state is S.FATAL_ERROR:
            raise self.fsm.fatal_error()

    def version_for(self, conn: BrokerConnection, api_key: int) -> int:
        """The version of a transactional Produce / EndTxn / TxnOffsetCommit to ``conn``: the negotiated one, but
        never a transactions V2 version while this transaction is V1."""
        v = conn.version_for(api_key)
        return v if self.v2 or api_key not in _V1_MAX else min(v, _V1_MAX[api_key])

    def produce_version(self, conn: BrokerConnection) -> int | None:
        """The Produce version the sender uses for this producer's requests to ``conn`` (None: the negotiated)."""
        return self.version_for(conn, _PRODUCE) if self.transactional else None

    def _update_v2(self, conn: BrokerConnection) -> None:
        v2 = supports_transactions_v2(conn)
        if v2 != self.v2:
            log.info("transactional producer %r uses transactions %s (%s finalizes %s %d)", self.transactional_id,
                     "V2" if v2 else "V1", conn.address, TRANSACTION_VERSION,
                     conn.finalized_features.get(TRANSACTION_VERSION, 0))
        self.v2 = v2

    # ------------------------------------------------------------------ requests

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.config.max_block_ms / 1000 if timeout is None else timeout)

    async def _coordinator_conn(self, deadline: float) -> BrokerConnection:
        conn = self._coordinator
        if conn is not None and conn.connected:
            return conn
        assert self.transactional_id is not None
        left = max(deadline - time.monotonic(), 0.001)
        conn = await self.cluster.coordinator_connection(COORDINATOR_TRANSACTION, self.transactional_id, left)
        self._coordinator = conn
        return conn

    async def _call(self, what: str, deadline: float, send: Callable[[BrokerConnection], Any],
                    error_of: Callable[[Any], int], *, group: str | None = None) -> Any:
        """Send to the transaction (or ``group``'s) coordinator, retrying retriable errors until ``deadline``.
        Returns the response with a zero or non-retriable error code."""
        while True:
            try:
                if group is None:
                    conn = await self._coordinator_conn(deadline)
                else:
                    left = max(deadline - time.monotonic(), 0.001)
                    conn = await self.cluster.coordinator_connection(COORDINATOR_GROUP, group, left)
                resp = await send(conn)
                code = error_of(resp)
            except KafkaError as e:
                if not e.retriable():
                    raise
                code, resp = int(e.code()), None
                if time.monotonic() + _BACKOFF > deadline:
                    raise KafkaTimeoutError(f"{what} did not succeed before the timeout (last error: {e})") \
                        from None
            if code == 0 or classify(code) != "retry":
                return resp
            if code in _REFIND and group is None:
                self._coordinator = None
            if time.monotonic() + _BACKOFF > deadline:
                raise KafkaTimeoutError(f"{what} did not succeed before the timeout (last error: "
                                        f"{ErrorCode(code).name})")
            log.debug("%s: %s, retrying", what, ErrorCode(code).name)
            await asyncio.sleep(_BACKOFF)

    def _error(self, code: int, what: str) -> KafkaError:
        hint = ""
        if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            hint = (f" (epoch {self.pid.epoch} is stale: another producer with this transactional.id was "
                    "initialised, or the coordinator aborted the transaction after transaction.timeout.ms="
                    f"{self.config.transaction_timeout_ms}; close this producer)")
        return KafkaError(code, f"{what} for transactional id {self.transactional_id!r} failed: "
                                f"{ErrorCode(code).name}{hint}")

    # ------------------------------------------------------------------ idempotent producer (no transactional.id)

    async def init_idempotent(self, timeout: float | None = None) -> None:
        """Get a producer id (or, after KIP-360 trouble, a bumped epoch) for the idempotent producer."""
        deadline = self._deadline(timeout)
        old = self.pid
        while True:
            conn = await self.cluster.any_connection()
            req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=self.config.transaction_timeout_ms)
            if old.valid and conn.version_for(_INIT_PRODUCER_ID) >= 3:
                req.producer_id, req.producer_epoch = old.producer_id, old.epoch
            resp = await conn.send(req)
            if resp.error_code == 0:
                self.sequences.set_producer(ProducerIdAndEpoch(resp.producer_id, resp.producer_epoch))
                self.bump_requested = False
                if self.fsm.state is S.UNINITIALIZED:
                    self.fsm.transition(S.INITIALIZING)
                    self.fsm.transition(S.READY)
                log.debug("idempotent producer id %s", self.pid)
                return
            if req.producer_id >= 0 and classify(resp.error_code) != "retry":
                # the broker forgot us, or cannot bump an epoch (no KIP-360): start over with a new producer id
                log.info("epoch bump of producer %s failed (%s); getting a new producer id", old,
                         ErrorCode(resp.error_code).name)
                old = ProducerIdAndEpoch()
                continue
            if classify(resp.error_code) != "retry" or time.monotonic() + _BACKOFF > deadline:
                err = KafkaError(resp.error_code, "InitProducerId for the idempotent producer failed: "
                                                  f"{ErrorCode(resp.error_code).name}")
                if classify(resp.error_code) == "fatal":
                    self.fsm.fail(err, fatal=True)
                raise err
            await asyncio.sleep(_BACKOFF)

    # ------------------------------------------------------------------ transactions

    async def init_transactions(self, timeout: float | None = None, keep_prepared_txn: bool = False) -> None:
        if not self.transactional:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "init_transactions() needs transactional.id in the "
                                                          "producer configuration", retriable=False)
        if keep_prepared_txn and not self.config.transaction_two_phase_commit_enable:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "init_transactions(keep_prepared_txn=True) needs "
                                                          "transaction.two.phase.commit.enable=true",
                             retriable=False)
        self.fsm.require("init_transactions()", S.UNINITIALIZED)
        self.fsm.transition(S.INITIALIZING)
        try:
            await self._init_pid(self._deadline(timeout), keep_prepared_txn, ProducerIdAndEpoch())
        except KafkaError as e:
            if self.fsm.state is S.INITIALIZING:
                if classify(int(e.code())) == "fatal" or not e.retriable():
                    self.fsm.fail(e, fatal=True)
                else:
                    self.fsm.transition(S.UNINITIALIZED)  # e.g. a timeout: init_transactions() may be called again
            raise

    async def _init_pid(self, deadline: float, keep_prepared: bool, current: ProducerIdAndEpoch) -> None:
        two_pc = self.config.transaction_two_phase_commit_enable

        async def send(conn: BrokerConnection) -> Any:
            if (two_pc or keep_prepared) and conn.version_for(_INIT_PRODUCER_ID) < 6:
                raise UnsupportedVersionError(f"{conn.address} does not support InitProducerId v6, needed for "
                                              "two-phase commit (KIP-939)")
            return await conn.send(InitProducerIdRequest(
                transactional_id=self.transactional_id, transaction_timeout_ms=self.config.transaction_timeout_ms,
                producer_id=current.producer_id, producer_epoch=current.epoch, enable2_pc=two_pc,
                keep_prepared_txn=keep_prepared))

        resp = await self._call("InitProducerId", deadline, send, lambda r: int(r.error_code))
        if resp.error_code:
            raise self._error(resp.error_code, "InitProducerId")
        if self._coordinator is not None:
            self._update_v2(self._coordinator)
        self.sequences.set_producer(ProducerIdAndEpoch(resp.producer_id, resp.producer_epoch))
        self.fsm.epoch_bump_needed = False
        ongoing = PreparedTxnState(resp.ongoing_txn_producer_id, resp.ongoing_txn_producer_epoch)
        if keep_prepared and ongoing.producer_id >= 0:
            self.prepared = ongoing
            self.fsm.transition(S.PREPARED_TRANSACTION)
        else:
            self.prepared = None
            self.fsm.transition(S.READY)

    def begin_transaction(self) -> None:
        self.fsm.require("begin_transaction()", S.READY)
        self.added.clear()
        self._pending_add.clear()
        self.txn_started = False
        self.fsm.transition(S.IN_TRANSACTION)

    def sendable(self, ready: list[TopicPartition]) -> list[TopicPartition]:
        """The ready partitions that may be drained now; starts AddPartitionsToTxn for the others."""
        if not self.transactional:
            return ready
        if self.fsm.state not in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.PREPARED_TRANSACTION,
                                  S.ABORTING_TRANSACTION):
            return []
        if self.v2:  # the broker adds a partition to the transaction with the first Produce v12 there
            if self.fsm.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION):
                self.added.update(ready)
                self.txn_started = self.txn_started or bool(ready)
                return ready
            return [tp for tp in ready if tp in self.added]
        out = [tp for tp in ready if tp in self.added]
        if len(out) < len(ready) and self.fsm.state is S.IN_TRANSACTION:
            self._pending_add.update(tp for tp in ready if tp not in self.added)
            if self._add_task is None or self._add_task.done():
                self._add_task = asyncio.get_running_loop().create_task(self._add_partitions())
        return out

    @property
    def adding_partitions(self) -> bool:
        return self._add_task is not None and not self._add_task.done()

    async def _add_partitions(self) -> None:
        deadline = self._deadline(None)
        try:
            while self._pending_add and self.fsm.state is S.IN_TRANSACTION:
                batch, self._pending_add = sorted(self._pending_add), set()
                await self._add_batch(batch, deadline)
        except KafkaError as e:
            self.fsm.fail(e)
        except Exception as e:  # a bug must not leave the transaction hanging silently
            log.exception("AddPartitionsToTxn failed")
            self.fsm.fail(KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}", retriable=False))
        finally:
            self.wakeup()

    async def _add_batch(self, tps: list[TopicPartition], deadline: float) -> None:
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        pid = self.pid
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id or "", v3_and_below_producer_id=pid.producer_id,
            v3_and_below_producer_epoch=pid.epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        def worst(resp: Any) -> int:
            if resp.error_code:
                return int(resp.error_code)
            codes = [r.partition_error_code for t in resp.results_by_topic_v3_and_below
                     for r in t.results_by_partition if r.partition_error_code
                     and r.partition_error_code != ErrorCode.OPERATION_NOT_ATTEMPTED]
            return int(codes[0]) if codes else 0

        resp = await self._call("AddPartitionsToTxn", deadline, lambda c: c.send(req), worst)
        code = worst(resp)
        if code:
            failed = sorted(f"{t.name}[{r.partition_index}]" for t in resp.results_by_topic_v3_and_below
                            for r in t.results_by_partition if r.partition_error_code == code)
            raise KafkaError(code, f"AddPartitionsToTxn for {self.transactional_id!r} failed for "
                                   f"{', '.join(failed) or 'the request'}: {ErrorCode(code).name}")
        self.added.update(tps)
        self.txn_started = True

    def batch_failed(self, error: KafkaError, *, unresolved_sequence: bool = False) -> None:
        """A batch failed for good. Transactional: the transaction must be aborted (or the producer is fenced).
        Idempotent: an unresolved sequence (OUT_OF_ORDER, UNKNOWN_PRODUCER_ID, expiry) needs a new epoch."""
        if self.transactional:
            if self.fsm.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR,
                                  S.PREPARED_TRANSACTION, S.ABORTING_TRANSACTION) or classify(int(error.code())) == "fatal":
                if unresolved_sequence:
                    self.fsm.epoch_bump_needed = True
                if self.fsm.state in (S.PREPARED_TRANSACTION, S.ABORTING_TRANSACTION) \
                        and classify(int(error.code())) != "fatal":
                    return  # nothing is produced in these states; the error reached the record's callback
                self.fsm.fail(error)
        elif classify(int(error.code())) == "fatal" and error.code() != ErrorCode.INVALID_PRODUCER_EPOCH:
            self.fsm.fail(error, fatal=True)
        elif unresolved_sequence:
            self.bump_requested = True

    async def send_offsets(self, offsets: OffsetsLike, group_metadata: Any, timeout: float | None = None) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group coordinator."""
        self.fsm.require("send_offsets_to_transaction()", S.IN_TRANSACTION)
        if isinstance(group_metadata, str):
            group_id, generation, member, instance = group_metadata, -1, "", None
        else:
            group_id = group_metadata.group_id
            generation = getattr(group_metadata, "generation_id", -1)
            member = getattr(group_metadata, "member_id", "")
            instance = getattr(group_metadata, "group_instance_id", None)
        offs = {tp: o for tp, o in normalize_offsets(offsets).items() if o >= 0}
        if not offs:
            return  # as librdkafka: partitions without a valid offset (OFFSET_INVALID positions) are skipped
        deadline = self._deadline(timeout)
        pid = self.pid
        try:
            if not self.v2:  # transactions V2: TxnOffsetCommit v5 adds the offsets partition itself
                add = AddOffsetsToTxnRequest(transactional_id=self.transactional_id or "",
                                             producer_id=pid.producer_id, producer_epoch=pid.epoch, group_id=group_id)
                resp = await self._call("AddOffsetsToTxn", deadline, lambda c: c.send(add),
                                        lambda r: int(r.error_code))
                if resp.error_code:
                    raise self._error(resp.error_code, f"AddOffsetsToTxn (group {group_id!r})")
            self.txn_started = True
            by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
            for (t, p), o in sorted(offs.items()):
                by_topic.setdefault(t, []).append(TxnOffsetCommitRequestPartition(partition_index=p,
                                                                                   committed_offset=o))
            commit = TxnOffsetCommitRequest(
                transactional_id=self.transactional_id or "", group_id=group_id, producer_id=pid.producer_id,
                producer_epoch=pid.epoch, generation_id=generation, member_id=member, group_instance_id=instance,
                topics=[TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

            def worst(r: Any) -> int:
                codes = [int(p.error_code) for t in r.topics for p in t.partitions if p.error_code]
                return max(codes, key=lambda c: classify(c) == "retry") if codes else 0

            resp = await self._call("TxnOffsetCommit", deadline, lambda c: c.send(
                commit, version=self.version_for(c, _TXN_OFFSET_COMMIT)), worst, group=group_id)
            code = worst(resp)
            if code:
                raise KafkaError(code, f"TxnOffsetCommit of group {group_id!r} in the transaction of "
                                       f"{self.transactional_id!r} failed: {ErrorCode(code).name}")
        except KafkaTimeoutError:
            raise  # the transaction may still be committed once the call succeeds (Kafka lets it be retried)
        except KafkaError as e:
            self.fsm.fail(e)
            raise

    def prepare(self) -> PreparedTxnState:
        """IN_TRANSACTION -> PREPARED_TRANSACTION (the caller has flushed)."""
        if not self.config.transaction_two_phase_commit_enable:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, "prepare_transaction() needs "
                                                          "transaction.two.phase.commit.enable=true",
                             retriable=False)
        self.fsm.require("prepare_transaction()", S.IN_TRANSACTION)
        self.fsm.transition(S.PREPARED_TRANSACTION)
        pid = self.pid
        return PreparedTxnState(pid.producer_id, pid.epoch)

    async def end_transaction(self, commit: bool, timeout: float | None = None) -> None:
        """EndTxn (commit or abort) with retries; READY after. The caller moved the state to COMMITTING/ABORTING
        and drained the records. An epoch bump (KIP-360) follows an abort that needs it."""
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        deadline = self._deadline(timeout)
        pid = self.pid
        req = EndTxnRequest(transactional_id=self.transactional_id or "", producer_id=pid.producer_id,
                            producer_epoch=pid.epoch, committed=commit)
        bumped: ProducerIdAndEpoch | None = None
        try:
            if self.txn_started or self.prepared is not None:  # nothing reached the coordinator: nothing to end
                resp = await self._call(what, deadline, lambda c: c.send(req, version=self.version_for(c, _END_TXN)),
                                        lambda r: int(r.error_code))
                if resp.error_code:
                    raise self._error(resp.error_code, what)
                if resp.producer_id >= 0:  # transactions V2: the next transaction's producer id and epoch
                    bumped = ProducerIdAndEpoch(resp.producer_id, resp.producer_epoch)
        except KafkaTimeoutError:
            raise  # may be retried: the state stays COMMITTING/ABORTING
        except KafkaError as e:
            if classify(int(e.code())) == "fatal" or not commit:
                self.fsm.fail(e, fatal=True)
            else:
                self.fsm.fail(e)
            raise
        self.prepared = None
        self.added.clear()
        self.txn_started = False
        if bumped is not None:
            # every partition starts again at sequence 0 under the new epoch, which also settles what a KIP-360
            # epoch bump would (unresolved sequences of the ended transaction)
            self.sequences.set_producer(bumped)
            self.fsm.epoch_bump_needed = False
        if self._coordinator is not None:
            self._update_v2(self._coordinator)
        if not commit and self.fsm.epoch_bump_needed:
            self.fsm.transition(S.INITIALIZING)
            await self._init_pid(deadline, False, self.pid)
        else:
            self.fsm.transition(S.READY)

    async def close(self) -> None:
        task = self._add_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
