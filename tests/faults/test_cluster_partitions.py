"""A 3-broker cluster under Jepsen's network faults, judged by the history checker (docs/testing.md, "How the
cluster tests use them").

etcd and each broker run on a host of their own of an ``oncelog.testing.netns`` network; the test process is the
network's client (producers, readers, and the observer that reads etcd). The cluster (``netcluster``, conftest.py)
is shared by the tests of this folder (each has its own topic: 3 partitions, replication factor 3, ``min.insync.replicas`` 2) and runs with short
timeouts (``broker.session.timeout.ms`` 3000) so that every fault outlasts a session. Each test runs the load of
``cluster_load`` (two idempotent ``acks=all`` librdkafka producers, a live ``read_committed`` reader), applies one
fault for a few seconds, heals it, and asserts:

- no anomaly in the history (no lost acknowledged write, no duplicate, offsets consistent), read back completely;
- liveness: within 10 s of the heal every partition is led with its full ISR, every partition acknowledges writes
  again and the reader reads again.

The mutation (``acks=1`` and ``unclean.leader.election.enable``) under the first fault must make the checker report
a lost write: the clean verdict means something.

``test_random_schedule`` runs a longer randomized schedule of all these faults; it is skipped unless
``ONCELOG_NEMESIS_SECONDS`` is set (docs/testing.md, "A longer randomized schedule")::

    ONCELOG_NEMESIS_SECONDS=600 python -m pytest tests/faults/test_cluster_partitions.py -k random_schedule -s
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.netns import CLIENT, Network, bridge, complete_grudge, majorities_ring

from helpers.checker import History
from helpers.checker.metadata_probe import MetadataProbe

from cluster_faults import LIVE_S, PARTITIONS, brokers_and_etcd, coordinator_of, copy_under_fault, judged, \
    leader_of, new_topic, run_fault
from cluster_load import Load, wait_live

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# ------------------------------------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("mutation", [False, True], ids=["acks=all", "mutation:acks=1+unclean"])
def test_leader_cut_from_its_peers_and_etcd_while_clients_reach_it(
        netcluster: tuple[Network, ClusterProcess], tmp_path: Path, mutation: bool) -> None:
    """The leader L of partition 0 keeps its clients but loses the other brokers and etcd. It cannot shrink its ISR
    (that is a write to etcd), so its acks=all writes wait and time out; the controller elects a leader from the
    ISR; after the heal L follows it and truncates. No acknowledged write may be lost. With acks=1 (and unclean
    election allowed) L acknowledges writes nobody else has, and they are lost: the checker must say so."""
    net, cluster = netcluster
    topic = new_topic(cluster, {"unclean.leader.election.enable": "true"} if mutation else None)
    victim = leader_of(cluster, topic)
    others = [cluster.host_of(n) for n in cluster.brokers if n != victim]
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS, acks="1" if mutation else "all")
    def cut() -> None:  # the client is in neither group: it reaches both sides
        net.partition([[cluster.host_of(victim)], [*others, cluster.etcd_host]])

    measured = run_fault(net, cluster, topic, load, cut,
                         live=lambda v: (s := v.partition(topic, 0)) is not None and s.leader != victim)
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    if mutation:
        assert "lost_write" in rep.found(), f"the mutation went unnoticed:\n{rep.summary()}"
        return
    assert rep.ok, rep.summary()
    assert rep.stats["acked"] > 500, rep.stats


def test_broker_cut_from_etcd_only_leads_no_stale_epoch_once_back(netcluster: tuple[Network, ClusterProcess],
                                                                  tmp_path: Path) -> None:
    """A leader cut from etcd only (it still talks to its peers and the clients): its lease expires and the
    controller moves its leaderships; it keeps its last view meanwhile (riding out etcd), its followers leave it and
    the epochs fence what it still does. Once it reaches etcd again it acts on a view as new as etcd's: it shows the
    new leader at once, and never its old leadership again."""
    net, cluster = netcluster
    topic = new_topic(cluster)
    victim = leader_of(cluster, topic)
    host = cluster.brokers[victim]
    probe = MetadataProbe({victim: (host.host, host.port)}, topic, period=0.1)
    old_epoch = cluster.view().partition(topic, 0).leader_epoch  # type: ignore[union-attr]
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS)
    probe.start()
    healed: list[float] = []
    log_from = host.log_path.stat().st_size

    def heal() -> None:
        net.heal()
        healed.append(time.monotonic())

    def cut() -> None:  # only the link between the broker and etcd
        net.partition([[cluster.host_of(victim)], [cluster.etcd_host]])

    measured = run_fault(net, cluster, topic, load, cut, heal,
                         live=lambda v: (s := v.partition(topic, 0)) is not None and s.leader != victim)
    probe.stop()
    ends = load.finish()
    after = [s for s in probe.samples if s.at >= healed[0] and 0 in s.leaders]
    new_seen = next((i for i, s in enumerate(after) if s.leaders[0][1] > old_epoch), None)
    assert new_seen is not None, [s.leaders for s in after[-5:]]
    measured["new_epoch_seen_s"] = round(after[new_seen].at - healed[0], 2)
    stale = [s for s in after[new_seen:] if s.leaders[0] == (victim, old_epoch)]
    with open(host.log_path, "rb") as f:  # what its replica manager did from the cut on
        f.seek(log_from)
        relead = [line for line in f.read().decode(errors="replace").splitlines()
                  if f"{topic}-0: leader at epoch {old_epoch} " in line]
    rep = judged(h, ends, measured, tmp_path)
    assert not stale, f"node {victim} showed its old leadership again after the new one: {stale[:3]}"
    # it never stopped leading at its old epoch while cut off (riding out etcd), so it never took that leadership
    # up again when its session came back (as it did when it stepped down and re-applied its old view then)
    assert not relead, relead
    assert measured["new_epoch_seen_s"] < LIVE_S, measured
    assert rep.ok, rep.summary()


def test_client_cut_from_one_broker(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """The clients lose one broker (both ways) that stays healthy in the cluster: nothing moves, its partitions
    wait, and everything resumes when the client reaches it again."""
    net, cluster = netcluster
    topic = new_topic(cluster)
    victim = leader_of(cluster, topic)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS)
    measured = run_fault(net, cluster, topic, load,
                         lambda: net.set_drops(complete_grudge([[CLIENT], [cluster.host_of(victim)]])))
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()
    assert leader_of(cluster, topic) == victim  # a client's trouble moves no leadership


def test_reassignment_during_a_partition(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """A partition of replication factor 2 moved from [a, b] to [b, c] (kafka-python's AlterPartitionReassignments,
    KIP-455) while its leader a, the replica being removed, is cut from its peers and etcd: the controller elects
    b, c catches up from b and joins the ISR, a is dropped. No acknowledged write is lost, and within 10 s of the
    heal the move is complete ([b, c], both in the ISR) and producers and reader are moving."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    net, cluster = netcluster
    topic = new_topic(cluster, replication_factor=2)
    controller = cluster.controller()
    view = cluster.view()
    partition, state = next((i, s) for i, s in view.topic_partitions(topic) if s.leader != controller)
    a = state.leader
    b = next(r for r in state.replicas if r != a)
    c = next(n for n in cluster.brokers if n not in state.replicas)
    admin = KafkaAdminClient(bootstrap_servers=",".join(cluster.brokers[n].bootstrap for n in cluster.brokers
                                                        if n != a), request_timeout_ms=30_000)
    others = [cluster.host_of(n) for n in cluster.brokers if n != a]
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS)

    def cut_and_move() -> None:
        net.partition([[cluster.host_of(a)], [*others, cluster.etcd_host]])
        admin.alter_partition_reassignments({KTopicPartition(topic, partition): [b, c]})

    try:
        measured = run_fault(net, cluster, topic, load, cut_and_move, replication_factor=2, live=lambda v: (
            (s := v.partition(topic, partition)) is not None and s.replicas == (b, c) and not s.adding
            and not s.removing))
    finally:
        admin.close()
    measured.update(moved=(state.replicas, (b, c)), leader_cut=a)
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()


