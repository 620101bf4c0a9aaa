"""Drop-in: the same programs, written for confluent-kafka, run with ``confluent_kafka`` and with
``oncelog.client`` (only the import differs) and must observe the same results. Every assertion below is made for
both clients alike; a failure names the client in the test id."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from types import ModuleType

import pytest
from _dropin_programs import admin_script, copier, group_consumer, produce, read_all

Client = tuple[str, ModuleType, ModuleType]


def _uid() -> str:
    return uuid.uuid4().hex[:10]


def _make_topic(admin: ModuleType, bootstrap: str, topic: str, partitions: int) -> None:
    a = admin.AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([admin.NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(30)


@pytest.mark.timeout(120)
def test_admin_script(client: Client, bootstrap: str) -> None:
    _, ck, admin = client
    seen = admin_script(ck, admin, bootstrap, f"dropin-admin-{_uid()}")
    assert seen == {
        "created": {"-a": ("ok", None), "-b": ("ok", None)},
        "created_again": ("error", 36, "TOPIC_ALREADY_EXISTS", False),
        "already_exists_constant": True,
        "grown": ("ok", None),
        "partitions": {"-a": [0, 1, 2], "-b": [0, 1, 2, 3]},
        "brokers_known": True,
        "topic_error": None,
        "leaders_known": True,
        "described_ok": "ok",
        "retention": "3600000",
        "retention_entry_name": "retention.ms",
        "deleted": ("ok", None),
        "gone": True,
        "delete_missing": ("error", 3, "UNKNOWN_TOPIC_OR_PART", False),
    }


@pytest.mark.timeout(180)
def test_produce_then_group_consumer_with_rebalance_callbacks(client: Client, bootstrap: str) -> None:
    _, ck, admin = client
    topic, n = f"dropin-group-{_uid()}", 400
    _make_topic(admin, bootstrap, topic, 4)
    produced = produce(ck, bootstrap, topic, n)
    assert produced == {
        "queued_before_flush": True, "left_after_flush": 0, "len_after_flush": 0, "poll_after_flush": 0,
        "reports": n, "errors": 0, "report_fields": [(True, True, True, True)],
        "offsets_per_partition": [0, 1, 2, 3], "dense_offsets": True,
    }
    seen = group_consumer(ck, bootstrap, topic, f"dropin-g-{_uid()}", n)
    assert seen["failures"] == []
    assert seen["values"] == sorted(f"v{i}".encode() for i in range(n))
    assert seen["fields"] == [(True, True, True, True, True, True)]
    assert seen["split_2_2"]
    # eager (range) rebalancing: a gets 4, gives them back when b joins, gets 2, gives them back when b leaves,
    # gets 4; b gets 2 and gives them back when it closes
    assert seen["a_events"] == [("assign", 4), ("revoke", 4), ("assign", 2), ("revoke", 2), ("assign", 4),
                                ("revoke", 4)]
    assert seen["b_events"] == [("assign", 2), ("revoke", 2)]
    ends = [high for _, high in seen["watermarks"]]
    assert sum(ends) == n and all(low == 0 for low, _ in seen["watermarks"])
    assert seen["committed"] == [(True, p, ends[p], None) for p in range(4)]


@pytest.mark.timeout(180)
def test_transactional_copier(client: Client, bootstrap: str) -> None:
    _, ck, admin = client
    src, dst, n = f"dropin-src-{_uid()}", f"dropin-dst-{_uid()}", 300
    _make_topic(admin, bootstrap, src, 3)
    _make_topic(admin, bootstrap, dst, 3)
    assert produce(ck, bootstrap, src, n)["reports"] == n
    group = f"dropin-copier-{_uid()}"
    stats = copier(ck, bootstrap, src, dst, group, f"dropin-txn-{_uid()}")
    assert stats["aborted_txns"] == 1 and stats["committed_txns"] >= 1 and stats["copied"] == n
    assert stats["commit_without_txn"] == (True, False, False)
    committed = read_all(ck, bootstrap, dst, 3, "read_committed")
    assert sorted(committed) == sorted(f"V{i}".encode() for i in range(n))  # each once, none of the aborted
    everything = read_all(ck, bootstrap, dst, 3, "read_uncommitted")
    assert len(everything) > n and set(everything) == set(committed)  # the aborted batch is in the log
    # the copier's offsets were committed with its transactions: a new member of the group starts at the end
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = c.committed([ck.TopicPartition(src, p) for p in range(3)], timeout=30)
        ends = [c.get_watermark_offsets(ck.TopicPartition(src, p), timeout=30)[1] for p in range(3)]
    finally:
        c.close()
    assert [tp.offset for tp in offsets] == ends and sum(ends) == n


@pytest.mark.timeout(120)
def test_no_warnings_at_exit_without_close(client: Client, bootstrap: str, tmp_path: object) -> None:
    """A program that never closes its clients (a producer with a transaction left open, a group consumer, an
    admin client) exits silently (nothing on stderr) and with status 0."""
    name = client[0]
    topic = f"dropin-exit-{_uid()}"
    script = textwrap.dedent(f"""
        import {name} as ck
        from {name}.admin import AdminClient, NewTopic
        bs = {bootstrap!r}
        a = AdminClient({{"bootstrap.servers": bs}})
        for f in a.create_topics([NewTopic({topic!r}, num_partitions=2, replication_factor=1)]).values():
            f.result(30)
        p = ck.Producer({{"bootstrap.servers": bs, "transactional.id": "dropin-exit-{_uid()}"}})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce({topic!r}, b"x")
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce({topic!r}, b"left in a transaction never committed")
        p.flush(30)  # librdkafka warns at exit about undelivered records; delivered ones are fine
        c = ck.Consumer({{"bootstrap.servers": bs, "group.id": "dropin-exit-{_uid()}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"}})
        c.subscribe([{topic!r}])
        got = []
        for _ in range(40):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
                break
        print(got)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[b'x']"
    assert r.stderr == ""


