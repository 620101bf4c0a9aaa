#!/usr/bin/env python3
"""Client benchmark: produce and consume throughput of oncelog's own client against confluent-kafka
(librdkafka) and aiokafka, all three against the same oncelog broker, side by side.

    python bench/client_bench.py                         # 1M x 100 B, 3 rounds
    python bench/client_bench.py --messages 200000 --rounds 3 --clients oncelog,confluent
    python bench/client_bench.py --messages 300000 --clients oncelog,oncelog-columnar,confluent

One oncelog broker (bench/brokers.py: fresh data dir, free 127.0.0.1 port) serves the whole run. For each
round and scenario the clients take turns in rotating order (A B C, B C A, C A B...), each in its own child
process with a hard time cap, on a fresh 3-partition topic:

* produce: ``--messages`` records of ``--value-size`` random bytes, no key, acks=all, linger 5 ms, no
  compression, one record per partition sent first outside the timed region (connection, metadata); timed until
  every record is acknowledged.
* consume: the topic is preloaded by confluent-kafka (not timed); the client assigns all partitions from offset 0
  and is timed until it has received every record.

``oncelog@REV`` (and ``oncelog-columnar@REV``) is that client at git revision REV (its ``src/``, extracted once
for the run), for a before/after comparison in one run, rounds alternating with the working tree's.

``oncelog-columnar`` is oncelog's bulk paths: ``Producer.produce_batch()`` of a ready Arrow binary column of
65,536 values at a time (no partition: the sticky partition, moving on after each full batch of
message.max.bytes), and
``Consumer.consume_arrow()`` (Arrow record batches). The table gives each client's ratio to confluent-kafka
(librdkafka, per record) in the same run when confluent is among the clients.

The table gives the median over the rounds (msg/s and MB/s of values). A failed round is reported, not hidden.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

PARTITIONS = 3
POOL = 1 << 16
CLIENTS = ["oncelog", "oncelog-columnar", "confluent", "aiokafka"]
SCENARIOS = ["produce", "consume"]
MAX_QUEUED = 200_000  # producer back-pressure for the clients without a bounded queue


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def values(size: int) -> list[bytes]:
    blob = os.urandom(size * POOL)
    return [blob[i * size:(i + 1) * size] for i in range(POOL)]


# ------------------------------------------------------------------------------------------ child: one round


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == PARTITIONS and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders after 30s")


def preload(bootstrap: str, topic: str, n: int, vals: list[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    mask = POOL - 1
    for i in range(n):
        while True:
            try:
                p.produce(topic, vals[i & mask], partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.005)
    if p.flush(600):
        raise RuntimeError("preload not delivered")


def produce_oncelog(bootstrap: str, topic: str, n: int, vals: list[bytes]) -> float:
    from oncelog.client import Producer

    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    # delivery reports as the confluent-kafka scenario asks for them: failures only, one configured callback
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                   "delivery.report.only.error": True, "on_delivery": report}) as p:
        for i in range(PARTITIONS):
            p.produce(topic, vals[i], partition=i)
        if p.flush(30):
            raise RuntimeError("warm-up not delivered")
        produce, mask = p.produce, POOL - 1
        t0 = time.perf_counter()
        for i in range(n):
            produce(topic, vals[i & mask])
            if i % 10_000 == 0:
                p.poll(0)
                while len(p) > MAX_QUEUED:
                    p.poll(0.01)
        if p.flush(600):
            raise RuntimeError("records still undelivered after flush")
        secs = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return secs


def produce_oncelog_columnar(bootstrap: str, topic: str, n: int, vals: list[bytes]) -> float:
    import pyarrow as pa

    from oncelog.client import Producer

    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    column = pa.array(vals, pa.binary())  # a ready Arrow column, as an Arrow/Spark pipeline hands it over
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as p:
        for i in range(PARTITIONS):
            p.produce(topic, vals[i], partition=i)
        if p.flush(30):
            raise RuntimeError("warm-up not delivered")
        t0 = time.perf_counter()
        done = 0
        while done < n:
            take = min(POOL, n - done)
            p.produce_batch(topic, column if take == POOL else column.slice(0, take), on_delivery=report)
            done += take
            p.poll(0)
            while len(p) > MAX_QUEUED:
                p.poll(0.01)
        if p.flush(600):
            raise RuntimeError("records still undelivered after flush")
        secs = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return secs


def produce_confluent(bootstrap: str, topic: str, n: int, vals: list[bytes]) -> float:
    from confluent_kafka import Producer

    failed: list[Any] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "delivery.report.only.error": True, "on_delivery": lambda e, m: failed.append(e)})
    for i in range(PARTITIONS):
        p.produce(topic, vals[i], partition=i)
    if p.flush(30):
        raise RuntimeError("warm-up not delivered")
    produce, mask = p.produce, POOL - 1
    t0 = time.perf_counter()
    for i in range(n):
        v = vals[i & mask]
        try:
            produce(topic, v)
        except BufferError:
            while True:
                p.poll(0.005)
                try:
                    produce(topic, v)
                    break
                except BufferError:
                    continue
    if p.flush(600):
        raise RuntimeError("records still undelivered after flush")
    secs = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed, first: {failed[0]}")
    return secs


def produce_aiokafka(bootstrap: str, topic: str, n: int, vals: list[bytes]) -> float:
    from aiokafka import AIOKafkaProducer

    async def main() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await p.start()
        try:
            await asyncio.gather(*[await p.send(topic, vals[i], partition=i) for i in range(PARTITIONS)])
            mask = POOL - 1
            pending: list[asyncio.Future[Any]] = []
            t0 = time.perf_counter()
            for i in range(n):
                pending.append(await p.send(topic, vals[i & mask]))
                if len(pending) >= MAX_QUEUED // 4:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
            return time.perf_counter() - t0
        finally:
            await p.stop()

    return asyncio.run(main())


def consume_oncelog(bootstrap: str, topic: str, n: int) -> float:
    from oncelog.client import Consumer

    with Consumer({"bootstrap.servers": bootstrap}) as c:
        t0 = time.perf_counter()
        c.assign([(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        while got < n:
            got += len(c.consume(10_000, 1.0))
        return time.perf_counter() - t0


def consume_oncelog_columnar(bootstrap: str, topic: str, n: int) -> float:
    import oncelog.client.consumer.arrow_batches  # noqa: F401 - imported lazily by consume_arrow(): numpy, pyarrow
    from oncelog.client import Consumer

    with Consumer({"bootstrap.servers": bootstrap}) as c:
        t0 = time.perf_counter()
        c.assign([(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        while got < n:
            got += sum(rb.num_rows for rb in c.consume_arrow(1.0))
        return time.perf_counter() - t0


def consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    try:
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        while got < n:
            for m in c.consume(10_000, 1.0):
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                got += err is None
        return time.perf_counter() - t0
    finally:
        c.close()


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main() -> float:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        await c.start()
        try:
            t0 = time.perf_counter()
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            got = 0
            while got < n:
                batches = await c.getmany(timeout_ms=1000, max_records=10_000)
                got += sum(len(v) for v in batches.values())
            return time.perf_counter() - t0
        finally:
            await c.stop()

    return asyncio.run(main())


def child(a: argparse.Namespace) -> int:
    if a.src:  # oncelog@REV: that revision's client
        sys.path.insert(0, a.src)
    try:
        vals = values(a.value_size)
        create_topic(a.bootstrap, a.topic)
        if a.scenario == "produce":
            fn = {"oncelog": produce_oncelog, "oncelog-columnar": produce_oncelog_columnar,
                  "confluent": produce_confluent, "aiokafka": produce_aiokafka}
            secs = fn[a.client](a.bootstrap, a.topic, a.messages, vals)
        else:
            preload(a.bootstrap, a.topic, a.messages, vals)
            fc = {"oncelog": consume_oncelog, "oncelog-columnar": consume_oncelog_columnar,
                  "confluent": consume_confluent, "aiokafka": consume_aiokafka}
            secs = fc[a.client](a.bootstrap, a.topic, a.messages)
        print(json.dumps({"ok": True, "seconds": secs}), flush=True)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which marks the round failed
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
    return 0


# ---------------------------------------------------------------------------------------- parent: the run


def checkout(rev: str, into: Path) -> str:
    """``src/`` of git revision ``rev`` extracted under ``into`` (the working tree is untouched)."""
    dest = into / rev
    if not dest.exists():
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", "--format=tar", rev, "src"],
                                 capture_output=True, timeout=60, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"error: oncelog@{rev}: git archive failed: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
    return str(dest / "src")


def run_round(a: argparse.Namespace, bootstrap: str, client: str, scenario: str, rnd: int,
              revs: Path) -> dict[str, Any]:
    topic = f"cbench-{scenario}-{client.replace('@', '-')}-r{rnd}-{uuid.uuid4().hex[:6]}"
    base, _, rev = client.partition("@")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--client", base, "--scenario", scenario,
           "--bootstrap", bootstrap, "--topic", topic, "--messages", str(a.messages),
           "--value-size", str(a.value_size)]
    if rev:
        cmd += ["--src", checkout(rev, revs)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, stdin=subprocess.DEVNULL,
                              check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        res: dict[str, Any] = json.loads(lines[-1]) if lines else {
            "ok": False, "error": f"exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    except subprocess.TimeoutExpired:
        res = {"ok": False, "error": f"no result within {a.timeout:.0f}s (killed)"}
    res.update(client=client, scenario=scenario, round=rnd)
    return res


def fmt(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def markdown(results: list[dict[str, Any]], a: argparse.Namespace) -> str:
    head = "| scenario | " + " | ".join(a.clients) + " |"
    lines = [head, "|" + "---|" * (len(a.clients) + 1)]
    for sc in a.scenarios:
        cells = []
        base = [r["seconds"] for r in results if r["client"] == "confluent" and r["scenario"] == sc and r.get("ok")]
        for cl in a.clients:
            rs = [r for r in results if r["client"] == cl and r["scenario"] == sc]
            ok = [r["seconds"] for r in rs if r.get("ok")]
            if not ok:
                cells.append(f"failed ({rs[0]['error'][:60]})" if rs else "-")
                continue
            med = statistics.median(ok)
            msg_s = a.messages / med
            cell = f"{fmt(msg_s)} msg/s, {msg_s * a.value_size / 1e6:.1f} MB/s"
            if base and cl != "confluent":
                cell += f", {statistics.median(base) / med:.2f}x"
            if len(ok) < len(rs):
                cell += f" ({len(rs) - len(ok)} of {len(rs)} rounds failed)"
            cells.append(cell)
        lines.append(f"| {sc} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=lambda v: v.split(","), default=CLIENTS)
    ap.add_argument("--scenarios", type=lambda v: v.split(","), default=SCENARIOS)
    ap.add_argument("--timeout", type=float, default=600.0, help="hard cap per round, seconds")
    ap.add_argument("--json", metavar="PATH", help="also write the raw results here")
    ap.add_argument("--bootstrap", help="use this running broker instead of starting an oncelog broker")
    # child mode (one round), used by the parent
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for bad in {c for c in a.clients if c.partition("@")[0] not in CLIENTS or c.startswith(("confluent@", "aiokafka@"))}:
        ap.error(f"unknown client {bad!r}; choose from {','.join(CLIENTS)}, oncelog@GIT_REV, oncelog-columnar@GIT_REV")
    for bad in set(a.scenarios) - set(SCENARIOS):
        ap.error(f"unknown scenario {bad!r}; choose from {','.join(SCENARIOS)}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child:
        return child(a)
    from brokers import OncelogBroker  # bench/brokers.py

    broker = None
    bootstrap = a.bootstrap
    if bootstrap is None:
        broker = OncelogBroker()
        broker.start()
        bootstrap = broker.bootstrap
        log(f"oncelog broker ({broker.version}) on {bootstrap}")
    results: list[dict[str, Any]] = []
    revs = tempfile.TemporaryDirectory(prefix="client-bench-revs-")
    try:
        for rnd in range(a.rounds):
            order = a.clients[rnd % len(a.clients):] + a.clients[:rnd % len(a.clients)]
            for sc in a.scenarios:
                for cl in order:
                    r = run_round(a, bootstrap, cl, sc, rnd, Path(revs.name))
                    results.append(r)
                    log(f"round {rnd + 1}/{a.rounds} {sc:8s} {cl:10s} "
                        + (f"{a.messages / r['seconds']:,.0f} msg/s ({r['seconds']:.2f}s)" if r.get("ok")
                           else f"FAILED: {r['error']}"))
    finally:
        revs.cleanup()
        if broker is not None:
            broker.cleanup()
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    print(f"\n`{shlex.join([Path(sys.executable).name, 'bench/client_bench.py', *(argv or sys.argv[1:])])}`"
          f" -- {a.messages:,} x {a.value_size} B, {a.rounds} rounds, median; one oncelog broker on 127.0.0.1\n")
    print(markdown(results, a))
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
