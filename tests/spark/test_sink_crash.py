"""Crash tests of the exactly-once sink: a streaming query (input topic -> transform -> output topic) run by a
driver script in a child process, SIGKILLed at chosen or random points and restarted from the same checkpoint.

After each scenario a read_committed confluent-kafka reader sees exactly one output per input record (no loss,
no duplicate, nothing aborted) and no transaction of the query is left open at the broker.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.spark_sink import duplicates_and_missing, open_txns, read_committed

from oncelog.client import Admin, Producer
from oncelog.testing.broker_process import BrokerProcess

# a test's driver runs share BUDGET_S; past it a run fails with its driver's log (pytest-timeout's kill shows none)
BUDGET_S = 540
pytestmark = pytest.mark.timeout(BUDGET_S + 60)

SCRIPT = Path(__file__).with_name("_sink_pipeline.py")
N = 600
PER_TRIGGER = 100


@pytest.fixture(scope="module")
def crash_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """2PC enabled, and a coordinator that aborts timed-out transactions within 200 ms of their timeout."""
    base = tmp_path_factory.mktemp("sink-crash-broker")
    proc = BrokerProcess(base / "data", settings={
        "num.partitions": 3, "transaction.two.phase.commit.enable": "true",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    proc.start()
    yield proc
    proc.stop()


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


@pytest.fixture
def pipeline(crash_broker: BrokerProcess, tmp_path: Path) -> Pipeline:
    return Pipeline(crash_broker.bootstrap, tmp_path)


def test_killed_worker_then_driver_killed_after_the_decision_outliving_the_transaction_timeout(
        pipeline: Pipeline) -> None:
    """(d) the Python worker of batch 1 / partition 0 / attempt 0 is SIGKILLed after flushing its rows into its open
    transaction: Spark retries the task and the dead attempt's transaction is aborted by the commit.
    (a) + done-when 3: the driver dies right after batch 2's decision is durable, before completion and before
    Spark's commit log; it stays down longer than the producers' transaction.timeout.ms (1 s) and the coordinator's
    abort interval (200 ms); the restarted query completes the recorded decision: batch 2 is committed once."""
    rc = pipeline.run(fault="kill-worker:1,kill-after-decision:2")
    assert rc == -signal.SIGKILL, f"the fault hook did not kill the driver (exit {rc}):\n{pipeline.tail()}"
    assert "Lost task" in pipeline.log.read_text(errors="replace"), "no task was lost: the worker was not killed"
    staged = pipeline.open()
    assert staged, "batch 2's prepared transactions should be open after the kill"
    before = pipeline.committed(timeout=3)
    assert len(before) == len(set(before)) == 2 * PER_TRIGGER, f"batches 0-1 committed once: {len(before)} rows"
    time.sleep(3.0)  # > transaction.timeout.ms (1000) + transaction.abort.timed.out...interval (200)
    assert sorted(pipeline.open()) == sorted(staged), "a prepared (2PC) transaction must not time out"
    pipeline.finish()
    pipeline.check_exactly_once()


def test_kill_while_executors_write_then_at_random_points_five_times(crash_broker: BrokerProcess,
                                                                     tmp_path: Path) -> None:
    """(b) SIGKILL the driver while the query's transactions are open at the broker (tasks writing, slowed by the
    sleep-in-write hook); then (c) five SIGKILLs at random points (0-1.5 s after a random number of committed
    micro-batches; 15 in all); a restart from the checkpoint after each kill, then
    a clean run. ONCELOG_CRASH_SEED replays a seed."""
    pipeline = Pipeline(crash_broker.bootstrap, tmp_path, per_trigger=N // 15)
    rc = pipeline.run(fault="sleep-in-write:1.5", kill_when=lambda: bool(pipeline.open()))
    assert rc == -signal.SIGKILL, f"the query ended before its transactions were seen open:\n{pipeline.tail()}"
    seed = int(os.environ.get("ONCELOG_CRASH_SEED") or random.SystemRandom().randrange(2**31))
    rng = random.Random(seed)
    # kill i comes 0-1.5 s after the checkpoint holds targets[i] committed batches (in any phase of the next one:
    # planning, tasks writing, the sink's commit, Spark's commit log); targets leave the last batches to the end
    targets = sorted(rng.sample(range(15 - 4), 5))
    for i, target in enumerate(targets):
        delay = rng.uniform(0.0, 1.5)
        marks: dict[str, float] = {}

        def due(target: int = target, delay: float = delay, marks: dict[str, float] = marks) -> bool:
            if "t" not in marks:
                if pipeline.committed_batches() < target or not pipeline.started():
                    return False
                marks["t"] = time.monotonic()
            return time.monotonic() - marks["t"] >= delay

        rc = pipeline.run(kill_when=due)
        assert rc == -signal.SIGKILL, (f"seed {seed}: driver run {pipeline.runs} (kill {i + 1} after {target} "
                                       f"batches) exited {rc}:\n{pipeline.tail()}")
    pipeline.finish()
    pipeline.check_exactly_once()
