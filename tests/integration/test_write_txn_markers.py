"""WriteTxnMarkers (27) as another broker's transaction coordinator sends it: the markers are written here, each
partition answers its own code, and a coordinator with an older epoch than the last marker's is fenced."""

from __future__ import annotations

from helpers.txn_raw import READ_COMMITTED, TxnClient, txn_batch

from oncelog.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.broker_process import BrokerProcess

WRITE_TXN_MARKERS = 27


def _markers(c: TxnClient, pid: int, epoch: int, coordinator_epoch: int,
             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    resp = c.request(WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=True, coordinator_epoch=coordinator_epoch,
        topics=[WritableTxnMarkerTopic(name=t, partition_indexes=[p]) for t, p in partitions])]))
    assert [m.producer_id for m in resp.markers] == [pid]
    return {(t.name, p.partition_index): int(p.error_code) for t in resp.markers[0].topics for p in t.partitions}


def test_write_txn_markers_from_a_remote_coordinator(broker: BrokerProcess, topic_name: str) -> None:
    with TxnClient(broker.bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        pid, epoch = c.init_txn(f"{topic_name}-tx")
        assert c.add_partitions(f"{topic_name}-tx", pid, epoch, [(topic_name, 0)]) == {(topic_name, 0): 0}
        assert c.produce_batch(topic_name, 0, txn_batch([b"v"], pid, epoch, 0), f"{topic_name}-tx").error_code == 0
        assert c.read(topic_name, 0, READ_COMMITTED) == []
        # a coordinator with a newer epoch than this broker's own commits it; a partition that does not exist
        # answers for itself
        assert _markers(c, pid, epoch, 1_000_000, [(topic_name, 0), ("no-such-topic", 0)]) == {
            (topic_name, 0): ErrorCode.NONE, ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert [v for _, v in c.read(topic_name, 0, READ_COMMITTED)] == [b"v"]
        # a zombie coordinator (an older epoch than the last marker's) is refused
        assert _markers(c, pid, epoch, 999_999, [(topic_name, 0)]) == {
            (topic_name, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
