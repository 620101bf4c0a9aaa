"""A real cluster for the cluster tests: etcd and three broker processes on 127.0.0.1.

``cluster``: the session's shared cluster (tests use their own topic names); a test that stops, kills or pauses one
of its brokers gets it back running and registered when it returns. Tests whose faults would disturb the others
(etcd stopped, a broker wiped, timing measured) build their own with ``make_cluster``. Without etcd on PATH the
tests are skipped, except in CI (which installs Debian's etcd-server).

The tests of the metadata store against etcd alone (no broker): ``etcd``, one per test module (tests use distinct
cluster names: ``cluster_name``), or a fresh one for a test that kills, pauses or compacts it (``own_etcd``;
``etcd_members``: three members, of which it loses some).
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.broker_process import free_port
from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.etcd_process import EtcdCluster, EtcdProcess

from helpers.cluster import etcd_or_skip


def _stop(cluster: ClusterProcess) -> None:
    codes = cluster.stop()
    bad = {n: rc for n, rc in codes.items() if rc != 0}
    assert not bad, "broker(s) did not stop cleanly: " + "".join(
        f"\n--- broker {n} (exit {rc}) ---\n{cluster.log_tail(n)}" for n, rc in bad.items())


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    etcd_or_skip()
    cluster = ClusterProcess(tmp_path_factory.mktemp("cluster"), 3, cluster_name=f"shared-{uuid.uuid4().hex[:6]}",
                             settings={"default.replication.factor": 3,
                                       "transaction.two.phase.commit.enable": "true"},  # the Spark sink's 2PC
                             broker_settings={n: {"metrics.listen": f"127.0.0.1:{free_port()}"} for n in (1, 2, 3)})
    cluster.start()
    yield cluster
    _quiet_and_in_sync(cluster)
    _stop(cluster)


def _fetches(cluster: ClusterProcess) -> dict[int, float]:
    """Fetch requests each broker has answered (its /metrics)."""
    out = {}
    for node, b in cluster.brokers.items():
        with urllib.request.urlopen(f"http://{b.settings['metrics.listen']}/metrics", timeout=10) as resp:
            out[node] = next((float(line.split()[-1]) for line in resp.read().decode().splitlines()
                              if line.startswith('oncelog_requests_total{api="fetch"}')), 0.0)
    return out


def _quiet_and_in_sync(cluster: ClusterProcess) -> None:
    """Liveness after every fault the session's tests made and healed: each partition's replicas are all in sync
    again, and the idle brokers fetch from each other at the long-poll pace (a follower that loops on an answer it
    cannot use, as one that kept an empty leader epoch did, never catches up and keeps two brokers busy)."""
    cluster.wait_for(lambda v: all(set(vp.state.isr) == set(vp.state.replicas) and vp.state.leader in v.brokers
                                   for tp, vp in v.partitions.items()
                                   if (m := v.topics.get(tp[0])) is not None and not m.deleting),
                     60, "every partition of the shared cluster in sync once the tests are done")
    before, t0 = _fetches(cluster), time.monotonic()
    time.sleep(3.0)
    after, took = _fetches(cluster), time.monotonic() - t0
    rates = {n: (after[n] - before[n]) / took for n in after}
    # two followers long-poll each leader (replica.fetch.wait.max.ms 500): a few fetches a second each
    assert all(r < 40 for r in rates.values()), f"idle brokers answer fetches in a loop: {rates} per second"


@pytest.fixture
def cluster(shared_cluster: ClusterProcess) -> Iterator[ClusterProcess]:
    """The shared cluster, every broker running and registered again after the test."""
    yield shared_cluster
    for node, b in shared_cluster.brokers.items():
        if b.paused:
            b.resume()
        if not b.alive():
            shared_cluster.start_broker(node)
    shared_cluster.wait_for(lambda v: set(shared_cluster.brokers) <= set(v.brokers)
                            and not any(i.shutting_down for i in v.brokers.values()),
                            60, "the shared cluster restored")


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., ClusterProcess]]:
    """Start a cluster of the test's own (``make_cluster(size=3, settings=..., start=True)``); stopped after it."""
    made: list[ClusterProcess] = []

    def make(size: int = 3, start: bool = True, **kw: Any) -> ClusterProcess:
        etcd_or_skip()
        c = ClusterProcess(tmp_path / f"cluster-{len(made)}", size, **kw)
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        for b in c.brokers.values():
            if b.paused:
                b.resume()
        c.stop()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """An etcd shared by the tests of one module."""
    etcd_or_skip()
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """An etcd for one test only (it may be killed, paused, restarted)."""
    etcd_or_skip()
    proc = EtcdProcess(tmp_path / "etcd-data").start()
    yield proc
    proc.stop()


@pytest.fixture
def etcd_members(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A 3-member etcd cluster on 127.0.0.1 for one test only."""
    etcd_or_skip()
    members = EtcdCluster(tmp_path / "etcd", 3).start()
    yield members
    members.stop()


@pytest.fixture
def cluster_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"
