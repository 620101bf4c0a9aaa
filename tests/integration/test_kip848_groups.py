"""Consumer groups of the KIP-848 protocol (``group.protocol=consumer``) with confluent-kafka (librdkafka) against a
real broker: members join, leave and crash with incremental assignments (a member keeps what it is not asked to
give up), commits are checked against member epochs, regex subscriptions are resolved by the broker, static members
come back to their partitions without a rebalance, and the admin APIs show the group.

The broker runs with short consumer group timeouts (a session of 4 s, heartbeats every second) to keep the tests
short; the rebalance logic is the same at Kafka's defaults.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from oncelog.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.rawclient import RawClient
from helpers.topics import make_topic

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SETTINGS = {"num.partitions": 3, "offsets.topic.num.partitions": 5,
            "group.consumer.session.timeout.ms": 4000, "group.consumer.min.session.timeout.ms": 1000,
            "group.consumer.heartbeat.interval.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 100}
PARTITIONS = 6


@pytest.fixture(scope="module")
def kbroker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    proc = kafka_module_broker_factory(SETTINGS, in_process=False)  # group timing: the clients' load apart
    yield proc
    rc = proc.stop()
    assert rc == 0, f"broker did not shut down cleanly (exit {rc}); log:\n{proc.log_tail()}"


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert p.flush(20) == 0


def consumer(bootstrap: str, group: str, client: str = "confluent", **extra: Any) -> Any:
    """A consumer of the KIP-848 protocol: confluent-kafka's, or oncelog's own client (its drop-in)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if client == "confluent":
        conf["topic.metadata.refresh.interval.ms"] = 1000
    conf.update(extra)
    if client == "oncelog":
        from oncelog.client import Consumer as NativeConsumer

        return NativeConsumer(conf)
    return Consumer(conf)


CLIENTS = pytest.mark.parametrize("client", ["confluent", "oncelog"])


class Member:
    """A consumer polled in its own thread; it commits every record it reads and logs its rebalance callbacks."""

    def __init__(self, c: Any, name: str, seen: list[int]) -> None:
        self.c, self.name, self.seen = c, name, seen
        self.assigned: set[tuple[str, int]] = set()
        self.events: list[tuple[str, set[tuple[str, int]]]] = []  # ("assign" | "revoke" | "lost", partitions)

    def subscribe(self, topics: list[str]) -> None:
        def cb(kind: str) -> Callable[[Any, list[TopicPartition]], None]:
            def on(_c: Any, parts: list[TopicPartition]) -> None:
                self.events.append((kind, {(p.topic, p.partition) for p in parts}))
            return on
        self.c.subscribe(topics, on_assign=cb("assign"), on_revoke=cb("revoke"), on_lost=cb("lost"))

    def poll(self) -> None:
        msg = self.c.poll(0.05)
        self.assigned = {(tp.topic, tp.partition) for tp in self.c.assignment()}
        if msg is None or msg.error():
            return
        self.seen.append(int(msg.value()))
        self.c.commit(message=msg, asynchronous=False)


def poll_until(members: list[Member], cond: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll every member in its own thread until ``cond()`` holds."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(m: Member) -> None:
        try:
            while not stop.is_set():
                m.poll()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m,), daemon=True) for m in members]
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
            t.join(30)
    if errors:
        raise errors[0]
    raise AssertionError(f"timed out; owned={[sorted(m.assigned) for m in members]}")


def split(members: list[Member], topic: str, partitions: int = PARTITIONS) -> bool:
    """Every partition owned by exactly one member, every member owning some."""
    owned = [tp for m in members for tp in m.assigned]
    return sorted(owned) == [(topic, p) for p in range(partitions)] and all(m.assigned for m in members)


def describe(bootstrap: str, group: str) -> Any:
    with RawClient(bootstrap) as raw:
        return raw.request(69, 0, ConsumerGroupDescribeRequest(group_ids=[group])).groups[0]


def test_apiversions_serves_the_protocol_and_group_version(kbroker: KafkaBroker) -> None:
    with RawClient(kbroker.bootstrap) as raw:
        r = raw.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert keys[68] == (0, 1) and keys[69] == (0, 0)
    assert ("group.version", 1) in [(f.name, f.max_version_level) for f in r.finalized_features]