SHAPES: dict[str, Callable[[ClusterProcess, random.Random], set[tuple[int, int]]]] = {
    # two sides that cannot talk, and one node (a broker or etcd) that talks to both
    "bridge": lambda c, rnd: bridge(brokers_and_etcd(c), rnd),
    # every node hears a majority of the others, no two the same one (one-way drops)
    "majorities-ring": lambda c, rnd: majorities_ring(brokers_and_etcd(c), rnd),
    # two brokers alone against the third and etcd: they lose their sessions and their leaderships, the third
    # cannot take them without an ISR of min.insync.replicas
    "two-brokers-against-the-third-and-etcd": lambda c, rnd: complete_grudge(
        [[c.host_of(1), c.host_of(2)], [c.host_of(3), c.etcd_host]]),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_network_shapes(netcluster: tuple[Network, ClusterProcess], tmp_path: Path, shape: str) -> None:
    """Jepsen's other partition shapes over the brokers and etcd (the client reaches everyone)."""
    net, cluster = netcluster
    topic = new_topic(cluster)
    rnd = random.Random(shape)
    drops = SHAPES[shape](cluster, rnd)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS)
    measured = run_fault(net, cluster, topic, load, lambda: net.set_drops(drops))
    measured["drops"] = sorted(drops)
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()


@pytest.mark.parametrize("target,signal", [("leader", "kill"), ("leader", "stop"), ("controller", "kill"),
                                           ("coordinator", "stop")])
