"""The Spark connector on the three-broker cluster: a streaming query (source -> transform -> exactly-once sink,
KIP-939 two-phase commit) runs while a broker is SIGKILLed and restarted (whatever it led: input or output
partitions, the sink's transaction coordinators, the group coordinator); the output is exactly once."""

from __future__ import annotations

import importlib.util
import random
import threading
import time
from pathlib import Path

import pytest

from oncelog.testing.cluster import ClusterProcess

from helpers.spark_sink import N, Pipeline

if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
    pytest.skip("pyspark and pyarrow are needed (make test installs them)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_streaming_query_exactly_once_through_a_broker_kill(cluster: ClusterProcess, tmp_path: Path) -> None:
    pipeline = Pipeline(cluster.bootstrap, tmp_path, per_trigger=N // 15)
    topics = cluster.view().topics
    assert topics[pipeline.src].num_partitions == 3
    rnd = random.Random()
    events: list[str] = []

    def chaos() -> None:
        deadline = time.monotonic() + 240
        while pipeline.committed_batches() < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rnd.uniform(0.0, 1.0))
        victim = rnd.choice(cluster.node_ids)
        events.append(f"broker {victim} killed after {pipeline.committed_batches()} batch(es)")
        cluster.kill(victim)
        time.sleep(rnd.uniform(0.5, 2.0))
        cluster.start_broker(victim)
        events.append(f"broker {victim} back")

    t = threading.Thread(target=chaos, daemon=True)
    t.start()
    rc = pipeline.run(timeout=300)
    t.join(60)
    assert len(events) == 2, events
    if rc != 0:  # the query may fail on the fault (a task out of retries): restarted from its checkpoint
        events.append(f"driver exited {rc}; restarted from the checkpoint")
        pipeline.finish()
    pipeline.check_exactly_once()
    print(f"\n{events}; {pipeline.committed_batches()} batches, {pipeline.runs} driver run(s)")
