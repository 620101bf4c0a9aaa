"""Coordinator writes that are not durable in time (Kafka's ``offsets.commit.timeout.ms`` / ``request.timeout.ms``):
the client is answered COORDINATOR_NOT_AVAILABLE instead of waiting on a stalled disk, and once the write does
reach the disk the coordinator's state shows it (memory follows the log; the caller just did not wait).

The broker runs on a slow disk (``ONCELOG_FSYNC_DELAY_MS``): every fsync first waits 600 ms."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.txn_raw import COORDINATOR_NOT_AVAILABLE, TxnClient

from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.offset_fetch_request import OffsetFetchRequest, OffsetFetchRequestTopic
from oncelog.storage.local_log import FSYNC_DELAY_ENV
from oncelog.testing.broker_process import BrokerProcess

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
TIMEOUT_MS = 150


@pytest.fixture(scope="module")
def slow_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("slow-disk") / "data",
                         settings={"offsets.commit.timeout.ms": TIMEOUT_MS, "request.timeout.ms": TIMEOUT_MS,
                                   "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3},
                         env={FSYNC_DELAY_ENV: "600"})
    proc.start(timeout=60)
    yield proc
    proc.stop()


def _commit(c: TxnClient, group: str, topic: str, offset: int) -> int:
    resp = c.request(OFFSET_COMMIT, 8, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[OffsetCommitRequestTopic(
            name=topic, partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                 committed_metadata="")])]))
    return int(resp.topics[0].partitions[0].error_code)


def _fetch(c: TxnClient, group: str, topic: str) -> int:
    resp = c.request(OFFSET_FETCH, 7, OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
    return int(resp.topics[0].partitions[0].committed_offset)


def _until(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_offset_commit_not_durable_in_time_answers_not_available_then_shows(slow_broker: BrokerProcess,
                                                                           tmp_path: Path) -> None:
    with TxnClient(slow_broker.bootstrap) as c:
        assert c.create_topic("slow-t", 1) == 0
        _commit(c, "warm-up", "slow-t", 1)  # the first slow fsync moves fsyncs off the event loop
        started = time.monotonic()
        assert _commit(c, "g", "slow-t", 42) == COORDINATOR_NOT_AVAILABLE
        assert time.monotonic() - started < 0.55  # answered at the timeout, not after the 600 ms fsync
        _until(lambda: _fetch(c, "g", "slow-t") == 42)  # the write completed: the offset is there


def test_add_partitions_not_durable_in_time_answers_not_available_then_shows(slow_broker: BrokerProcess) -> None:
    with TxnClient(slow_broker.bootstrap) as c:
        assert c.create_topic("slow-txn", 1) == 0
        _commit(c, "warm-up-2", "slow-txn", 1)
        code, _, _ = c.init_producer_id("slow-tx", 60_000)
        assert code == COORDINATOR_NOT_AVAILABLE  # its write is on the slow disk...
        _until(lambda: c.describe_txn("slow-tx").transaction_state == "Empty")  # ...and lands
        d = c.describe_txn("slow-tx")
        codes = c.add_partitions("slow-tx", d.producer_id, d.producer_epoch, [("slow-txn", 0)])
        assert set(codes.values()) == {COORDINATOR_NOT_AVAILABLE}
        _until(lambda: c.describe_txn("slow-tx").transaction_state == "Ongoing")
        assert [(t.topic, list(t.partitions)) for t in c.describe_txn("slow-tx").topics] == [("slow-txn", [0])]
