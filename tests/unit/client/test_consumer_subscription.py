"""SubscriptionState and the consumer's offset bookkeeping, without a network."""

from __future__ import annotations

import pytest

from oncelog.client.consumer import AsyncConsumer
from oncelog.client.consumer.fetcher import FetchedBatches, ReadUncommittedFilter, accepted_batches
from oncelog.client.consumer.subscription import SubscriptionMode, SubscriptionState
from oncelog.client.errors import ConfigError
from oncelog.client.message import Message
from oncelog.client.topic_partition import TopicPartition
from oncelog.protocol.records import RecordBatchBuilder


def test_subscribe_names_and_patterns() -> None:
    s = SubscriptionState()
    s.subscribe(["orders", "^metrics-.*", "orders"])
    assert s.auto and s.topics == ("orders",) and s.has_patterns
    known = ["orders", "metrics-a", "metrics-b", "xmetrics-c", "__consumer_offsets", "other"]
    assert s.matching(known, internal=["__consumer_offsets"]) == ["metrics-a", "metrics-b", "orders"]
    s.subscribe(["^__.*"])
    assert s.matching(known, internal=["__consumer_offsets"]) == []
    with pytest.raises(TypeError):
        s.subscribe("orders")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a valid regular expression"):
        s.subscribe(["^("])
    with pytest.raises(ValueError, match="at least one topic"):
        s.subscribe([])


def test_subscribe_and_assign_exclude_each_other() -> None:
    s = SubscriptionState()
    s.set_manual()
    s.assign([("t", 0)], await_committed=False)
    with pytest.raises(ValueError, match="unassign"):
        s.subscribe(["t"])
    s.unassign([("t", 0)])
    assert s.mode is SubscriptionMode.NONE
    s.subscribe(["t"])
    with pytest.raises(ValueError, match="unsubscribe"):
        s.set_manual()
    s.unsubscribe()
    assert s.mode is SubscriptionMode.NONE and s.assignment() == []


def test_pause_resume_and_unassign_bookkeeping() -> None:
    s = SubscriptionState()
    s.subscribe(["t"])
    s.assign([("t", 1), ("t", 0)], await_committed=True)
    assert s.assignment() == [("t", 0), ("t", 1)] and list(s.awaiting_committed) == [("t", 1), ("t", 0)]
    assert s.pause([("t", 0), ("u", 0)]) == [("u", 0)]
    assert s.paused == {("t", 0)}
    s.unassign([("t", 0)])
    assert s.paused == set() and list(s.awaiting_committed) == [("t", 1)]
    s.resume([("t", 1)])


def _msg(p: int, off: int) -> Message:
    return Message("t", p, off, None, b"x")


def _fetched(p: int, base: int, n: int) -> FetchedBatches:
    """What a fetch of partition ``p`` at ``base`` brings: one batch of ``n`` records."""
    b = RecordBatchBuilder(base_offset=base)
    for i in range(n):
        b.append(1000 + i, None, b"x")
    batches, _ = accepted_batches(b.build(), base, ReadUncommittedFilter())
    return FetchedBatches("t", p, base, batches)


def test_consumer_positions_stored_offsets_and_pause_rewind() -> None:
    c = AsyncConsumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "enable.auto.commit": False})
    c.assign([("t", 0, 5), ("t", 1, 7)])
    assert c.assignment() == [("t", 0), ("t", 1)]
    c.fetcher.positions[("t", 0)] = 8  # as if offsets 5..7 were fetched
    c._buffer.add(_fetched(0, 5, 3))  # one fetch of partition 0
    assert c.position("t", 0) == 5 and [(tp.topic, tp.partition, tp.offset) for tp in c.position(
        [("t", 0), ("t", 1), TopicPartition("t", 2)])] == [("t", 0, 5), ("t", 1, 7), ("t", 2, -1001)]
    c.pause([("t", 0)])
    assert not c._buffer and c.fetcher.positions[("t", 0)] == 5  # fetched again after resume
    c.resume([("t", 0)])
    c.store_offsets(offsets=[("t", 1, 9)])
    c.store_offsets(message=_msg(0, 5))
    assert c._stored == {("t", 1): 9, ("t", 0): 6}
    c.seek("t", 1, 3)
    assert ("t", 1) not in c._stored and c.fetcher.positions[("t", 1)] == 3
    c.assign([("t", 2)])  # no offset and a group: the committed offset is looked up at the next poll
    assert list(c.subscription.awaiting_committed) == [("t", 2)] and ("t", 2) not in c.fetcher.positions


def test_consumer_without_group_refuses_group_calls() -> None:
    c = AsyncConsumer({"bootstrap.servers": "127.0.0.1:9"})
    for call in (lambda: c.subscribe(["t"]), c.consumer_group_metadata):
        with pytest.raises(ConfigError, match="group.id"):
            call()
    c.assign([("t", 0)])  # manual assignment without a group: auto.offset.reset (latest)
    assert c.fetcher.resets == {("t", 0): -1}
    with pytest.raises(ValueError, match="unassign"):
        c.subscription.subscribe(["t"])
