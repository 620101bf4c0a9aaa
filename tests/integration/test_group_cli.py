"""``oncelog group ...``: list/describe/reset-offsets/delete on a group made by a real confluent-kafka consumer.

The consumer subscribes, reads the whole topic, commits chosen (partial) offsets and closes, leaving an Empty group.
An open transaction on one partition holds back its last stable offset, so read_committed lag is smaller than
read_uncommitted lag there.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from oncelog.client.admin import Admin
from oncelog.client.errors import KafkaError
from oncelog.protocol.errors import ErrorCode

from helpers.cli import Result, oncelog


def run(*args: str) -> Result:
    return oncelog(*args)


def run_json(*args: str):
    r = run(*args, "--json")
    assert r.exit_code == 0, f"{args}: exit {r.exit_code}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return json.loads(r.stdout)


def produce_plain(bootstrap: str, topic: str, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert p.flush(15) == 0
    close_producer(p)


def close_producer(p: Producer) -> None:
    """Release librdkafka's threads now (``close`` is new in confluent-kafka 2.x), not when the GC gets to it."""
    if hasattr(p, "close"):
        p.close()


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"cli-{group}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 10000, **extra})


def consume(c: Consumer, want: int, timeout: float = 20.0) -> int:
    got, deadline = 0, time.monotonic() + timeout
    while got < want and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    return got


def committed(bootstrap: str, group: str, topic: str, parts: list[int]) -> dict[int, int]:
    c = consumer(bootstrap, group)
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in parts], 15)}
    finally:
        c.close()


def make_empty_group(bootstrap: str, topic: str, group: str) -> None:
    """10 records on partition 0, 6 on partition 1; the group reads all, commits 4 and 2, then leaves."""
    with Admin({"bootstrap.servers": bootstrap}) as a:
        a.create_topics(topic, partitions=2)
    produce_plain(bootstrap, topic, 0, 10)
    produce_plain(bootstrap, topic, 1, 6)
    c = consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        assert consume(c, 16) == 16
        c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 2)], asynchronous=False)
    finally:
        c.close()


def offsets_by_partition(desc: dict) -> dict[int, dict]:
    return {r["partition"]: r for r in desc["offsets"]}


