#!/usr/bin/env python3
"""The etcd metadata store's costs on one box: transaction latency, how fast another store's view follows a
write, and the memory and CPU of a view of 10,000 partitions.

    python bench/etcd_metadata.py                  # starts its own etcd (etcd on PATH), prints a markdown table
    python bench/etcd_metadata.py --rounds 500 --partitions 10000
    python bench/etcd_metadata.py --partition-changes 10000   # the controller's writes after a broker loss

Two stores in one process and event loop (separate gRPC channels): the writer and a follower. The 10,000-partition
view is measured in a child process that only connects and loads it. ``--partition-changes N``: N partitions, then
rounds of what the controller writes when a broker dies (a third of them elected again, the others' ISR shrunk; the
elections in a call of their own first), ``apply_partition_changes`` with 1 transaction in flight (back to back)
and with more, alternating in the same run.

Two stores in one process and event loop (separate gRPC channels): the writer and a follower. The 10,000-partition
view is measured in a child process that only connects and loads it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

from oncelog.cluster import metadata
from oncelog.cluster._etcd import Cmp, Etcd, Put
from oncelog.cluster._etcd_view import PartitionMap
from oncelog.cluster.metadata import EtcdMetadata
from oncelog.cluster.model import BrokerInfo, PartitionState, TopicMeta
from oncelog.cluster.store import PartitionChange
from oncelog.testing.etcd_process import EtcdProcess


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def ms(xs: list[float]) -> str:
    return f"p50 {statistics.median(xs) * 1000:.2f} ms, p99 {pct(xs, 99) * 1000:.2f} ms"


async def latencies(endpoint: str, rounds: int) -> dict[str, str]:
    out: dict[str, str] = {}
    raw = Etcd([endpoint], 5.0)
    key = b"/bench/cas"
    rev = 0
    samples = []
    for i in range(rounds):
        t0 = time.perf_counter()
        res = await raw.txn([Cmp.mod_is(key, rev)], [Put(key, str(i).encode())])
        samples.append(time.perf_counter() - t0)
        rev = res.revision
    out["compare-and-swap txn (raw)"] = ms(samples)

    writer = await EtcdMetadata.connect(endpoint, "bench")
    follower = await EtcdMetadata.connect(endpoint, "bench")
    await writer.create_topic(TopicMeta("lat", uuid.uuid4(), 1), [PartitionState((1, 2, 3), (1, 2, 3), 1)])
    await follower.wait_for_change(0, 5)
    sub = follower.subscribe()
    own, other = [], []
    cpu0 = time.process_time()
    for i in range(rounds):
        vp = writer.view.partitions[("lat", 0)]
        t0 = time.perf_counter()
        assert await writer.update_partitions([PartitionChange(("lat", 0), vp.mod_revision, vp.state.with_isr(
            (1, 2, 3) if i % 2 else (1, 2)))])
        own.append(time.perf_counter() - t0)
        while follower.view.partitions[("lat", 0)].mod_revision < writer.view.partitions[("lat", 0)].mod_revision:
            await sub.next(5)
        other.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    out["update_partitions (CAS + own view shows it)"] = ms(own)
    out["write -> another store's view (subscription)"] = ms(other)
    out["CPU of both stores per write"] = f"{cpu / rounds * 1e6:.0f} µs"
    await writer.close()
    await follower.close()
    await raw.close()
    return out


async def fill(endpoint: str, cluster: str, partitions: int) -> None:
    store = await EtcdMetadata.connect(endpoint, cluster, 30)
    per_topic = 250
    for t in range(partitions // per_topic):
        states = [PartitionState((1, 2, 3), (1, 2, 3), 1 + i % 3, 3, 5) for i in range(per_topic)]
        await store.create_topic(TopicMeta(f"topic-{t:04d}", uuid.uuid4(), per_topic,
                                           {"retention.ms": "604800000"}), states)
    await store.close()


def measure_view(endpoint: str, cluster: str) -> dict[str, float]:
    """Run in a child process: connect, load, and report memory and time."""

    async def main() -> dict[str, float]:
        import gc

        gc.collect()
        rss0 = rss_kib()
        tracemalloc.start()
        t0, cpu0 = time.perf_counter(), time.process_time()
        store = await EtcdMetadata.connect(endpoint, cluster, 30)
        load_s, load_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        gc.collect()
        traced, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss1 = rss_kib()
        v = store.view
        n = len(v.partitions)
        # apply cost: one election among n partitions (copy-on-write) vs rebuilding the whole map
        vp = v.partitions[("topic-0000", 0)]
        events_cpu0 = time.process_time()
        rounds = 200
        for i in range(rounds):
            vp = store.view.partitions[("topic-0000", 0)]
            await store.update_partitions([PartitionChange(("topic-0000", 0), vp.mod_revision,
                                                           vp.state.with_isr((1, 2) if i % 2 else (1, 2, 3)))])
        per_write_cpu = (time.process_time() - events_cpu0) / rounds
        t0 = time.perf_counter()
        for _ in range(20):
            PartitionMap.build(v.partitions.items())
        rebuild = (time.perf_counter() - t0) / 20
        pm = v.partitions
        assert isinstance(pm, PartitionMap)
        t0 = time.perf_counter()
        for i in range(2000):
            pm.updated({("topic-0000", i % 250): vp}, ())
        cow = (time.perf_counter() - t0) / 2000
        await store.close()
        return {"partitions": n, "load_s": load_s, "load_cpu_s": load_cpu, "traced_mib": traced / 2**20,
                "rss_delta_mib": (rss1 - rss0) / 1024, "write_cpu_us": per_write_cpu * 1e6,
                "rebuild_ms": rebuild * 1000, "cow_us": cow * 1e6}

    return asyncio.run(main())


async def failover_writes(endpoint: str, partitions: int, rounds: int, in_flight: list[int]) -> dict[str, str]:
    """The controller's writes after a broker loss, timed per ``_TXNS_IN_FLIGHT`` setting (alternating)."""
    await fill(endpoint, "failover", partitions)
    store = await EtcdMetadata.connect(endpoint, "failover", 30)
    await store.register(BrokerInfo(1, "127.0.0.1", 9))
    epoch = (await store.campaign()).epoch
    times: dict[int, list[tuple[float, float, float]]] = {k: [] for k in in_flight}
    for r in range(rounds):
        for k in in_flight if r % 2 == 0 else in_flight[::-1]:
            metadata._TXNS_IN_FLIGHT = k
            view = store.view
            elections, shrinks = [], []
            for i, (tp, vp) in enumerate(sorted(view.partitions.items())):
                s = vp.state
                if i % 3 == 0:  # led by the lost broker: a new leader among the others
                    leader = next(b for b in s.replicas if b != s.leader)
                    elections.append(PartitionChange(tp, vp.mod_revision, s.with_leader(leader, s.replicas)))
                else:  # the lost broker leaves the ISR (and returns to it in the next round)
                    isr = s.replicas if len(s.isr) < len(s.replicas) else s.isr[:-1]
                    shrinks.append(PartitionChange(tp, vp.mod_revision, s.with_isr(isr)))
            cpu0, t0 = time.process_time(), time.perf_counter()
            res = await store.apply_partition_changes(elections, controller_epoch=epoch)
            t1 = time.perf_counter()
            res2 = await store.apply_partition_changes(shrinks, controller_epoch=epoch)
            t2, cpu = time.perf_counter(), time.process_time() - cpu0
            assert len(res.applied) + len(res2.applied) == partitions, (res, res2)
            times[k].append((t1 - t0, t2 - t0, cpu))
    await store.close()
    out = {}
    for k, xs in times.items():
        el = statistics.median(x[0] for x in xs)
        tot = statistics.median(x[1] for x in xs)
        cpu = statistics.median(x[2] for x in xs)
        out[f"{k} txn(s) in flight: elections / all written and in the own view, CPU"] = \
            f"{el:.2f} / {tot:.2f} s, {cpu:.2f} s (rounds: {', '.join(f'{x[1]:.2f}' for x in xs)})"
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partition-changes", type=int, default=0, metavar="N",
                    help="time the controller's writes after a broker loss among N partitions instead")
    ap.add_argument("--in-flight", default="1,4,8", help="with --partition-changes: transactions in flight to try")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure_view(*args.child)))
        return
    if args.partition_changes:
        with tempfile.TemporaryDirectory() as d:
            etcd = EtcdProcess(Path(d) / "etcd").start()
            try:
                kinds = [int(k) for k in args.in_flight.split(",")]
                rows = asyncio.run(failover_writes(etcd.endpoint, args.partition_changes, args.rounds, kinds))
            finally:
                etcd.stop()
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of {args.rounds} rounds\n")
        print("| measure | value |\n|---|---|")
        for k, val in rows.items():
            print(f"| {k} | {val} |")
        print(f"\n`python bench/etcd_metadata.py --partition-changes {args.partition_changes} --rounds {args.rounds} "
              f"--in-flight {args.in_flight}`")
        return
    with tempfile.TemporaryDirectory() as d:
        etcd = EtcdProcess(Path(d) / "etcd").start()
        try:
            cluster = f"big-{uuid.uuid4().hex[:6]}"

            async def both() -> tuple[dict[str, str], float]:  # one event loop: grpc.aio binds to the first
                rows = await latencies(etcd.endpoint, args.rounds)
                t0 = time.perf_counter()
                await fill(etcd.endpoint, cluster, args.partitions)
                return rows, time.perf_counter() - t0

            rows, fill_s = asyncio.run(both())
            out = subprocess.run([sys.executable, __file__, "--child", etcd.endpoint, cluster],
                                 capture_output=True, text=True, check=True)
            v = json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            etcd.stop()
    n = int(v["partitions"])
    rows[f"create {n} partitions ({n // 250} topics of 250)"] = f"{fill_s:.1f} s"
    rows[f"load a view of {n} partitions (connect)"] = f"{v['load_s']:.2f} s wall, {v['load_cpu_s']:.2f} s CPU"
    rows["memory of that view"] = (f"{v['traced_mib']:.1f} MiB allocated by the load (tracemalloc), "
                                    f"RSS +{v['rss_delta_mib']:.1f} MiB")
    rows[f"one partition write among {n}, CPU of the store (write + watch + new view)"] = \
        f"{v['write_cpu_us']:.0f} µs"
    rows[f"copy-on-write update of the {n}-partition map"] = f"{v['cow_us']:.1f} µs (rebuild: " \
                                                             f"{v['rebuild_ms']:.1f} ms)"
    print(f"etcd {subprocess.run(['etcd', '--version'], capture_output=True, text=True).stdout.split()[2]}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, {args.rounds} rounds\n")
    print("| measure | value |\n|---|---|")
    for k, val in rows.items():
        print(f"| {k} | {val} |")
    print(f"\n`python bench/etcd_metadata.py --rounds {args.rounds} --partitions {args.partitions}`")


if __name__ == "__main__":
    main()
