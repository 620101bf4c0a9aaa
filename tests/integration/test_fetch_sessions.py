"""Incremental fetch sessions (KIP-227) on the shared broker: by hand, and with kafka-python's FetchSessionHandler."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic

from helpers.rawclient import FETCH, RawClient, build_batch

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

V = 12  # topic names; v13+ keys sessions by topic id, the same code


def fetch(c: RawClient, session_id: int, epoch: int, topic: str, offsets: dict[int, int],
          forget: list[int] | None = None) -> Any:
    return c.request(FETCH, V, FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=session_id,
        session_epoch=epoch,
        topics=[FetchTopic(topic=topic, partitions=[FetchPartition(partition=p, fetch_offset=o,
                                                                   partition_max_bytes=1 << 20)
                                                    for p, o in offsets.items()])] if offsets else [],
        forgotten_topics_data=[ForgottenTopic(topic=topic, partitions=forget)] if forget else []))


def answered(resp: Any) -> dict[int, tuple[int, int, bool]]:
    """partition -> (error, high watermark, has records)"""
    return {p.partition_index: (p.error_code, p.high_watermark, bool(p.records))
            for t in resp.responses for p in t.partitions}


def test_incremental_fetches_carry_only_what_changed(bootstrap: str, topic_name: str) -> None:
    with RawClient(bootstrap) as c:
        assert c.create_topic(topic_name, 3) == 0
        assert c.produce(topic_name, 0, build_batch([(None, b"a")])).error_code == 0
        full = fetch(c, 0, 0, topic_name, {0: 1, 1: 0, 2: 0})
        sid = full.session_id
        assert full.error_code == 0 and sid != 0
        assert answered(full) == {0: (0, 1, False), 1: (0, 0, False), 2: (0, 0, False)}
        idle = fetch(c, sid, 1, topic_name, {})
        assert (idle.error_code, idle.session_id, answered(idle)) == (0, sid, {})
        assert c.produce(topic_name, 1, build_batch([(None, b"b")])).error_code == 0
        assert answered(fetch(c, sid, 2, topic_name, {})) == {1: (0, 1, True)}
        # the session still fetches partition 1 from 0 until told otherwise
        assert answered(fetch(c, sid, 3, topic_name, {1: 1})) == {}
        assert answered(fetch(c, sid, 4, topic_name, {}, forget=[2])) == {}
        assert c.produce(topic_name, 2, build_batch([(None, b"c")])).error_code == 0
        assert c.produce(topic_name, 0, build_batch([(None, b"d")])).error_code == 0
        assert answered(fetch(c, sid, 5, topic_name, {})) == {0: (0, 2, True)}  # 2 was forgotten
        # out of epoch (a replayed or lost fetch), unknown session: no partitions, the fetcher starts again in full
        stale = fetch(c, sid, 5, topic_name, {})
        assert (stale.error_code, stale.session_id, stale.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        gone = fetch(c, sid + 1, 1, topic_name, {})
        assert (gone.error_code, gone.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, [])
        again = fetch(c, sid, 0, topic_name, {0: 2, 1: 1, 2: 0})
        assert again.error_code == 0 and again.session_id not in (0, sid)
        assert answered(again) == {0: (0, 2, False), 1: (0, 1, False), 2: (0, 1, True)}
        assert fetch(c, sid, 6, topic_name, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND  # closed
        # a sessionless fetch (epoch -1) is answered in full and gets no session
        none = fetch(c, 0, -1, topic_name, {0: 2})
        assert none.session_id == 0 and answered(none) == {0: (0, 2, False)}


def test_what_a_fetch_left_unread_comes_in_the_next_incremental_fetches(bootstrap: str, topic_name: str) -> None:
    with RawClient(bootstrap) as c:
        assert c.create_topic(topic_name, 3) == 0
        for p in range(3):
            assert c.produce(topic_name, p, build_batch([(None, b"x" * 100)])).error_code == 0
        full = c.request(FETCH, V, FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=0, session_id=0, session_epoch=0,
            topics=[FetchTopic(topic=topic_name, partitions=[FetchPartition(partition=p, fetch_offset=0,
                                                                            partition_max_bytes=1 << 20)
                                                             for p in range(3)])]))
        sid = full.session_id
        got = {p for p, (_, _, records) in answered(full).items() if records}
        assert len(got) == 1  # max_bytes: one batch, the first partition's
        # the session still fetches the others from 0: they come in the following fetches, one batch each
        for epoch in (1, 2):
            resp = c.request(FETCH, V, FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=0, session_id=sid,
                session_epoch=epoch, topics=[FetchTopic(topic=topic_name, partitions=[
                    FetchPartition(partition=p, fetch_offset=1, partition_max_bytes=1 << 20) for p in got])]))
            new = {p for p, (_, _, records) in answered(resp).items() if records}
            assert len(new) == 1 and not new & got
            got |= new
        assert got == {0, 1, 2}


class Spy:
    """Records the Fetch requests a kafka-python consumer builds and the answers it gets (it still handles them)."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.requests: list[Any] = []
        self.responses: list[Any] = []
        f = consumer._fetcher
        create, handle = f._create_fetch_requests, f._handle_fetch_response

        def create_spy() -> Any:
            reqs = create()
            self.requests += [r for r, _offsets in reqs.values()]
            return reqs

        def handle_spy(node_id: Any, offsets: Any, send_time: Any, response: Any) -> Any:
            self.responses.append(response)
            return handle(node_id, offsets, send_time, response)

        f._create_fetch_requests = create_spy
        f._handle_fetch_response = handle_spy

    def mark(self) -> tuple[int, int]:
        return len(self.requests), len(self.responses)