def test_group_lifecycle(bootstrap: str, topic_name: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    make_empty_group(bootstrap, topic_name, group)

    listed = {g["group_id"]: g for g in run_json("group", "list", "-b", bootstrap)}
    assert listed[group]["state"] == "Empty" and listed[group]["protocol_type"] == "consumer"
    assert group in {g["group_id"] for g in run_json("group", "list", "--state", "Empty", "-b", bootstrap)}
    assert group not in {g["group_id"] for g in run_json("group", "list", "--state", "Stable", "-b", bootstrap)}

    desc = run_json("group", "describe", group, "-b", bootstrap)
    assert desc["state"] == "Empty" and desc["members"] == [] and desc["isolation"] == "read_committed"
    rows = offsets_by_partition(desc)
    assert {p: (r["committed_offset"], r["log_end_offset"], r["last_stable_offset"], r["lag"])
            for p, r in rows.items()} == {0: (4, 10, 10, 6), 1: (2, 6, 6, 4)}
    assert desc["total_lag"] == 10

    # an open transaction on partition 0 (3 records) followed by 2 plain records: LSO stays at 10, LEO is 15
    txp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
                    "transaction.timeout.ms": 60000, "linger.ms": 0})
    txp.init_transactions(15)
    txp.begin_transaction()
    for i in range(3):
        txp.produce(topic_name, value=b"t%d" % i, partition=0)
    assert txp.flush(15) == 0
    produce_plain(bootstrap, topic_name, 0, 2)
    try:
        rc = offsets_by_partition(run_json("group", "describe", group, "-b", bootstrap))[0]
        assert (rc["committed_offset"], rc["log_end_offset"], rc["last_stable_offset"], rc["lag"]) == (4, 15, 10, 6)
        ru = offsets_by_partition(run_json("group", "describe", group, "--isolation", "read_uncommitted",
                                           "-b", bootstrap))[0]
        assert (ru["last_stable_offset"], ru["lag"]) == (10, 11)
        text = run("group", "describe", group, "-b", bootstrap)
        assert text.exit_code == 0 and "Lag (vs LSO)" in text.stdout and "Empty" in text.stdout
    finally:
        txp.abort_transaction(15)
        close_producer(txp)

    # dry run: prints the plan, changes nothing
    dry = run_json("group", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "-b", bootstrap)
    assert dry["executed"] is False
    assert {r["partition"]: (r["current_offset"], r["new_offset"]) for r in dry["offsets"]} == {0: (4, 0), 1: (2, 0)}
    assert committed(bootstrap, group, topic_name, [0, 1]) == {0: 4, 1: 2}
    text = run("group", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "-b", bootstrap)
    assert text.exit_code == 0 and "Dry run" in text.stdout

    done = run_json("group", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute",
                    "-b", bootstrap)
    assert done["executed"] is True
    assert committed(bootstrap, group, topic_name, [0, 1]) == {0: 0, 1: 0}

    # the other specs, on one partition
    run_json("group", "reset-offsets", group, "-t", topic_name, "-p", "1", "--to-offset", "5", "--execute",
             "-b", bootstrap)
    run_json("group", "reset-offsets", group, "-t", topic_name, "-p", "0", "--to-latest", "--execute", "-b", bootstrap)
    assert committed(bootstrap, group, topic_name, [0, 1]) == {0: 16, 1: 5}  # 10 + 3 aborted + 2 + abort marker
    shifted = run_json("group", "reset-offsets", group, "-t", topic_name, "-p", "1", "--shift-by", "-3",
                       "--execute", "-b", bootstrap)
    assert shifted["offsets"] == [{"topic": topic_name, "partition": 1, "current_offset": 5, "new_offset": 2}]
    future = run_json("group", "reset-offsets", group, "-t", topic_name, "-p", "1", "--to-datetime",
                      "2100-01-01T00:00:00Z", "-b", bootstrap)
    assert future["offsets"][0]["new_offset"] == 6  # no record that late: the log end
    past = run_json("group", "reset-offsets", group, "-t", topic_name, "-p", "1", "--to-datetime",
                    "2000-01-01T00:00:00+00:00", "-b", bootstrap)
    assert past["offsets"][0]["new_offset"] == 0

    usage = run("group", "reset-offsets", group, "-t", topic_name, "--to-earliest", "--to-latest", "-b", bootstrap)
    assert usage.exit_code == 2 and "exactly one of" in usage.stderr

    with Admin({"bootstrap.servers": bootstrap}) as a:
        assert a.list_group_offsets(group) == {(topic_name, 0): 16, (topic_name, 1): 2}
        a.delete_group_offsets(group, [(topic_name, 1)])
        assert a.list_group_offsets(group) == {(topic_name, 0): 16}
        assert a.list_group_offsets(group, [(topic_name, 1)]) == {}

    deleted = run_json("group", "delete", group, "-b", bootstrap)
    assert deleted == [{"group_id": group, "deleted": True, "error": None}]
    assert group not in {g["group_id"] for g in run_json("group", "list", "-b", bootstrap)}
    missing = run("group", "describe", group, "-b", bootstrap)
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    again = run("group", "delete", group, "-b", bootstrap)
    assert again.exit_code == 1 and "does not exist" in again.stderr


def test_active_group_refuses_reset_and_delete(bootstrap: str, topic_name: str) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    make_empty_group(bootstrap, topic_name, group)
    c = consumer(bootstrap, group)
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert sorted(tp.partition for tp in c.assignment()) == [0, 1]

        desc = run_json("group", "describe", group, "-b", bootstrap)
        assert desc["state"] == "Stable" and desc["protocol_type"] == "consumer" and desc["protocol"]
        [member] = desc["members"]
        assert member["client_id"] == f"cli-{group}" and member["client_host"]
        assert member["assignment"] == [{"topic": topic_name, "partition": 0}, {"topic": topic_name, "partition": 1}]
        assert {r["partition"]: r["member_id"] for r in desc["offsets"]} == {0: member["member_id"],
                                                                             1: member["member_id"]}

        refused = run("group", "reset-offsets", group, "-t", topic_name, "--to-earliest", "--execute",
                      "-b", bootstrap)
        assert refused.exit_code == 1 and "Stable" in refused.stderr and "no members" in refused.stderr
        busy = run("group", "delete", group, "-b", bootstrap)
        assert busy.exit_code == 1 and "active members" in busy.stderr
        with Admin({"bootstrap.servers": bootstrap}) as a:
            with pytest.raises(KafkaError) as e:
                a.alter_group_offsets(group, {(topic_name, 0): 0})
            assert e.value.code() == ErrorCode.UNKNOWN_MEMBER_ID
            with pytest.raises(KafkaError) as e:
                a.delete_group_offsets(group, [(topic_name, 0)])
            assert e.value.code() == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    finally:
        c.close()
    assert committed(bootstrap, group, topic_name, [0, 1]) == {0: 4, 1: 2}
    run_json("group", "delete", group, "-b", bootstrap)
