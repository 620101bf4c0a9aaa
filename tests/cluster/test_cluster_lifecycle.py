"""A broker's life in a cluster, with real etcd and broker processes: refusing to start (duplicate node id, etcd
unreachable, a data folder of another cluster) with one line and a non-zero exit, coming back at once after a
SIGKILL, and leaving cleanly (controlled shutdown: leadership moves away before the registration goes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.cluster.model import ClusterView
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker
from oncelog.testing.cluster import ClusterProcess

TIMEOUT = 30


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``oncelog serve ...`` in the foreground, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "oncelog", "serve", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in out.stderr, out.stderr
    return [line for line in out.stderr.splitlines() if line.startswith("error:")]


def create(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)


def test_a_second_broker_with_the_same_node_id_refuses_to_start(cluster: ClusterProcess, tmp_path: Path) -> None:
    before = cluster.view().brokers[1]
    port = free_port()
    out = serve("--node-id", "1", "--metadata", f"etcd://{cluster.etcd.endpoint}", "--set",
                f"cluster.name={cluster.cluster_name}", "--listen", f"127.0.0.1:{port}", "--data-dir",
                str(tmp_path / "dup"))
    assert out.returncode != 0
    (line,) = error_lines(out)
    assert f"node id 1 is already registered by a live broker at 127.0.0.1:{cluster.brokers[1].port}" in line
    assert "node.id" in line
    # the first one keeps serving, with the same registration
    after = cluster.view().brokers[1]
    assert after == before
    md = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap}).list_topics(timeout=TIMEOUT)
    assert sorted(md.brokers) == [1, 2, 3]


def test_etcd_unreachable_at_start_is_one_line_naming_it(tmp_path: Path) -> None:
    etcd_port = free_port()
    t0 = time.monotonic()
    out = serve("--node-id", "1", "--metadata", f"etcd://127.0.0.1:{etcd_port}", "--listen",
                f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "data"))
    assert out.returncode != 0
    (line,) = error_lines(out)
    assert f"cannot reach etcd at 127.0.0.1:{etcd_port}" in line and "--metadata" in line
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "data").exists()  # nothing created


def test_settings_errors_are_one_line(tmp_path: Path) -> None:
    out = serve("--metadata", "etcd://127.0.0.1:2379", "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2
    (line,) = error_lines(out)
    assert "--node-id" in line
    out = serve("--node-id", "1", "--metadata", "etcd://127.0.0.1:notaport", "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2
    (line,) = error_lines(out)
    assert "'metadata'" in line and "notaport" in line


def test_a_single_nodes_data_folder_is_refused_by_a_cluster(
        cluster: ClusterProcess, kafka_broker_factory: Callable[..., KafkaBroker], tmp_path: Path) -> None:
    single = kafka_broker_factory(data_dir=tmp_path / "data")
    create(single.bootstrap, "single-node-topic", 1, 1)
    assert single.stop() == 0
    out = serve("--node-id", "9", "--metadata", f"etcd://{cluster.etcd.endpoint}", "--set",
                f"cluster.name={cluster.cluster_name}", "--listen", f"127.0.0.1:{free_port()}", "--data-dir",
                str(tmp_path / "data"))
    assert out.returncode != 0
    (line,) = error_lines(out)
    assert "belongs to another cluster" in line and cluster.view().cluster_id in line
    assert 9 not in cluster.view().brokers
    assert {p.name for p in (tmp_path / "data").iterdir()} >= {"single-node-topic-0"}  # nothing deleted


def test_a_killed_broker_restarted_at_once_registers_again(make_cluster: Callable[..., ClusterProcess]) -> None:
    """Alone (no controller to notice it died), a broker restarted right after a SIGKILL finds its own
    registration still there (its lease runs 9 s more), revokes it and registers anew, without waiting."""
    cluster = make_cluster(1)
    old = cluster.view().brokers[1]
    cluster.kill(1)
    t0 = time.monotonic()
    cluster.start_broker(1)
    took = time.monotonic() - t0
    new = cluster.view().brokers[1]
    assert new.epoch > old.epoch
    assert took < 9.0, f"registered again after {took:.1f} s: it waited for the old lease to expire"
    log = cluster.log_tail(1, 200)
    assert "by an earlier process of this broker, which is gone" in log and "revoking its lease" in log
    # one cluster id in the broker's log, the cluster's: a new data folder takes it when it is made
    ids = {line.rsplit("cluster id ", 1)[1].split()[0].rstrip(",)") for line in
           cluster.broker(1).log_path.read_text().splitlines() if "cluster id " in line}
    assert ids == {cluster.view().cluster_id}, ids
    print(f"\nSIGKILLed broker restarted and registered again in {took:.2f} s (session timeout 9 s)")


def _deregistered_at(cluster: ClusterProcess, node: int, after: int, upto: int) -> int:
    """The etcd revision that removed ``node``'s registration, between two revisions."""
    for rev in range(after + 1, upto + 1):
        if node not in cluster.view(revision=rev).brokers:
            return rev
    raise AssertionError(f"node {node} was still registered at revision {upto}")


def _stop_and_look_before_leaving(cluster: ClusterProcess, node: int) -> ClusterView:
    """Stop ``node`` (SIGTERM) and return the view just before its registration went."""
    before = cluster.view().revision
    assert cluster.stop_broker(node) == 0, cluster.log_tail(node)
    after = cluster.wait_for(lambda v: node not in v.brokers, TIMEOUT, f"node {node} gone").revision
    return cluster.view(revision=_deregistered_at(cluster, node, before, after) - 1)


def test_controlled_shutdown_moves_leadership_away_before_the_broker_leaves(
        make_cluster: Callable[..., ClusterProcess], topic_name: str) -> None:
    cluster = make_cluster(3)
    create(cluster.bootstrap, topic_name, 6, 3)
    view = cluster.wait_for_topic(topic_name, 3)
    node = view.controller.node_id if view.controller else 1  # the controller itself: the hardest case
    assert any(s.leader == node for _, s in view.topic_partitions(topic_name))

    last = _stop_and_look_before_leaving(cluster, node)
    assert last.brokers[node].shutting_down
    assert all(s.leader != node and node not in s.isr for _, s in last.topic_partitions(topic_name)), \
        f"still led by {node} when it left: {dict(last.topic_partitions(topic_name))}"
    assert all(s.leader in last.brokers for _, s in last.topic_partitions(topic_name))
    assert "leads nothing now" in cluster.log_tail(node)
    cluster.wait_for(lambda v: v.controller is not None and v.controller.node_id != node, TIMEOUT,
                     "another controller")

    # the same without controlled shutdown: the broker leaves while still leading (what the above prevents)
    cluster.brokers[node].settings["controlled.shutdown.enable"] = "false"
    cluster.start_broker(node)
    create(cluster.bootstrap, topic_name + "-2", 6, 3)
    view = cluster.wait_for_topic(topic_name + "-2", 3)
    assert any(s.leader == node for _, s in view.topic_partitions(topic_name + "-2"))
    last = _stop_and_look_before_leaving(cluster, node)
    assert any(s.leader == node for _, s in last.topic_partitions(topic_name + "-2"))
