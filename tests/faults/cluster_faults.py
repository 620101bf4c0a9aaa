"""What every cluster fault test does (``test_cluster_*.py``; docs/testing.md, "How the cluster tests use them"):
a 3-broker cluster on hosts of an ``oncelog.testing.netns`` network with short timeouts, a topic of its own per
test, one fault applied under the load of ``cluster_load`` and healed, and the checker's verdict.

- :func:`net_cluster`: the cluster (brokers on hosts 1-3, etcd on the next host, or the next three with
  ``etcd_members=3``; ``broker.session.timeout.ms`` :data:`SESSION_MS` so that every fault outlasts a session);
  the ``netcluster`` fixture of ``conftest.py`` is one, shared by the modules of this folder.
- :func:`new_topic` (3 partitions, replication factor 3, ``min.insync.replicas`` 2), :func:`run_fault` (load for
  1.5 s, the fault for :data:`FAULT_S`, the heal, then the liveness bounds of ``cluster_load.wait_live``),
  :func:`judged` (the checker's report over a complete read-back, kept in the test's tmp folder).
- :func:`copy_under_fault`: two transactional consume-transform-produce copiers in one group
  (``tests/eos/copier.py``) under a fault, judged by the copy checker (every input exactly once, in order).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


from oncelog.cluster.model import ClusterView
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.netns import Network, require_netns

from helpers.checker import History, check
from helpers.cluster import etcd_or_skip
from helpers.copiers import Copiers, group_committed, seed_input, stop_and_check

from cluster_load import Load, wait_live

__all__ = ["COPY_LIVE_S", "FAULT_S", "LIVE_S", "PARTITIONS", "SESSION_MS", "brokers_and_etcd", "coordinator_of",
           "copy_under_fault", "judged", "leader_of", "net_cluster", "new_topic", "run_fault"]

SESSION_MS = 3000
PARTITIONS = 3
FAULT_S = 5.0  # every fault outlasts a session (the lease of a broker cut from etcd expires)
LIVE_S = 10.0  # the liveness bound after a heal
COPY_LIVE_S = 60.0  # the copiers' committed offsets at the input's end after a heal (rebalances, the rest of the copy)


@contextlib.contextmanager
def net_cluster(base: Path, etcd_members: int = 1, clock_control: bool = False
                ) -> Iterator[tuple[Network, ClusterProcess]]:
    """3 brokers and ``etcd_members`` etcd members, each on a host of its own; skipped without network namespaces
    or etcd. Left healed, resumed and stopped."""
    require_netns()
    etcd_or_skip()
    with Network(hosts=3 + etcd_members) as net:
        cluster = ClusterProcess(base, 3, net=net, new_session=True, etcd_members=etcd_members,
                                 clock_control=clock_control, settings={
                                     "broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
                                     "replica.lag.time.max.ms": 2000, "default.replication.factor": 3,
                                     "min.insync.replicas": 2, "offsets.topic.replication.factor": 3,
                                     "transaction.state.log.replication.factor": 3,
                                     # a step of a coordinator's wall clock is acted on within a second
                                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000})
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


def new_topic(cluster: ClusterProcess, configs: dict[str, str] | None = None, replication_factor: int = 3) -> str:
    """A topic of its own for one test, created again while the answer is a retriable error (etcd may be electing
    a leader after the previous test's fault: REQUEST_TIMED_OUT)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"nemesis-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(name, PARTITIONS, replication_factor, config=configs or {})])[name].result(30)
            break
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break  # an earlier attempt was written after all
            if not (err.retriable() or err.code() == KafkaError.REQUEST_TIMED_OUT) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    cluster.wait_for_topic(name, replication_factor)
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
              fault_s: float = FAULT_S, replication_factor: int = 3) -> dict[str, Any]:
    """Load for 1.5 s, ``apply`` the fault for ``fault_s``, ``heal`` (default: the network), then wait for
    liveness (``cluster_load.wait_live``)."""
    time.sleep(1.5)
    before = load.acked()
    t0 = time.monotonic()
    apply()
    time.sleep(fault_s)
    during = load.acked() - before
    (heal or net.heal)()
    healed = time.monotonic()
    measured: dict[str, Any] = {"fault_s": round(healed - t0, 1), "acked_during_fault": during}
    measured.update(wait_live(cluster, load, topic, healed, LIVE_S, live, replication_factor))
    time.sleep(0.5)
    return measured


