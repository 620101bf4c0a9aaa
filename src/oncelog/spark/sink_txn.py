"""The sink's transactions: their ids, the executor side that stages rows in one, the driver side that ends them.

Transactional ids are ``<prefix>-<sink id>-b<batch>-p<partition>-a<attempt>-<random>``: unique per task attempt
(one id runs exactly one transaction in its life), and every transaction of a sink shares
``<prefix>-<sink id>-``, so the driver finds leftovers with ListTransactions and knows each one's batch from its id.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from oncelog.client import Admin, KafkaError, PreparedTxnState, Producer

from .commit_log import StagedTxn
from .sink_rows import stage_batch

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "SinkTxnError",
    "StagingTxn",
    "TxnResolver",
    "make_txn_id",
    "parse_txn_batch",
    "txn_prefix",
]

log = logging.getLogger(__name__)

_TXN_ID_AUTHORIZATION_FAILED = 53
_ID_REST = re.compile(r"b(\d+)-p(\d+)-a(\d+)-[0-9a-f]+")


class SinkTxnError(RuntimeError):
    """A staged transaction could not be written, prepared, committed or aborted."""


def txn_prefix(id_prefix: str, sink_id: str) -> str:
    return f"{id_prefix}-{sink_id}-"


def make_txn_id(id_prefix: str, sink_id: str, batch_id: int, partition_id: int, attempt: int) -> str:
    return f"{txn_prefix(id_prefix, sink_id)}b{batch_id}-p{partition_id}-a{attempt}-{secrets.token_hex(4)}"


def parse_txn_batch(txn_id: str, prefix: str) -> int | None:
    """The batch id of one of this sink's transactional ids, None for an id that is not the sink's."""
    if not txn_id.startswith(prefix):
        return None
    m = _ID_REST.fullmatch(txn_id[len(prefix):])
    return int(m.group(1)) if m else None


def _two_pc(conf: Mapping[str, Any], txn_id: str) -> dict[str, Any]:
    return {**conf, "transactional.id": txn_id, "transaction.two.phase.commit.enable": True}


class StagingTxn:
    """Executor side: one task attempt's rows in one 2PC transaction, prepared (flushed, not committed) at the end.

    Rows come as Arrow record batches with spark-sql-kafka's sink columns: value (binary or string, required),
    key, topic, partition, headers (array<struct<key string, value binary>>), each optional.
    """

    def __init__(self, producer_conf: Mapping[str, Any], txn_id: str, default_topic: str | None) -> None:
        self.txn_id = txn_id
        self.default_topic = default_topic
        self.rows = 0
        self.topics: set[str] = set()
        self._conf = _two_pc(producer_conf, txn_id)
        self._producer: Producer | None = None

    def _start(self) -> Producer:
        p = Producer(self._conf)
        try:
            p.init_transactions()
            p.begin_transaction()
        except KafkaError as e:
            p.close(5)
            if int(e.code()) == _TXN_ID_AUTHORIZATION_FAILED:
                raise SinkTxnError(
                    f"the broker at {self._conf.get('bootstrap.servers')} refused a two-phase-commit transaction "
                    f"({e}); the exactly-once sink needs KIP-939: start the broker with "
                    "transaction.two.phase.commit.enable=true") from e
            raise SinkTxnError(f"cannot start transaction {self.txn_id!r}: {e}") from e
        except BaseException:
            p.close(5)
            raise
        self._producer = p
        return p

    def write(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        # not ``self._producer or ...``: a Producer's len() is its queued records, so one with everything
        # delivered is falsy, and a second producer with the same transactional.id would fence the first
        # and abort the rows it staged
        p = self._producer if self._producer is not None else self._start()
        self.topics |= stage_batch(p, batch, self.default_topic, self.rows)
        self.rows += n
        p.poll(0)  # drop delivery reports as we go

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush()

    def prepare(self) -> StagedTxn | None:
        """Flush and prepare; None when no row was written (no transaction was started)."""
        p = self._producer
        if p is None:
            return None
        try:
            state = p.prepare_transaction()
        except KafkaError as e:
            raise SinkTxnError(f"transaction {self.txn_id!r} ({self.rows} rows) could not be prepared: {e}") from e
        finally:
            self._producer = None
            p.close(5)
        return StagedTxn(self.txn_id, str(state), tuple(sorted(self.topics)), self.rows)

    def discard(self) -> None:
        """Abort after a failure in the task (best effort: the driver aborts leftovers anyway)."""
        p, self._producer = self._producer, None
        if p is None:
            return
        try:
            p.abort_transaction(5)
        except Exception as e:  # noqa: BLE001 - the driver's leftover scan aborts it
            log.info("could not abort %s after a failed task (the next commit aborts it): %s", self.txn_id, e)
        finally:
            p.close(5)


class TxnResolver:
    """Driver side: commit decided transactions, abort the rest, find a sink's open transactions."""

    def __init__(self, producer_conf: Mapping[str, Any], admin: Admin, parallelism: int = 8) -> None:
        self.conf = dict(producer_conf)
        self.admin = admin
        self.parallelism = parallelism

    def commit(self, txn: StagedTxn) -> bool:
        """Commit a decided transaction; False if it has none open any more (an earlier completion committed it).

        The kept transaction is committed when its producer id is the recorded one. Its epoch may be higher than
        the recorded epoch: InitProducerId(keepPreparedTxn) bumps it, so a completion that was interrupted after
        that step leaves the epoch bumped; the id is unique to this one transaction, so it is still the same one.
        """
        recorded = PreparedTxnState.parse(txn.state)
        p = Producer(_two_pc(self.conf, txn.transactional_id))
        try:
            p.init_transactions(keep_prepared_txn=True)
            kept = p.prepared_transaction()
            if kept is None:
                return False
            if kept.producer_id != recorded.producer_id:
                raise SinkTxnError(
                    f"transaction {txn.transactional_id!r} has producer id {kept.producer_id}, the decision recorded "
                    f"{recorded.producer_id}: the id was reused outside this sink; it is left open for inspection "
                    f"(abort it with 'oncelog' admin tools once resolved)")
            p.complete_transaction(kept)
            return True
        except KafkaError as e:
            raise SinkTxnError(f"cannot commit the decided transaction {txn.transactional_id!r}: {e}; the batch "
                               "stays decided and is completed when Spark retries it") from e
        finally:
            p.close(5)

    def abort(self, txn_id: str) -> None:
        """Abort whatever ``txn_id`` has open (InitProducerId without keepPreparedTxn fences and aborts it)."""
        p = Producer(_two_pc(self.conf, txn_id))
        try:
            p.init_transactions()
        except KafkaError as e:
            raise SinkTxnError(f"cannot abort the leftover transaction {txn_id!r}: {e}") from e
        finally:
            p.close(5)

    def commit_all(self, txns: Iterable[StagedTxn]) -> int:
        """Commit each (in parallel); returns how many were still open."""
        items = list(txns)
        if not items:
            return 0
        with ThreadPoolExecutor(min(self.parallelism, len(items))) as pool:
            return sum(pool.map(self.commit, items))

    def abort_all(self, txn_ids: Iterable[str]) -> None:
        items = sorted(set(txn_ids))
        if not items:
            return
        with ThreadPoolExecutor(min(self.parallelism, len(items))) as pool:
            list(pool.map(self.abort, items))

    def open_txns(self, prefix: str) -> dict[str, int]:
        """This sink's transactions that are open at the broker: transactional id -> batch id."""
        out: dict[str, int] = {}
        for t in self.admin.list_transactions(states=["Ongoing"]):
            b = parse_txn_batch(t.transactional_id, prefix)
            if b is not None:
                out[t.transactional_id] = b
        return out
