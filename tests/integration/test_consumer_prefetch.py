"""The native consumer fetches ahead (librdkafka's prefetch): while the application works, the next fetch is in
flight and records are buffered up to ``queued.max.messages.kbytes``; records come once and in order; pausing,
seeking and committing while a fetch is in flight lose nothing and wait for nothing (the group coordinator has a
connection of its own, so a fetch long-polling the same broker does not hold up a commit)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from oncelog.client import Admin, Consumer, Producer

pytestmark = pytest.mark.timeout(120)


def _produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384}) as p:
        for partition, value in values:
            p.produce(topic, value, partition=partition)
        assert p.flush(30) == 0


def _drain(c: Consumer, want: int, timeout: float = 20.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out += c.consume(500, 0.5)
    return out


def test_prefetch_fills_the_buffer_up_to_its_bound_and_loses_nothing(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 2)
    n = 2000
    _produce(bootstrap, topic_name, [(i % 2, i.to_bytes(4, "big") * 250) for i in range(n)])  # 1 KB values
    conf = {"bootstrap.servers": bootstrap, "queued.max.messages.kbytes": 256, "max.partition.fetch.bytes": 65536}
    with Consumer(conf) as c:
        c.assign([(topic_name, p, 0) for p in range(2)])
        first = c.consume(10, 10.0)
        assert first
        time.sleep(1.0)  # the application works: fetches go on without it, up to the bound
        fetched = sum(c._async.fetcher.positions.values())
        buffered = c._async._buffer.nbytes
        assert fetched > 200, "nothing was fetched ahead"  # one fetch brings ~2 x 64 records
        assert buffered <= 256 * 1024 + 2 * 65536 + 8192, f"{buffered} bytes buffered, above the bound"
        assert fetched < n, "the bound did not stop the prefetch"
        got = first + _drain(c, n - len(first))
    assert len(got) == n
    for p in range(2):
        values = [int.from_bytes(m.value()[:4], "big") for m in got if m.partition() == p]
        assert values == list(range(p, n, 2)), f"partition {p}: not once and in order"


def test_commit_does_not_wait_for_a_long_polling_fetch(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 2)
    _produce(bootstrap, topic_name, [(i % 2, f"a{i}".encode()) for i in range(20)])
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic_name}", "enable.auto.commit": False,
            "fetch.wait.max.ms": 5000}
    with Consumer(conf) as c:
        c.assign([(topic_name, p, 0) for p in range(2)])
        assert len(_drain(c, 20)) == 20
        # at the end of the log: the fetch the last consume sent long-polls the same broker for 5 s
        t0 = time.monotonic()
        done = c.commit(asynchronous=False)
        assert time.monotonic() - t0 < 2.5, "the commit waited behind the long-polling fetch"
        assert sorted((tp.partition, tp.offset) for tp in done) == [(0, 10), (1, 10)]


def test_pause_resume_and_seek_while_a_fetch_is_in_flight(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 2)
    _produce(bootstrap, topic_name, [(i % 2, f"a{i}".encode()) for i in range(20)])
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        c.assign([(topic_name, p, 0) for p in range(2)])
        assert len(_drain(c, 20)) == 20
        c.pause([(topic_name, 0)])  # a fetch of both partitions is in flight: what it brings of 0 is dropped
        _produce(bootstrap, topic_name, [(i % 2, f"b{i}".encode()) for i in range(20)])
        more = _drain(c, 10)
        assert sorted(m.value() for m in more) == sorted(f"b{i}".encode() for i in range(1, 20, 2))
        assert c.consume(10, 1.0) == []  # partition 0 stays paused
        c.resume([(topic_name, 0)])
        resumed = _drain(c, 10)
        assert [m.value() for m in resumed] == [f"b{i}".encode() for i in range(0, 20, 2)]
        c.seek((topic_name, 1, 5))
        again = _drain(c, 15)
        assert [(m.partition(), m.offset()) for m in again] == [(1, o) for o in range(5, 20)]
        assert c.consume(10, 0.5) == []


def test_poll_on_the_callers_thread_while_another_thread_pauses_and_resumes(bootstrap: str,
                                                                             topic_name: str) -> None:
    """poll() takes buffered records on the caller's thread; pause/resume from another thread (run on the event
    loop) meanwhile drop and fetch again partition 0's buffered records: each record still comes once, in order."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 2)
    n = 3000
    _produce(bootstrap, topic_name, [(i % 2, f"{i}".encode()) for i in range(n)])
    got: list[tuple[int, int]] = []
    with Consumer({"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": 4096}) as c:
        c.assign([(topic_name, p, 0) for p in range(2)])
        stop = threading.Event()

        def toggle() -> None:
            while not stop.is_set():
                c.pause([(topic_name, 0)])
                time.sleep(0.002)
                c.resume([(topic_name, 0)])
                time.sleep(0.005)

        t = threading.Thread(target=toggle)
        t.start()
        try:
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None:
                    got.append((m.partition(), m.offset()))
        finally:
            stop.set()
            t.join()
            c.resume([(topic_name, 0)])
        got += [(m.partition(), m.offset()) for m in _drain(c, n - len(got))]
    for p in range(2):
        assert [o for q, o in got if q == p] == list(range(n // 2)), f"partition {p}: lost, repeated or reordered"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_polls_taking_buffered_records_keep_the_member_in_the_group(bootstrap: str, topic_name: str,
                                                                    protocol: str) -> None:
    """A poll() served on the caller's thread from records fetched ahead still counts as a poll (classic and
    KIP-848 groups): a member doing only such polls for longer than max.poll.interval.ms stays in the group."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 1)
    n = 1500
    _produce(bootstrap, topic_name, [(0, f"{i}".encode()) for i in range(n)])
    events: list[tuple[str, list[Any]]] = []
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic_name}", "group.protocol": protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "max.poll.interval.ms": 500}
    with Consumer(conf) as c:
        c.subscribe([topic_name], on_assign=lambda _c, ps: events.append(("assign", ps)),
                    on_revoke=lambda _c, ps: events.append(("revoke", ps)),
                    on_lost=lambda _c, ps: events.append(("lost", ps)))
        got = _drain(c, 1, 30.0)
        assert got, "no record within 30 s"
        time.sleep(0.3)  # the rest of the partition arrives in the buffer (one fetch of ~20 KB)
        t0 = time.monotonic()
        while len(got) < n and time.monotonic() - t0 < 30:
            m = c.poll(0.5)
            if m is not None:
                got.append(m)
            time.sleep(0.002)  # the application works: ~3 s of polls, well over max.poll.interval.ms
        assert time.monotonic() - t0 > 1.5, "the records were consumed too fast to cover max.poll.interval.ms"
        assert c.poll(0.5) is None  # on the event loop: a loss would be reported now
        assert [int(m.value()) for m in got] == list(range(n))
        assert events == [("assign", [(topic_name, 0)])], "the member left the group or was fenced"
        c.commit(asynchronous=False)  # still a member: the commit is accepted
