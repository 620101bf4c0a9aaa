"""A 3-broker cluster on a 3-member etcd (docs/testing.md, "How the cluster tests use them"): one member lost
(SIGKILL, or cut from everyone) and one member cut from the other two (a minority partitioned; the brokers still
reach it), under the load of ``cluster_load``, judged by the checker with the liveness bounds of the other fault
tests. The member hit is the one the brokers talk to, and etcd's leader (moved there first), so that the fault also
costs etcd an election.

A majority of etcd is up all along, so nothing may move: every broker keeps its registration (its broker epoch),
the controller keeps its epoch and no partition of the topic changes leader epoch. The brokers get there by moving
to another member within their session timeout (``cluster._etcd``: every call requires etcd's leader, so a member
without one answers at once instead of at the deadline).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.cluster.model import ClusterView
from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.etcd_process import EtcdCluster
from oncelog.testing.netns import Network

from helpers.checker import History

from cluster_faults import PARTITIONS, SESSION_MS, judged, net_cluster, new_topic, run_fault
from cluster_load import Load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def etcd3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Network, ClusterProcess]]:
    with net_cluster(tmp_path_factory.mktemp("etcd3"), etcd_members=3) as nc:
        yield nc


_ETCD_IN_USE = re.compile(r"(?:connected to etcd at|using etcd at) (\S+?)[:,]? ")


def etcd_in_use(cluster: ClusterProcess, node: int) -> str | None:
    """The etcd endpoint broker ``node`` talks to, as its log last said."""
    found = _ETCD_IN_USE.findall(cluster.brokers[node].log_path.read_text(errors="replace"))
    return found[-1] if found else None


def member_in_use(cluster: ClusterProcess) -> int:
    """The index of the etcd member most brokers talk to."""
    etcd = cluster.etcd
    assert isinstance(etcd, EtcdCluster)
    used = [etcd_in_use(cluster, n) for n in cluster.brokers]
    return max(range(len(etcd.members)), key=lambda i: used.count(etcd.members[i].endpoint))


def fingerprint(view: ClusterView, topic: str) -> dict[str, Any]:
    """What must not change while a majority of etcd is up."""
    return {"broker_epochs": {n: b.epoch for n, b in sorted(view.brokers.items())},
            "controller_epoch": view.controller.epoch if view.controller else None,
            "leader_epochs": {i: (s.leader, s.leader_epoch) for i, s in view.topic_partitions(topic)}}


FAULTS = ["killed", "isolated", "cut-from-its-peers"]
#: a lease that no refresh reaches expires meanwhile, even with the extension etcd's new leader gives every lease
FAULT_S = 2 * SESSION_MS / 1000 + 1


@pytest.mark.parametrize("fault", FAULTS)
def test_one_etcd_member_lost_or_cut_off(etcd3: tuple[Network, ClusterProcess], tmp_path: Path,
                                         fault: str) -> None:
    """``killed``: SIGKILL, restarted at the heal (its data folder makes it rejoin); ``isolated``: cut from
    everyone (brokers, client, the other members); ``cut-from-its-peers``: a minority of one, which the brokers and
    the client still reach, without a leader."""
    net, cluster = etcd3
    etcd = cluster.etcd
    assert isinstance(etcd, EtcdCluster)
    target = member_in_use(cluster)
    etcd.move_leader(target)
    topic = new_topic(cluster)
    host = cluster.etcd_hosts[target]
    peers = [h for h in cluster.etcd_hosts if h != host]
    before = fingerprint(cluster.view(), topic)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS)
    apply: Callable[[], None]
    heal: Callable[[], None] | None = None
    if fault == "killed":
        apply = etcd.members[target].kill

        def heal() -> None:
            etcd.members[target].start()
    elif fault == "isolated":
        def apply() -> None:
            net.isolate(host)
    else:
        def apply() -> None:
            net.partition([[host], peers])

    measured = run_fault(net, cluster, topic, load, apply, heal, fault_s=FAULT_S)
    after = fingerprint(cluster.view(), topic)
    measured.update(member=target + 1, before=before, after=after,
                    in_use_after={n: etcd_in_use(cluster, n) for n in cluster.brokers})
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()
    assert after == before, f"something moved with a majority of etcd up: {before} -> {after}"