def test_values_and_objects_without_a_broker(client: Client) -> None:
    """KafkaError, KafkaException, TopicPartition and the constants behave alike."""
    _, ck, _ = client
    e = ck.KafkaError(ck.KafkaError.TOPIC_ALREADY_EXISTS)
    assert (e.code(), e.name(), e.retriable(), e.fatal(), e.txn_requires_abort()) == (
        36, "TOPIC_ALREADY_EXISTS", False, False, False)
    assert e == 36 and e != 37 and isinstance(e.str(), str) and e.str()  # the texts differ: librdkafka's, Kafka's
    x = ck.KafkaException(e)
    assert x.args[0] is e and isinstance(x, Exception)
    t = ck.KafkaError(ck.KafkaError._TIMED_OUT)
    assert (t.code(), t.name()) == (-185, "_TIMED_OUT")
    assert ck.KafkaError._PARTITION_EOF == -191 and ck.KafkaError._NO_OFFSET == -168
    assert ck.KafkaError(6).name() == "NOT_LEADER_FOR_PARTITION"
    tp = ck.TopicPartition("t", 1)
    assert (tp.topic, tp.partition, tp.offset, tp.metadata, tp.leader_epoch, tp.error) == (
        "t", 1, ck.OFFSET_INVALID, None, None, None)
    assert ck.TopicPartition("t", 1, 5) == tp and hash(ck.TopicPartition("t", 1, 5)) == hash(tp)
    assert ck.TopicPartition("t", 0) < tp and ck.TopicPartition("t").partition == -1
    assert len({ck.TopicPartition("t", 1, 5), tp}) == 1
    assert (ck.OFFSET_BEGINNING, ck.OFFSET_END, ck.OFFSET_STORED, ck.OFFSET_INVALID) == (-2, -1, -1000, -1001)
    assert (ck.TIMESTAMP_NOT_AVAILABLE, ck.TIMESTAMP_CREATE_TIME, ck.TIMESTAMP_LOG_APPEND_TIME) == (0, 1, 2)
