#!/usr/bin/env python3
"""A three-broker cluster on one box: throughput at replication factor 1 vs 3, latency at 3, and failover times.

    python bench/cluster_bench.py                        # 3 rounds, 300k x 100 B, 5 failovers of each kind
    python bench/cluster_bench.py --rounds 5 --messages 500000 --failovers 10 --json out.json
    python bench/cluster_bench.py --sections txn --txn-rounds 3          # transactions only, RF=3 vs one broker

One cluster (etcd + 3 oncelog brokers on 127.0.0.1, default settings but the replication factors) serves every
round. Throughput rounds alternate RF=1 and RF=3 (a fresh 3-partition topic each, ``acks=all``, confluent-kafka, the
same client settings as ``bench/run.py``), so both see the same box in the same run. Latency: one record at a time,
``acks=all``, RF=3, ``min.insync.replicas=2``.

Failover, with default broker settings (``broker.session.timeout.ms``, ``replica.lag.time.max.ms``):

- **leader**: an idempotent ``acks=all`` producer writes one record at a time to a partition (RF=3) led by the
  victim; the victim is SIGKILLed; the time is from the kill to the first write acknowledged after it (by the new
  leader). The victim is restarted and back in the ISR before the next round.
- **coordinator**: a transactional producer commits one-record transactions in a loop; the broker leading its
  ``__transaction_state`` partition is SIGKILLed; the time is from the kill to the first ``commit_transaction``
  that returns after it (through the new coordinator, which loaded the partition).

Transactions (``--txn-rounds``, against the cluster at RF=3 and, in the same run, a single broker with default
settings started next to it; rounds alternate between the two, a fresh topic and transactional id each, so the
coordinator lands on a different broker from round to round):

- **throughput**: ``--transactions`` transactions of 10 records of ``--value-size`` B (``acks=all``, idempotent,
  ``linger.ms=5``), records round-robin over the topic's 3 partitions (at RF=3 one leader on each broker: every
  transaction verifies its writes with the coordinator, and sends markers to three leaders); txn/s.
- **latency**: ``--txn-latency-samples`` one-record transactions per round (``linger.ms=35``, as librdkafka's test
  ``0055_producer_latency``): delivery (``produce()`` to the delivery callback) and ``commit_transaction()``, p50 /
  p99 / max over every round's samples, and how many deliveries took over 100 ms (linger + 65 ms).

Memory (``--memory``): the resident set size of each broker process when idle, after a topic of 1,000 partitions
(replication factor 3) is created, and after 10,000 idempotent producer ids have each written one record (to
partition ``id % 1000``): what a broker holds per partition (segment and index files are mapped, not read in) and per
producer id (one entry in the partition's producer state, forgotten after ``producer.id.expiration.ms``).

Scale (``--partitions N``, the ``scale`` section, alone unless ``--sections`` names others): one topic of N
partitions at RF=3: creation, idle CPU and RSS per broker, Metadata size and time, leader failover of every
partition of a SIGKILLed broker, its start-up, controlled shutdown; see ``bench/cluster_scale.py``.

``--sections`` runs a subset (``throughput,latency,failover,txn`` by default, ``scale``). Output: a markdown table
(medians with min-max) and the exact command; ``--json`` writes every sample.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import cluster_scale
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.testing.broker_process import BrokerProcess
from oncelog.testing.cluster import ClusterProcess

PARTITIONS = 3
TXN_TOPIC = "__transaction_state"
SECTIONS = ("throughput", "latency", "failover", "txn", "scale")
DEFAULT_SECTIONS = ("throughput", "latency", "failover", "txn")
TXN_RECORDS = 10  # per transaction, in the throughput rounds
TXN_LINGER_MS = 35  # the latency rounds' linger.ms (librdkafka's 0055_producer_latency)
SLOW_DELIVERY_MS = 100  # a delivery over this (linger + 65 ms) is counted


def log(msg: str) -> None:
    print(f"[cluster-bench] {msg}", file=sys.stderr, flush=True)


def create(boot: str, topic: str, partitions: int, rf: int, configs: dict[str, str] | None = None,
           timeout: float = 30) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})],
                                 operation_timeout=timeout, request_timeout=timeout).values():
        f.result(timeout)


def producer_conf(boot: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": boot, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
            "enable.idempotence": False, **extra}


def produce_round(boot: str, topic: str, n: int, size: int) -> float:
    value = b"x" * size
    errors: list[str] = []

    def done(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer({**producer_conf(boot), "on_delivery": done})
    for i in range(1000):  # warm-up: metadata, connections
        p.produce(topic, value, partition=i % PARTITIONS)
    p.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if i & 1023 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("produce did not finish in 120 s")
    secs = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors: {errors[:3]}")
    return n / secs


def consume_round(boot: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": boot, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(topic, i, 0) for i in range(PARTITIONS)])
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < n + 1000:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += 1
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(m.error())
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumed {got} of {n + 1000}")
    secs = time.perf_counter() - t0
    c.close()
    return got / secs


def latency(boot: str, topic: str, samples: int) -> dict[str, float]:
    p = Producer(producer_conf(boot, **{"linger.ms": 0}))
    for i in range(200):
        p.produce(topic, b"w", partition=i % PARTITIONS)
        p.flush(30)
    out = []
    for i in range(samples):
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 100, partition=i % PARTITIONS)
        if p.flush(30):
            raise RuntimeError("single-record flush timed out")
        out.append((time.perf_counter() - t0) * 1000)
    out.sort()
    return {"p50_ms": out[len(out) // 2], "p99_ms": out[int(len(out) * 0.99)], "max_ms": out[-1]}


def wait_isr(cluster: ClusterProcess, topic: str, timeout: float = 120) -> None:
    cluster.wait_for(lambda v: all(len(s.isr) == len(s.replicas) and s.leader in v.brokers
                                   for _, s in v.topic_partitions(topic)), timeout, f"{topic} fully in sync")


def leader_failover(cluster: ClusterProcess, topic: str) -> float:
    """Seconds from SIGKILL of partition 0's leader to the first write acknowledged after it."""
    victim = cluster.leaders(topic)[0]
    p = Producer(producer_conf(cluster.bootstrap, **{"enable.idempotence": True, "linger.ms": 0,
                                                     "message.timeout.ms": 60_000}))
    acked: list[float] = []

    def done(err: Any, _msg: Any) -> None:
        if err is None:
            acked.append(time.monotonic())

    for _ in range(20):
        p.produce(topic, b"before", partition=0, on_delivery=done)
        p.flush(30)
    def writer(stop: threading.Event) -> None:
        while not stop.is_set():
            p.produce(topic, b"r", partition=0, on_delivery=done)
            p.flush(60)

    return time_kill(cluster, victim, acked, writer, 0.5, topic, "write acknowledged")


