"""The 3-broker cluster under clock skew (docs/testing.md, "How the cluster tests use them"): Jepsen's clock nemesis
(bumps, strobes, and monotonic jumps, ``oncelog.testing.clock_skew``) on the controller's broker while it must
elect, on a transaction coordinator and on a group coordinator, under load, judged by the checker with the liveness
bounds of the partition tests (the shared ``netcluster`` of conftest.py: every broker runs with skewable clocks).

Leases expire on etcd's clock and the epochs fence every decision, so no skew may leave two leaders at one leader
epoch or lose an acknowledged write. A coordinator's clock decides timeouts: a wall clock stepped forward times
transactions out early (aborted whole, the producer fenced), a monotonic jump expires group sessions early (a
rebalance): availability, never exactly-once, is what it may cost. Each test also shows the skew had its effect.
"""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.netns import Network

from helpers.checker import ABORT, COMMIT, OK, UNKNOWN, History, Send, TxnEnd
from helpers.checker.metadata_probe import MetadataProbe

from cluster_faults import FAULT_S, LIVE_S, PARTITIONS, coordinator_of, copy_under_fault, judged, new_topic, \
    run_fault
from cluster_load import CLIENT_CONF, Load, TxnWriter

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


def log_since(cluster: ClusterProcess, node: int, offset: int) -> str:
    with open(cluster.brokers[node].log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def log_size(cluster: ClusterProcess, node: int) -> int:
    return cluster.brokers[node].log_path.stat().st_size


def test_controller_clock_skew_while_it_elects(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """The controller's wall clock bumped an hour ahead and strobed between an hour ahead and an hour behind every
    100 ms, its monotonic clock jumped a minute forward, while the leader of a partition (another broker) is cut
    from its peers and etcd: the controller elects a new leader; every broker's Metadata shows one leader per
    leader epoch, no acknowledged write is lost, and everything is live within 10 s of the heal."""
    net, cluster = netcluster
    topic = new_topic(cluster)
    controller = cluster.controller()
    assert controller is not None
    view = cluster.view()
    partition, victim = next((i, s.leader) for i, s in view.topic_partitions(topic) if s.leader != controller)
    old_epoch = view.partition(topic, partition).leader_epoch  # type: ignore[union-attr]
    clock = cluster.clocks[controller]
    others = [cluster.host_of(n) for n in cluster.brokers if n != victim]
    probe = MetadataProbe({n: (b.host, b.port) for n, b in cluster.brokers.items()}, topic, period=0.1)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS)
    probe.start()

    def skew_and_cut() -> None:
        clock.jump_monotonic(MINUTE_MS)
        clock.bump_wall(HOUR_MS)
        clock.strobe(-2 * HOUR_MS, period_ms=100, duration_s=FAULT_S)
        net.partition([[cluster.host_of(victim)], [*others, cluster.etcd_host]])

    def heal() -> None:
        net.heal()
        clock.stop_strobe()
        clock.reset_wall()

    measured = run_fault(net, cluster, topic, load, skew_and_cut, heal,
                         live=lambda v: (s := v.partition(topic, partition)) is not None and s.leader != victim)
    probe.stop()
    leaders: dict[tuple[int, int], set[int]] = defaultdict(set)
    for sample in probe.samples:
        for p, (leader, epoch) in sample.leaders.items():
            if leader >= 0:
                leaders[(p, epoch)].add(leader)
    state = cluster.view().partition(topic, partition)
    assert state is not None
    measured.update(controller=controller, victim=victim, partition=partition, epochs=(old_epoch, state.leader_epoch),
                    samples=len(probe.samples))
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()
    assert state.leader_epoch > old_epoch, "the controller did not elect a new leader"
    two = {k: v for k, v in leaders.items() if len(v) > 1}
    assert not two, f"two leaders at one leader epoch (partition, epoch) -> leaders: {two}"
    assert len(probe.samples) > 100, len(probe.samples)


def held_transaction(h: History, cluster: ClusterProcess, topic: str, coordinator: int) -> tuple[Any, str, str]:
    """A transactional producer whose coordinator is ``coordinator``, with a transaction open over every partition
    (its records sent, so the coordinator has it ongoing from now): (producer, transactional id, transaction)."""
    from confluent_kafka import Producer

    tid = next(t for t in (f"{topic}-held-{i}" for i in range(1000))
               if coordinator_of(cluster, "__transaction_state", t) == coordinator)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 20_000,
                  **CLIENT_CONF, "message.timeout.ms": 15_000})
    p.init_transactions(30)
    p.begin_transaction()
    txn = f"{tid}.1"
    for q in range(PARTITIONS):
        s = h.add(Send(tid, topic, q, f"{txn}:{q}", UNKNOWN, txn=txn))

        def cb(err: Any, msg: Any, s: Any = s) -> None:
            if err is None:
                s.outcome, s.offset = OK, msg.offset()

        p.produce(topic, value=s.value.encode(), partition=q, on_delivery=cb)  # type: ignore[union-attr]
    assert p.flush(15) == 0
    return p, tid, txn


