"""A small blocking transactional test client over the raw protocol, plus a log checker.

``TxnClient`` adds to ``helpers.rawclient.RawClient``: FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce of
hand-built batches with an explicit producer id / epoch / sequence (v12: transactions V2, the broker adds the
partition), EndTxn (also fire-and-forget; ``end_txn_v2`` for v5), Fetch and ListOffsets with an isolation level,
DescribeTransactions, DescribeProducers.

``read_partition`` reads a partition back the way a consumer does (read_committed filters aborted transactions
with the fetch response's aborted_transactions list) and ``log_view`` reconstructs the truth from the raw log
(read_uncommitted + markers), so checkers can compare the broker's read_committed against the log itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from helpers.rawclient import RawClient

from oncelog.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from oncelog.protocol.messages.describe_producers_request import DescribeProducersRequest, TopicRequest
from oncelog.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from oncelog.protocol.messages.end_txn_request import EndTxnRequest
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest
from oncelog.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from oncelog.protocol.records import (
    RecordBatchBuilder,
    decode_records,
    parse_batch_header,
    parse_control_record,
)

PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 10, 22, 24, 26
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS = 61, 65
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LATEST, EARLIEST = -1, -2

# error codes used by the tests
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
FENCED = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}


def txn_batch(values: list[bytes], pid: int, epoch: int, seq: int, transactional: bool = True,
              keys: list[bytes | None] | None = None) -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=transactional)
    ts = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(ts, None if keys is None else keys[i], v)
    return b.build()


@dataclass
class Batch:
    """One batch of a fetch response, decoded."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    commit: bool | None  # control batches: COMMIT (True) / ABORT (False)
    records: list[tuple[int, bytes | None, bytes | None]] = field(default_factory=list)  # (offset, key, value)


def decode_batches(records: Any) -> list[Batch]:
    out: list[Batch] = []
    if not records:
        return out
    data = bytes(records)
    pos = 0
    while pos + 61 <= len(data):
        h = parse_batch_header(data, pos)
        if pos + h.size > len(data):
            break  # a partial trailing batch
        commit = parse_control_record(data, pos).commit if h.is_control else None
        recs = [(r.offset, r.key, r.value) for r in decode_records(data, pos)]
        out.append(Batch(h.base_offset, h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence,
                         h.is_transactional, h.is_control, commit, recs))
        pos += h.size
    return out


