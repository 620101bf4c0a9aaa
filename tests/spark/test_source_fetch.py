"""The client's BatchFetcher (the source's read path) against the real broker, without Spark."""

from __future__ import annotations

import confluent_kafka as ck
import pytest

from oncelog.client import Admin, KafkaError
from oncelog.client.consumer.batch_fetch import BatchFetcher
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.reader import read_range

pytestmark = pytest.mark.timeout(120)


def _fill(bootstrap: str, topic: str) -> None:
    """offsets 0-2 plain, 3-7 aborted txn + marker 8, 9-10 committed txn + marker 11, 12 plain."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics(topic, 1)
    plain = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        plain.produce(topic, value=b"p%d" % i, partition=0)
    assert plain.flush(30) == 0
    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"f-{topic}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(5):
        txn.produce(topic, value=b"a%d" % i, partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, value=b"c%d" % i, partition=0)
    txn.commit_transaction(30)
    plain.produce(topic, value=b"p3", partition=0)
    assert plain.flush(30) == 0


def test_batch_fetcher_drops_aborted_batches_and_markers_and_stops_at_the_end(spark_bootstrap: str,
                                                                               spark_topic: str) -> None:
    _fill(spark_bootstrap, spark_topic)
    conf = {"bootstrap.servers": spark_bootstrap, "isolation.level": "read_committed"}
    with BatchFetcher({**conf, "max.partition.fetch.bytes": 200}) as f:
        batches = [b for chunk in f.read_range(spark_topic, 0, 0, 13) for b in chunk]
        covered = [o for b in batches for o in range(b.base_offset, b.last_offset + 1)]
        assert covered == [0, 1, 2, 9, 10, 12]  # no aborted batch (3-7), no markers (8, 11)
        assert sum(b.records_count for b in batches) == 6
        # a range that ends on the abort marker yields nothing and still ends
        assert [b for chunk in f.read_range(spark_topic, 0, 3, 9) for b in chunk] == []

    def values(start: int, end: int, level: str) -> list[bytes]:
        rows = [rb.column("value").to_pylist() for rb in read_range(
            OffsetRange(spark_topic, 0, start, end), {**conf, "isolation.level": level}, False)]
        return [v for chunk in rows for v in chunk]

    assert values(0, 13, "read_committed") == [b"p0", b"p1", b"p2", b"c0", b"c1", b"p3"]
    assert values(4, 10, "read_committed") == [b"c0"]
    assert values(0, 13, "read_uncommitted") == [b"p0", b"p1", b"p2", b"a0", b"a1", b"a2", b"a3", b"a4",
                                                 b"c0", b"c1", b"p3"]


def test_fetching_below_the_log_start_raises_offset_out_of_range(spark_bootstrap: str, spark_topic: str) -> None:
    _fill(spark_bootstrap, spark_topic)
    with Admin({"bootstrap.servers": spark_bootstrap}) as admin:
        admin.delete_records({(spark_topic, 0): 3})
    with BatchFetcher({"bootstrap.servers": spark_bootstrap}) as f, pytest.raises(KafkaError) as e:
        list(f.read_range(spark_topic, 0, 1, 13))
    assert e.value.name() == "OFFSET_OUT_OF_RANGE"
