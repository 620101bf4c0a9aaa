#!/usr/bin/env python3
"""`make demo`: a broker, the clickstream generator and the Spark job on this machine, then a check of the output.

    .venv/bin/python examples/clickstream/run_demo.py [--seconds 30] [--rate 300] [--kill-job-after 15]
    .venv/bin/python examples/clickstream/run_demo.py --seconds 40 --kills 5 --seed 7   # 5 kills at random points

1. starts ``oncelog serve`` (KIP-939 two-phase commit enabled, which the exactly-once sink needs) on a free port;
2. creates ``clicks``, ``clicks-enriched`` and ``page-views`` (3 partitions each);
3. starts the Spark job (``job.py``, local[2]) and the generator;
4. with ``--kill-job-after S``, SIGKILLs the job S seconds in and starts it again from its checkpoints (``--kills N
   --seed S``: N kills at seeded random points). A kill takes the whole job at once, the Python driver, its JVM and
   its Python workers, as a crash of its machine would: SIGKILL of the Python driver alone leaves its JVM running the
   queries for a while, next to the restarted job, on the same checkpoints;
5. waits until every click is in ``clicks-enriched``, then reads both outputs with a read_committed consumer and
   prints: clicks sent, enriched records (duplicates?), page-view windows (emitted twice?).
Everything runs under a temporary folder (or ``--work-dir``) and is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from oncelog.client import Admin, Consumer
from oncelog.testing.broker_process import BrokerProcess

HERE = Path(__file__).resolve().parent
TOPICS = ("clicks", "clicks-enriched", "page-views")


def read_all(bootstrap: str, topic: str, partitions: int = 3, idle: float = 3.0) -> list[Any]:
    """Every committed record of ``topic`` (read_committed), once the topic has been quiet for ``idle`` s."""
    out: list[Any] = []
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}) as c:
        c.assign([(topic, p, 0) for p in range(partitions)])
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < idle:
            batch = c.consume(10000, timeout=0.5)
            if batch:
                out.extend(batch)
                quiet_since = time.monotonic()
    return out


def start_job(bootstrap: str, checkpoints: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, str(HERE / "job.py"), "--bootstrap", bootstrap, "--checkpoints",
                                 str(checkpoints), "--master", "local[2]"], stdout=f, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc: the JVM under the Python driver, the Python workers under
    the JVM, which put themselves in process groups of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def kill_job(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the job and all its processes at once, as a crash of its machine would."""
    for pid in descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_job(proc)


def kill_points(args: argparse.Namespace) -> list[float]:
    """Seconds after the generator starts at which the job is killed: --kill-job-after, or --kills random points
    spread over the run (seeded by --seed), at least 4 s apart so that most restarts get to run."""
    if args.kill_job_after is not None:
        return [args.kill_job_after]
    if not args.kills:
        return []
    rng = random.Random(args.seed)
    slots = args.seconds / args.kills
    return [round(i * slots + rng.uniform(min(4.0, slots / 2), slots), 1) for i in range(args.kills)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the generator runs")
    ap.add_argument("--rate", type=float, default=300.0, help="clicks per second")
    ap.add_argument("--kill-job-after", type=float, default=None, help="SIGKILL the job after S s, restart it")
    ap.add_argument("--kills", type=int, default=0, help="SIGKILL the job N times at random points, restarting it")
    ap.add_argument("--seed", type=int, default=None, help="seed of the random kill points (--kills)")
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=300.0, help="give up waiting for the output after this")
    args = ap.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="oncelog-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    job_log = work / "job.log"
    broker = BrokerProcess(work / "data", settings={"transaction.two.phase.commit.enable": "true"}).start()
    bs = broker.bootstrap
    print(f"broker on {bs} (data and logs in {work})", flush=True)
    job = gen = None
    try:
        with Admin({"bootstrap.servers": bs}) as admin:
            admin.create_topics(list(TOPICS), 3)
        job = start_job(bs, work / "checkpoints", job_log)
        print(f"spark job started (pid {job.pid}, log {job_log}); generating {args.rate:g} clicks/s for "
              f"{args.seconds:g} s", flush=True)
        gen = subprocess.Popen([sys.executable, str(HERE / "generator.py"), "--bootstrap", bs, "--rate",
                                str(args.rate), "--seconds", str(args.seconds)], stdout=subprocess.PIPE)
        if args.kills and args.seed is None:
            args.seed = random.randrange(10_000)
        points = kill_points(args)
        if args.kills:
            print(f"killing the job at {', '.join(f'{p:g}' for p in points)} s (--seed {args.seed})", flush=True)
        started = time.monotonic()
        for at in points:
            time.sleep(max(0.0, at - (time.monotonic() - started)))
            print(f"{time.monotonic() - started:.1f} s: SIGKILL the spark job (pid {job.pid}, with its JVM and "
                  f"Python workers) and restart it from its checkpoints", flush=True)
            kill_job(job)
            job = start_job(bs, work / "checkpoints", job_log)
        gen_out, _ = gen.communicate(timeout=args.seconds * 3 + 60)
        sent = json.loads(gen_out.decode().strip().splitlines()[-1])["events"] + 1  # + the closing tick
        print(f"generator done: {sent} events; waiting for the job to catch up ...", flush=True)
        deadline = time.monotonic() + args.timeout
        enriched: list[Any] = []
        while time.monotonic() < deadline:
            if job.poll() is not None:
                print(f"the spark job exited with {job.returncode}; see {job_log}", file=sys.stderr)
                return 1
            enriched = read_all(bs, "clicks-enriched", idle=1.0)
            if len({json.loads(m.value())["id"] for m in enriched}) >= sent:
                break
            time.sleep(2)
        time.sleep(8)  # let the last page-view windows (closed by the tick) commit
        enriched = read_all(bs, "clicks-enriched")
        views = [json.loads(m.value()) for m in read_all(bs, "page-views")]
    finally:
        for proc in (gen, job):
            if proc is not None:
                stop(proc)
        broker.stop()
    ids = Counter(json.loads(m.value())["id"] for m in enriched)
    dup_ids = sum(1 for n in ids.values() if n > 1)
    windows = Counter((v["window"], v["page"]) for v in views)
    dup_windows = sum(1 for n in windows.values() if n > 1)
    counted = sum(v["views"] for v in views if v["page"] != "/_tick")
    top: Counter[str] = Counter()
    for v in views:
        top[v["page"]] += v["views"]
    print("\n| what | count |\n|---|---|")
    print(f"| clicks sent (incl. the closing tick) | {sent} |")
    print(f"| clicks-enriched records | {len(enriched)} ({len(ids)} distinct ids, {dup_ids} duplicated) |")
    print(f"| page-views windows | {len(views)} ({dup_windows} emitted twice), {counted} clicks counted |")
    print("\ntop pages: " + ", ".join(f"{p} {n}" for p, n in top.most_common(5)))
    ok = len(ids) == sent and dup_ids == 0 and dup_windows == 0
    print("\nexactly once: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
