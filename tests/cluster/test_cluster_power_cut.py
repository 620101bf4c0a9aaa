"""A power cut of a minority in the durable default: the partition's leader (one of three replicas) loses what it
had not fsynced; no acknowledged record is lost, even once it leads again.

The leader runs with the power-cut trace and a slow disk (``oncelog.testing.power_cut``); while an idempotent
``acks=all`` producer writes, it is stopped inside a window where some appends are not durable yet, SIGKILLed, and
every segment is cut back to a random length at or above what it had fsynced (often mid-batch). A follower became
leader meanwhile and the writes went on. The cut broker restarts, truncates to the new leader's log, catches up and
rejoins the ISR; then a preferred election makes it the leader again, and everything acknowledged is read back from
it, once. In the durable default a replica counts towards ``acks=all`` only for what it has on disk, so the cut can
only take records that nobody was told were written (Kafka's "last replica standing" loss, KIP-966, cannot happen).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.testing.cluster import ClusterProcess
from oncelog.testing.power_cut import FSYNC_DELAY_ENV, FSYNC_TRACE_ENV, cut_to_durable, freeze_with_undurable

TIMEOUT = 30
VICTIM = 1


def test_a_power_cut_of_the_leader_loses_no_acknowledged_record(make_cluster: Callable[..., ClusterProcess],
                                                                 tmp_path: Path) -> None:
    trace = tmp_path / "fsync.trace"
    cluster = make_cluster(3, settings={"min.insync.replicas": 2},
                           broker_env={VICTIM: {FSYNC_TRACE_ENV: str(trace), FSYNC_DELAY_ENV: "3"}})
    topic = "power-cut"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[VICTIM, 2, 3]])])[topic].result(TIMEOUT)
    cluster.wait_for_topic(topic, 3)
    assert cluster.leaders(topic)[0] == VICTIM

    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(str(err))

    def write() -> None:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 1, "message.timeout.ms": 60_000})
        i = 0
        while not stop.is_set():
            p.produce(topic, f"v{i}".encode(), partition=0, on_delivery=done)
            i += 1
            p.poll(0.001 if i % 20 else 0.01)
        p.flush(60)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    time.sleep(3.0)
    rnd = random.Random()
    b = cluster.brokers[VICTIM]
    assert b.proc is not None
    undurable = freeze_with_undurable(b.proc.pid, b.data_dir, trace, rnd)
    acked_at_cut = len(acked)
    cluster.kill(VICTIM)
    cuts = cut_to_durable(b.data_dir, trace, rnd)
    cluster.wait_for(lambda v: v.partition(topic, 0).leader not in (VICTIM, -1), TIMEOUT,  # type: ignore[union-attr]
                     "a new leader")
    time.sleep(2.0)  # writes go on at the new leader
    cluster.start_broker(VICTIM)
    cluster.wait_for(lambda v: VICTIM in v.partition(topic, 0).isr, 60, "the cut broker back in the ISR")  # type: ignore[union-attr]
    stop.set()
    writer.join(90)
    assert not errors, errors[:3]
    assert len(acked) > acked_at_cut > 0, (acked_at_cut, len(acked))

    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(TIMEOUT)
    assert all(e is None for e in result.values()), result
    cluster.wait_for(lambda v: v.partition(topic, 0).leader == VICTIM, TIMEOUT, "the cut broker leading")  # type: ignore[union-attr]

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "power-cut-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        eof = False
        while not eof and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    eof = eof or len(got) >= len(acked)
                    continue
                got.append(m.value())
    finally:
        c.close()
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged record(s) lost, e.g. {sorted(missing)[:5]}; cuts {cuts}"
    assert len(got) == len(set(got)), "a record stored twice"
    assert undurable and cuts, (undurable, cuts)  # the cut took something: the test meant something
    print(f"\n{len(acked)} acknowledged ({acked_at_cut} before the cut), {len(got)} read back from the cut broker "
          f"as leader; cut: {[str(c) for c in cuts]}")
