"""Fetching for assigned partitions: positions, offset resets via ListOffsets, Fetch per leader.

A fetch brings each partition's record batches back checked (CRC), filtered by the isolation level and
decompressed (:func:`accepted_batches`), not decoded: the consumer decodes them into Messages when it hands them
out (:mod:`.buffer`), or column-wise (``consume_arrow()``).

Transactions: :func:`make_batch_filter` gives ``isolation.level=read_committed`` fetches a
:class:`ReadCommittedFilter` (Kafka's ``Fetcher`` with ``abortedProducerIds``, in :mod:`.txn_filter`). The broker
bounds read_committed fetches by the last stable offset and sends ``aborted_transactions``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog.protocol import compression as _compression
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest
from oncelog.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from oncelog.protocol.record_decode import decode_records_into
from oncelog.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    compute_crc,
    parse_batch_header,
)

from ..cluster import Cluster
from ..config import ConsumerConfig
from ..errors import KafkaError
from ..fetch_session import FetchSessionHandler
from ..message import Message
from .txn_filter import AbortedTransactionFilter

__all__ = [
    "BatchFilter",
    "FetchedBatch",
    "FetchedBatches",
    "Fetcher",
    "ReadCommittedFilter",
    "ReadUncommittedFilter",
    "TopicPartition",
    "accepted_batches",
    "decode_batch",
    "decode_fetched",
    "make_batch_filter",
]

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
_EARLIEST, _LATEST = -2, -1
_I = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """One data batch: its header fields and its uncompressed records section (record format v2)."""

    base_offset: int
    last_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool
    records_count: int
    records: bytes


@dataclass(frozen=True, slots=True)
class FetchedBatches:
    """The accepted record batches of one partition from one fetch, and the position the fetch started at
    (records before it, in a batch that starts before it, are not returned)."""

    topic: str
    partition: int
    fetch_offset: int
    batches: list[FetchedBatch]


class BatchFilter(Protocol):
    def accept(self, header: BatchHeader) -> bool:
        """Whether the records of this batch go to the application."""


class ReadUncommittedFilter:
    """Every data batch; control batches (transaction markers) are never shown to applications."""

    def accept(self, header: BatchHeader) -> bool:
        return not header.is_control


class ReadCommittedFilter(AbortedTransactionFilter):
    """isolation.level=read_committed: drops the batches of aborted transactions using the fetch response's
    ``aborted_transactions`` and the ABORT markers met on the way (see :mod:`.txn_filter`); the broker bounds
    the fetch by the last stable offset."""


def make_batch_filter(isolation_level: int, aborted_transactions: Sequence[Any] | None) -> BatchFilter:
    if isolation_level == 1:
        return ReadCommittedFilter(aborted_transactions)
    return ReadUncommittedFilter()


def accepted_batches(records: Any, offset: int, batch_filter: BatchFilter, check_crcs: bool = True
                     ) -> tuple[list[FetchedBatch], int]:
    """The data batches of a fetched records blob that end at or after ``offset`` and that ``batch_filter``
    accepts (checked, decompressed), and the next offset to fetch; a batch cut short at the end (allowed by the
    protocol) is left for the next fetch. Raises CorruptRecordError."""
    out: list[FetchedBatch] = []
    next_offset = offset
    if not records:
        return out, next_offset
    buf = records if isinstance(records, (bytes, bytearray)) else bytes(records)
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD + 5:
        (length,) = _I.unpack_from(buf, pos + 8)
        if pos + LOG_OVERHEAD + length > end:
            break  # partial trailing batch: the next fetch starts there
        h = parse_batch_header(buf, pos)
        if h.next_offset > offset and batch_filter.accept(h) and h.records_count:
            if check_crcs and compute_crc(buf, pos, h.size) != h.crc:
                raise CorruptRecordError(f"record batch at offset {h.base_offset} fails its CRC32C")
            section = memoryview(buf)[pos + BATCH_HEADER_SIZE:pos + h.size]
            data = bytes(section) if h.compression == 0 else _compression.decompress(h.compression, section)
            out.append(FetchedBatch(h.base_offset, h.last_offset, h.base_timestamp, h.max_timestamp,
                                    bool(h.attributes & ATTR_TIMESTAMP_TYPE), h.records_count, data))
        next_offset = max(next_offset, h.next_offset)
        pos += h.size
    return out, next_offset


def decode_batch(b: FetchedBatch, topic: str, partition: int, from_offset: int, out: list[Message],
                 pos: int = 0, index: int = 0, limit: int | None = None) -> tuple[int, int]:
    """Append the records of ``b`` at or after ``from_offset`` to ``out`` as Messages: from its record at byte
    ``pos`` of the section (the ``index``-th) on, at most ``limit`` of them (those before ``from_offset``
    counted); returns where the next one starts (byte, index; the index is ``b.records_count`` at the end).
    Raises CorruptRecordError."""
    log_append = b.max_timestamp if b.log_append_time else None
    if b.base_offset >= from_offset:
        return decode_records_into(b.records, b.records_count, b.base_offset, b.base_timestamp, log_append,
                                   Message, topic, partition, out, pos, index, limit)
    part: list[Message] = []  # the position is inside this batch (e.g. a compressed one): drop the head
    at = decode_records_into(b.records, b.records_count, b.base_offset, b.base_timestamp, log_append, Message,
                             topic, partition, part, pos, index, limit)
    out += [m for m in part if m._offset >= from_offset]
    return at


def decode_fetched(topic: str, partition: int, records: Any, fetch_offset: int, batch_filter: BatchFilter,
                   check_crcs: bool = True) -> tuple[list[Message], int]:
    """Messages at or after ``fetch_offset`` from a fetched records blob, and the next offset to fetch
    (:func:`accepted_batches`, then :func:`decode_batch`)."""
    batches, next_offset = accepted_batches(records, fetch_offset, batch_filter, check_crcs)
    out: list[Message] = []
    for b in batches:
        decode_batch(b, topic, partition, fetch_offset, out)
    return out, next_offset


class Fetcher:
    def __init__(self, cluster: Cluster, config: ConsumerConfig) -> None:
        self.cluster = cluster
        self.config = config
        self.positions: dict[TopicPartition, int] = {}
        self.resets: dict[TopicPartition, int] = {}  # tp -> EARLIEST/LATEST still to resolve
        self.high_watermarks: dict[TopicPartition, int] = {}
        #: not fetched while paused (the consumer shares its SubscriptionState's set here)
        self.paused: set[TopicPartition] = set()
        self.sessions: dict[int, FetchSessionHandler] = {}  # KIP-227, one per broker

    def assign(self, tp: TopicPartition, offset: int | None) -> None:
        """``offset`` >= 0: start there; -2 earliest; -1 latest; None: ``auto.offset.reset``."""
        self.positions.pop(tp, None)
        self.resets.pop(tp, None)
        if offset is not None and offset >= 0:
            self.positions[tp] = offset
        elif offset in (_EARLIEST, _LATEST):
            self.resets[tp] = offset
        else:
            self._reset_by_policy(tp, f"no start offset for {tp[0]}[{tp[1]}]")

    def unassign_all(self) -> None:
        self.positions.clear()
        self.resets.clear()

    def unassign(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.positions.pop(tp, None)
            self.resets.pop(tp, None)
            self.high_watermarks.pop(tp, None)

    def _reset_by_policy(self, tp: TopicPartition, why: str) -> None:
        policy = self.config.auto_offset_reset
        if policy == "error":
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{why} and auto.offset.reset=error")
        self.positions.pop(tp, None)
        self.resets[tp] = _EARLIEST if policy == "earliest" else _LATEST

    async def _resolve_resets(self) -> None:
        if not self.resets:
            return
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in list(self.resets):
            by_node[self.cluster.leader_for(*tp)].append(tp)
        for node, tps in by_node.items():
            by_topic: dict[str, list[ListOffsetsPartition]] = defaultdict(list)
            for t, p in tps:
                ts = self.resets.get((t, p))
                if ts is not None:  # else unassigned meanwhile
                    by_topic[t].append(ListOffsetsPartition(partition_index=p, timestamp=ts))
            if not by_topic:
                continue
            req = ListOffsetsRequest(replica_id=-1, isolation_level=self.config.isolation_level,
                                     topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
            resp = await (await self.cluster.connection(node)).send(req)
            for rt in resp.topics:
                for rp in rt.partitions:
                    tp = (rt.name, rp.partition_index)
                    if rp.error_code:
                        raise KafkaError(rp.error_code, f"cannot find the start offset of {tp[0]}[{tp[1]}]")
                    if tp in self.resets:
                        del self.resets[tp]
                        self.positions[tp] = rp.offset

    def fetchable(self) -> bool:
        """Whether a fetch would ask for anything: a partition with a position that is not paused, or a reset."""
        paused = self.paused
        return bool(self.resets) or any(tp not in paused for tp in self.positions)

    async def fetch(self, max_wait_ms: int, deliver: Callable[[FetchedBatches], None]) -> None:
        """One round of Fetch requests (one per leader, concurrently). Each partition's accepted batches go to
        ``deliver`` in the same step that moves its position past them (nothing awaited in between): a fetch
        cancelled at any point loses no records and delivers none twice.

        What a response brings for a partition that was unassigned, sought, reset or paused while it was in
        flight is dropped (its position is not moved): the assignment may change under a fetch (librdkafka's
        fetch version barrier does the same)."""
        if not self.fetchable():
            await asyncio.sleep(max_wait_ms / 1000)
            return
        try:
            for t in {t for t, _ in list(self.positions) + list(self.resets)}:
                if self.cluster.topic(t) is None:
                    await self.cluster.wait_for_topic(t, self.config.request_timeout_ms / 1000)
            await self._resolve_resets()
        except KafkaError as e:
            if not e.retriable():
                raise
            log.debug("consumer: %s; retrying", e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            return
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in list(self.positions):
            if tp in self.paused:
                continue
            try:
                by_node[self.cluster.leader_for(*tp)].append(tp)
            except KafkaError:
                await self.cluster.refresh()
        results: list[BaseException | None] = [None]
        if len(by_node) == 1:  # one leader (one broker): the request is written before this first awaits
            try:
                await self._fetch_node(*next(iter(by_node.items())), max_wait_ms, deliver)
            except Exception as e:
                results = [e]
        else:
            results = await asyncio.gather(*(self._fetch_node(n, tps, max_wait_ms, deliver)
                                             for n, tps in by_node.items()), return_exceptions=True)
        for r in results:
            if isinstance(r, KafkaError) and r.retriable():
                log.debug("fetch failed: %s", r)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                await self.cluster.refresh()
            elif isinstance(r, BaseException):
                raise r

    async def _fetch_node(self, node: int, tps: list[TopicPartition], max_wait_ms: int,
                          deliver: Callable[[FetchedBatches], None]) -> None:
        conn = await self.cluster.connection(node)
        version = conn.version_for(1)
        c = self.config
        sent = {tp: self.positions[tp] for tp in tps if tp in self.positions}  # a rebalance may have run
        if not sent:
            return
        session = self.sessions.get(node)
        if session is None or session.use_topic_ids != (version >= 13):
            session = self.sessions[node] = FetchSessionHandler(use_topic_ids=version >= 13)
        # an incremental fetch (KIP-227) lists only the partitions whose position moved
        wanted = [(t, self.cluster.topic_id(t), FetchPartition(partition=p, fetch_offset=offset,
                                                             partition_max_bytes=c.max_partition_fetch_bytes))
                  for (t, p), offset in sent.items()]
        request = session.build(wanted)
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=c.fetch_min_bytes,
                           max_bytes=c.fetch_max_bytes, isolation_level=c.isolation_level,
                           session_id=request.session_id, session_epoch=request.session_epoch,
                           topics=request.topics, forgotten_topics_data=request.forgotten)
        try:
            resp = await conn.send(req, timeout=conn.request_timeout + max_wait_ms / 1000)
        except BaseException:
            session.reset()
            raise
        if not session.handle_response(request, resp):
            log.debug("fetch session with node %d answered %s; fetching in full", node, resp.error_code)
            return
        if resp.error_code:
            raise KafkaError(resp.error_code, f"fetch from node {node} failed")
        for rt in resp.responses:
            topic = rt.topic if version < 13 else (self.cluster.topic_name(rt.topic_id) or rt.topic)
            for rp in rt.partitions:
                tp = (topic, rp.partition_index)
                fetch_offset = self.positions.get(tp)
                if fetch_offset is None or fetch_offset != sent.get(tp) or tp in self.paused:
                    continue  # unassigned, sought, reset or paused while the fetch was in flight
                if rp.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._reset_by_policy(tp, f"offset {fetch_offset} is out of range for {tp[0]}[{tp[1]}]")
                    continue
                if rp.error_code:
                    err = KafkaError(rp.error_code, f"fetch {tp[0]}[{tp[1]}] at offset {fetch_offset}")
                    if err.retriable():
                        await self.cluster.refresh()
                        continue
                    raise err
                self.high_watermarks[tp] = rp.high_watermark
                batch_filter = make_batch_filter(c.isolation_level, rp.aborted_transactions)
                try:
                    batches, nxt = accepted_batches(rp.records, fetch_offset, batch_filter, c.check_crcs)
                except CorruptRecordError as e:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{tp[0]}[{tp[1]}] at {fetch_offset}: {e}",
                                     retriable=False) from None
                self.positions[tp] = nxt
                if batches:
                    deliver(FetchedBatches(tp[0], tp[1], fetch_offset, batches))
