"""The randomized exactly-once workload on a three-broker cluster with broker SIGKILLs and SIGSTOP pauses, judged by
the history checker (the workload of ``tests/eos/test_random_workload.py``, its writers reused).

The topic has 3 partitions, replication factor 3 and ``min.insync.replicas=2``; ``__transaction_state`` and
``__consumer_offsets`` are replicated the same way (Kafka's defaults). Transactional confluent-kafka producers (about
30% of their transactions aborted on purpose) and idempotent ``acks=all`` producers write while a read_committed and a
read_uncommitted consumer record what they are handed. Faults at random moments, one at a time, each healed before
the next: SIGKILL of a broker (the leader of a data partition, of a transaction coordinator's partition, or the
controller: whatever the draw hits) and a restart; SIGSTOP of a broker for longer than its etcd session (it comes
back as a zombie that believed it led partitions and coordinators, and must be fenced by the epochs). Then the
writers stop, every transactional id is re-initialised (settling its last transaction) and fresh readers read every
partition to its end. The checker must find no anomaly (lost write, duplicate, aborted read, half-visible
transaction, offsets going backwards), and the writers must have committed transactions after the last fault
healed (liveness).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from oncelog.testing.cluster import ClusterProcess

from helpers.checker import ABORT, COMMIT, OK, History, Send, TxnEnd, check
from helpers.copiers import CONSUMER_GROUP_SETTINGS, run_copy
from helpers.workload import PARTITIONS, TOPIC, Workload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

RUN_SECONDS = 40
SESSION_MS = 4000  # broker.session.timeout.ms: a paused broker loses its leaderships after this
#: client settings for a cluster that fails over: a request to a dead leader is given up on soon
CLIENT = {"socket.timeout.ms": 10_000, "topic.metadata.refresh.interval.ms": 2_000}


def test_random_workload_on_a_cluster_with_kills_and_pauses(make_cluster: Callable[..., ClusterProcess],
                                                            tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    seed = int(os.environ.get("EOS_SEED", int.from_bytes(os.urandom(4), "big")))
    rnd = random.Random(seed)
    cluster = make_cluster(3, settings={
        "default.replication.factor": 3, "min.insync.replicas": 2, "log.segment.bytes": 512 * 1024,
        "broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
        "replica.lag.time.max.ms": 4000,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
    boot = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(20)
    cluster.wait_for_topic(TOPIC, 3)

    h = History()
    stop = threading.Event()
    w = Workload(h, boot, rnd, stop, CLIENT, CLIENT)
    writers, readers = w.writers, w.readers

    t0 = time.monotonic()
    faults: list[tuple[float, str, int, float]] = []  # (at, kind, node, healed at)
    commits_at: list[tuple[float, int]] = []

    def commits() -> int:
        return sum(1 for e in h.of(TxnEnd) if e.outcome == COMMIT)

    def sleep_until(t: float) -> None:
        while time.monotonic() < t:
            time.sleep(min(0.5, max(0.0, t - time.monotonic())))
            commits_at.append((round(time.monotonic() - t0, 1), commits()))

    kinds = ["kill", "pause", "kill"]
    rnd.shuffle(kinds)
    at = 4.0
    for kind in kinds:
        sleep_until(t0 + at)
        node = rnd.choice(cluster.node_ids)
        started = round(time.monotonic() - t0, 1)
        if kind == "kill":
            cluster.kill(node)
            time.sleep(rnd.uniform(0.5, 3.0))
            cluster.start_broker(node)
        else:
            cluster.pause(node)
            time.sleep(SESSION_MS / 1000 + rnd.uniform(0.5, 2.0))  # its session expires: a zombie when resumed
            cluster.resume(node)
            cluster.wait_for(lambda v, n=node: n in v.brokers, 30, f"node {node} registered again")
        healed = round(time.monotonic() - t0, 1)
        faults.append((started, kind, node, healed))
        cluster.wait_for(lambda v: all(len(s.isr) >= 2 for _, s in v.topic_partitions(TOPIC)), 30,
                         "every partition back to min.insync.replicas")
        at = max(at + 8.0, time.monotonic() - t0 + 4.0)
    last_healed = time.monotonic()
    committed_at_heal = commits()
    sleep_until(max(t0 + RUN_SECONDS, last_healed + 8.0))
    committed_after_heal = commits() - committed_at_heal
    stop.set()
    ends = w.finish()

    rep = check(h, sends_complete=True)
    rep.stats.update(seed=seed, faults=faults, commits_at=commits_at[::4], ends=ends,
                     committed_after_heal=committed_after_heal, **w.stats())
    h.dump(tmp_path / "history.jsonl")
    (tmp_path / "report.json").write_text(rep.to_json())
    print(rep.summary(3))
    print(f"faults (at, kind, node, healed): {faults}; commits after the last fault healed: {committed_after_heal}")
    for wr in writers:
        assert wr.error is None, f"{wr.name} crashed: {wr.error!r}"
    assert rep.ok, f"anomalies (seed {seed}, history in {tmp_path}):\n{rep.summary()}"
    assert rep.stats["txns"][COMMIT] >= 20 and rep.stats["txns"][ABORT] >= 5, rep.stats
    assert rep.stats["acked"] >= 1000, rep.stats
    assert sum(1 for s in h.of(Send) if s.outcome == OK) == rep.stats["acked"]
    assert all(r.count > 0 for r in readers), rep.stats["live_polls"]
    # liveness: transactions kept committing once the last fault healed
    assert committed_after_heal >= 3, (committed_after_heal, faults, commits_at[-20:])


class _OneBrokerOf:
    """What the copy test's chaos kills and restarts (``kill()`` / ``start()`` / ``bootstrap``): a random broker of
    the cluster (whichever it leads: data partitions, the group's or a transaction's coordinator, the controller)."""

    def __init__(self, cluster: ClusterProcess, rnd: random.Random) -> None:
        self.cluster, self.rnd = cluster, rnd
        self.bootstrap = cluster.bootstrap
        self.victims: list[int] = []

    def kill(self) -> None:
        self.victims.append(self.rnd.choice(self.cluster.node_ids))
        self.cluster.kill(self.victims[-1])

    def start(self) -> None:
        self.cluster.start_broker(self.victims[-1])


def test_exactly_once_copy_on_a_cluster(cluster: ClusterProcess, tmp_path: Path) -> None:
    """The exactly-once copy of ``tests/eos/test_copy.py`` (confluent copiers SIGKILLed every few seconds, input 2
    partitions, output 3) on the three-broker cluster with replication factor 3, one broker SIGKILLed and restarted
    in the middle; the checker judges the output."""
    rnd = random.Random(int(os.environ.get("EOS_SEED", int.from_bytes(os.urandom(4), "big"))))
    target = _OneBrokerOf(cluster, rnd)
    run_copy(target, tmp_path, "confluent", 2, 3, replication=3)  # type: ignore[arg-type]
    assert len(target.victims) == 1


class _GroupCoordinatorOf(_OneBrokerOf):
    """The broker leading the group's ``__consumer_offsets`` partition, whichever it is when the chaos strikes."""

    def __init__(self, cluster: ClusterProcess, rnd: random.Random, group: str) -> None:
        super().__init__(cluster, rnd)
        self.group = group

    def kill(self) -> None:
        from oncelog.coordinator.transaction.partitioner import partition_for

        view = self.cluster.view()
        meta = view.topics.get("__consumer_offsets")
        state = None if meta is None else view.partition("__consumer_offsets",
                                                         partition_for(self.group, meta.num_partitions))
        node = state.leader if state is not None and state.leader in self.cluster.node_ids else None
        self.victims.append(node if node is not None else self.rnd.choice(self.cluster.node_ids))
        self.cluster.kill(self.victims[-1])


def test_exactly_once_copy_on_a_cluster_with_the_consumer_group_protocol(make_cluster: Callable[..., ClusterProcess],
                                                                         tmp_path: Path) -> None:
    """The same copy with copiers in a KIP-848 consumer group (group.protocol=consumer): the broker SIGKILLed in the
    middle is the group's coordinator, which the copiers' heartbeats and transactional offset commits then find on
    another broker (the group loaded from the replicated ``__consumer_offsets``)."""
    cluster = make_cluster(3, settings={"default.replication.factor": 3, **CONSUMER_GROUP_SETTINGS,
                                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
    rnd = random.Random(int(os.environ.get("EOS_SEED", int.from_bytes(os.urandom(4), "big"))))
    target = _GroupCoordinatorOf(cluster, rnd, "kip848-copy-group")
    run_copy(target, tmp_path, "confluent", 2, 3, replication=3, extra=("--group-protocol", "consumer"),  # type: ignore[arg-type]
             run="kip848-copy")
    assert len(target.victims) == 1
