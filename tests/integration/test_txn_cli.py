"""``oncelog txn ...``: list/describe/producers on an open transaction, abort it, and find + abort a hanging one.

A transaction is left open with a confluent-kafka transactional producer (produce + flush, no commit). The hanging
one is made on a private broker whose transaction coordinator state is removed while it is down: the partition
still holds the open transaction, and no coordinator will ever end it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from oncelog.client.admin import Admin
from oncelog.testing.pytest_plugin import KafkaBroker

from _cli import Result, oncelog


def run(*args: str) -> Result:
    return oncelog(*args)


def run_json(*args: str):
    r = run(*args, "--json")
    assert r.exit_code == 0, f"{args}: exit {r.exit_code}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return json.loads(r.stdout)


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps tables to the terminal width


def open_transaction(bootstrap: str, txn_id: str, records: list[tuple[str, int, bytes]]) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 60000,
                  "linger.ms": 0})
    p.init_transactions(15)
    p.begin_transaction()
    for topic, partition, value in records:
        p.produce(topic, value=value, partition=partition)
    assert p.flush(15) == 0
    return p


def produce_plain(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(15) == 0


def read_committed(bootstrap: str, topic: str, partition: int, want: int, timeout: float = 8.0) -> list[bytes]:
    """Values a read_committed consumer (assign, from offset 0) gets within ``timeout``, stopping at ``want``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def lso(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    with Admin({"bootstrap.servers": bootstrap}) as a:
        tp = (topic, partition)
        return (a.list_offsets({tp: "latest"}, isolation_level=1)[tp].offset, a.list_offsets({tp: "latest"})[tp].offset)


def test_open_transaction_is_listed_described_and_aborted(bootstrap: str, topic_name: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    assert run("topic", "create", topic_name, "--partitions", "2", *b).exit_code == 0
    produce_plain(bootstrap, topic_name, 0, [b"before"])  # offset 0 of partition 0, committed
    txn_id = f"tid-{topic_name}"
    producer = open_transaction(bootstrap, txn_id, [(topic_name, 0, b"t0"), (topic_name, 0, b"t1"),
                                                     (topic_name, 0, b"t2"), (topic_name, 1, b"u0")])

    # list: the transaction is Ongoing; filters by state and producer id work on the broker side
    listed = [t for t in run_json("txn", "list", *b) if t["transactional_id"] == txn_id]
    assert len(listed) == 1 and listed[0]["state"] == "Ongoing" and listed[0]["coordinator_id"] == 0
    pid = listed[0]["producer_id"]
    assert pid >= 0
    assert run_json("txn", "list", "--state", "Ongoing", "--producer-id", str(pid), *b) == listed
    assert run_json("txn", "list", "--state", "CompleteCommit", "--producer-id", str(pid), *b) == []
    r = run("txn", "list", *b)
    assert r.exit_code == 0 and txn_id in flat(r.stdout) and "Ongoing" in r.stdout
    assert [t["transactional_id"] for t in run_json("txn", "list", "--min-duration-ms", "0", "--producer-id",
                                                    str(pid), *b)] == [txn_id]
    assert run_json("txn", "list", "--min-duration-ms", "3600000", "--producer-id", str(pid), *b) == []
    r = run("txn", "list", "--state", "Bogus", *b)
    assert r.exit_code == 1 and "Bogus" in r.stderr and "Ongoing" in r.stderr  # names the known states

    # describe: state, producer, timeout and both partitions
    d = run_json("txn", "describe", txn_id, *b)
    assert d["state"] == "Ongoing" and d["producer_id"] == pid and d["producer_epoch"] >= 0
    assert d["transaction_timeout_ms"] == 60000
    assert d["topic_partitions"] == [{"topic": topic_name, "partition": 0}, {"topic": topic_name, "partition": 1}]
    assert d["transaction_start_time_ms"] > 0 and 0 <= d["duration_ms"] < 120_000
    r = run("txn", "describe", txn_id, *b)
    assert r.exit_code == 0 and f"{topic_name}-0" in flat(r.stdout) and "Ongoing" in r.stdout
    r = run("txn", "describe", f"no-such-{uuid.uuid4().hex[:6]}", *b)
    assert r.exit_code == 1 and "not known" in r.stderr and "oncelog txn list" in r.stderr

    # producers: where the open transaction starts on each partition
    rows = [x for x in run_json("txn", "producers", topic_name, *b) if x["producer_id"] == pid]
    assert {(x["partition"], x["current_txn_start_offset"]) for x in rows} == {(0, 1), (1, 0)}
    p0 = next(x for x in rows if x["partition"] == 0)
    assert p0["last_sequence"] == 2 and p0["coordinator_epoch"] is None and p0["last_timestamp"] > 0
    only1 = run_json("txn", "producers", topic_name, "--partition", "1", *b)
    assert [(x["partition"], x["producer_id"], x["current_txn_start_offset"]) for x in only1] == [(1, pid, 0)]
    r = run("txn", "producers", topic_name, "--partition", "0", *b)
    assert r.exit_code == 0 and str(pid) in r.stdout and "1 open transaction(s)" in flat(r.stdout)
    r = run("txn", "producers", f"{topic_name}-missing", *b)
    assert r.exit_code == 1 and "does not exist" in r.stderr

    # the coordinator still owns this transaction: not hanging, however old
    assert run_json("txn", "find-hanging", "--topic", topic_name, "--max-duration-ms", "0", *b) == []

    # the open transaction pins the LSO: read_committed sees only the record before it
    assert lso(bootstrap, topic_name, 0) == (1, 4)
    produce_plain(bootstrap, topic_name, 0, [b"after"])  # offset 4, behind the open transaction
    assert read_committed(bootstrap, topic_name, 0, want=2, timeout=1.5) == [b"before"]

    # abort by start offset: a wrong one is refused, the right one releases the partition
    r = run("txn", "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "2", *b)
    assert r.exit_code == 1 and "no open transaction starts at offset 2" in r.stderr and "start at 1" in r.stderr
    r = run("txn", "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "1", "--json", *b)
    assert r.exit_code == 0, r.stderr
    assert f"warning: transaction {txn_id!r} is Ongoing on its coordinator" in flat(r.stderr)
    out = json.loads(r.stdout)
    assert out["producer_id"] == pid and out["producer_epoch"] == d["producer_epoch"]
    assert out["last_stable_offset_before"] == 1 and out["last_stable_offset"] == 6  # 0..4 data, 5 marker
    assert lso(bootstrap, topic_name, 0) == (6, 6)
    assert read_committed(bootstrap, topic_name, 0, want=2) == [b"before", b"after"]  # t0..t2 aborted, skipped
    p0 = next(x for x in run_json("txn", "producers", topic_name, "--partition", "0", *b) if x["producer_id"] == pid)
    assert p0["current_txn_start_offset"] is None and p0["coordinator_epoch"] == 0

    # abort by producer id/epoch on partition 1 (coordinator epoch -1 = none seen yet, sent as 0)
    r = run("txn", "abort", "--topic", topic_name, "--partition", "1", "--producer-id", str(pid),
            "--producer-epoch", str(d["producer_epoch"]), "--coordinator-epoch", "-1", *b)
    assert r.exit_code == 0, r.stderr
    assert f"producer {pid}" in r.stdout and "last stable offset 0 -> 2" in r.stdout
    assert lso(bootstrap, topic_name, 1) == (2, 2)
    produce_plain(bootstrap, topic_name, 1, [b"plain"])
    assert read_committed(bootstrap, topic_name, 1, want=1) == [b"plain"]  # u0 (offset 0) aborted, skipped

    # the producer can still end its transaction (the coordinator's markers find nothing open)
    producer.abort_transaction(15)
    assert [t["state"] for t in run_json("txn", "list", "--producer-id", str(pid), *b)] == ["CompleteAbort"]
    assert run_json("txn", "describe", txn_id, *b)["topic_partitions"] == []
    del producer


@pytest.mark.parametrize("args, message", [
    ((), "say which transaction to abort"),
    (("--start-offset", "1", "--producer-id", "3"), "cannot be combined"),
    (("--producer-id", "3", "--producer-epoch", "0"), "missing --coordinator-epoch"),
])
def test_abort_usage_errors(bootstrap: str, args: tuple[str, ...], message: str) -> None:
    r = run("txn", "abort", "--topic", "any", "--partition", "0", *args, "--bootstrap-server", bootstrap)
    assert r.exit_code == 2 and message in r.stderr


def test_unreachable_broker_is_a_clear_error() -> None:
    r = run("txn", "list", "--bootstrap-server", "127.0.0.1:1")
    assert r.exit_code == 1 and "cannot list transactions" in r.stderr and "hint:" in r.stderr
    r = run("txn", "find-hanging", "--partition", "0", "--bootstrap-server", "127.0.0.1:1")
    assert r.exit_code == 2 and "--partition needs --topic" in r.stderr


def test_find_and_abort_hanging_transaction(tmp_path: Path, kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    """The coordinator loses its state while a transaction is open: find-hanging reports it, abort releases it."""
    broker = kafka_broker_factory({"num.partitions": 1}, data_dir=tmp_path / "data")
    try:
        b = ["--bootstrap-server", broker.bootstrap]
        assert run("topic", "create", "orders", "--partitions", "2", *b).exit_code == 0
        assert run("topic", "create", "quiet", *b).exit_code == 0
        producer = open_transaction(broker.bootstrap, "lost-app", [("orders", 1, b"a"), ("orders", 1, b"b")])
        assert broker.stop() == 0
        del producer
        for state_dir in (tmp_path / "data").glob("__transaction_state-*"):
            for f in state_dir.iterdir():
                f.unlink()
        broker.start()
        produce_plain(broker.bootstrap, "orders", 1, [b"later"])  # offset 2, behind the hanging transaction
        assert lso(broker.bootstrap, "orders", 1) == (0, 3)
        assert run_json("txn", "list", *b) == []  # the coordinator knows no transaction

        hanging = run_json("txn", "find-hanging", "--max-duration-ms", "0", *b)
        assert len(hanging) == 1
        h = hanging[0]
        assert (h["topic"], h["partition"], h["start_offset"], h["transactional_id"]) == ("orders", 1, 0, None)
        assert h["producer_epoch"] == 0 and h["duration_ms"] >= 0 and "no transactional id" in h["reason"]
        # a write newer than --max-duration-ms is not a candidate yet
        assert run_json("txn", "find-hanging", "--max-duration-ms", "3600000", *b) == []
        assert run_json("txn", "find-hanging", "--topic", "orders", "--partition", "0",
                        "--max-duration-ms", "0", *b) == []
        r = run("txn", "find-hanging", "--topic", "orders", "--max-duration-ms", "0", *b)
        assert r.exit_code == 0
        text = flat(r.stdout)
        assert "1 hanging transaction(s)" in text
        assert "oncelog txn abort --topic orders --partition 1 --start-offset 0" in text
        assert read_committed(broker.bootstrap, "orders", 1, want=1, timeout=1.5) == []  # stuck at the LSO

        r = run("txn", "abort", "--topic", "orders", "--partition", "1", "--start-offset", "0", *b)
        assert r.exit_code == 0, r.stderr
        assert "last stable offset 0 -> 4" in r.stdout and "warning" not in r.stderr  # nobody else will end it
        assert read_committed(broker.bootstrap, "orders", 1, want=1) == [b"later"]
        assert run_json("txn", "find-hanging", "--max-duration-ms", "0", *b) == []
        r = run("txn", "find-hanging", "--max-duration-ms", "0", *b)
        assert r.exit_code == 0 and "No hanging transactions found." in r.stdout
    finally:
        assert broker.stop() == 0
