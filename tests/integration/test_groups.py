"""Classic consumer groups with real clients against a real broker.

confluent-kafka groups of 3 with range, roundrobin and cooperative-sticky assignment; kafka-python and aiokafka
groups; members join, leave cleanly and crash (a child process SIGKILLed: its session times out). After each
rebalance every partition is owned by exactly one member; across a clean handover with committed offsets no
record is consumed twice; committed offsets survive a broker restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.topics import make_topic

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SETTINGS = {"num.partitions": 3, "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
            "offsets.topic.num.partitions": 5}
PARTITIONS = 6


@pytest.fixture(scope="module")
def gbroker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    proc = kafka_module_broker_factory(SETTINGS, in_process=False)  # group timing: the clients' load apart
    yield proc
    rc = proc.stop()
    assert rc == 0, f"broker did not shut down cleanly (exit {rc}); log:\n{proc.log_tail()}"


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert p.flush(20) == 0


def consumer(bootstrap: str, group: str, strategy: str, **extra: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": strategy,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "topic.metadata.refresh.interval.ms": 1000}
    conf.update(extra)
    return Consumer(conf)


class Member:
    def __init__(self, c: Consumer, name: str, seen: list[int]) -> None:
        self.c, self.name, self.seen = c, name, seen
        #: the member's assignment as of its last poll, read by the test's main thread (a consumer is only ever
        #: called from the one thread that polls it)
        self.assigned: list[tuple[str, int]] = []

    def poll(self) -> None:
        msg = self.c.poll(0.05)
        self.assigned = [(tp.topic, tp.partition) for tp in self.c.assignment()]
        if msg is None or msg.error():
            return
        self.seen.append(int(msg.value()))
        for _ in range(200):  # a commit while the group completes a rebalance is refused (Kafka does too): retry
            try:
                self.c.commit(message=msg, asynchronous=False)
                return
            except KafkaException as e:
                if e.args[0].code() != KafkaError.REBALANCE_IN_PROGRESS:
                    raise
                time.sleep(0.05)
        raise AssertionError("commit kept failing with REBALANCE_IN_PROGRESS")


def owned(members: list[Member]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for m in members:
        out += m.assigned
    return out


def poll_until(members: list[Member], cond: Any, timeout: float = 40.0) -> None:
    """Poll every member in its own thread (as applications run consumers) until ``cond()`` holds.

    One thread per member matters: a synchronous commit waits behind its member's in-flight JoinGroup (a broker
    answers one connection's requests in order, Kafka included), and that join completes only once the other
    members have served their rebalance callbacks, which they do inside ``poll()``. Polled from one thread, the
    commit would block the very polls the join waits for."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(m: Member) -> None:
        try:
            while not stop.is_set():
                m.poll()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m,), name=f"poll-{m.name}", daemon=True) for m in members]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not errors:
            if cond():
                return
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(70)
    if errors:
        raise errors[0]
    raise AssertionError(f"timed out; owned={owned(members)}")


def exactly_once_owned(members: list[Member], topic: str) -> bool:
    o = owned(members)
    return sorted(o) == [(topic, p) for p in range(PARTITIONS)] and all(len(m.assigned) > 0 for m in members)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_group_of_three(gbroker: KafkaBroker, topic_name: str, strategy: str) -> None:
    bs = gbroker.bootstrap
    make_topic(bs, topic_name, PARTITIONS)
    produce(bs, topic_name, 0, 300)
    group = f"g-{topic_name}"
    seen: list[int] = []
    members = [Member(consumer(bs, group, strategy), f"m{i}", seen) for i in range(3)]
    for m in members:
        m.c.subscribe([topic_name])
    poll_until(members, lambda: exactly_once_owned(members, topic_name) and len(seen) >= 300)
    # a member leaves cleanly: the other two take over from the committed offsets
    leaving = members.pop()
    leaving.c.close()
    produce(bs, topic_name, 300, 300)
    poll_until(members, lambda: exactly_once_owned(members, topic_name) and len(seen) >= 600)
    # a new member joins
    members.append(Member(consumer(bs, group, strategy), "m3", seen))
    members[-1].c.subscribe([topic_name])
    produce(bs, topic_name, 600, 300)
    poll_until(members, lambda: exactly_once_owned(members, topic_name) and len(seen) >= 900)
    for m in members:
        m.poll()
    assert sorted(seen) == list(range(900)), "a record was consumed twice or lost"
    for m in members:
        m.c.close()


CRASHER = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
                  "session.timeout.ms": 2000, "heartbeat.interval.ms": 300, "enable.auto.commit": False})
    c.subscribe([sys.argv[3]])
    while True:
        m = c.poll(0.1)
        if c.assignment():
            print("assigned", flush=True)