def coordinator_failover(cluster: ClusterProcess, topic: str, txn_id: str) -> float:
    """Seconds from SIGKILL of the transaction coordinator's broker to the first commit returning after it."""
    p = Producer(producer_conf(cluster.bootstrap, **{"transactional.id": txn_id, "enable.idempotence": True,
                                                     "linger.ms": 0,
                                                     "transaction.timeout.ms": 60_000}))
    p.init_transactions(60)
    view = cluster.view()
    state = view.partition(TXN_TOPIC, partition_for(txn_id, view.topics[TXN_TOPIC].num_partitions))
    assert state is not None
    victim = state.leader
    commits: list[float] = []
    errors: list[str] = []

    def loop(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                p.begin_transaction()
                p.produce(topic, b"t", partition=0)
                p.commit_transaction(60)
                commits.append(time.monotonic())
            except KafkaException as e:
                errors.append(str(e))
                err = e.args[0]
                if err.txn_requires_abort():
                    try:
                        p.abort_transaction(60)
                    except KafkaException as e2:
                        errors.append(str(e2))
                elif not err.retriable():
                    return

    try:
        return time_kill(cluster, victim, commits, loop, 1.0, TXN_TOPIC, "commit")
    except RuntimeError as e:
        raise RuntimeError(f"{e}; errors {errors[:3]}") from None


def time_kill(cluster: ClusterProcess, victim: int, stamps: list[float], work: Callable[[threading.Event], None],
              settle_s: float, resync: str, what: str) -> float:
    """Run ``work(stop)`` in a thread (it appends the monotonic time of each success to ``stamps``), SIGKILL
    ``victim`` after ``settle_s``, and return the seconds from the kill to the first success after it; the victim is
    restarted and ``resync`` waited for in sync before returning (or raising when nothing succeeded within 60 s)."""
    stop = threading.Event()
    t = threading.Thread(target=work, args=(stop,), daemon=True)
    t.start()
    time.sleep(settle_s)
    killed = time.monotonic()
    cluster.kill(victim)
    deadline = killed + 60
    while time.monotonic() < deadline and not any(s > killed for s in stamps[-50:]):
        time.sleep(0.005)
    stop.set()
    t.join(90)
    after = [s for s in stamps if s > killed]
    cluster.start_broker(victim)
    wait_isr(cluster, resync)
    if not after:
        raise RuntimeError(f"no {what} within 60 s of node {victim}'s SIGKILL")
    return after[0] - killed


def txn_throughput(boot: str, topic: str, transactions: int, size: int, txn_id: str) -> float:
    """Transactions of ``TXN_RECORDS`` records, round-robin over the topic's partitions: txn/s."""
    p = Producer(producer_conf(boot, **{"transactional.id": txn_id, "enable.idempotence": True}))
    p.init_transactions(60)
    value = b"x" * size
    p.begin_transaction()  # warm-up, not timed: coordinator lookup, connections to every leader
    for i in range(PARTITIONS):
        p.produce(topic, value, partition=i)
    p.commit_transaction(60)
    t0 = time.perf_counter()
    for _ in range(transactions):
        p.begin_transaction()
        for i in range(TXN_RECORDS):
            p.produce(topic, value, partition=i % PARTITIONS)
        p.commit_transaction(60)  # raises if a record was not delivered
    return transactions / (time.perf_counter() - t0)


def txn_latency(boot: str, topic: str, samples: int, txn_id: str) -> tuple[list[float], list[float]]:
    """One-record transactions to partition 0: (delivery ms, commit_transaction() ms) of each."""
    p = Producer({"bootstrap.servers": boot, "transactional.id": txn_id, "linger.ms": TXN_LINGER_MS})
    p.init_transactions(60)
    delivery: list[float] = []
    commit: list[float] = []
    for i in range(samples + 5):  # 5 warm-up transactions
        got: list[tuple[Any, float]] = []
        p.begin_transaction()
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 100, partition=0,
                  on_delivery=lambda err, _m: got.append((err, time.perf_counter())))
        while not got:
            p.poll(0.05)
        if got[0][0] is not None:
            raise RuntimeError(f"transaction {i}: delivery failed: {got[0][0]}")
        t1 = time.perf_counter()
        p.commit_transaction(60)
        if i >= 5:
            delivery.append((got[0][1] - t0) * 1000)
            commit.append((time.perf_counter() - t1) * 1000)
    return delivery, commit