class TxnClient(RawClient):
    def __init__(self, bootstrap: str, timeout: float = 20.0, client_id: str = "txn-raw") -> None:
        super().__init__(bootstrap, timeout=timeout, client_id=client_id)
        # as every client does before its first group or transaction request: find the coordinators (on a
        # single node this also creates their internal topics on first use, as Kafka's FindCoordinator does)
        for key_type in (0, 1):
            self.find_coordinator("raw-client", key_type)

    # ------------------------------------------------------------------ coordinator APIs
    def find_coordinator(self, key: str, key_type: int = 1, version: int = 3) -> Any:
        return self.request(FIND_COORDINATOR, version, FindCoordinatorRequest(key=key, key_type=key_type,
                                                                              coordinator_keys=[key]))

    def init_producer_id(self, txn_id: str | None = None, timeout_ms: int = 60_000, pid: int = -1,
                         epoch: int = -1, version: int = 4) -> tuple[int, int, int]:
        """(error, producer id, epoch) of one InitProducerId."""
        r = self.request(INIT_PRODUCER_ID, version, InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch))
        return int(r.error_code), int(r.producer_id), int(r.producer_epoch)

    def init_txn(self, txn_id: str, timeout_ms: int = 60_000, deadline_s: float = 30.0, **kw: int) -> tuple[int, int]:
        """InitProducerId, retried while the coordinator answers CONCURRENT_TRANSACTIONS (fencing an ongoing
        transaction) or is loading; -> (producer id, epoch)."""
        end = time.monotonic() + deadline_s
        while True:
            code, pid, epoch = self.init_producer_id(txn_id, timeout_ms, **kw)
            if code == NONE:
                return pid, epoch
            if code not in (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) \
                    or time.monotonic() > end:
                raise AssertionError(f"InitProducerId({txn_id!r}) failed with error {code}")
            time.sleep(0.05)

    def add_partitions(self, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                       version: int = 3) -> dict[tuple[str, int], int]:
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        r = self.request(ADD_PARTITIONS_TO_TXN, version, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()]))
        return {(t.name, p.partition_index): int(p.partition_error_code)
                for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}

    def _end_req(self, txn_id: str, pid: int, epoch: int, commit: bool) -> EndTxnRequest:
        return EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit)

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
        return int(self.request(END_TXN, version, self._end_req(txn_id, pid, epoch, commit)).error_code)

    def end_txn_v2(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 5) -> tuple[int, int, int]:
        """EndTxn v5 (transactions V2) -> (error, producer id, epoch of the producer's next transaction)."""
        r = self.request(END_TXN, version, self._end_req(txn_id, pid, epoch, commit))
        return int(r.error_code), int(r.producer_id), int(r.producer_epoch)

    def send_end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
        """Send EndTxn without waiting for the answer; returns the correlation id."""
        return self.send(END_TXN, version, self._end_req(txn_id, pid, epoch, commit))

    def describe_txn(self, txn_id: str) -> Any:
        r = self.request(DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[txn_id]))
        return r.transaction_states[0]

    def wait_txn_state(self, txn_id: str, states: set[str], timeout: float = 30.0) -> Any:
        end = time.monotonic() + timeout
        while True:
            d = self.describe_txn(txn_id)
            if d.error_code == NONE and d.transaction_state in states:
                return d
            if time.monotonic() > end:
                raise AssertionError(f"{txn_id}: state {d.transaction_state!r} (error {d.error_code}) "
                                     f"never reached {states} in {timeout} s")
            time.sleep(0.1)

    def describe_producers(self, topic: str, partition: int) -> Any:
        r = self.request(DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(
            topics=[TopicRequest(name=topic, partition_indexes=[partition])]))
        return r.topics[0].partitions[0]

    # ------------------------------------------------------------------ data APIs
    def produce_batch(self, topic: str, partition: int, batch: bytes, txn_id: str | None = None,
                      acks: int = -1, version: int = 9) -> Any:
        req = ProduceRequest(transactional_id=txn_id, acks=acks, timeout_ms=10000, topic_data=[
            TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)])])
        return self.request(PRODUCE, version, req).responses[0].partition_responses[0]

    def fetch_iso(self, topic: str, partition: int, offset: int, isolation: int,
                  max_bytes: int = 16 * 1024 * 1024, version: int = 12) -> Any:
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=isolation,
                           session_id=0, session_epoch=-1, topics=[FetchTopic(topic=topic, partitions=[FetchPartition(
                               partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])
        return self.request(FETCH, version, req).responses[0].partitions[0]

    def list_offset_iso(self, topic: str, partition: int, timestamp: int = LATEST,
                        isolation: int = READ_UNCOMMITTED, version: int = 7) -> int:
        req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
            ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(partition_index=partition,
                                                                         timestamp=timestamp)])])
        p = self.request(LIST_OFFSETS, version, req).topics[0].partitions[0]
        assert p.error_code == 0, f"ListOffsets {topic}-{partition}: error {p.error_code}"
        return int(p.offset)

    def lso(self, topic: str, partition: int) -> int:
        return self.list_offset_iso(topic, partition, LATEST, READ_COMMITTED)

    def hw(self, topic: str, partition: int) -> int:
        return self.list_offset_iso(topic, partition, LATEST, READ_UNCOMMITTED)

    def fetch_batches(self, topic: str, partition: int, isolation: int,
                      start: int = 0) -> tuple[list[Batch], list[tuple[int, int]], int, int]:
        """Every batch from ``start`` up to the isolation limit -> (batches, aborted (pid, first offset), hw,
        lso) as the broker answered them."""
        batches: list[Batch] = []
        aborted: set[tuple[int, int]] = set()
        offset = start
        while True:
            p = self.fetch_iso(topic, partition, offset, isolation)
            assert p.error_code == 0, f"fetch {topic}-{partition}@{offset}: error {p.error_code}"
            limit = p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
            got = [b for b in decode_batches(p.records) if b.last_offset >= offset]
            for b in got:
                assert b.base_offset < limit, (f"{topic}-{partition}: isolation {isolation} fetch returned a "
                                               f"batch at {b.base_offset} at/after its limit {limit}")
            for a in p.aborted_transactions or []:
                aborted.add((int(a.producer_id), int(a.first_offset)))
            batches.extend(got)
            if got:
                offset = got[-1].last_offset + 1
            if not got or offset >= limit:
                return batches, sorted(aborted, key=lambda a: a[1]), int(p.high_watermark), \
                    int(p.last_stable_offset)

    def read(self, topic: str, partition: int, isolation: int) -> list[tuple[int, bytes | None]]:
        """(offset, value) of every record a consumer with this isolation level sees (from offset 0)."""
        batches, aborted, _, _ = self.fetch_batches(topic, partition, isolation)
        if isolation == READ_UNCOMMITTED:
            return [(o, v) for b in batches if not b.control for o, _, v in b.records]
        # Kafka consumer: an aborted transaction becomes active once a batch at/after its first offset is read,
        # and ends at the producer's ABORT marker.
        pending = list(aborted)
        active: set[int] = set()
        out: list[tuple[int, bytes | None]] = []
        for b in batches:
            while pending and pending[0][1] <= b.last_offset:
                active.add(pending.pop(0)[0])
            if b.control:
                if b.commit is False:
                    active.discard(b.producer_id)
                continue
            if b.transactional and b.producer_id in active:
                continue
            out.extend((o, v) for o, _, v in b.records)
        return out

    def log_view(self, topic: str, partition: int) -> "LogView":
        """The partition's content judged from the raw log (read_uncommitted batches and their markers)."""
        batches, _, hw, _ = self.fetch_batches(topic, partition, READ_UNCOMMITTED)
        return LogView.of(batches, hw)