CHILD = textwrap.dedent("""
    import sys
    if sys.argv[4] == "oncelog":
        from oncelog.client import Consumer
    else:
        from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([sys.argv[3]])
    told = False
    while True:
        c.poll(0.1)
        if c.assignment() and not told:
            print("assigned", flush=True)
            told = True
""")


@CLIENTS
def test_join_leave_and_crash_move_only_what_must_move(kbroker: KafkaBroker, client: str) -> None:
    bs = kbroker.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    make_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 0, 300)
    seen: list[int] = []
    m0 = Member(consumer(bs, group, client), "m0", seen)
    m0.subscribe([topic])
    poll_until([m0], lambda: len(m0.assigned) == PARTITIONS and len(seen) >= 300)
    first = set(m0.assigned)
    # a second member joins: m0 gives up half, incrementally (no revocation of what it keeps)
    m1 = Member(consumer(bs, group, client), "m1", seen)
    m1.subscribe([topic])
    produce(bs, topic, 300, 300)
    poll_until([m0, m1], lambda: split([m0, m1], topic) and len(seen) >= 600)
    revoked = set().union(*(p for kind, p in m0.events if kind == "revoke"))
    assert revoked == first - m0.assigned and len(m0.assigned) == 3
    assert [kind for kind, _ in m1.events] == ["assign"] and m1.events[0][1] == m1.assigned
    d = describe(bs, group)
    assert (d.error_code, d.group_state, d.assignor_name) == (0, "Stable", "uniform")
    assert {m.member_epoch for m in d.members} == {d.group_epoch} == {d.assignment_epoch}
    # m1 leaves cleanly: m0 takes over from the committed offsets, nothing is read twice
    m1.c.close()
    produce(bs, topic, 600, 300)
    poll_until([m0], lambda: len(m0.assigned) == PARTITIONS and len(seen) >= 900)
    assert sorted(seen) == list(range(900)), "a record was consumed twice or lost"
    # a member in another process is SIGKILLed: its partitions come back once its session expires
    child = subprocess.Popen([sys.executable, "-c", CHILD, bs, group, topic, client], stdout=subprocess.PIPE)
    lines: list[bytes] = []
    threading.Thread(target=lambda: lines.extend(child.stdout or []), daemon=True).start()
    try:
        poll_until([m0], lambda: len(m0.assigned) == 3 and lines == [b"assigned\n"])
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        t0 = time.monotonic()
        poll_until([m0], lambda: len(m0.assigned) == PARTITIONS)
        assert time.monotonic() - t0 >= 1.0  # the move waited for the session timeout
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not [p for kind, p in m0.events if kind == "lost"]
    m0.c.close()