def leader_of(cluster: ClusterProcess, topic: str, partition: int = 0) -> int:
    state = cluster.view().partition(topic, partition)
    assert state is not None
    return state.leader


def brokers_and_etcd(cluster: ClusterProcess) -> list[int]:
    return [*(cluster.host_of(n) for n in cluster.brokers), *cluster.etcd_hosts]


def coordinator_of(cluster: ClusterProcess, internal_topic: str, key: str) -> int:
    """The broker that coordinates ``key`` (a transactional id in ``__transaction_state``, a group in
    ``__consumer_offsets``): the leader of its partition there."""
    view = cluster.view()
    meta = view.topics[internal_topic]
    state = view.partition(internal_topic, partition_for(key, meta.num_partitions))
    assert state is not None
    return state.leader


def copy_under_fault(cluster: ClusterProcess, tmp_path: Path, fault: Callable[[str, Any], Callable[[], None]],
                     fault_s: float = FAULT_S, notes: dict[str, Any] | None = None) -> Any:
    """Two copiers copy 3000 records (2 input partitions, 3 output partitions) in group ``<run>-group``; once the
    group has committed, ``fault(group, copiers)`` (``helpers.copiers.Copiers``) applies a fault and returns its heal,
    called ``fault_s`` later. Returns the
    copy checker's report, with ``notes`` (what the fault recorded in it meanwhile) in its stats (AssertionError
    unless the group's committed offsets reach the input's end within :data:`COPY_LIVE_S` of the heal)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    run = f"copy-{uuid.uuid4().hex[:6]}"
    group, in_topic, out_topic = f"{run}-group", f"{run}-in", f"{run}-out"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(in_topic, 2, 3), NewTopic(out_topic, 3, 3)]).values():
        f.result(30)
    h = History()
    inputs = seed_input(h, cluster.bootstrap, in_topic, 2, records=3000)
    copiers = Copiers(tmp_path, "confluent", cluster.bootstrap, in_topic, out_topic, 3, run)
    names = ["copier-0", "copier-1"]
    for n in names:
        copiers.start(n)
    ends = {q: len(v) for q, v in inputs.items()}
    deadline = time.monotonic() + 30
    while not (c := group_committed(cluster.bootstrap, group, in_topic, 2)) or min(c.values()) < 0:
        assert time.monotonic() < deadline, f"the copiers' group did not commit within 30 s\n{copiers.log_tail()}"
        time.sleep(0.5)  # the group formed and committed on every input partition (no offset is -1001)
    heal = fault(group, copiers)
    time.sleep(fault_s)
    heal()
    healed = time.monotonic()
    committed: dict[int, int] = {}
    while time.monotonic() < healed + COPY_LIVE_S:
        copiers.revive()
        committed = group_committed(cluster.bootstrap, group, in_topic, 2)
        if committed == ends:
            break
        time.sleep(0.5)
    done_s = round(time.monotonic() - healed, 1)
    rep = stop_and_check(copiers, names, h, cluster.bootstrap, out_topic, 3, inputs)
    rep.stats.update(done_after_heal_s=done_s, committed=committed, input_ends=ends, copier_exits=copiers.exits[:10],
                     **(notes or {}))
    (tmp_path / "report.json").write_text(rep.to_json())
    print(rep.summary(3))
    assert committed == ends, (f"not copied within {COPY_LIVE_S:g} s of the heal: {committed} != {ends}\n"
                               f"{copiers.log_tail()}")
    return rep