def test_transaction_coordinator_clock_skew(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """The wall clock of a transactional producer's coordinator stepped an hour ahead, then strobed between now and
    an hour ahead every 200 ms, its monotonic clock jumped a minute. A transaction open across the step (over every
    partition) times out at once: the coordinator aborts it whole and its producer is fenced at commit; the load's
    transactional producer, fenced too whenever its transaction spans a step, starts again with InitProducerId. No
    transaction is seen half or aborted-yet-read, no acknowledged write is lost, and the producer commits again within
    10 s of the clock's reset."""
    from confluent_kafka import KafkaException

    net, cluster = netcluster
    topic = new_topic(cluster)
    h = History()
    load = Load(h, cluster.bootstrap, topic, PARTITIONS, transactional=True)
    tx = next(w for w in load.writers if isinstance(w, TxnWriter))
    deadline = time.monotonic() + 30
    while tx.committed < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    victim = coordinator_of(cluster, "__transaction_state", tx.name)
    held, held_tid, held_txn = held_transaction(h, cluster, topic, victim)
    clock = cluster.clocks[victim]
    log_from = log_size(cluster, victim)
    at_heal: list[tuple[float, int]] = []  # (when, transactions committed by then)
    held_end: list[str] = []

    def skew() -> None:
        clock.jump_monotonic(MINUTE_MS)
        clock.bump_wall(HOUR_MS)
        time.sleep(1.5)  # the timer acts on the step within a second (the cleanup interval)
        try:
            held.commit_transaction(15)
            held_end.append("committed")
        except KafkaException as e:
            held_end.append(e.args[0].name())
        fenced = held_end[0] in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
        h.add(TxnEnd(held_txn, ABORT if fenced else COMMIT if held_end[0] == "committed" else UNKNOWN))
        clock.strobe(-HOUR_MS, period_ms=200, duration_s=FAULT_S)

    def heal() -> None:
        clock.stop_strobe()
        clock.reset_wall()
        at_heal.append((time.monotonic(), tx.committed))

    measured = run_fault(net, cluster, topic, load, skew, heal)
    healed, committed = at_heal[0]
    while tx.committed <= committed and time.monotonic() < healed + LIVE_S:
        time.sleep(0.05)
    measured.update(victim=victim, committing_s=round(time.monotonic() - healed, 2), held_commit=held_end[0],
                    txn_errors=tx.log[-5:])
    timed_out = log_since(cluster, victim, log_from)
    measured["timed_out_by_the_coordinator"] = [t for t in (held_tid, tx.name) if f"aborting transaction {t} " in timed_out]
    ends = load.finish()
    rep = judged(h, ends, measured, tmp_path)
    assert rep.ok, rep.summary()
    assert held_end[0] in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), \
        f"the transaction open across the step was not timed out: its commit says {held_end[0]}"
    assert held_tid in measured["timed_out_by_the_coordinator"], measured["timed_out_by_the_coordinator"]
    assert tx.committed > committed, f"no transaction committed within {LIVE_S:g} s of the heal: {tx.log[-5:]}"


def test_group_coordinator_clock_skew(netcluster: tuple[Network, ClusterProcess], tmp_path: Path) -> None:
    """Two transactional copiers in one group (tests/eos/copier.py) while their group coordinator's monotonic clock
    jumps a minute forward three times (the sessions it holds expire early: members are removed, the group
    rebalances) and its wall clock strobes an hour ahead: every input exactly once and in order in the
    read_committed output, and the group's offsets at the input's end within 60 s."""
    net, cluster = netcluster
    notes: dict[str, Any] = {}

    def skew(group: str, copiers: Any) -> Callable[[], None]:
        victim = notes["victim"] = coordinator_of(cluster, "__consumer_offsets", group)
        log_from = log_size(cluster, victim)
        clock = cluster.clocks[victim]
        clock.strobe(HOUR_MS, period_ms=150, duration_s=FAULT_S)
        for _ in range(3):
            # the members are held (SIGSTOP) across the jump, so the coordinator's session timer (it looks at its
            # clock at least every 200 ms) sees them before a heartbeat or an offset commit renews their session
            # from the jumped clock (as in test_clock_skew.py)
            members = [p for p in copiers.procs.values() if p.poll() is None]
            for p in members:
                p.send_signal(signal.SIGSTOP)
            clock.jump_monotonic(MINUTE_MS)
            time.sleep(0.5)
            for p in members:
                p.send_signal(signal.SIGCONT)
            time.sleep(0.5)

        def heal() -> None:
            clock.stop_strobe()
            clock.reset_wall()
            notes["members_removed"] = len(re.findall(rf"group {re.escape(group)}: member \S+ removed",
                                                      log_since(cluster, victim, log_from)))
        return heal

    rep = copy_under_fault(cluster, tmp_path, skew, fault_s=FAULT_S - 3.0, notes=notes)
    assert rep.ok, rep.summary()
    assert notes["members_removed"] >= 1, "no session expired: the test did not test anything"
