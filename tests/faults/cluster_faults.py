"""What every cluster fault test does (``test_cluster_*.py``; docs/testing.md, "How the cluster tests use them"):
a 3-broker cluster on hosts of an ``oncelog.testing.netns`` network with short timeouts, a topic of its own per
test, one fault applied under the load of ``cluster_load`` and healed, and the checker's verdict.

- :func:`net_cluster`: the cluster (brokers on hosts 1-3, etcd on the next host, or the next three with
  ``etcd_members=3``; ``broker.session.timeout.ms`` :data:`SESSION_MS` so that every fault outlasts a session);
  the ``netcluster`` fixture of ``conftest.py`` is one, shared by the modules of this folder.
- :func:`new_topic` (3 partitions, replication factor 3, ``min.insync.replicas`` 2), :func:`run_fault` (load for
  1.5 s, the fault for :data:`FAULT_S`, the heal, then the liveness bounds of ``cluster_load.wait_live``),
  :func:`judged` (the checker's report over a complete read-back, kept in the test's tmp folder).
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.cluster.model import ClusterView
from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.etcd_process import EtcdUnavailable, find_etcd
from oncelog.testing.netns import Network, require_netns

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from checker import History, check

from cluster_load import Load, wait_live

__all__ = ["FAULT_S", "LIVE_S", "PARTITIONS", "SESSION_MS", "brokers_and_etcd", "judged", "leader_of",
           "net_cluster", "new_topic", "run_fault"]

SESSION_MS = 3000
PARTITIONS = 3
FAULT_S = 5.0  # every fault outlasts a session (the lease of a broker cut from etcd expires)
LIVE_S = 10.0  # the liveness bound after a heal


@contextlib.contextmanager
def net_cluster(base: Path, etcd_members: int = 1, clock_control: bool = False
                ) -> Iterator[tuple[Network, ClusterProcess]]:
    """3 brokers and ``etcd_members`` etcd members, each on a host of its own; skipped without network namespaces
    or etcd. Left healed, resumed and stopped."""
    require_netns()
    try:
        find_etcd()
    except EtcdUnavailable as e:
        pytest.skip(str(e))
    with Network(hosts=3 + etcd_members) as net:
        cluster = ClusterProcess(base, 3, net=net, new_session=True, etcd_members=etcd_members,
                                 clock_control=clock_control, settings={
                                     "broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
                                     "replica.lag.time.max.ms": 2000, "default.replication.factor": 3,
                                     "min.insync.replicas": 2, "offsets.topic.replication.factor": 3,
                                     "transaction.state.log.replication.factor": 3})
        cluster.start()
        try:
            yield net, cluster
        finally:
            net.heal()
            for b in cluster.brokers.values():
                if b.paused:
                    b.resume()
            for clock in cluster.clocks.values():
                clock.stop_strobe()
            cluster.stop()


def new_topic(cluster: ClusterProcess, configs: dict[str, str] | None = None) -> str:
    """A topic of its own for one test, created again while the answer is a retriable error (etcd may be electing
    a leader after the previous test's fault: REQUEST_TIMED_OUT)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"nemesis-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(name, PARTITIONS, 3, config=configs or {})])[name].result(30)
            break
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break  # an earlier attempt was written after all
            if not (err.retriable() or err.code() == KafkaError.REQUEST_TIMED_OUT) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    cluster.wait_for_topic(name, 3)
    return name


def judged(h: History, ends: dict[int, int], measured: dict[str, Any], tmp_path: Path) -> Any:
    rep = check(h, sends_complete=True)
    rep.stats.update(ends=ends, **measured)
    h.dump(tmp_path / "history.jsonl")
    (tmp_path / "report.json").write_text(rep.to_json())
    print(rep.summary(3))
    return rep


def run_fault(net: Network, cluster: ClusterProcess, topic: str, load: Load, apply: Callable[[], None],
              heal: Callable[[], None] | None = None, live: Callable[[ClusterView], bool] | None = None,
              fault_s: float = FAULT_S) -> dict[str, Any]:
    """Load for 1.5 s, ``apply`` the fault for ``fault_s``, ``heal`` (default: the network), then wait for
    liveness."""
    time.sleep(1.5)
    before = load.acked()
    t0 = time.monotonic()
    apply()
    time.sleep(fault_s)
    during = load.acked() - before
    (heal or net.heal)()
    healed = time.monotonic()
    measured: dict[str, Any] = {"fault_s": round(healed - t0, 1), "acked_during_fault": during}
    measured.update(wait_live(cluster, load, topic, healed, LIVE_S, live))
    time.sleep(0.5)
    return measured


def leader_of(cluster: ClusterProcess, topic: str, partition: int = 0) -> int:
    state = cluster.view().partition(topic, partition)
    assert state is not None
    return state.leader


def brokers_and_etcd(cluster: ClusterProcess) -> list[int]:
    return [*(cluster.host_of(n) for n in cluster.brokers), *cluster.etcd_hosts]
