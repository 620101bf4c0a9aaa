"""Our group consumer against real brokers (oncelog and Tansu): balanced assignments, rebalances without loss or
duplicates under synchronous commits, committed offsets across restarts, cooperative-sticky moves, and a group
shared with confluent-kafka consumers."""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from oncelog.client import OFFSET_INVALID, Admin, Consumer, Producer
from oncelog.client.consumer import CommitFailedError
from oncelog.client.errors import KafkaError

from helpers.topics import make_topic

pytestmark = pytest.mark.timeout(180)

FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 30000,
        "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}
TP = tuple[str, int]


@pytest.fixture
def group_id() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0) -> None:
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for i in range(start, start + n):
            p.produce(topic, f"v{i}", key=str(i), partition=i % partitions)
        assert p.flush(30) == 0


class Member:
    """A consumer polling in its own thread; commits synchronously after each batch; counts every record."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **conf: Any) -> None:
        self.name = name
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                     "enable.auto.commit": False, **FAST, **conf}
        self.topic = topic
        self.records: list[tuple[str, int, int, bytes | None]] = []
        self.events: list[tuple[str, list[TP]]] = []
        self.errors: list[BaseException] = []
        self.commit_failures = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.consumer: Consumer | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            c = self.consumer = Consumer(self.conf)
            c.subscribe([self.topic], on_assign=lambda _c, ps: self.events.append(("assign", ps)),
                        on_revoke=lambda _c, ps: self.events.append(("revoke", ps)),
                        on_lost=lambda _c, ps: self.events.append(("lost", ps)))
            while not self._stop.is_set():
                msgs = c.consume(100, 0.2)
                if not msgs:
                    continue
                try:
                    c.commit(asynchronous=False)
                except (CommitFailedError, KafkaError):  # KafkaError _NO_OFFSET: a rebalance took the partitions
                    self.commit_failures += 1  # the batch may be read again by the new owner
                with self._lock:
                    self.records.extend((m.topic(), m.partition(), m.offset(), m.value()) for m in msgs)
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def assignment(self) -> list[TP]:
        c = self.consumer
        return c.assignment() if c is not None else []

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        assert not self.errors, f"{self.name}: {self.errors!r}"


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def balanced(members: list[Member], partitions: int, topic: str) -> bool:
    got = [set(m.assignment()) for m in members]
    union = set().union(*got)
    return (union == {(topic, p) for p in range(partitions)} and sum(len(g) for g in got) == partitions
            and max(len(g) for g in got) - min(len(g) for g in got) <= 1)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    out: list[Member] = []
    yield out
    for m in out:
        m._stop.set()
    for m in out:
        m.thread.join(30)


def test_three_consumers_share_six_partitions(any_bootstrap: str, topic_name: str, group_id: str,
                                              members: list[Member]) -> None:
    make_topic(any_bootstrap, topic_name, 6)
    produce(any_bootstrap, topic_name, 600, 6)
    members.extend(Member(any_bootstrap, group_id, topic_name, f"c{i}") for i in range(3))
    wait_for(lambda: balanced(members, 6, topic_name), 60, "a balanced assignment")
    wait_for(lambda: sum(len(m.records) for m in members) >= 600, 60, "all 600 records")
    for m in members:
        assert len(m.assignment()) == 2
    seen = collections.Counter((t, p, o) for m in members for t, p, o, _ in m.records)
    assert len(seen) == 600 and max(seen.values()) == 1
    for m in members:
        owned = set(m.assignment())
        assert {(t, p) for t, p, _, _ in m.records} <= owned
    for m in members:
        m.stop()
    with Admin({"bootstrap.servers": any_bootstrap}) as a:
        committed = a.list_group_offsets(group_id)
    assert committed == {(topic_name, p): 100 for p in range(6)}


def test_join_and_leave_rebalance_without_loss_or_duplicates(any_bootstrap: str, topic_name: str, group_id: str,
                                                             members: list[Member]) -> None:
    make_topic(any_bootstrap, topic_name, 6)
    members.append(Member(any_bootstrap, group_id, topic_name, "c0"))
    wait_for(lambda: len(members[0].assignment()) == 6, 60, "c0 owning every partition")
    total = 0

    def feed(n: int) -> None:
        nonlocal total
        produce(any_bootstrap, topic_name, n, 6, start=total)
        total += n

    feed(300)
    members.append(Member(any_bootstrap, group_id, topic_name, "c1"))
    feed(300)
    wait_for(lambda: balanced(members, 6, topic_name), 60, "a balanced assignment of 2")
    feed(300)
    members.append(Member(any_bootstrap, group_id, topic_name, "c2"))
    wait_for(lambda: balanced(members, 6, topic_name), 60, "a balanced assignment of 3")
    feed(300)
    members[0].stop()  # leaves the group: its partitions move to c1 and c2
    wait_for(lambda: balanced(members[1:], 6, topic_name), 60, "a balanced assignment after c0 left")
    feed(300)
    wait_for(lambda: sum(len(m.records) for m in members) >= total, 60, f"all {total} records")
    time.sleep(1)
    seen = collections.Counter((t, p, o) for m in members for t, p, o, _ in m.records)
    dups = {k: v for k, v in seen.items() if v > 1}
    failures = sum(m.commit_failures for m in members)
    assert len(seen) == total, f"lost {total - len(seen)} record(s)"
    assert not dups or failures, f"records read twice without a failed commit: {sorted(dups)[:10]}"
    assert not dups, f"{len(dups)} record(s) read twice after {failures} failed commit(s)"
    assert any(kind == "revoke" for kind, _ in members[0].events)


def test_committed_offsets_survive_a_restart(any_bootstrap: str, topic_name: str, group_id: str) -> None:
    make_topic(any_bootstrap, topic_name, 3)
    produce(any_bootstrap, topic_name, 90, 3)
    conf = {"bootstrap.servers": any_bootstrap, "group.id": group_id, **FAST}
    got: list[int] = []
    with Consumer({**conf, "enable.auto.commit": False}) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 60
        while len(got) < 40 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                got.append(int(m.value().decode()[1:]))  # type: ignore[union-attr]
        assert len(got) == 40
        committed = c.commit(asynchronous=False)
        assert committed is not None and sum(tp.offset for tp in committed) == 40
        by_tp = {(tp.topic, tp.partition): tp.offset for tp in committed}
        assert [(tp.topic, tp.partition, tp.offset) for tp in c.committed([(topic_name, p) for p in range(3)])] == [
            (topic_name, p, by_tp.get((topic_name, p), OFFSET_INVALID)) for p in range(3)]
    # auto commit (the default with group.id) commits on close
    with Consumer(conf) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 60
        while len(got) < 70 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                got.append(int(m.value().decode()[1:]))  # type: ignore[union-attr]
    with Consumer({**conf, "enable.auto.commit": False}) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 60
        while len(got) < 90 and time.monotonic() < deadline:
            got.extend(int(m.value().decode()[1:]) for m in c.consume(50, 0.5))  # type: ignore[union-attr]
        assert c.poll(1.0) is None
    assert sorted(got) == list(range(90))


def test_commit_without_group_and_config_errors(any_bootstrap: str) -> None:
    with Consumer({"bootstrap.servers": any_bootstrap}) as c:
        with pytest.raises(Exception, match="group.id"):
            c.subscribe(["x"])
        with pytest.raises(Exception, match="group.id"):
            c.commit(offsets=[("x", 0, 1)], asynchronous=False)


def test_cooperative_sticky_moves_only_what_it_must(any_bootstrap: str, topic_name: str, group_id: str,
                                                    members: list[Member]) -> None:
    make_topic(any_bootstrap, topic_name, 6)
    produce(any_bootstrap, topic_name, 120, 6)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    members.extend(Member(any_bootstrap, group_id, topic_name, f"c{i}", **coop) for i in range(2))
    wait_for(lambda: balanced(members, 6, topic_name), 60, "a balanced assignment of 2")
    before = [set(m.assignment()) for m in members]
    members.append(Member(any_bootstrap, group_id, topic_name, "c2", **coop))
    wait_for(lambda: balanced(members, 6, topic_name), 60, "a balanced assignment of 3")
    after = [set(m.assignment()) for m in members]
    # the two old members each keep 2 of their 3 partitions, the new one gets one from each
    history = {m.name: m.events for m in members}
    for b, a in zip(before, after[:2], strict=True):
        assert a <= b and len(a) == 2, (before, after, history)
    assert after[2] == (before[0] - after[0]) | (before[1] - after[1])
    # nobody revoked a partition it kept: only the moved ones were revoked, never everything
    for m, b, a in zip(members[:2], before, after[:2], strict=True):
        revoked = {tp for kind, ps in m.events if kind == "revoke" for tp in ps}
        assert revoked == b - a, (m.name, m.events)
    wait_for(lambda: sum(len(m.records) for m in members) >= 120, 60, "all 120 records")
    seen = collections.Counter((t, p, o) for m in members for t, p, o, _ in m.records)
    assert len(seen) == 120 and max(seen.values()) == 1


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_shared_group_with_confluent_consumers(bootstrap: str, topic_name: str, group_id: str,
                                               members: list[Member], strategy: str) -> None:
    make_topic(bootstrap, topic_name, 6)
    produce(bootstrap, topic_name, 600, 6)
    members.append(Member(bootstrap, group_id, topic_name, "ours", **{"partition.assignment.strategy": strategy}))
    theirs: dict[str, Any] = {"records": [], "assignment": [], "stop": threading.Event(), "errors": [],
                              "commit_failures": []}

    def run_ck() -> None:
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        try:
            c.subscribe([topic_name])
            while not theirs["stop"].is_set():
                msgs = c.consume(100, 0.2)
                theirs["assignment"] = [(tp.topic, tp.partition) for tp in c.assignment()]
                good = [m for m in msgs if m.error() is None]
                if good:
                    try:
                        c.commit(asynchronous=False)
                    except ck.KafkaException as e:  # a rebalance raced the commit: the batch may be re-read
                        theirs["commit_failures"].append(e)
                    theirs["records"].extend((m.topic(), m.partition(), m.offset()) for m in good)
        except BaseException as e:  # noqa: BLE001
            theirs["errors"].append(e)
        finally:
            c.close()

    t = threading.Thread(target=run_ck, daemon=True)
    t.start()
    try:
        def shared() -> bool:
            ours, other = set(members[0].assignment()), set(theirs["assignment"])
            return (len(ours) == 3 and len(other) == 3 and not ours & other
                    and ours | other == {(topic_name, p) for p in range(6)})
        wait_for(shared, 60, "our consumer and confluent-kafka's sharing 6 partitions 3/3")
        wait_for(lambda: len(members[0].records) + len(theirs["records"]) >= 600, 60, "all 600 records")
        seen = collections.Counter([(a, b, c) for a, b, c, _ in members[0].records] + theirs["records"])
        assert len(seen) == 600
        assert max(seen.values()) == 1, (members[0].commit_failures, theirs["commit_failures"])
    finally:
        theirs["stop"].set()
        t.join(30)
    assert not theirs["errors"]


def test_kafka_error_is_raised_for_bad_assignor_mix(bootstrap: str, topic_name: str, group_id: str) -> None:
    make_topic(bootstrap, topic_name, 2)
    base = {"bootstrap.servers": bootstrap, "group.id": group_id, **FAST}
    with Consumer({**base, "partition.assignment.strategy": "range"}) as a:
        a.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not a.assignment() and time.monotonic() < deadline:
            a.poll(0.2)
        assert len(a.assignment()) == 2
        with Consumer({**base, "partition.assignment.strategy": "roundrobin"}) as b:
            b.subscribe([topic_name])
            with pytest.raises(KafkaError, match="INCONSISTENT_GROUP_PROTOCOL"):
                for _ in range(50):
                    b.poll(0.2)
