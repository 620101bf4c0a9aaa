"""The sink's two-phase commit driven directly (no SparkSession): staged transactions, decisions, replays,
leftovers, interrupted completions and the KIP-939 property that a decided batch outlives transaction.timeout.ms.

These run against the real 2PC-enabled broker; Spark itself is exercised in test_batch_write / test_sink_crash.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import pyarrow as pa
import pytest

from oncelog.client import Admin, Producer
from oncelog.spark.commit_log import Decision, SinkCommitLog
from oncelog.protocol.murmur2 import partition_for_key
from oncelog.spark.sink import SinkCommitMessage, SinkCommitter, parse_sink_options
from oncelog.spark.sink_rows import SinkRowError
from oncelog.spark.sink_txn import StagingTxn, make_txn_id, parse_txn_batch, txn_prefix
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.spark_sink import open_txns, read_committed

pytestmark = pytest.mark.timeout(120)


def _stage(cfg_opts: dict[str, str], sink: str, batch: int, part: int, attempt: int, values: list[bytes]
           ) -> SinkCommitMessage:
    cfg = parse_sink_options(cfg_opts)
    s = StagingTxn(cfg.producer_conf, make_txn_id(cfg.txn_id_prefix, sink, batch, part, attempt), cfg.topic)
    s.write(pa.record_batch({"value": values}))
    return SinkCommitMessage(sink, batch, part, attempt, s.prepare())


def _values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


@pytest.fixture
def opts(spark_bootstrap: str, spark_topic: str) -> dict[str, str]:
    with Admin({"bootstrap.servers": spark_bootstrap}) as a:
        a.create_topics(spark_topic, 3)
    return {"kafka.bootstrap.servers": spark_bootstrap, "topic": spark_topic,
            "sinkCommitTopic": f"commits-{uuid.uuid4().hex[:8]}"}


def test_transactional_ids_carry_sink_and_batch() -> None:
    tid = make_txn_id("oncelog-spark", "0b7c-uuid-with-dashes", 12, 3, 1)
    prefix = txn_prefix("oncelog-spark", "0b7c-uuid-with-dashes")
    assert tid.startswith(prefix) and parse_txn_batch(tid, prefix) == 12
    assert parse_txn_batch(tid, txn_prefix("oncelog-spark", "0b7c-uuid")) is None
    assert make_txn_id("p", "s", 1, 0, 0) != make_txn_id("p", "s", 1, 0, 0)
    d = Decision("s", 4, ())
    assert Decision.decode(d.encode()) == d


def test_staged_rows_are_invisible_until_the_decision_commits_them(opts: dict[str, str]) -> None:
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    msgs = [_stage(opts, sink, 0, p, 0, _values(f"b0p{p}", 300)) for p in range(2)]
    assert read_committed(bs, topic, timeout=2, settle=0.2) == []
    assert len(open_txns(bs, txn_prefix("oncelog-spark", sink))) == 2
    decision = SinkCommitter(parse_sink_options(opts)).commit(sink, 0, msgs)
    assert decision.rows == 600
    got = read_committed(bs, topic, expect=600)
    assert sorted(got) == sorted(_values("b0p0", 300) + _values("b0p1", 300))
    assert open_txns(bs, txn_prefix("oncelog-spark", sink)) == []



def test_a_task_writing_many_arrow_batches_keeps_one_transaction(opts: dict[str, str]) -> None:
    """Spark hands a task its rows as many Arrow batches; between two of them the producer may have delivered
    everything (its len() is 0). The same producer and transaction must go on: a second producer with the same
    transactional.id would fence the first one and abort every row staged so far (found by the Spark bench: with
    500k rows per task half the rows of a batch were silently lost)."""
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    cfg = parse_sink_options(opts)
    s = StagingTxn(cfg.producer_conf, make_txn_id(cfg.txn_id_prefix, sink, 0, 0, 0), cfg.topic)
    parts = [_values(f"rb{i}", 50) for i in range(4)]
    for values in parts:
        s.write(pa.record_batch({"value": values}))
        s.flush()  # everything delivered: the producer is empty (falsy) before the next batch
    msg = SinkCommitMessage(sink, 0, 0, 0, s.prepare())
    assert msg.txn is not None and msg.txn.rows == 200
    decision = SinkCommitter(cfg).commit(sink, 0, [msg])
    assert decision.rows == 200
    got = read_committed(bs, topic, expect=200)
    assert sorted(got) == sorted(v for values in parts for v in values)


def test_replay_of_a_decided_batch_commits_the_recorded_decision_and_aborts_the_new_attempts(
        opts: dict[str, str]) -> None:
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    cfg = parse_sink_options(opts)
    first = [_stage(opts, sink, 5, 0, 0, _values("first", 100))]
    # the driver decides batch 5 and dies before completing it: record the decision only
    SinkCommitLog(cfg.admin_conf, cfg.commit_topic).record(Decision(sink, 5, tuple(m.txn for m in first if m.txn)))
    # Spark re-runs batch 5: new attempts stage the same rows again, and commit is called with them
    again = [_stage(opts, sink, 5, 0, 1, _values("first", 100))]
    decision = SinkCommitter(cfg).commit(sink, 5, again)
    assert first[0].txn is not None and decision.txn_ids == {first[0].txn.transactional_id}
    assert sorted(read_committed(bs, topic, expect=100)) == sorted(_values("first", 100))
    assert open_txns(bs, txn_prefix("oncelog-spark", sink)) == []
    # and commit called once more for the same batch (q.stop() during commit) changes nothing
    SinkCommitter(cfg).commit(sink, 5, again)
    assert len(read_committed(bs, topic, expect=100)) == 100


def test_unreported_attempts_are_aborted_by_the_next_commit_and_other_sinks_are_left_alone(
        opts: dict[str, str]) -> None:
    bs, topic = opts["kafka.bootstrap.servers"], opts["topic"]
    sink, other = f"q-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"
    cfg = parse_sink_options(opts)
    _stage(opts, sink, 0, 0, 0, _values("killed-attempt", 50))  # its task died: nobody reports it
    _stage(opts, sink, 1, 1, 0, _values("earlier-run-b1", 50))  # a previous run's batch 1, never decided
    foreign = _stage(opts, other, 0, 0, 0, _values("other-sink", 10))
    good = [_stage(opts, sink, 1, 0, 1, _values("good", 80))]
    SinkCommitter(cfg).commit(sink, 1, good)
    assert open_txns(bs, txn_prefix("oncelog-spark", sink)) == []
    assert open_txns(bs, txn_prefix("oncelog-spark", other)) == [foreign.txn.transactional_id if foreign.txn else ""]
    SinkCommitter(cfg).abort(other, 0, [foreign])  # (its open transaction holds back the LSO until then)
    assert open_txns(bs, txn_prefix("oncelog-spark", other)) == []
    assert sorted(read_committed(bs, topic, expect=80)) == sorted(_values("good", 80))


def test_abort_of_an_undecided_batch_aborts_and_of_a_decided_batch_is_harmless(opts: dict[str, str]) -> None:
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    cfg = parse_sink_options(opts)
    SinkCommitter(cfg).abort(sink, 0, [_stage(opts, sink, 0, 0, 0, _values("aborted", 40)), None])
    assert open_txns(bs, txn_prefix("oncelog-spark", sink)) == []
    msgs = [_stage(opts, sink, 1, 0, 0, _values("kept", 40))]
    SinkCommitter(cfg).commit(sink, 1, msgs)
    SinkCommitter(cfg).abort(sink, 1, msgs)  # e.g. a stop during commit: the batch stays committed
    assert sorted(read_committed(bs, topic, expect=40)) == sorted(_values("kept", 40))


def test_a_completion_interrupted_after_keep_prepared_is_finished_by_the_next_one(opts: dict[str, str]) -> None:
    """InitProducerId(keepPreparedTxn) bumps the epoch; a completer that dies right after it must not make the next
    completion see a 'mismatching' state and abort a decided transaction."""
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    cfg = parse_sink_options(opts)
    msgs = [_stage(opts, sink, 0, 0, 0, _values("bumped", 60))]
    txn = msgs[0].txn
    assert txn is not None
    SinkCommitLog(cfg.admin_conf, cfg.commit_topic).record(Decision(sink, 0, (txn,)))
    p = Producer({"bootstrap.servers": bs, "transactional.id": txn.transactional_id,
                  "transaction.two.phase.commit.enable": True})
    p.init_transactions(keep_prepared_txn=True)  # ... and the completer is gone
    p.close()
    SinkCommitter(cfg).commit(sink, 0, [])
    assert sorted(read_committed(bs, topic, expect=60)) == sorted(_values("bumped", 60))


def test_a_decided_batch_outlives_the_transaction_timeout(kafka_broker_factory: Callable[..., KafkaBroker],
                                                          spark_topic: str) -> None:
    """The same wait aborts a plain transaction (control) but not a staged 2PC one."""
    # a process: its transaction timeouts run apart from the test's load
    b = kafka_broker_factory({"transaction.two.phase.commit.enable": "true",
                              "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}, in_process=False)
    with Admin({"bootstrap.servers": b.bootstrap}) as a:
        a.create_topics(spark_topic, 1)
    opts = {"kafka.bootstrap.servers": b.bootstrap, "topic": spark_topic, "kafka.transaction.timeout.ms": "1000"}
    sink = f"q-{uuid.uuid4().hex[:8]}"
    plain = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"plain-{sink}",
                      "transaction.timeout.ms": 1000})
    plain.init_transactions()
    plain.begin_transaction()
    plain.produce(spark_topic, b"plain")
    plain.flush()
    msgs = [_stage(opts, sink, 0, 0, 0, _values("staged", 30))]
    time.sleep(3.0)  # > transaction.timeout.ms + the coordinator's abort interval
    with Admin({"bootstrap.servers": b.bootstrap}) as a:
        states = {d.transactional_id: d.state for d in
                  a.describe_transactions([f"plain-{sink}", msgs[0].txn.transactional_id if msgs[0].txn else ""]
                                          ).values()}
    assert states[f"plain-{sink}"] in ("CompleteAbort", "PrepareAbort"), states
    plain.close(1)
    SinkCommitter(parse_sink_options(opts)).commit(sink, 0, msgs)
    assert sorted(read_committed(b.bootstrap, spark_topic, expect=30)) == sorted(_values("staged", 30))


def test_decisions_of_finished_batches_are_tombstoned(opts: dict[str, str]) -> None:
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    cfg = parse_sink_options(opts)
    for b in range(3):
        SinkCommitter(cfg).commit(sink, b, [_stage(opts, sink, b, 0, 0, _values(f"t{b}", 10))])
    with Admin(cfg.admin_conf) as a:
        assert list(SinkCommitLog(cfg.admin_conf, cfg.commit_topic).decisions(sink, a)) == [2]
        configs = a.describe_configs(cfg.commit_topic)
    assert configs["cleanup.policy"].value == "compact"
    assert len(read_committed(bs, topic, expect=30)) == 30


def test_sink_options_and_schema_are_checked_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    from oncelog.spark.options import OncelogOptionError
    from oncelog.spark.sink import validate_sink_schema
    from oncelog.spark.sink_faults import fault_points

    base = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
    cfg = parse_sink_options({**base, "kafka.linger.ms": "5", "topic": "t"})
    assert cfg.producer_conf["linger.ms"] == "5" and cfg.topic == "t" and cfg.sink_id is None
    with pytest.raises(OncelogOptionError, match="sinkId"):
        parse_sink_options({**base, "sinkId": "a/b"})

    def schema(**cols: object) -> StructType:
        return StructType([StructField(n, t, True) for n, t in cols.items()])  # type: ignore[arg-type]

    validate_sink_schema(schema(value=StringType(), key=BinaryType(), partition=IntegerType()), True)
    validate_sink_schema(schema(value=BinaryType(), topic=StringType()), False)
    with pytest.raises(OncelogOptionError, match="'value' column"):
        validate_sink_schema(schema(v=BinaryType()), True)
    with pytest.raises(OncelogOptionError, match="column 'partition' must be int, got bigint"):
        validate_sink_schema(schema(value=BinaryType(), partition=LongType()), True)
    with pytest.raises(OncelogOptionError, match="option 'topic'"):
        validate_sink_schema(schema(value=BinaryType()), False)

    monkeypatch.setenv("ONCELOG_SPARK_SINK_FAULT", "kill-worker:1, kill-after-decision:2,sleep-in-write:0.5")
    assert fault_points() == {"kill-worker": "1", "kill-after-decision": "2", "sleep-in-write": "0.5"}
    monkeypatch.delenv("ONCELOG_SPARK_SINK_FAULT")
    assert fault_points() == {}


def _read_rows(bs: str, topics: list[str], partitions: int, want: int) -> dict[bytes, tuple[Any, ...]]:
    """value -> (topic, partition, key, headers) of what a read_committed confluent-kafka consumer sees."""
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4().hex}",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in topics for p in range(partitions)])
        seen: dict[bytes, tuple[Any, ...]] = {}
        deadline = time.monotonic() + 30
        while len(seen) < want and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    seen[m.value()] = (m.topic(), m.partition(), m.key(), list(m.headers() or []))
        return seen
    finally:
        c.close()


def test_staged_rows_go_where_produce_would_put_them(opts: dict[str, str]) -> None:
    """The bulk path keeps produce()'s choices: a row's partition column if set, else murmur2 of its key, else
    one (sticky) partition; the topic column (null: the option) splits rows by topic; headers and string
    columns are kept."""
    bs, topic, sink = opts["kafka.bootstrap.servers"], opts["topic"], f"q-{uuid.uuid4().hex[:8]}"
    other = f"{topic}-other"
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics(other, 3)
    cfg = parse_sink_options(opts)
    n = 600
    keys = [None if i % 7 == 0 else f"key-{i % 50}" for i in range(n)]
    parts = [i % 3 if i % 5 == 0 else None for i in range(n)]
    topics = [other if i % 2 else None for i in range(n)]
    headers = [[{"key": "h", "value": f"{i}".encode()}] if i % 3 == 0 else None for i in range(n)]
    header_type = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
    rb = pa.record_batch({"value": pa.array([f"v{i}" for i in range(n)], pa.string()),
                          "key": pa.array(keys, pa.string()), "topic": pa.array(topics, pa.string()),
                          "partition": pa.array(parts, pa.int32()), "headers": pa.array(headers, header_type)})
    s = StagingTxn(cfg.producer_conf, make_txn_id(cfg.txn_id_prefix, sink, 0, 0, 0), cfg.topic)
    s.write(rb)
    msg = SinkCommitMessage(sink, 0, 0, 0, s.prepare())
    assert msg.txn is not None and msg.txn.rows == n and set(msg.txn.topics) == {topic, other}
    SinkCommitter(cfg).commit(sink, 0, [msg])
    seen = _read_rows(bs, [topic, other], 3, n)
    assert len(seen) == n
    sticky: dict[str, set[int]] = {topic: set(), other: set()}
    for i in range(n):
        t, p, k, hs = seen[f"v{i}".encode()]
        assert t == (other if i % 2 else topic)
        assert k == (None if keys[i] is None else keys[i].encode())
        assert hs == ([("h", f"{i}".encode())] if i % 3 == 0 else [])
        if parts[i] is not None:
            assert p == parts[i]
        elif k is not None:
            assert p == partition_for_key(k, 3)
        else:
            sticky[t].add(p)
    assert all(len(ps) == 1 for ps in sticky.values())


def test_a_row_without_topic_fails_the_task(spark_bootstrap: str, spark_topic: str) -> None:
    cfg = parse_sink_options({"kafka.bootstrap.servers": spark_bootstrap})
    s = StagingTxn(cfg.producer_conf, make_txn_id(cfg.txn_id_prefix, "q-nt", 0, 0, 0), None)
    try:
        with pytest.raises(SinkRowError, match="row 1 has no topic"):
            s.write(pa.record_batch({"value": [b"a", b"b"], "topic": pa.array([spark_topic, None], pa.string())}))
    finally:
        s.discard()
