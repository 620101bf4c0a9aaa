"""The native transactional producer over transactions V2 (KIP-890 part 2), the default of the shared broker
(``transaction.version`` 2): every commit or abort moves the producer to the next epoch, which the coordinator
reports; records and transactional offsets land as the transactions decided. Against a broker that finalizes
``transaction.version`` 1 the same producer runs transactions V1 (the epoch stays)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.testing.pytest_plugin import KafkaBroker

from test_producer_transactions import read_values

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
T = 20.0


def epoch_of(admin: Admin, txn_id: str) -> tuple[str, int]:
    d = admin.describe_transactions(txn_id)[txn_id]
    return d.state, d.producer_epoch


def run_three_transactions(bootstrap: str, topic: str, group: str) -> list[tuple[str, int]]:
    """Commit (two partitions and the group's offsets), abort, commit; -> the coordinator's (state, epoch) after the
    init and after each transaction."""
    txn_id = f"{topic}-{uuid.uuid4().hex[:6]}"
    seen: list[tuple[str, int]] = []
    with Admin({"bootstrap.servers": bootstrap}) as admin, \
            Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2}) as p:
        p.init_transactions(T)
        seen.append(epoch_of(admin, txn_id))
        p.begin_transaction()
        p.produce(topic, "one-0", partition=0)
        p.produce(topic, "one-1", partition=1)
        p.send_offsets_to_transaction({(topic, 0): 7}, group, T)
        p.commit_transaction(T)
        seen.append(epoch_of(admin, txn_id))
        p.begin_transaction()
        p.produce(topic, "aborted", partition=1)
        p.send_offsets_to_transaction({(topic, 0): 99}, group, T)
        assert p.flush(T) == 0
        p.abort_transaction(T)
        seen.append(epoch_of(admin, txn_id))
        p.begin_transaction()
        p.produce(topic, "two-2", partition=2)
        p.commit_transaction(T)
        seen.append(epoch_of(admin, txn_id))
    assert sorted(read_values(bootstrap, [topic], 3, "read_committed")) == [b"one-0", b"one-1", b"two-2"]
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        assert [tp.offset for tp in checker.committed([TopicPartition(topic, 0)], timeout=10)] == [7]
    finally:
        checker.close()
    return seen


def test_every_transaction_gets_the_next_epoch(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    seen = run_three_transactions(bootstrap, topic_name, f"g-{uuid.uuid4().hex[:8]}")
    e0 = seen[0][1]
    assert seen == [("Empty", e0), ("CompleteCommit", e0 + 1), ("CompleteAbort", e0 + 2), ("CompleteCommit", e0 + 3)]


@pytest.fixture(scope="module")
def tv1_broker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    proc = kafka_module_broker_factory({"transaction.version": 1})
    yield proc
    assert proc.stop() == 0, proc.log_tail()


def test_transactions_v1_where_the_broker_does_not_finalize_v2(tv1_broker: KafkaBroker,
                                                               topic_name: str) -> None:
    with Admin({"bootstrap.servers": tv1_broker.bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    seen = run_three_transactions(tv1_broker.bootstrap, topic_name, f"g-{uuid.uuid4().hex[:8]}")
    e0 = seen[0][1]
    assert seen == [("Empty", e0), ("CompleteCommit", e0), ("CompleteAbort", e0), ("CompleteCommit", e0)]