@dataclass
class LogView:
    """Records of one partition classified by the markers that follow them in the log."""

    committed: list[tuple[int, bytes | None]]  # non-transactional + committed transactional, in offset order
    aborted: list[tuple[int, bytes | None]]
    open: list[tuple[int, bytes | None]]  # transactional records whose producer has no marker after them yet
    markers: list[tuple[int, int, bool]]  # (offset, pid, commit)
    first_open_offset: int | None
    hw: int

    @classmethod
    def of(cls, batches: list[Batch], hw: int) -> "LogView":
        state: dict[int, list[tuple[int, bytes | None]]] = {}  # pid -> records of its open transaction
        first_open: dict[int, int] = {}
        committed: list[tuple[int, bytes | None]] = []
        aborted: list[tuple[int, bytes | None]] = []
        markers: list[tuple[int, int, bool]] = []
        for b in batches:
            if b.control:
                markers.append((b.base_offset, b.producer_id, bool(b.commit)))
                recs = state.pop(b.producer_id, [])
                first_open.pop(b.producer_id, None)
                (committed if b.commit else aborted).extend(recs)
                continue
            recs = [(o, v) for o, _, v in b.records]
            if b.transactional:
                state.setdefault(b.producer_id, []).extend(recs)
                first_open.setdefault(b.producer_id, b.base_offset)
            else:
                committed.extend(recs)
        committed.sort()
        aborted.sort()
        open_ = sorted(r for recs in state.values() for r in recs)
        return cls(committed, aborted, open_, markers, min(first_open.values()) if first_open else None, hw)
