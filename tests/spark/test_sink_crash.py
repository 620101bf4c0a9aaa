"""Crash tests of the exactly-once sink: a streaming query (input topic -> transform -> output topic) run by a
driver script in a child process, SIGKILLed at chosen or random points and restarted from the same checkpoint.

After each scenario a read_committed confluent-kafka reader sees exactly one output per input record (no loss,
no duplicate, nothing aborted) and no transaction of the query is left open at the broker.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.spark_sink import BUDGET_S, N, PER_TRIGGER, Pipeline

pytestmark = pytest.mark.timeout(BUDGET_S + 60)


@pytest.fixture(scope="module")
def crash_broker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    """2PC enabled, and a coordinator that aborts timed-out transactions within 200 ms of their timeout (a process:
    its timeouts run apart from the Spark driver and workers)."""
    proc = kafka_module_broker_factory({
        "num.partitions": 3, "transaction.two.phase.commit.enable": "true",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}, in_process=False)
    yield proc
    proc.stop()


@pytest.fixture
def pipeline(crash_broker: KafkaBroker, tmp_path: Path) -> Pipeline:
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


def test_kill_while_executors_write_then_at_random_points(crash_broker: KafkaBroker, tmp_path: Path) -> None:
    """(b) SIGKILL the driver while the query's transactions are open at the broker (tasks writing, slowed by the
    sleep-in-write hook); then (c) SIGKILLs at random points (0-1.5 s after a random number of committed
    micro-batches; 15 in all): three, ONCELOG_SPARK_KILLS=N for more (up to 11); a restart from the checkpoint after
    each kill, then a clean run. ONCELOG_CRASH_SEED replays a seed."""
    pipeline = Pipeline(crash_broker.bootstrap, tmp_path, per_trigger=N // 15)
    rc = pipeline.run(fault="sleep-in-write:1.5", kill_when=lambda: bool(pipeline.open()))
    assert rc == -signal.SIGKILL, f"the query ended before its transactions were seen open:\n{pipeline.tail()}"
    seed = int(os.environ.get("ONCELOG_CRASH_SEED") or random.SystemRandom().randrange(2**31))
    rng = random.Random(seed)
    # kill i comes 0-1.5 s after the checkpoint holds targets[i] committed batches (in any phase of the next one:
    # planning, tasks writing, the sink's commit, Spark's commit log); targets leave the last batches to the end
    targets = sorted(rng.sample(range(15 - 4), min(11, int(os.environ.get("ONCELOG_SPARK_KILLS") or 3))))
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
