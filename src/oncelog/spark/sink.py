"""The exactly-once ``oncelog`` sink: streaming (``writeStream``) and batch (``write``) writers.

Rows are spark-sql-kafka's sink rows: ``value`` (binary or string, required), ``key``, ``topic`` (else the option
``topic``), ``partition`` and ``headers`` (array<struct<key string, value binary>>), each optional::

    (df.writeStream.format("oncelog").option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "out")
       .option("checkpointLocation", "/chk/job").start())
    df.write.mode("append").format("oncelog").option("kafka.bootstrap.servers", bs).option("topic", "out").save()

Options: ``kafka.bootstrap.servers`` (required) and any ``kafka.<producer setting>`` (e.g. ``kafka.linger.ms``,
``kafka.batch.size``, ``kafka.compression.type``); ``topic``; ``sinkCommitTopic`` (default
``__oncelog_spark_sink_commits``, created compacted on first use); ``transactionalIdPrefix`` (default
``oncelog-spark``; the sink's transactional ids are ``<prefix>-<query id>-b<batch>-p<partition>-a<attempt>-<rand>``);
``sinkId`` (batch writes only: prefix of the generated job id). The broker must run with
``transaction.two.phase.commit.enable=true`` (KIP-939); without it the first write fails saying so.

Protocol: two-phase commit keyed by (sink id, batch id)
======================================================
The sink id is the streaming query's id (``sql.streaming.queryId``: kept in the checkpoint, so the same across
driver restarts); a batch (non-streaming) write uses a job id generated on the driver (``<sinkId option or
"job">-<uuid>``) and batch id 0.

Phase 1, on the executors (:meth:`write`): each task attempt opens its own transaction with a transactional id
unique to (sink, batch, partition, attempt, random suffix) and two-phase commit enabled (KIP-939), writes all its
rows, *prepares* it (flushed: every record is in the log, invisible to read_committed readers) and closes the
producer, which leaves the transaction open at the broker. The commit message names the transaction and its
PreparedTxnState (producer id, epoch).

Phase 2, on the driver (:meth:`commit`), for batch B:

1. Read the sink-commit topic (:mod:`.commit_log`). If B has no decision there, append one: the list of the
   transactions Spark reported, acknowledged by the broker (acks=all) before anything else happens. From then on
   that record *is* B's outcome; nothing Spark reports later for B changes it.
2. Commit every transaction of B's decision that is still open (InitProducerId with keepPreparedTxn, then EndTxn
   commit). One whose transactional id has nothing open was committed by an earlier completion.
3. Abort every open transaction of this sink (ListTransactions, matched by the id prefix) that belongs to a batch
   <= B and is not in that batch's decision: killed task attempts, a replay's new attempts, tasks of a batch that
   was never decided. A transaction of a decided batch that is in its decision is committed instead.
4. Tombstone the decisions of batches < B: Spark never re-runs them, and their transactions are all committed.

``abort(messages, B)`` aborts B's reported and open transactions unless B is decided, in which case it completes
the decision, as commit does.

Why this is exactly once, whatever is killed when
-------------------------------------------------
* Every output record is written inside exactly one transaction, and a read_committed reader sees it only if that
  transaction commits. So the question is which transactions commit: exactly those named in a decision.
* Only step 2 commits, and only transactions named in a recorded decision; only step 3 and ``abort`` abort, and
  never a transaction named in a decision. A transaction is therefore committed iff it is in a decision, no matter
  how often steps 2-3 are interrupted and repeated (each is idempotent: committing a committed transaction finds
  nothing open; aborting an aborted one likewise).
* There is at most one decision per batch: it is written only after reading the log and finding none, by the one
  driver that runs the query (Spark allows one active run per checkpoint). Each decision names at most one
  transaction per Spark partition of the batch (Spark reports one successful attempt per partition), and each
  partition's attempt wrote all of that partition's rows. So a decided batch commits each of its rows once.
* Spark re-runs a batch (same batch id, same input offsets) only if its commit log lacks the batch, i.e. until
  ``commit`` returned for it. A re-run whose batch is decided commits nothing new (step 1 keeps the recorded
  decision) and its fresh transactions are aborted (step 3): no duplicates. A re-run of an undecided batch decides
  it afresh; everything earlier attempts staged is not in the decision and is aborted: nothing counted twice.
  A batch is never skipped: Spark moves past B only after ``commit(B)`` returned, i.e. after B was decided and
  completed, so no loss.
* Driver killed (a) before the decision: the batch is undecided, its staged transactions are aborted when it is
  re-run; (b) after the decision and before completion or Spark's commit log: the re-run finds the decision and
  completes exactly it. A task attempt killed at any point leaves at most an open transaction that no decision names,
  aborted by the next commit (its id carries its batch id and the sink's prefix, so it is found even though nobody
  reported it to the driver). The first commit after a driver restart cleans up the previous run the same way.
* A decided batch survives a driver outage of any length: its transactions are 2PC transactions, which the broker
  never times out or aborts by itself (KIP-939), and InitProducerId(keepPreparedTxn) lets the restarted driver
  commit them from another process. Without that, the coordinator aborts an open transaction after
  transaction.timeout.ms and the decision could no longer be honoured -- the flaw that stopped SPARK-28908, whose
  sink shared one transaction across tasks and could not survive a slow or dead driver.
* Transactions of the query's last batches that a killed attempt left open are aborted by the next commit of the
  same query (they hold back the LSO of their partitions until then; read_committed readers wait, they never see
  them).

Test hook: ``ONCELOG_SPARK_SINK_FAULT`` (see :mod:`.sink_faults`) kills the driver or a worker at chosen points.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from oncelog.client import Admin

from .commit_log import DEFAULT_COMMIT_TOPIC, Decision, SinkCommitLog, StagedTxn
from .options import OncelogOptionError, get_option, role_conf
from .sink_faults import kill_driver_at, kill_worker_at, sleep_in_write
from .sink_txn import StagingTxn, TxnResolver, make_txn_id, txn_prefix
from .worker_malloc import tune_worker_malloc

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "OncelogBatchWriter",
    "OncelogStreamWriter",
    "SinkCommitMessage",
    "SinkCommitter",
    "SinkConfig",
    "parse_sink_options",
    "validate_sink_schema",
]

DEFAULT_TXN_ID_PREFIX = "oncelog-spark"
#: producer settings of the staging transactions unless the user sets kafka.* options
_STAGING_DEFAULTS = {"linger.ms": "20", "batch.size": "524288"}


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task reports to the driver: its prepared transaction (None when it wrote no row)."""

    sink_id: str
    batch_id: int
    partition_id: int
    attempt: int
    txn: StagedTxn | None