def pcts(xs: list[float]) -> str:
    """p50 / p99 / max of millisecond samples."""
    if not xs:
        return "-"
    s = sorted(xs)
    return f"{s[len(s) // 2]:.1f} / {s[min(len(s) - 1, int(len(s) * 0.99))]:.1f} / {s[-1]:.1f}"


def txn_rounds(cluster: ClusterProcess, single: BrokerProcess, rounds: int, transactions: int, size: int,
               latency_samples: int, samples: dict[str, list[float]]) -> None:
    """Transaction rounds alternating between the cluster (RF=3, min ISR 2) and the single broker."""
    for r in range(rounds):
        for kind in ("rf3", "single") if r % 2 == 0 else ("single", "rf3"):
            boot = cluster.bootstrap if kind == "rf3" else single.bootstrap
            topic, txn_id = f"bench-txn-{kind}-{r}", f"bench-txn-{kind}-{r}-{uuid.uuid4().hex[:6]}"
            if kind == "rf3":
                create(boot, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
                wait_isr(cluster, topic)
            else:
                create(boot, topic, PARTITIONS, 1)
            rate = txn_throughput(boot, topic, transactions, size, txn_id + "-tput")
            delivery, commit = txn_latency(boot, topic, latency_samples, txn_id + "-lat")
            samples[f"txn_s_{kind}"].append(rate)
            samples[f"txn_delivery_ms_{kind}"] += delivery
            samples[f"txn_commit_ms_{kind}"] += commit
            log(f"txn round {r} {kind}: {rate:,.0f} txn/s; one-record transactions: delivery {pcts(delivery)}, "
                f"commit {pcts(commit)} ms (p50 / p99 / max)")


def rss_mb(cluster: ClusterProcess) -> dict[int, float]:
    """Resident set size of each broker process, MB (from /proc)."""
    out = {}
    for node, b in cluster.brokers.items():
        assert b.proc is not None
        for line in Path(f"/proc/{b.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out[node] = int(line.split()[1]) / 1024
    return out


def memory(cluster: ClusterProcess, partitions: int = 1000, producers: int = 10_000) -> dict[str, dict[int, float]]:
    """RSS per broker: idle, with ``partitions`` partitions at RF=3, and with ``producers`` idempotent producer ids."""
    from oncelog.client.connection import BrokerConnection
    from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest
    from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
    from oncelog.protocol.records import RecordBatchBuilder

    import asyncio

    out = {"idle": rss_mb(cluster)}
    topic = "bench-memory"
    create(cluster.bootstrap, topic, partitions, 3)
    wait_isr(cluster, topic)
    time.sleep(2.0)
    out[f"{partitions}_partitions"] = rss_mb(cluster)

    async def write() -> None:
        view = cluster.view()
        conns: dict[int, BrokerConnection] = {}
        for node, info in view.brokers.items():
            conns[node] = BrokerConnection(info.host, info.port)
            await conns[node].connect()
        leaders = cluster.leaders(topic, view)
        any_conn = conns[min(conns)]
        sem = asyncio.Semaphore(64)

        async def one(i: int) -> None:
            async with sem:
                r = await any_conn.send(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000))
                b = RecordBatchBuilder(producer_id=r.producer_id, producer_epoch=r.producer_epoch, base_sequence=0)
                b.append(0, None, b"x" * 100)
                part = i % partitions
                resp = await conns[leaders[part]].send(ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[
                    TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=part,
                                                                                      records=b.build())])]))
                code = resp.responses[0].partition_responses[0].error_code
                if code:
                    raise RuntimeError(f"produce to {topic}-{part} failed with error {code}")

        await asyncio.gather(*(one(i) for i in range(producers)))
        for c in conns.values():
            await c.close()

    asyncio.run(write())
    time.sleep(2.0)
    out[f"{producers}_producer_ids"] = rss_mb(cluster)
    return out


