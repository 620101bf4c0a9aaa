"""Helpers of the Spark sink tests (tests/spark, and tests/cluster's sink under broker kills): an independent
read_committed reader (confluent-kafka), open-transaction checks, and ``Pipeline``: a streaming query run by a
driver script (tests/spark/_sink_pipeline.py) in a child process that a test kills and restarts."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck

from oncelog.client import Admin, Producer

# a test's driver runs share BUDGET_S; past it a run fails with its driver's log (pytest-timeout's kill shows none)
BUDGET_S = 540
SCRIPT = Path(__file__).resolve().parents[1] / "spark" / "_sink_pipeline.py"
N = 600
PER_TRIGGER = 100


def read_committed(bootstrap: str, topic: str, expect: int | None = None, timeout: float = 30.0,
                   settle: float = 0.3) -> list[bytes]:
    """Every value of ``topic`` a read_committed confluent-kafka consumer sees, up to the LSO of every partition.

    Reads until the positions reach the read_committed end offsets (the LSO); with ``expect`` also waits until that
    many values were read (or ``timeout``), then ``settle`` seconds more to catch duplicates.
    """
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        quiet_until: float | None = None
        admin = Admin({"bootstrap.servers": bootstrap})
        try:
            while time.monotonic() < deadline:
                batch = c.consume(10_000, 0.2)
                for m in batch:
                    if m.error() is None:
                        values.append(bytes(m.value() or b""))
                if batch:
                    quiet_until = None
                    continue
                ends = admin.list_offsets({(topic, p): "latest" for p in parts}, isolation_level=1)
                positions = c.position([ck.TopicPartition(topic, p) for p in parts])
                at_end = all(ends[(topic, tp.partition)].offset == 0 or tp.offset >= ends[(topic, tp.partition)].offset
                             for tp in positions)
                if at_end and (expect is None or len(values) >= expect):
                    if quiet_until is None:
                        quiet_until = time.monotonic() + settle
                    elif time.monotonic() >= quiet_until:
                        break
        finally:
            admin.close()
        return values
    finally:
        c.close()


def duplicates_and_missing(values: list[bytes], expected: set[bytes]) -> tuple[dict[bytes, int], set[bytes]]:
    counts = collections.Counter(values)
    dups = {v: n for v, n in counts.items() if n > 1}
    missing = expected - set(counts)
    extra = set(counts) - expected
    if extra:
        dups.update({v: -1 for v in extra})  # -1: a value that no input produced
    return dups, missing


def open_txns(bootstrap: str, prefix: str) -> list[str]:
    """Transactional ids starting with ``prefix`` that are still open (Ongoing/Prepare*) at the broker."""
    with Admin({"bootstrap.servers": bootstrap}) as a:
        return [t.transactional_id for t in a.list_transactions()
                if t.transactional_id.startswith(prefix)
                and t.state in ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")]


class Pipeline:
    """One input topic filled with N records, one output topic, one checkpoint: run, kill, run again, check."""

    def __init__(self, bootstrap: str, tmp: Path, per_trigger: int = PER_TRIGGER) -> None:
        tag = uuid.uuid4().hex[:8]
        self.per_trigger = per_trigger
        self.bootstrap, self.tmp = bootstrap, tmp
        self.src, self.dst, self.prefix = f"in-{tag}", f"out-{tag}", f"crash-{tag}"
        self.checkpoint = str(tmp / "checkpoint")
        self.runs = 0
        self.budget_end = time.monotonic() + BUDGET_S
        self.took: list[float] = []  # seconds of each driver run
        with Admin({"bootstrap.servers": bootstrap}) as a:
            a.create_topics([self.src, self.dst], 3)
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(N):
            p.produce(self.src, f"rec-{i:05d}".encode(), key=f"k{i % 17}".encode())
        assert p.flush(30) == 0
        p.close()
        self.expected = {f"out-rec-{i:05d}".encode() for i in range(N)}

    @property
    def log(self) -> Path:
        return self.tmp / f"driver-{self.runs}.log"

    def run(self, fault: str | None = None, kill_when: Callable[[], bool] | None = None,
            timeout: float = 180) -> int:
        """Run the driver to its end (or until ``kill_when()`` is true: SIGKILL its process group); its exit code."""
        self.runs += 1
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                   PYTHONUNBUFFERED="1")
        env.pop("ONCELOG_SPARK_SINK_FAULT_PGID", None)
        if fault:
            env["ONCELOG_SPARK_SINK_FAULT"] = fault
        else:
            env.pop("ONCELOG_SPARK_SINK_FAULT", None)
        with open(self.log, "wb") as out:
            proc = subprocess.Popen([sys.executable, str(SCRIPT), self.bootstrap, self.src, self.dst,
                                     self.checkpoint, self.prefix, str(self.per_trigger)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        started = time.monotonic()
        deadline = min(started + timeout, self.budget_end)
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"driver run {self.runs} did not finish in {time.monotonic() - started:.0f} s (earlier runs "
                        f"took {[round(t) for t in self.took]} s; {self.committed_batches()} batches in Spark's "
                        f"commit log):\n{self.tail()}")
                if kill_when is not None and kill_when():
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.05)
            return proc.wait(30)
        finally:
            self.took.append(time.monotonic() - started)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def started(self) -> bool:
        return "started" in self.log.read_text(errors="replace")

    def committed_batches(self) -> int:
        """Batches in Spark's commit log (over every run so far)."""
        commits = Path(self.checkpoint) / "commits"
        return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else 0

    def finish(self) -> None:
        rc = self.run()
        assert rc == 0, f"the clean run exited {rc}:\n{self.tail()}"

    def committed(self, expect: int | None = None, timeout: float = 30.0) -> list[bytes]:
        return read_committed(self.bootstrap, self.dst, expect=expect, timeout=timeout)

    def open(self) -> list[str]:
        return open_txns(self.bootstrap, self.prefix)

    def check_exactly_once(self) -> None:
        values = self.committed(expect=N)
        dups, missing = duplicates_and_missing(values, self.expected)
        assert not dups and not missing, (f"{len(values)} outputs for {N} inputs: duplicated/unexpected "
                                          f"{sorted(dups.items())[:10]}, missing {sorted(missing)[:10]}")
        assert len(values) == N
        assert self.open() == [], "transactions of the query are left open"