@CLIENTS
def test_commits_are_checked_against_the_member_epoch(kbroker: KafkaBroker, client: str) -> None:
    bs = kbroker.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    make_topic(bs, topic, 1)
    produce(bs, topic, 0, 10)
    seen: list[int] = []
    m = Member(consumer(bs, group, client), "m", seen)
    m.subscribe([topic])
    poll_until([m], lambda: len(seen) >= 10)
    d = describe(bs, group)
    member_id, epoch = d.members[0].member_id, d.members[0].member_epoch

    def commit(version: int, epoch_: int, member: str = member_id) -> int:
        req = OffsetCommitRequest(group_id=group, member_id=member, generation_id_or_member_epoch=epoch_, topics=[
            OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequestPartition(partition_index=0, committed_offset=3, committed_leader_epoch=-1)])])
        with RawClient(bs) as raw:
            return int(raw.request(8, version, req).topics[0].partitions[0].error_code)

    assert commit(9, epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit(9, epoch, "someone-else") == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit(8, epoch) == ErrorCode.UNSUPPORTED_VERSION  # KIP-848 members commit with v9+
    assert commit(9, epoch) == ErrorCode.NONE
    if client == "oncelog":
        from oncelog.client import TopicPartition as NativeTopicPartition

        committed = m.c.committed([NativeTopicPartition(topic, 0)], timeout=10)
    else:
        committed = m.c.committed([TopicPartition(topic, 0)], timeout=10)
    assert committed[0].offset == 3
    m.c.close()
    # the group is Empty: a commit without a member is an admin's, and allowed
    assert commit(9, -1, "") == ErrorCode.NONE


@CLIENTS
def test_regex_subscription_is_resolved_by_the_broker(kbroker: KafkaBroker, client: str) -> None:
    bs = kbroker.bootstrap
    base = f"rx{uuid.uuid4().hex[:6]}"
    for name in (f"{base}-a", f"{base}-b", f"other-{base}"):
        make_topic(bs, name, 2)
    m = Member(consumer(bs, f"g-{base}", client), "m", [])
    m.subscribe([f"^{base}-.*"])
    want = {(f"{base}-{x}", p) for x in "ab" for p in range(2)}
    poll_until([m], lambda: m.assigned == want)
    d = describe(bs, f"g-{base}")
    assert d.members[0].subscribed_topic_regex == f"(^{base}-.*)"
    if client == "oncelog":  # the rest is the broker's doing, the same whatever the client: once is enough
        m.c.close()
        return
    # a topic created later is matched at the next refresh of the group's regexes (at most every 10 s)
    make_topic(bs, f"{base}-c", 1)
    poll_until([m], lambda: m.assigned == want | {(f"{base}-c", 0)}, timeout=25)
    m.c.close()


@CLIENTS
def test_static_member_returns_to_its_partitions_without_a_rebalance(kbroker: KafkaBroker,
                                                                    client: str) -> None:
    bs = kbroker.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    make_topic(bs, topic, PARTITIONS)
    a = Member(consumer(bs, group, client, **{"group.instance.id": "a"}), "a", [])
    b = Member(consumer(bs, group, client, **{"group.instance.id": "b"}), "b", [])
    for m in (a, b):
        m.subscribe([topic])
    poll_until([a, b], lambda: split([a, b], topic) and describe(bs, group).group_state == "Stable")
    mine, epoch = set(a.assigned), describe(bs, group).group_epoch
    b_events = len(b.events)
    a.c.close()  # a static member leaves for a while (epoch -2): it keeps its place and partitions
    assert describe(bs, group).group_epoch == epoch
    back = Member(consumer(bs, group, client, **{"group.instance.id": "a"}), "a2", [])
    back.subscribe([topic])
    poll_until([back, b], lambda: back.assigned == mine)
    d = describe(bs, group)
    assert d.group_epoch == epoch and sorted(m.instance_id for m in d.members) == ["a", "b"]
    assert len(b.events) == b_events  # b saw no rebalance
    back.c.close()
    b.c.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(kbroker: KafkaBroker) -> None:
    """max.poll.interval.ms without poll(): the member leaves the group and stays out (Kafka's stale member) until
    the application polls again; that poll reports the partitions lost and rejoins."""
    bs = kbroker.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    make_topic(bs, topic, 2)
    m = Member(consumer(bs, group, "oncelog", **{"max.poll.interval.ms": 1000}), "m", [])
    m.subscribe([topic])
    poll_until([m], lambda: len(m.assigned) == 2)
    time.sleep(2.5)  # the application works for longer than max.poll.interval.ms
    assert describe(bs, group).members == [], "the member did not leave, or rejoined without a poll"
    t0 = time.monotonic()
    poll_until([m], lambda: len(m.assigned) == 2, timeout=15)
    assert time.monotonic() - t0 < 10
    assert [kind for kind, _ in m.events] == ["assign", "lost", "assign"]
    assert m.events[1][1] == {(topic, 0), (topic, 1)}
    m.c.close()


def test_admin_lists_and_describes_consumer_groups(kbroker: KafkaBroker) -> None:
    bs = kbroker.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    make_topic(bs, topic, 2)
    m = Member(consumer(bs, group), "m", [])
    m.subscribe([topic])
    poll_until([m], lambda: len(m.assigned) == 2)
    admin = AdminClient({"bootstrap.servers": bs})
    listed = admin.list_consumer_groups(request_timeout=10).result()
    types = {g.group_id: g.type for g in listed.valid}
    assert types[group] == ConsumerGroupType.CONSUMER
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert desc.type == ConsumerGroupType.CONSUMER and desc.partition_assignor == "uniform"
    assert {(tp.topic, tp.partition) for tp in desc.members[0].assignment.topic_partitions} == m.assigned
    m.c.close()
    deleted = admin.delete_consumer_groups([group], request_timeout=10)
    deleted[group].result()
    gone = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert gone.state == ConsumerGroupState.DEAD and not gone.members
    assert group not in {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}


def classic_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "cooperative-sticky"})