def spread(xs: list[float], unit: str = "", digits: int = 2) -> str:
    if not xs:
        return "-"
    fmt = (lambda x: f"{x:,.0f}") if digits == 0 else (lambda x: f"{x:.{digits}f}")
    return f"{fmt(statistics.median(xs))}{unit} ({fmt(min(xs))}-{fmt(max(xs))})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--latency-samples", type=int, default=2000)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--txn-rounds", type=int, default=3, help="transaction rounds per side (RF=3, single broker)")
    ap.add_argument("--transactions", type=int, default=500, help="transactions of 10 records per round")
    ap.add_argument("--txn-latency-samples", type=int, default=200, help="one-record transactions per round")
    ap.add_argument("--sections", help=f"a subset of {','.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)}; "
                    "only scale with --partitions)")
    ap.add_argument("--partitions", type=int, help="the scale section's partition count (default 10,000)")
    ap.add_argument("--idle-seconds", type=float, default=30.0, help="the scale section's idle CPU sample")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--memory", action="store_true", help="also measure RSS with 1,000 partitions and 10,000 "
                    "producer ids (after the other rounds)")
    a = ap.parse_args(argv)
    chosen = a.sections or ("scale" if a.partitions else ",".join(DEFAULT_SECTIONS))
    sections = {x.strip() for x in chosen.split(",") if x.strip()}
    if not sections <= set(SECTIONS):
        ap.error(f"--sections: unknown {', '.join(sorted(sections - set(SECTIONS)))}; choose from {', '.join(SECTIONS)}")

    base = Path(tempfile.mkdtemp(prefix="oncelog-cluster-bench-"))
    cluster = ClusterProcess(base, 3, cluster_name=f"bench-{uuid.uuid4().hex[:6]}")
    cluster.start()
    single: BrokerProcess | None = None
    samples: dict[str, list[float]] = {k: [] for k in (
        "produce_rf1", "produce_rf3", "consume_rf1", "consume_rf3", "leader_failover_s", "coordinator_failover_s",
        *(f"{m}_{kind}" for m in ("txn_s", "txn_delivery_ms", "txn_commit_ms") for kind in ("rf3", "single")))}
    lat: dict[str, float] = {}
    mem: dict[str, dict[int, float]] = {}
    scaled: dict[str, Any] = {}
    try:
        boot = cluster.bootstrap
        for r in range(a.rounds if "throughput" in sections else 0):
            for rf in (1, 3) if r % 2 == 0 else (3, 1):
                topic = f"bench-rf{rf}-{r}"
                create(boot, topic, PARTITIONS, rf, {"min.insync.replicas": "2"} if rf == 3 else None)
                wait_isr(cluster, topic)
                rate = produce_round(boot, topic, a.messages, a.value_size)
                samples[f"produce_rf{rf}"].append(rate)
                crate = consume_round(boot, topic, a.messages)
                samples[f"consume_rf{rf}"].append(crate)
                log(f"round {r} RF={rf}: produce {rate:,.0f} msg/s, consume {crate:,.0f} msg/s")
        if "latency" in sections:
            create(boot, "bench-latency", PARTITIONS, 3, {"min.insync.replicas": "2"})
            wait_isr(cluster, "bench-latency")
            lat = latency(boot, "bench-latency", a.latency_samples)
            log(f"latency RF=3: {lat}")
        if "txn" in sections and a.txn_rounds > 0:
            single = BrokerProcess(base / "single", log_path=base / "single.log").start(60)
            txn_rounds(cluster, single, a.txn_rounds, a.transactions, a.value_size, a.txn_latency_samples, samples)
            single.stop()
        if "failover" in sections:
            create(boot, "bench-failover", 1, 3, {"min.insync.replicas": "2"})
            wait_isr(cluster, "bench-failover")
            for i in range(a.failovers):
                s = leader_failover(cluster, "bench-failover")
                samples["leader_failover_s"].append(s)
                log(f"leader failover {i}: {s:.2f} s")
            for i in range(a.failovers):
                s = coordinator_failover(cluster, "bench-failover", f"bench-txn-{i}")
                samples["coordinator_failover_s"].append(s)
                log(f"coordinator failover {i}: {s:.2f} s")
        if "scale" in sections:
            scaled = cluster_scale.run(
                cluster, a.partitions or 10_000, a.idle_seconds,
                lambda topic, n, rf: create(boot, topic, n, rf, timeout=max(60.0, n / 50)),
                lambda topic, timeout: wait_isr(cluster, topic, timeout), log)
        if a.memory:
            mem = memory(cluster)
            log(f"RSS MB per broker: {mem}")
    except BaseException:
        log(f"the brokers' and etcd's logs and data are kept in {base}")
        raise
    finally:
        if single is not None and single.alive():
            single.stop()
        cluster.stop()
    shutil.rmtree(base, ignore_errors=True)  # the scale section leaves ~0.5 GB at 10,000 partitions
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent).stdout.strip()
    rows: list[tuple[str, str]] = []
    if samples["produce_rf1"] and samples["produce_rf3"]:
        ratio = statistics.median(samples["produce_rf3"]) / statistics.median(samples["produce_rf1"])
        rows += [
            ("produce acks=all, RF=1, msg/s", spread(samples["produce_rf1"], digits=0)),
            ("produce acks=all, RF=3 (min ISR 2), msg/s", spread(samples["produce_rf3"], digits=0)),
            ("RF=3 / RF=1 produce", f"{ratio:.2f}x"),
            ("consume, RF=1, msg/s", spread(samples["consume_rf1"], digits=0)),
            ("consume, RF=3, msg/s", spread(samples["consume_rf3"], digits=0)),
        ]
    if lat:
        rows.append(("latency RF=3 p50 / p99 / max, ms",
                     f"{lat['p50_ms']:.2f} / {lat['p99_ms']:.2f} / {lat['max_ms']:.2f}"))
    if samples["txn_s_rf3"] and samples["txn_s_single"]:
        ratio = statistics.median(samples["txn_s_rf3"]) / statistics.median(samples["txn_s_single"])
        rows += [
            (f"transactions of {TXN_RECORDS} records over {PARTITIONS} partitions, RF=3 (min ISR 2), txn/s",
             spread(samples["txn_s_rf3"], digits=0)),
            (f"transactions of {TXN_RECORDS} records, single broker, txn/s", spread(samples["txn_s_single"], digits=0)),
            ("RF=3 / single broker transactions", f"{ratio:.2f}x"),
        ]
        for kind, name in (("rf3", "RF=3"), ("single", "single broker")):
            delivery = samples[f"txn_delivery_ms_{kind}"]
            slow = sum(1 for d in delivery if d > SLOW_DELIVERY_MS)
            rows += [
                (f"one-record transaction (linger.ms={TXN_LINGER_MS}), delivery p50 / p99 / max, ms, {name}",
                 f"{pcts(delivery)} ({slow} of {len(delivery)} over {SLOW_DELIVERY_MS} ms)"),
                (f"commit_transaction() p50 / p99 / max, ms, {name}", pcts(samples[f"txn_commit_ms_{kind}"])),
            ]
    if samples["leader_failover_s"]:
        rows += [
            ("leader failover (SIGKILL -> first ack), s", spread(samples["leader_failover_s"])),
            ("coordinator failover (SIGKILL -> first commit), s", spread(samples["coordinator_failover_s"])),
        ]
    for stage, per_broker in mem.items():
        rows.append((f"RSS per broker, {stage.replace('_', ' ')}, MB",
                     " / ".join(f"{v:.0f}" for _, v in sorted(per_broker.items()))))
    if scaled:
        rows += cluster_scale.rows(scaled)
    cmd = "python bench/cluster_bench.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    if sections == {"scale"}:
        print(f"\n`{cmd.strip()}` (git {rev})\n")
    else:
        print(f"\n`{cmd.strip()}` (git {rev}, {a.rounds} rounds of {a.messages} x {a.value_size} B, {a.txn_rounds} "
              f"transaction rounds of {a.transactions} + {a.txn_latency_samples}, medians with min-max)\n")
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    if a.json:
        a.json.write_text(json.dumps({"samples": samples, "latency": lat, "memory": mem, "scale": scaled, "git": rev,
                                      "command": cmd}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