def listed(req: Any) -> int:
    return sum(len(t[1]) if isinstance(t, tuple) else len(t.partitions) for t in req.topics)


def carried(resp: Any) -> int:
    return sum(len(t[1]) if isinstance(t, tuple) else len(t.partitions) for t in resp.responses)


def poll_until(consumer: KafkaConsumer, want: int, timeout: float = 15) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100).values():
            got += [r.value for r in records]
    assert len(got) >= want, f"consumed {len(got)} of {want}"
    return got


def produce(bootstrap: str, topic: str, partition: int, value: bytes) -> None:
    with RawClient(bootstrap) as c:
        assert c.produce(topic, partition, build_batch([(None, value)])).error_code == 0


def wait_for_error(consumer: KafkaConsumer, spy: Spy, code: int, timeout: float = 10) -> int:
    """Poll until the consumer got a fetch answered ``code``; its index in ``spy.responses``."""
    n = len(spy.responses)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert consumer.poll(timeout_ms=50) == {}
        codes = [r.error_code for r in spy.responses[n:]]
        if code in codes:
            return n + codes.index(code)
    raise AssertionError(f"no fetch answered {ErrorCode(code).name} within {timeout:g} s")


def test_kafka_python_idle_fetches_carry_no_partitions_and_recover(bootstrap: str, topic_name: str) -> None:
    with RawClient(bootstrap) as c:
        assert c.create_topic(topic_name, 3) == 0
        assert c.produce(topic_name, 0, build_batch([(None, b"first")])).error_code == 0
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=15000)
    try:
        spy = Spy(consumer)
        consumer.assign([TopicPartition(topic_name, i) for i in range(3)])
        assert poll_until(consumer, 1) == [b"first"]
        first = spy.requests[0]
        assert (first.session_epoch, listed(first)) == (0, 3)  # full: every partition
        sid = next(r.session_id for r in spy.responses if r.session_id)
        start = spy.mark()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            consumer.poll(timeout_ms=100)
        idle_reqs, idle_resps = spy.requests[start[0] + 1:], spy.responses[start[1] + 1:]
        assert len(idle_reqs) >= 5 and len(idle_resps) >= 5
        assert all(r.session_id == sid and listed(r) == 0 and not r.forgotten_topics_data for r in idle_reqs)
        assert all(r.error_code == 0 and carried(r) == 0 for r in idle_resps)

        # the broker loses the session (as on an eviction): the consumer's next fetch is refused, it fetches in full
        # and goes on consuming
        with RawClient(bootstrap) as c:
            assert fetch(c, sid, -1, topic_name, {}).error_code == 0  # epoch -1 closes the session
        n = len(spy.requests)
        refused = wait_for_error(consumer, spy, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        produce(bootstrap, topic_name, 1, b"after-eviction")
        assert poll_until(consumer, 1) == [b"after-eviction"]
        assert any(r.session_epoch == 0 and listed(r) == 3 for r in spy.requests[n:])  # a full fetch
        sid2 = next(r.session_id for r in spy.responses[refused + 1:] if r.session_id)
        assert sid2 != sid

        # out of epoch: other fetches move the session's epoch on behind the consumer's back
        with RawClient(bootstrap) as c:
            assert 0 in [fetch(c, sid2, e, topic_name, {}).error_code for e in range(1, 400)]
        wait_for_error(consumer, spy, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        produce(bootstrap, topic_name, 2, b"after-epoch")
        assert poll_until(consumer, 1) == [b"after-epoch"]
    finally:
        consumer.close()


def test_native_consumer_fetches_in_a_session(bootstrap: str, topic_name: str) -> None:
    from oncelog.client import OFFSET_BEGINNING, Consumer

    with RawClient(bootstrap) as c:
        assert c.create_topic(topic_name, 3) == 0
    produce(bootstrap, topic_name, 0, b"first")
    consumer = Consumer({"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 50, "enable.auto.commit": False})
    try:
        consumer.assign([(topic_name, i, OFFSET_BEGINNING) for i in range(3)])
        m = consumer.poll(15)
        assert m is not None and m.value() == b"first"
        (handler,) = consumer._async.fetcher.sessions.values()
        assert handler.session_id != 0
        built: list[Any] = []
        build = handler.build

        def build_spy(wanted: Any) -> Any:
            built.append(build(wanted))
            return built[-1]

        handler.build = build_spy  # type: ignore[method-assign]
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            assert consumer.poll(0.1) is None
        # the first may list partition 0 (the consumer's position moved past "first"), the others nothing
        assert [p.partition for t in built[0].topics for p in t.partitions] in ([0], [])
        assert len(built) >= 5 and all(not r.full and r.topics == [] and r.forgotten == [] for r in built[1:])
        # the broker loses the session: the next fetch is refused, the one after lists everything again
        with RawClient(bootstrap) as c:
            assert fetch(c, handler.session_id, -1, topic_name, {}).error_code == 0
        produce(bootstrap, topic_name, 2, b"after")
        m = consumer.poll(15)
        assert m is not None and m.value() == b"after"
        assert any(r.full and sum(len(t.partitions) for t in r.topics) == 3 for r in built)
    finally:
        consumer.close()