@dataclass(frozen=True)
class SinkConfig:
    producer_conf: dict[str, Any]
    admin_conf: dict[str, Any]
    topic: str | None
    commit_topic: str
    txn_id_prefix: str
    sink_id: str | None

    def prefix(self, sink_id: str) -> str:
        return txn_prefix(self.txn_id_prefix, sink_id)


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    prefix = get_option(options, "transactionalIdPrefix") or DEFAULT_TXN_ID_PREFIX
    sink_id = get_option(options, "sinkId")
    for what, v in (("transactionalIdPrefix", prefix), ("sinkId", sink_id)):
        if v is not None and (not v or "/" in v or any(c.isspace() for c in v)):
            raise OncelogOptionError(f"option {what!r} must be a non-empty name without '/' or spaces, got {v!r}")
    return SinkConfig(
        producer_conf=role_conf(options, "producer", _STAGING_DEFAULTS),
        admin_conf=role_conf(options, "admin"),
        topic=get_option(options, "topic"),
        commit_topic=get_option(options, "sinkCommitTopic") or DEFAULT_COMMIT_TOPIC,
        txn_id_prefix=prefix,
        sink_id=sink_id,
    )


def _is_bytes_like(t: Any) -> bool:
    return isinstance(t, (BinaryType, StringType))


