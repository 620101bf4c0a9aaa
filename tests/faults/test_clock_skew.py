"""oncelog.testing.clock_skew: a broker started with a clock control file sees the skew the test sets, at run
time: LogAppendTime timestamps follow its wall clock through bumps and a strobe; a wall jump makes a transaction
time out early (forward) or late (back); a monotonic jump expires a consumer group member's session early."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.broker_process import BrokerProcess
from oncelog.testing.clock_skew import SkewControl

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

HOUR_MS = 3_600_000


@pytest.fixture
def skewed(tmp_path: Path) -> Iterator[tuple[BrokerProcess, SkewControl]]:
    control = SkewControl(tmp_path / "clock.json")
    proc = BrokerProcess(tmp_path / "data", clock_control=control.path, settings={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
        "group.initial.rebalance.delay.ms": 0})
    proc.start()
    yield proc, control
    control.stop_strobe()
    proc.kill()


def create_topic(bootstrap: str, config: dict[str, str] | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"skew-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(20)
    return name


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[Any] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(str(m.error()))
            out.append(m)
    finally:
        c.close()
    raise AssertionError(f"did not reach the end of {topic}")


def test_log_append_time_follows_the_brokers_wall_clock_through_bumps_and_a_strobe(
        skewed: tuple[BrokerProcess, SkewControl]) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Producer

    broker, control = skewed
    topic = create_topic(broker.bootstrap, {"message.timestamp.type": "LogAppendTime"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

    def produce(tag: str) -> None:
        p.produce(topic, value=tag.encode(), timestamp=1_000)  # the broker replaces CreateTime with its own time
        p.flush(10)

    produce("real")
    control.bump_wall(HOUR_MS)
    time.sleep(0.05)
    produce("ahead")
    control.bump_wall(-3 * HOUR_MS)  # a step back: now 2 hours behind
    time.sleep(0.05)
    produce("behind")
    control.reset_wall()
    control.strobe(HOUR_MS, period_ms=50, duration_s=1.5)
    strobe_end = time.monotonic() + 1.5
    n = 0
    while time.monotonic() < strobe_end:
        produce(f"strobe-{n}")
        n += 1
        time.sleep(0.01)
    control.stop_strobe()
    time.sleep(0.05)
    produce("after")

    now = time.time() * 1000
    got = {m.value().decode(): m.timestamp() for m in read_all(broker.bootstrap, topic)}
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME for kind, _ in got.values()), got

    def skew(tag: str) -> float:
        return (got[tag][1] - now) / HOUR_MS  # in hours, relative to the real clock now (some seconds later)

    assert abs(skew("real")) < 0.01 and abs(skew("after")) < 0.01, got
    assert abs(skew("ahead") - 1) < 0.01, got
    assert abs(skew("behind") + 2) < 0.01, got
    strobed = [round(skew(t)) for t in got if t.startswith("strobe-")]
    assert strobed.count(0) >= 3 and strobed.count(1) >= 3, strobed  # both sides of the strobe were seen
    ts = [got[t][1] for t in sorted((t for t in got if t.startswith("strobe-")), key=lambda t: int(t[7:]))]
    assert any(b < a for a, b in zip(ts, ts[1:])), "a strobe makes append times go back"


def txn_producer(bootstrap: str, timeout_ms: int) -> Any:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"skew-{uuid.uuid4().hex[:8]}",
                  "transaction.timeout.ms": timeout_ms, "message.timeout.ms": min(timeout_ms, 10_000)})
    p.init_transactions(20)
    return p


def open_txn(p: Any, topic: str, value: str) -> None:
    p.begin_transaction()
    p.produce(topic, value=value.encode())
    p.flush(10)  # AddPartitionsToTxn done: the coordinator has started the transaction's clock


def try_commit(p: Any) -> str:
    from confluent_kafka import KafkaException

    try:
        p.commit_transaction(20)
        return "committed"
    except KafkaException as e:
        return f"failed: {e.args[0].name()}"


def test_a_wall_clock_jump_forward_times_a_transaction_out_early(skewed: tuple[BrokerProcess, SkewControl]) -> None:
    broker, control = skewed
    topic = create_topic(broker.bootstrap)
    # control: a 60 s transaction open for 2 s commits
    p = txn_producer(broker.bootstrap, 60_000)
    open_txn(p, topic, "unskewed")
    time.sleep(2)
    assert try_commit(p) == "committed"
    # the same with the broker's wall clock stepped 2 minutes ahead meanwhile: its 60 s are up at once
    p = txn_producer(broker.bootstrap, 60_000)
    open_txn(p, topic, "jumped")
    control.bump_wall(120_000)
    time.sleep(2)
    outcome = try_commit(p)
    assert outcome.startswith("failed"), outcome
    assert [m.value() for m in read_all(broker.bootstrap, topic)] == [b"unskewed"]


def test_a_wall_clock_jump_back_times_a_transaction_out_late(skewed: tuple[BrokerProcess, SkewControl]) -> None:
    broker, control = skewed
    topic = create_topic(broker.bootstrap)
    # control: a 3 s transaction left open for 5 s is aborted by the broker's timer
    p = txn_producer(broker.bootstrap, 3_000)
    open_txn(p, topic, "unskewed")
    time.sleep(5)
    outcome = try_commit(p)
    assert outcome.startswith("failed"), outcome
    # the same with the broker's wall clock stepped 2 minutes back meanwhile: its 3 s have not passed
    p = txn_producer(broker.bootstrap, 3_000)
    open_txn(p, topic, "jumped")
    control.bump_wall(-120_000)
    time.sleep(5)
    assert try_commit(p) == "committed"
    assert [m.value() for m in read_all(broker.bootstrap, topic)] == [b"jumped"]


MEMBER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 30000,
                  "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
    c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", flush=True))
    end = time.monotonic() + float(sys.argv[4])
    while time.monotonic() < end:
        c.poll(0.1)
    c.close()
""")


def assignments(broker: BrokerProcess, topic: str, seconds: float, control: SkewControl | None) -> int:
    """Run a group member for ``seconds``; once it has its assignment, hold it (SIGSTOP) for 0.5 s, and with
    ``control`` jump the broker's monotonic clock 60 s forward meanwhile. Returns how many times it was assigned
    partitions. (The hold makes the broker's session timer, which looks at its clock at least every 200 ms, see
    the member before its next heartbeat could renew the session from the jumped clock.)"""
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = subprocess.Popen([sys.executable, "-c", MEMBER, broker.bootstrap, group, topic, str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert member.stdout is not None
    assert member.stdout.readline().strip() == "assigned"
    member.send_signal(signal.SIGSTOP)
    if control is not None:
        control.jump_monotonic(60_000)  # twice its 30 s session, in an instant
    time.sleep(0.5)
    member.send_signal(signal.SIGCONT)
    out = member.communicate(timeout=seconds + 30)[0]
    return 1 + out.split().count("assigned")


def test_a_monotonic_jump_expires_a_group_members_session_early(skewed: tuple[BrokerProcess, SkewControl]) -> None:
    broker, control = skewed
    topic = create_topic(broker.bootstrap)
    # control: a member silent for 0.5 s keeps its 30 s session and its one assignment
    assert assignments(broker, topic, 6, None) == 1
    # the broker's monotonic clock jumps 60 s meanwhile: the session is over; the member is removed, finds out at
    # its next heartbeat, joins again and is assigned again
    assert assignments(broker, topic, 6, control) == 2