""")


def test_crashed_member_times_out_and_partitions_move(gbroker: KafkaBroker, topic_name: str) -> None:
    bs = gbroker.bootstrap
    make_topic(bs, topic_name, PARTITIONS)
    group = f"g-{topic_name}"
    child = subprocess.Popen([sys.executable, "-c", CRASHER, bs, group, topic_name], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"assigned"
        seen: list[int] = []
        survivor = Member(consumer(bs, group, "range", **{"session.timeout.ms": 2000}), "s", seen)
        survivor.c.subscribe([topic_name])
        poll_until([survivor], lambda: 0 < len(survivor.assigned) < PARTITIONS)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        t0 = time.monotonic()
        poll_until([survivor], lambda: len(survivor.assigned) == PARTITIONS, timeout=30)
        assert time.monotonic() - t0 >= 0.5  # the move waited for the session timeout
        produce(bs, topic_name, 0, 60)
        poll_until([survivor], lambda: len(seen) >= 60)
        survivor.c.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _unstick_kafka_python(c: Any) -> bool:
    """Work around a kafka-python 3.0.12 client bug (not a broker bug; Kafka's coordinator answers the same).

    ``poll(timeout_ms=100)`` runs ``BaseCoordinator.join_group_async``, which starts a JoinGroup+SyncGroup task
    (``_join_task``) and, when the poll times out, leaves it in flight for the next poll to await again -- but only
    ``while self.need_rejoin()``. When the rejoin was wanted solely because the leader's metadata changed
    (``ConsumerCoordinator.need_rejoin``: ``_assignment_snapshot != _metadata_snapshot``, e.g. generation 1 was
    assigned before the leader knew the topic's partitions), the leader's own ``_perform_assignment`` inside that
    task sets ``_assignment_snapshot = _metadata_snapshot`` before the SyncGroup answer arrives. The next poll
    then sees ``need_rejoin() == False`` and returns without awaiting the task; the successful SyncGroup result is
    dropped: ``state`` stays REBALANCING, ``_enable_heartbeat()`` and ``_on_join_complete`` never run, so the
    heartbeat loop stays disabled and nothing ever sets ``rejoin_needed``. The broker (rightly) removes the silent
    member after session.timeout.ms, the client never learns it and never rejoins. Seen in a broker log as
    ``generation N stable`` followed exactly session.timeout.ms later by ``member <leader> removed (Stable)``.

    Detect exactly that state (join task finished, its result never consumed, nothing wants a rejoin) and ask for
    a rejoin, which is what the client would do once it learnt that it fell out of the group."""
    from kafka.structs import MemberState

    coord = c._coordinator
    task = getattr(coord, "_join_task", None)
    if coord.state is MemberState.REBALANCING and task is not None and task.is_done and not coord.need_rejoin():
        logging.getLogger(__name__).warning("kafka-python member %s dropped its finished join; requesting a rejoin",
                                            coord._generation.member_id)
        coord.request_rejoin()
        return True
    return False


def test_kafka_python_group(gbroker: KafkaBroker, topic_name: str) -> None:
    """Two kafka-python consumers, each driven by its own thread (as an application would: one consumer's
    blocking rejoin must not starve the other's)."""
    import threading

    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    bs = gbroker.bootstrap
    make_topic(bs, topic_name, PARTITIONS)
    produce(bs, topic_name, 0, 200)
    group = f"g-{topic_name}"
    seen: list[int] = []
    lock = threading.Lock()
    stop = [threading.Event(), threading.Event()]
    unstuck: list[int] = []  # consumers the kafka-python workaround had to kick (see _unstick_kafka_python)
    cs = [KafkaConsumer(topic_name, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
          for _ in range(2)]

    def run(i: int) -> None:
        c = cs[i]
        while not stop[i].is_set():
            for msgs in c.poll(timeout_ms=100).values():
                with lock:
                    seen.extend(int(m.value) for m in msgs)
            if _unstick_kafka_python(c):
                unstuck.append(i)
            try:
                c.commit()
            except (CommitFailedError, RebalanceInProgressError):
                pass  # refused during a rebalance, as Kafka does; the next commit covers it
        c.close()  # commits nothing more (auto commit off) and leaves the group

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()

    def settled() -> bool:
        parts = [(tp.topic, tp.partition) for c in cs for tp in c.assignment()]
        return sorted(parts) == [(topic_name, p) for p in range(PARTITIONS)] and all(c.assignment() for c in cs)

    deadline = time.monotonic() + 40
    while not (len(seen) >= 200 and settled()) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert settled() and set(seen) == set(range(200)), \
            f"kafka-python group did not settle: {len(seen)} records, {[c.assignment() for c in cs]}, " \
            f"unstuck={unstuck}"
        time.sleep(1)  # both have committed what they read
        with lock:
            seen.clear()
        stop[0].set()
        threads[0].join(20)
        produce(bs, topic_name, 200, 100)
        deadline = time.monotonic() + 40
        while len(seen) < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        assert sorted(seen) == list(range(200, 300)), "a record was consumed twice across the handover"
        assert len(cs[1].assignment()) == PARTITIONS
    finally:
        for e in stop:
            e.set()
        for t in threads:
            t.join(20)


def test_aiokafka_group(gbroker: KafkaBroker, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer

    bs = gbroker.bootstrap
    make_topic(bs, topic_name, PARTITIONS)
    produce(bs, topic_name, 0, 200)
    group = f"g-{topic_name}"

    async def main() -> None:
        cs = [AIOKafkaConsumer(topic_name, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                               enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
              for _ in range(2)]
        for c in cs:
            await c.start()
        seen: list[int] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            for c in cs:
                res = await c.getmany(timeout_ms=100)
                for msgs in res.values():
                    seen += [int(m.value) for m in msgs]
                if res:
                    await c.commit()
            parts = sorted((tp.topic, tp.partition) for c in cs for tp in c.assignment())
            if len(seen) >= 200 and parts == [(topic_name, p) for p in range(PARTITIONS)] \
                    and all(c.assignment() for c in cs):
                break
        assert sorted(seen) == list(range(200)), f"{len(seen)} records; {[c.assignment() for c in cs]}"
        for c in cs:
            await c.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_offsets_survive_restart_and_admin_view(kafka_broker_factory: Callable[..., KafkaBroker],
                                                 topic_name: str) -> None:
    proc = kafka_broker_factory(SETTINGS)
    bs = proc.bootstrap
    make_topic(bs, topic_name, PARTITIONS)
    produce(bs, topic_name, 0, 60)
    group = f"g-{topic_name}"
    seen: list[int] = []
    m = Member(consumer(bs, group, "range"), "m", seen)
    m.c.subscribe([topic_name])
    poll_until([m], lambda: len(seen) >= 60)
    a = AdminClient({"bootstrap.servers": bs})
    listed = a.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    desc = a.describe_consumer_groups([group])[group].result(10)
    assert str(desc.state).endswith("STABLE") and len(desc.members) == 1
    m.c.close()
    assert proc.stop() == 0
    proc.start()
    c = consumer(proc.bootstrap, group, "range")
    committed = c.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=15)
    assert sum(tp.offset for tp in committed) == 60
    c.close()
    a = AdminClient({"bootstrap.servers": proc.bootstrap})
    a.delete_consumer_groups([group])[group].result(10)  # Empty after the close: deletable
    assert group not in {g.group_id for g in a.list_consumer_groups().result(10).valid}


# A member that dies while its JoinGroup is parked (hardening issue, defect 1): a raw client process joins as a new
# member with librdkafka's default rebalance timeout (max.poll.interval.ms, 5 minutes), prints once the broker holds
# its JoinGroup, and is SIGKILLed. The broker cancels the closed connection's request; the parked JoinGroup belongs
# to the group (Kafka's purgatory), so the member still counts as joined, and its session timeout removes it after
# the join phase. Before the fix the survivors' JoinGroup waited for the 5-minute rebalance timeout.
PARKED_JOINER = textwrap.dedent("""
    import asyncio, struct, sys
    from oncelog.client.connection import BrokerConnection
    from oncelog.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol

    host, port = sys.argv[1].rsplit(":", 1)
    group, topic = sys.argv[2], sys.argv[3]
    t = topic.encode()
    subscription = struct.pack(">hih", 0, 1, len(t)) + t + struct.pack(">i", -1)  # ConsumerProtocol v0

    async def main() -> None:
        conn = BrokerConnection(host, int(port), client_id="parked-joiner")
        await conn.connect()
        def join(member_id: str) -> JoinGroupRequest:
            return JoinGroupRequest(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=300_000,
                                    member_id=member_id, protocol_type="consumer",
                                    protocols=[JoinGroupRequestProtocol(name="range", metadata=subscription)])
        r = await conn.send(join(""), version=9)
        assert r.error_code == 79, r  # MEMBER_ID_REQUIRED
        parked = asyncio.ensure_future(conn.send(join(r.member_id), version=9, timeout=600))
        await asyncio.sleep(0.5)
        assert not parked.done(), parked
        print("parked", flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
""")


def test_member_killed_while_its_join_is_parked_does_not_stall_the_group(gbroker: KafkaBroker,
                                                                          topic_name: str) -> None:
    bs = gbroker.bootstrap
    make_topic(bs, topic_name, PARTITIONS)
    group = f"g-{topic_name}"
    seen: list[int] = []
    # librdkafka's default max.poll.interval.ms: the rebalance timeout the broker would otherwise wait for
    members = [Member(consumer(bs, group, "range", **{"max.poll.interval.ms": 300_000}), f"m{i}", seen)
               for i in range(2)]
    for m in members:
        m.c.subscribe([topic_name])
    poll_until(members, lambda: exactly_once_owned(members, topic_name))
    child = subprocess.Popen([sys.executable, "-c", PARKED_JOINER, bs, group, topic_name], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"parked"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        t0 = time.monotonic()
        # the survivors learn of the rebalance the joiner started (their assignment as of the last poll is stale)
        poll_until(members, lambda: not exactly_once_owned(members, topic_name), timeout=10)
        # the survivors rejoin (answered at once: the dead member counts as joined), get a generation where it owns
        # partitions too, and once its 6 s session has run out, one without it: all partitions between them
        poll_until(members, lambda: exactly_once_owned(members, topic_name), timeout=25)
        assert time.monotonic() - t0 < 6 + 12, "the survivors got their assignment too late"
        produce(bs, topic_name, 0, 60)
        poll_until(members, lambda: len(seen) >= 60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for m in members:
            m.c.close()