def test_a_classic_group_migrates_online_to_the_consumer_protocol_and_back(kbroker: KafkaBroker) -> None:
    """KIP-848's upgrade path: classic members keep consuming while a member of the consumer protocol joins (the
    group becomes a consumer group, the classic members rejoin it with JoinGroup) and leaves again (the group goes
    back to the classic protocol); every record is consumed once across both moves."""
    bs = kbroker.bootstrap
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    make_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 0, 300)
    seen: list[int] = []
    classic = [Member(classic_consumer(bs, group), f"k{i}", seen) for i in range(2)]
    for m in classic:
        m.subscribe([topic])
    poll_until(classic, lambda: split(classic, topic) and len(seen) >= 300)
    admin = AdminClient({"bootstrap.servers": bs})

    def group_type() -> Any:
        return {g.group_id: g.type for g in admin.list_consumer_groups(request_timeout=10).result().valid}.get(group)

    assert group_type() == ConsumerGroupType.CLASSIC
    new = Member(consumer(bs, group), "n", seen)
    new.subscribe([topic])
    produce(bs, topic, 300, 300)
    everyone = [*classic, new]
    poll_until(everyone, lambda: split(everyone, topic) and len(seen) >= 600
               and describe(bs, group).group_state == "Stable")
    assert group_type() == ConsumerGroupType.CONSUMER
    d = describe(bs, group)
    assert len(d.members) == 3 and {m.member_epoch for m in d.members} == {d.assignment_epoch}
    new.c.close()
    produce(bs, topic, 600, 300)
    poll_until(classic, lambda: split(classic, topic) and len(seen) >= 900)
    assert group_type() == ConsumerGroupType.CLASSIC
    assert sorted(seen) == list(range(900)), "a record was consumed twice or lost"
    for m in classic:
        m.c.close()


def test_group_configs_are_described_altered_and_obeyed(kbroker: KafkaBroker) -> None:
    """Kafka 4.0's group configs (ConfigResource GROUP): DescribeConfigs shows the broker's values for a group
    without its own, IncrementalAlterConfigs sets and deletes the group's, out-of-range values are refused, and the
    group's members are given its heartbeat interval."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

    bs = kbroker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    group = f"cfg-{uuid.uuid4().hex[:8]}"

    def describe_configs() -> dict[str, Any]:
        res = ConfigResource(ResourceType.GROUP, group)
        return admin.describe_configs([res], request_timeout=10)[res].result()

    def alter(*entries: ConfigEntry) -> None:
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=list(entries))
        admin.incremental_alter_configs([res], request_timeout=10)[res].result()

    before = describe_configs()
    assert before["consumer.session.timeout.ms"].value == "4000"  # the broker's group.consumer.session.timeout.ms
    assert before["consumer.heartbeat.interval.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    alter(ConfigEntry("consumer.heartbeat.interval.ms", "700", incremental_operation=AlterConfigOpType.SET))
    after = describe_configs()["consumer.heartbeat.interval.ms"]
    assert (after.value, after.source) == ("700", ConfigSource.GROUP_CONFIG.value)
    with pytest.raises(KafkaException) as e:  # above the session timeout
        alter(ConfigEntry("consumer.heartbeat.interval.ms", "5000", incremental_operation=AlterConfigOpType.SET))
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    # a member of the group is told the group's interval
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    make_topic(bs, topic, 1)
    with RawClient(bs) as raw:
        deadline = time.monotonic() + 10  # FindCoordinator first, as clients do (it creates __consumer_offsets)
        while raw.request(10, 3, FindCoordinatorRequest(key=group, key_type=0)).error_code:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        r = raw.request(68, 1, ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rebalance_timeout_ms=10_000,
            subscribed_topic_names=[topic], topic_partitions=[]))
        assert (r.error_code, r.heartbeat_interval_ms) == (0, 700)
        raw.request(68, 1, ConsumerGroupHeartbeatRequest(group_id=group, member_id=r.member_id, member_epoch=-1))
    alter(ConfigEntry("consumer.heartbeat.interval.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    assert describe_configs()["consumer.heartbeat.interval.ms"].value == "1000"