def test_process_faults(netcluster: tuple[Network, ClusterProcess], tmp_path: Path, target: str,
                        signal: str) -> None:
    """SIGKILL (then a restart) or SIGSTOP (then SIGCONT) of the leader of partition 0, of the controller, or of
    the broker that runs the transaction coordinator of a transactional producer of the load."""
    net, cluster = netcluster
    topic = new_topic(cluster)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS, transactional=target == "coordinator")
    if target == "coordinator":
        tx = next(w for w in load.writers if w.name.endswith("-tx"))
        deadline = time.monotonic() + 30
        while getattr(tx, "committed", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        victim = coordinator_of(cluster, "__transaction_state", tx.name)
    elif target == "controller":
        victim = cluster.controller() or 1
    else:
        victim = leader_of(cluster, topic)
    b = cluster.brokers[victim]

    def fault() -> None:
        if signal == "kill":
            b.kill()
        else:
            b.pause()

    def heal() -> None:
        if signal == "kill":
            cluster.start_broker(victim, wait_registered=False)
        else:
            b.resume()

    measured = run_fault(net, cluster, topic, load, fault, heal,
                         live=lambda v: victim in v.brokers and v.controller is not None)
    measured["victim"] = victim
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()
    if target == "coordinator":
        assert rep.stats["txns"]["commit"] >= 3, rep.stats


@pytest.mark.timeout(180 + 2 * float(os.environ.get("ONCELOG_NEMESIS_SECONDS") or 0))  # the module's 180 s is for short tests
def test_random_schedule(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """Faults of every kind above, one after the other, at random moments for random durations (1-8 s, a heal of
    1-4 s between two), for ``ONCELOG_NEMESIS_SECONDS``, under the transactional load; then the checker, and
    liveness after the last heal. ``ONCELOG_NEMESIS_SEED`` replays a schedule."""
    seconds = float(os.environ.get("ONCELOG_NEMESIS_SECONDS", "0"))
    if seconds <= 0:
        pytest.skip("set ONCELOG_NEMESIS_SECONDS to run the randomized schedule (docs/testing.md)")
    seed = int(os.environ.get("ONCELOG_NEMESIS_SEED", int.from_bytes(os.urandom(4), "big")))
    rnd = random.Random(seed)
    net, cluster = netcluster
    topic = new_topic(cluster)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS, transactional=True)
    schedule: list[dict[str, Any]] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(rnd.uniform(1.0, 4.0))
        kind = rnd.choice(["bridge", "majorities-ring", "halves", "isolated", "etcd-only", "client-one-way",
                           "kill", "stop", "etcd-stop"])
        victim = rnd.choice(list(cluster.brokers))
        b = cluster.brokers[victim]
        nodes = brokers_and_etcd(cluster)
        heal: Callable[[], None] = net.heal
        if kind in ("bridge", "majorities-ring"):
            net.set_drops(SHAPES[kind](cluster, rnd))
        elif kind == "halves":
            rnd.shuffle(nodes)
            net.partition([nodes[:2], nodes[2:]])
        elif kind == "isolated":
            net.partition([[cluster.host_of(victim)], [n for n in nodes if n != cluster.host_of(victim)]])
        elif kind == "etcd-only":
            net.partition([[cluster.host_of(victim)], [cluster.etcd_host]])
        elif kind == "client-one-way":
            net.drop(CLIENT, cluster.host_of(victim))
        elif kind == "kill":
            b.kill()

            def heal(n: int = victim) -> None:
                cluster.start_broker(n, wait_registered=False)
        elif kind == "stop":
            b.pause()
            heal = b.resume
        else:
            cluster.etcd.pause()
            heal = cluster.etcd.resume
        lasted = rnd.uniform(1.0, 8.0)
        schedule.append({"at": round(time.monotonic() - t0, 1), "kind": kind, "victim": victim,
                         "seconds": round(lasted, 1)})
        time.sleep(lasted)
        heal()
    healed = time.monotonic()
    measured: dict[str, Any] = {"seed": seed, "schedule": schedule}
    measured.update(wait_live(cluster, load, topic, healed, 30.0))
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, f"seed {seed}:\n{rep.summary()}"


def test_copier_group_under_a_partition(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """Two transactional consume-transform-produce copiers in one consumer group (tests/eos/copier.py) while the
    leader of the group's coordinator partition is cut from its peers and etcd (the clients reach it): every input
    exactly once in the read_committed output, in order per input partition, and the group's committed offsets at
    the input's end within 60 s of the heal."""
    net, cluster = netcluster
    notes: dict[str, Any] = {}

    def cut(group: str, copiers: Any) -> Callable[[], None]:
        victim = notes["victim"] = coordinator_of(cluster, "__consumer_offsets", group)
        others = [cluster.host_of(n) for n in cluster.brokers if n != victim]
        net.partition([[cluster.host_of(victim)], [*others, cluster.etcd_host]])
        return net.heal

    rep = copy_under_fault(cluster, tmp_path, cut, notes=notes)
    assert rep.ok, rep.summary()