def validate_sink_schema(schema: StructType, has_topic_option: bool) -> None:
    """spark-sql-kafka's sink columns; raises :class:`OncelogOptionError` naming the offending column."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OncelogOptionError(f"the oncelog sink needs a 'value' column (binary or string); the data has "
                                 f"{', '.join(fields) or 'no columns'}")
    checks = {
        "value": (_is_bytes_like, "binary or string"),
        "key": (_is_bytes_like, "binary or string"),
        "topic": (lambda t: isinstance(t, StringType), "string"),
        "partition": (lambda t: isinstance(t, IntegerType), "int"),
        "headers": (lambda t: isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
                    and [f.name for f in t.elementType.fields] == ["key", "value"], "array<struct<key, value>>"),
    }
    for name, (ok, want) in checks.items():
        if name in fields and not ok(fields[name]):
            raise OncelogOptionError(f"column {name!r} must be {want}, got {fields[name].simpleString()}")
    if "topic" not in fields and not has_topic_option:
        raise OncelogOptionError("set the option 'topic' or add a 'topic' column to say where rows go")


def write_task(cfg: SinkConfig, sink_id: str, batch_id: int, batches: Iterator[pa.RecordBatch]
               ) -> SinkCommitMessage:
    """Phase 1 for one task attempt: stage every row in a fresh 2PC transaction and prepare it."""
    tune_worker_malloc()
    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    attempt = ctx.attemptNumber() if ctx is not None else 0
    staging = StagingTxn(cfg.producer_conf, make_txn_id(cfg.txn_id_prefix, sink_id, batch_id, partition_id, attempt),
                         cfg.topic)
    try:
        for rb in batches:
            staging.write(rb)
        sleep_in_write()
        staging.flush()
        kill_worker_at(batch_id, partition_id, attempt)
        txn = staging.prepare()
    except BaseException:
        staging.discard()
        raise
    return SinkCommitMessage(sink_id, batch_id, partition_id, attempt, txn)


class SinkCommitter:
    """Phase 2 on the driver: decide a batch once, then complete the decision and abort everything else."""

    def __init__(self, cfg: SinkConfig) -> None:
        self.cfg = cfg
        self.log = SinkCommitLog({k: v for k, v in cfg.admin_conf.items()}, cfg.commit_topic)

    def commit(self, sink_id: str, batch_id: int, messages: Sequence[SinkCommitMessage | None], *,
               once: bool = False) -> Decision:
        """Decide and complete ``batch_id``. ``once``: nobody will ever commit this batch again (a batch job: Spark
        does not re-run a finished job), so its own decision is tombstoned as soon as it is completed too."""
        with Admin(self.cfg.admin_conf) as admin:
            decided = self.log.decisions(sink_id, admin)
            decision = decided.get(batch_id)
            if decision is None:
                kill_driver_at("kill-before-decision", batch_id)
                decision = Decision(sink_id, batch_id, tuple(m.txn for m in messages if m is not None and m.txn))
                self.log.record(decision)
                decided[batch_id] = decision
                kill_driver_at("kill-after-decision", batch_id)
            resolver = TxnResolver(self.cfg.producer_conf, admin)
            resolver.commit_all(decision.txns)
            kill_driver_at("kill-after-complete", batch_id)
            self._clean(resolver, sink_id, batch_id, decided, messages)
            # every batch before this one is completed (Spark started this batch only after commit() returned for
            # the previous one, and never re-runs an older one): their decisions are no longer needed
            self.log.forget(sink_id, sorted(b for b in decided if b < batch_id or (once and b == batch_id)))
        return decision

    def abort(self, sink_id: str, batch_id: int, messages: Sequence[SinkCommitMessage | None]) -> None:
        with Admin(self.cfg.admin_conf) as admin:
            decided = self.log.decisions(sink_id, admin)
            resolver = TxnResolver(self.cfg.producer_conf, admin)
            if batch_id in decided:
                resolver.commit_all(decided[batch_id].txns)
            self._clean(resolver, sink_id, batch_id, decided, messages)

    def _clean(self, resolver: TxnResolver, sink_id: str, batch_id: int, decided: Mapping[int, Decision],
               messages: Sequence[SinkCommitMessage | None]) -> None:
        """Step 3: settle every open transaction of this sink from batches <= ``batch_id``."""
        def in_decision(txn_id: str, batch: int) -> bool:
            d = decided.get(batch)
            return d is not None and txn_id in d.txn_ids

        reported = {m.txn.transactional_id: m.batch_id for m in messages if m is not None and m.txn is not None}
        open_txns = resolver.open_txns(self.cfg.prefix(sink_id))
        late = [t for d in decided.values() for t in d.txns if t.transactional_id in open_txns]
        resolver.commit_all(late)
        doomed = {tid for tid, b in {**reported, **open_txns}.items()
                  if b <= batch_id and not in_decision(tid, b)}
        resolver.abort_all(doomed)


def _sink_id_of(messages: Sequence[Any]) -> str | None:
    """The query id the tasks saw (a batch with no task has nothing to decide or clean: None)."""
    for m in messages:
        if isinstance(m, SinkCommitMessage):
            return m.sink_id
    return None


class OncelogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("oncelog")``: exactly-once micro-batches (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.cfg = parse_sink_options(options)
        validate_sink_schema(schema, self.cfg.topic is not None)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("OncelogStreamWriter.write runs in a Spark task only")
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        sink_id = ctx.getLocalProperty("sql.streaming.queryId")
        if not sink_id:
            raise RuntimeError("OncelogStreamWriter.write found no streaming query id (sql.streaming.queryId) in "
                               "its task; it must run inside a streaming query")
        return write_task(self.cfg, sink_id, batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sink_id = _sink_id_of(messages)
        if sink_id is not None:
            SinkCommitter(self.cfg).commit(sink_id, batchId, _ours(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sink_id = _sink_id_of(messages)
        if sink_id is not None:
            SinkCommitter(self.cfg).abort(sink_id, batchId, _ours(messages))


class OncelogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("oncelog")``: the same protocol with a job id generated here (on the driver) as the sink id
    and batch id 0; the job's rows become visible all at once, or not at all."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.cfg = parse_sink_options(options)
        validate_sink_schema(schema, self.cfg.topic is not None)
        self.job_id = f"{self.cfg.sink_id or 'job'}-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.cfg, self.job_id, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        SinkCommitter(self.cfg).commit(self.job_id, 0, _ours(messages), once=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        SinkCommitter(self.cfg).abort(self.job_id, 0, _ours(messages))


def _ours(messages: Sequence[WriterCommitMessage | None]) -> list[SinkCommitMessage | None]:
    return [m if isinstance(m, SinkCommitMessage) else None for m in messages]
