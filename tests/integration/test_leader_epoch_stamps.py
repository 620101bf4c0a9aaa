"""Leader epochs on the single node: every batch the broker appends (client data, transaction markers) carries
leader epoch 0, the partition's leader-epoch-checkpoint records it, and OffsetForLeaderEpoch answers from that
cache (Kafka's LeaderEpochFileCache.endOffsetFor), through a restart."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from oncelog.protocol.messages.offset_for_leader_epoch_request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from oncelog.protocol.records import iter_batch_headers
from oncelog.testing.pytest_plugin import KafkaBroker

from _rawclient import RawClient, build_batch

OFFSET_FOR_LEADER_EPOCH = 23
UNKNOWN_LEADER_EPOCH = 75


def end_offset(c: RawClient, topic: str, leader_epoch: int, current_leader_epoch: int = -1) -> tuple[int, int, int]:
    """(error code, epoch, end offset) for partition 0."""
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderTopic(topic=topic, partitions=[
        OffsetForLeaderPartition(partition=0, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)])])
    p = c.request(OFFSET_FOR_LEADER_EPOCH, 4, req).topics[0].partitions[0]
    return int(p.error_code), int(p.leader_epoch), int(p.end_offset)


def epochs_of_batches(c: RawClient, topic: str) -> list[tuple[int, bool, int]]:
    """(base offset, is control, partition leader epoch) of every batch of partition 0."""
    p = c.fetch(topic, 0, 0)
    return [(h.base_offset, h.is_control, h.partition_leader_epoch) for h in iter_batch_headers(bytes(p.records))]


@pytest.fixture
def ebroker(kafka_broker_factory: Callable[..., KafkaBroker]) -> KafkaBroker:
    return kafka_broker_factory({"num.partitions": 1})


def test_batches_carry_the_leader_epoch_and_offset_for_leader_epoch_answers_from_the_cache(
        ebroker: KafkaBroker) -> None:
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    with RawClient(ebroker.bootstrap) as c:
        assert c.create_topic(topic, 1) == 0
        assert end_offset(c, topic, 0) == (0, 0, 0)  # the broker took the partition at epoch 0, offset 0
        for i in range(3):
            assert c.produce(topic, 0, build_batch([(b"k", b"v%d" % i)] * 2)).error_code == 0
    p = Producer({"bootstrap.servers": ebroker.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"in a transaction", partition=0)
    p.commit_transaction(30)
    del p  # (closes its connections)
    with RawClient(ebroker.bootstrap) as c:
        batches = epochs_of_batches(c, topic)
        assert [b[:2] for b in batches] == [(0, False), (2, False), (4, False), (6, False), (7, True)]
        assert {b[2] for b in batches} == {0}  # data and the COMMIT marker alike
        assert end_offset(c, topic, 0) == (0, 0, 8)  # the current epoch ends at the log end
        assert end_offset(c, topic, 3) == (0, -1, -1)  # an epoch this log never had
        assert end_offset(c, topic, 0, current_leader_epoch=1)[0] == UNKNOWN_LEADER_EPOCH
    checkpoint = ebroker.data_dir / f"{topic}-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n1\n0 0\n"
    ebroker.kill()  # the epoch survives an unclean restart
    ebroker.start()
    with RawClient(ebroker.bootstrap) as c:
        assert end_offset(c, topic, 0) == (0, 0, 8)
        assert c.produce(topic, 0, build_batch([(b"k", b"after")])).error_code == 0
        assert epochs_of_batches(c, topic)[-1] == (8, False, 0)
    assert checkpoint.read_text() == "0\n1\n0 0\n"
