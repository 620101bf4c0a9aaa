"""The ``oncelog`` command on the shared cluster (issue 24): ``topic create`` leaves the replication factor to the
brokers' default.replication.factor, and ``cluster status`` shows a broker that is down instead of dropping it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from oncelog.testing.cluster import ClusterProcess

_SCRIPT = Path(sys.executable).parent / "oncelog"
ONCELOG = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oncelog"]


def _oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ONCELOG, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})


def test_topic_create_uses_the_clusters_default_replication_factor(cluster: ClusterProcess,
                                                                    topic_name: str) -> None:
    """The CLI sent replication factor 1 unless -r was given."""
    r = _oncelog("topic", "create", topic_name, "--partitions", "3", "-b", cluster.bootstrap)
    assert r.returncode == 0, r.stderr
    view = cluster.wait_for_topic(topic_name)
    assert [len(state.replicas) for _, state in view.topic_partitions(topic_name)] == [3, 3, 3]  # the cluster's
    assert "with 3 partition(s), replication factor 3" in r.stdout, r.stdout


def test_cluster_status_shows_a_broker_that_is_down(cluster: ClusterProcess, topic_name: str) -> None:
    """status listed the registered brokers only: a broker that died vanished from the table."""
    r = _oncelog("topic", "create", topic_name, "-p", "3", "-r", "3", "-b", cluster.bootstrap)
    assert r.returncode == 0, r.stderr
    cluster.wait_for_topic(topic_name)
    ctrl = cluster.controller()
    down = max(n for n in cluster.node_ids if n != ctrl)
    cluster.stop_broker(down)  # a controlled shutdown: it leaves the registry at once (the fixture restarts it)
    cluster.wait_for(lambda v: down not in v.brokers, 30, f"broker {down} unregistered")
    up = ",".join(cluster.brokers[n].bootstrap for n in cluster.node_ids if n != down)
    r = _oncelog("cluster", "status", "--json", "-b", up)
    assert r.returncode == 0, r.stderr
    states = {b["node_id"]: b["state"] for b in json.loads(r.stdout)["brokers"]}
    assert states == {**{n: "up" for n in cluster.node_ids}, down: "down"}, states
    r = _oncelog("cluster", "status", "-b", up)
    assert r.returncode == 0, r.stderr
    assert f"3 broker(s) (1 down: {down})" in r.stdout, r.stdout
    assert re.search(rf"^\s*{down}\s+-\s+-\s+0\s+DOWN", r.stdout, re.M), r.stdout  # its row in the Brokers table
    assert all(len(line) <= 80 for line in r.stdout.splitlines()), r.stdout
