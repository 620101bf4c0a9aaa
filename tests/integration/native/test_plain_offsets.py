"""Start offsets, seek, position and auto.offset.reset: our consumer behaves as confluent-kafka's (librdkafka)
on the same log, on oncelog AND Tansu."""

from __future__ import annotations

import json
import time

import confluent_kafka as ck
import pytest

from oncelog.client import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, Admin, Consumer, KafkaError, Producer
from oncelog.protocol.errors import ErrorCode

N = 20
TIMEOUT = 20.0
APPENDED_WAIT = 6.0


def _fill(bootstrap: str, topic: str) -> str:
    """Create a one-partition topic holding values 0..N-1 at offsets 0..N-1."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic, 1)
    with Producer({"bootstrap.servers": bootstrap}) as p:
        for i in range(N):
            p.produce(topic, str(i), partition=0)
        assert p.flush(TIMEOUT) == 0
    return topic


@pytest.fixture
def topic(any_bootstrap: str, topic_name: str) -> str:
    return _fill(any_bootstrap, topic_name)


@pytest.fixture
def topic_pair(any_bootstrap: str, topic_name: str) -> tuple[str, str]:
    """Two identical topics: one for our consumer, one for librdkafka (each may append a record)."""
    return _fill(any_bootstrap, topic_name + "-ours"), _fill(any_bootstrap, topic_name + "-ck")


def _produce_one(bootstrap: str, topic: str, value: str) -> None:
    with Producer({"bootstrap.servers": bootstrap}) as p:
        p.produce(topic, value, partition=0)
        assert p.flush(TIMEOUT) == 0


def ours_first_offset(bootstrap: str, topic: str, start: int, policy: str) -> int | None:
    """Offset of the first record our consumer returns from ``start`` (a record is appended if it waits at the
    end; None if even that does not come); asserts the position is right after it."""
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": policy}) as c:
        c.assign([(topic, 0, start)])
        m = c.poll(2.0)
        deadline = time.monotonic() + TIMEOUT
        while m is None and c.position(topic, 0) is None and time.monotonic() < deadline:
            m = c.poll(0.5)  # a slow box: the start offset is not resolved yet
        if m is None:
            assert c.position(topic, 0) is not None  # resolved to the end
            _produce_one(bootstrap, topic, "appended")
            m = c.poll(APPENDED_WAIT)
        if m is None:
            return None
        assert c.position(topic, 0) == m.offset() + 1
        return m.offset()


def ck_first_offset(bootstrap: str, topic: str, start: int, policy: str) -> int | None:
    fetch_state: list[str] = []

    def on_stats(raw: str) -> None:
        part = json.loads(raw).get("topics", {}).get(topic, {}).get("partitions", {}).get("0", {})
        fetch_state.append(part.get("fetch_state", "?"))

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                     "auto.offset.reset": policy, "enable.partition.eof": False,
                     "statistics.interval.ms": 100, "stats_cb": on_stats})
    try:
        c.assign([ck.TopicPartition(topic, 0, start)])
        msgs = c.consume(1, 2.0)
        deadline = time.monotonic() + TIMEOUT
        while not msgs and fetch_state[-1:] != ["active"] and time.monotonic() < deadline:
            msgs = c.consume(1, 0.2)  # a slow box: librdkafka has not resolved its start offset yet
        if not msgs:
            _produce_one(bootstrap, topic, "appended")
            msgs = c.consume(1, APPENDED_WAIT)
        if not msgs:
            return None
        assert msgs[0].error() is None, msgs[0].error()
        return int(msgs[0].offset())
    finally:
        c.close()


CASES = [  # (start, auto.offset.reset, expected first offset; N means "the end: the next record appended")
    (5, "earliest", 5),
    (OFFSET_BEGINNING, "latest", 0),
    (OFFSET_END, "earliest", N),
    (OFFSET_INVALID, "earliest", 0),
    (OFFSET_INVALID, "latest", N),
    (1000, "earliest", 0),  # out of range: reset by policy
    (1000, "latest", N),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("start", "policy", "first"), CASES,
                         ids=[f"{s}-{p}" for s, p, _ in CASES])
def test_start_offsets_and_resets_match_librdkafka(any_bootstrap: str, topic_pair: tuple[str, str], start: int,
                                                   policy: str, first: int, request: pytest.FixtureRequest) -> None:
    ours = ours_first_offset(any_bootstrap, topic_pair[0], start, policy)
    theirs = ck_first_offset(any_bootstrap, topic_pair[1], start, policy)
    assert ours == theirs
    if "oncelog" in request.node.callspec.id:
        # Tansu answers ListOffsets(latest) with less than the log end when a batch holds several records and
        # answers a fetch past the end with no records instead of OFFSET_OUT_OF_RANGE (both clients then behave
        # alike), so the absolute offsets are checked on oncelog
        assert ours == first


@pytest.mark.timeout(60)
def test_out_of_range_with_reset_error_is_reported(bootstrap: str, topic_name: str) -> None:
    """oncelog only: Tansu answers a fetch past the end with no records, so neither client sees an error."""
    any_bootstrap, topic = bootstrap, _fill(bootstrap, topic_name)
    with Consumer({"bootstrap.servers": any_bootstrap, "auto.offset.reset": "error"}) as c:
        c.assign([(topic, 0, 1000)])
        with pytest.raises(KafkaError) as err:
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                c.poll(0.5)
        assert err.value.code() == ErrorCode.OFFSET_OUT_OF_RANGE
        assert "auto.offset.reset" in str(err.value)
    c2 = ck.Consumer({"bootstrap.servers": any_bootstrap, "group.id": "unused", "auto.offset.reset": "error",
                      "enable.auto.commit": False})
    try:
        c2.assign([ck.TopicPartition(topic, 0, 1000)])
        errors = []
        deadline = time.monotonic() + TIMEOUT
        while not errors and time.monotonic() < deadline:
            errors = [m.error() for m in c2.consume(10, 0.5) if m.error() is not None]
        assert errors and errors[0].code() == ck.KafkaError._AUTO_OFFSET_RESET
    finally:
        c2.close()


@pytest.mark.timeout(60)
def test_seek_and_position_match_librdkafka(any_bootstrap: str, topic: str) -> None:
    steps: list[tuple[str, int]] = [("read", 10), ("seek", 2), ("read", 3), ("seek", 15), ("read", 5), ("seek", 0),
                                    ("read", 1)]

    def ours() -> list[tuple[list[int], int | None]]:
        trace: list[tuple[list[int], int | None]] = []
        with Consumer({"bootstrap.servers": any_bootstrap}) as c:
            c.assign([(topic, 0, 0)])
            for op, arg in steps:
                if op == "seek":
                    c.seek(topic, 0, arg)
                    continue
                got: list[int] = []
                deadline = time.monotonic() + TIMEOUT
                while len(got) < arg and time.monotonic() < deadline:
                    got += [m.offset() for m in c.consume(arg - len(got), 1.0)]
                trace.append((got, c.position(topic, 0)))
        return trace

    def theirs() -> list[tuple[list[int], int | None]]:
        trace: list[tuple[list[int], int | None]] = []
        c = ck.Consumer({"bootstrap.servers": any_bootstrap, "group.id": "unused", "enable.auto.commit": False})
        try:
            c.assign([ck.TopicPartition(topic, 0, 0)])
            for op, arg in steps:
                if op == "seek":
                    c.seek(ck.TopicPartition(topic, 0, arg))
                    continue
                got: list[int] = []
                deadline = time.monotonic() + TIMEOUT
                while len(got) < arg and time.monotonic() < deadline:
                    for m in c.consume(arg - len(got), 1.0):
                        assert m.error() is None, m.error()
                        got.append(m.offset())
                trace.append((got, c.position([ck.TopicPartition(topic, 0)])[0].offset))
        finally:
            c.close()
        return trace

    expected = [(list(range(10)), 10), ([2, 3, 4], 5), ([15, 16, 17, 18, 19], 20), ([0], 1)]
    assert ours() == expected
    assert theirs() == expected


@pytest.mark.timeout(60)
def test_reset_after_deleted_records_goes_to_the_log_start(bootstrap: str, topic_name: str) -> None:
    """Below the log start offset (after DeleteRecords) is out of range too (oncelog only: Tansu has no
    DeleteRecords)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 1)
        with Producer({"bootstrap.servers": bootstrap}) as p:
            for i in range(N):
                p.produce(topic_name, str(i), partition=0)
            assert p.flush(TIMEOUT) == 0
        assert admin.delete_records({(topic_name, 0): 8})[(topic_name, 0)] == 8
    assert ours_first_offset(bootstrap, topic_name, 3, "earliest") == 8
    assert ck_first_offset(bootstrap, topic_name, 3, "earliest") == 8
    assert ours_first_offset(bootstrap, topic_name, OFFSET_BEGINNING, "latest") == 8


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_start_inside_a_compressed_batch(any_bootstrap: str, topic_name: str, codec: str) -> None:
    """Records written by librdkafka as one (compressed) batch; both consumers started in its middle return the
    records from that offset on, nothing before."""
    with Admin({"bootstrap.servers": any_bootstrap}) as admin:
        admin.create_topics(topic_name, 1)
    p = ck.Producer({"bootstrap.servers": any_bootstrap, "compression.type": codec, "linger.ms": 200,
                     "batch.num.messages": 1000})
    for i in range(N):
        p.produce(topic_name, str(i).encode(), partition=0)
    assert p.flush(TIMEOUT) == 0
    with Consumer({"bootstrap.servers": any_bootstrap}) as c:
        c.assign([(topic_name, 0, 7)])
        ours: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(ours) < N - 7 and time.monotonic() < deadline:
            ours += [(m.offset(), m.value()) for m in c.consume(100, 0.5)]
    c2 = ck.Consumer({"bootstrap.servers": any_bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c2.assign([ck.TopicPartition(topic_name, 0, 7)])
        theirs: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(theirs) < N - 7 and time.monotonic() < deadline:
            theirs += [(m.offset(), m.value()) for m in c2.consume(100, 0.5) if m.error() is None]
    finally:
        c2.close()
    assert ours == theirs == [(i, str(i).encode()) for i in range(7, N)]
