#!/usr/bin/env python3
"""What TLS and SASL cost: produce and consume throughput over SSL and SASL_SSL (SCRAM-SHA-512) next to PLAINTEXT,
in the same run on the same broker, and the time to open an authenticated connection.

    python bench/security_bench.py                         # 3 rounds, 300k x 100 B per round
    python bench/security_bench.py --rounds 5 --messages 500000 --json out.json

One oncelog broker (default settings) with three listeners: PLAINTEXT, SSL (a trustme CA, the broker's certificate
for 127.0.0.1) and SASL_SSL with SCRAM-SHA-512. Each round runs every listener in turn (their order rotates from
round to round), each with a fresh 3-partition topic: confluent-kafka produces ``--messages`` records of
``--value-size`` random bytes with ``acks=all`` (the client settings of ``bench/run.py``), then one consumer reads
them back from offset 0. The ratio column is the listener's median over PLAINTEXT's; the issue asks for at least
``--floor`` (0.7) on every throughput row, and the run exits 1 below it.

Connection set-up: ``--connects`` times, a new connection of the native client (``BrokerConnection.connect``: TCP,
TLS handshake, ApiVersions, and on SASL_SSL SaslHandshake + the two SCRAM round trips), closed at once; the median and
p99 per listener. SCRAM's cost on the client is PBKDF2 with the user's iterations (4096, Kafka's minimum); the broker
only checks HMACs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from oncelog.client.connection import BrokerConnection
from oncelog.client.security import parse_security
from oncelog.testing.broker_process import BrokerProcess, free_port

PARTITIONS = 3
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"


def log(msg: str) -> None:
    print(f"[security-bench] {msg}", file=sys.stderr, flush=True)


def client_conf(listener: str, port: int, ca: Path) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener}
    if listener != "PLAINTEXT":
        conf["ssl.ca.location"] = str(ca)
    if listener == "SASL_SSL":
        conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def create_topic(admin_boot: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": admin_boot})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def produce(conf: dict[str, Any], topic: str, n: int, size: int) -> float:
    vals = [os.urandom(size) for _ in range(1024)]
    failed: list[KafkaError] = []
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "delivery.report.only.error": True,
                  "on_delivery": lambda err, _m: failed.append(err)})
    for i in range(PARTITIONS):  # warm-up: connections, metadata (not timed)
        p.produce(topic, vals[i], partition=i)
    p.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, vals[i & 1023])
                break
            except BufferError:
                p.poll(0.005)
    if p.flush(600):
        raise RuntimeError("records still undelivered after 600 s")
    secs = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[0]}")
    return secs


def consume(conf: dict[str, Any], topic: str, n: int, timeout: float) -> float:
    c = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(topic, i, 0) for i in range(PARTITIONS)])
    got, deadline = 0, time.monotonic() + timeout
    t0 = time.perf_counter()
    while got < n + PARTITIONS:  # the warm-up records too
        for m in c.consume(10000, 1.0):
            if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(m.error())
            if m.error() is None:
                got += 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumed {got} of {n} within {timeout} s")
    secs = time.perf_counter() - t0
    c.close()
    return secs


async def connect_times(conf: dict[str, Any], port: int, count: int) -> list[float]:
    security = parse_security({k: v for k, v in conf.items() if k != "bootstrap.servers"})
    out = []
    for _ in range(count):
        conn = BrokerConnection("127.0.0.1", port, security=security)
        t0 = time.perf_counter()
        await conn.connect()
        out.append(time.perf_counter() - t0)
        await conn.close()
    return out


def broker_cpu(proc: BrokerProcess) -> float:
    """CPU seconds (user + system) the broker process has used."""
    assert proc.proc is not None
    fields = Path(f"/proc/{proc.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], fmt: str) -> str:
    return f"{format(med(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--connects", type=int, default=200)
    ap.add_argument("--floor", type=float, default=0.7)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    import trustme

    with tempfile.TemporaryDirectory(prefix="oncelog-security-bench-") as tmp:
        base = Path(tmp)
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(base / "ca.pem"))
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(base / "broker.pem"))
        ports = {name: free_port() for name in LISTENERS}
        settings = {"listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
                    "ssl.keystore.type": "PEM", "ssl.keystore.location": base / "broker.pem",
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
        broker = BrokerProcess(base / "data", port=ports["PLAINTEXT"], settings=settings,
                               log_path=base / "broker.log").start()
        try:
            admin_boot = f"127.0.0.1:{ports['PLAINTEXT']}"
            admin = AdminClient({"bootstrap.servers": admin_boot})
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())])[USER].result(30)
            results: dict[str, dict[str, list[float]]] = {
                n: {"produce": [], "consume": [], "connect": [], "cpu_produce": [], "cpu_consume": []}
                for n in LISTENERS}
            for r in range(a.rounds):
                order = LISTENERS[r % 3:] + LISTENERS[:r % 3]
                for name in order:
                    conf = client_conf(name, ports[name], base / "ca.pem")
                    topic = f"sec-bench-{uuid.uuid4().hex[:8]}"
                    create_topic(admin_boot, topic)
                    cpu0 = broker_cpu(broker)
                    p_s = produce(conf, topic, a.messages, a.value_size)
                    cpu1 = broker_cpu(broker)
                    c_s = consume(conf, topic, a.messages, a.timeout)
                    cpu2 = broker_cpu(broker)
                    results[name]["cpu_produce"].append((cpu1 - cpu0) / a.messages * 1e6)
                    results[name]["cpu_consume"].append((cpu2 - cpu1) / a.messages * 1e6)
                    results[name]["produce"].append(a.messages / p_s)
                    results[name]["consume"].append(a.messages / c_s)
                    log(f"round {r + 1} {name}: produce {a.messages / p_s:,.0f} msg/s, consume "
                        f"{a.messages / c_s:,.0f} msg/s")
            for name in LISTENERS:
                times = asyncio.run(connect_times(client_conf(name, ports[name], base / "ca.pem"), ports[name],
                                                  a.connects))
                results[name]["connect"] = times
            del admin
        finally:
            broker.stop()
    mb = a.value_size / 1e6
    base_p, base_c = med(results["PLAINTEXT"]["produce"]), med(results["PLAINTEXT"]["consume"])
    rows = ["| listener | produce msg/s | produce MB/s | ratio | consume msg/s | consume MB/s | ratio | "
            "broker CPU s per 1M produced / consumed | connect ms (median) | connect ms (p99) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    below = []
    for name in LISTENERS:
        res = results[name]
        rp, rc = med(res["produce"]) / base_p, med(res["consume"]) / base_c
        if name != "PLAINTEXT" and min(rp, rc) < a.floor:
            below.append(name)
        conn = sorted(res["connect"])
        p99 = conn[min(len(conn) - 1, int(len(conn) * 0.99))]
        rows.append(f"| {name}{' (SCRAM-SHA-512)' if name == 'SASL_SSL' else ''} | {spread(res['produce'], ',.0f')} | "
                    f"{med(res['produce']) * mb:.1f} | {rp:.2f} | {spread(res['consume'], ',.0f')} | "
                    f"{med(res['consume']) * mb:.1f} | {rc:.2f} | {med(res['cpu_produce']):.2f} / "
                    f"{med(res['cpu_consume']):.2f} | {med(conn) * 1000:.1f} | {p99 * 1000:.1f} |")
    print("\n".join(rows))
    print(f"\n{a.rounds} rounds x {a.messages:,} records of {a.value_size} B, 3 partitions, acks=all, confluent-kafka; "
          f"{a.connects} connections per listener (native client). Floor {a.floor}x of PLAINTEXT: "
          f"{'met' if not below else 'NOT met by ' + ', '.join(below)}.")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    if a.json is not None:
        a.json.write_text(json.dumps(results, indent=1))
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
