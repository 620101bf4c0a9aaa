"""Fetching for assigned partitions: positions, offset resets via ListOffsets, Fetch per leader, batch decoding.

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
from typing import Any, Protocol

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest
from oncelog.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from oncelog.protocol.record_decode import decode_batch_into
from oncelog.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
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
    "Decode",
    "Fetcher",
    "ReadCommittedFilter",
    "ReadUncommittedFilter",
    "TopicPartition",
    "decode_fetched",
    "make_batch_filter",
]

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
_EARLIEST, _LATEST = -2, -1
_I = struct.Struct(">i")


#: (topic, partition, records, fetch offset, batch filter, check_crcs) -> (what they become, next offset)
Decode = Callable[[str, int, Any, int, "BatchFilter", bool], tuple[list[Any], int]]


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


def decode_fetched(topic: str, partition: int, records: Any, fetch_offset: int, batch_filter: BatchFilter,
                   check_crcs: bool = True) -> tuple[list[Message], int]:
    """Messages at or after ``fetch_offset`` from a fetched records blob, and the next offset to fetch.

    A batch cut short at the end of the blob (allowed by the protocol) is left for the next fetch.
    """
    out: list[Message] = []
    next_offset = fetch_offset
    if not records:
        return out, next_offset
    buf = records if isinstance(records, bytes) else bytes(records)
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD + 5:
        (length,) = _I.unpack_from(buf, pos + 8)
        if pos + LOG_OVERHEAD + length > end:
            break  # partial trailing batch
        h = parse_batch_header(buf, pos)
        nxt = h.base_offset + h.last_offset_delta + 1
        if nxt > fetch_offset and batch_filter.accept(h):
            if h.base_offset >= fetch_offset:
                decode_batch_into(buf, h, Message, topic, partition, out, check_crc=check_crcs)
            else:  # the fetch starts inside this batch (e.g. a compressed one): drop the records before it
                part: list[Message] = []
                decode_batch_into(buf, h, Message, topic, partition, part, check_crc=check_crcs)
                out += [m for m in part if m._offset >= fetch_offset]
        next_offset = max(next_offset, nxt)
        pos += LOG_OVERHEAD + length
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

    async def fetch(self, max_wait_ms: int, decode: Decode | None = None) -> list[Any]:
        """One round of Fetch requests (one per leader, concurrently); returns the new messages in order.

        ``decode(topic, partition, records, fetch_offset, batch_filter, check_crcs)`` returns what a partition's
        fetched records become and the next offset to fetch (default :func:`decode_fetched`: Messages; the
        columnar path asks for whole batches)."""
        if not self.resets and all(tp in self.paused for tp in self.positions):
            await asyncio.sleep(max_wait_ms / 1000)
            return []
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
            return []
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in list(self.positions):
            if tp in self.paused:
                continue
            try:
                by_node[self.cluster.leader_for(*tp)].append(tp)
            except KafkaError:
                await self.cluster.refresh()
        results = await asyncio.gather(*(self._fetch_node(n, tps, max_wait_ms, decode or decode_fetched)
                                         for n, tps in by_node.items()), return_exceptions=True)
        out: list[Any] = []
        for r in results:
            if isinstance(r, KafkaError) and r.retriable():
                log.debug("fetch failed: %s", r)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                await self.cluster.refresh()
            elif isinstance(r, BaseException):
                raise r
            else:
                out.extend(r)
        return out

    async def _fetch_node(self, node: int, tps: list[TopicPartition], max_wait_ms: int, decode: Decode
                          ) -> list[Any]:
        conn = await self.cluster.connection(node)
        version = conn.version_for(1)
        c = self.config
        sent = {tp: self.positions[tp] for tp in tps if tp in self.positions}  # a rebalance may have run
        if not sent:
            return []
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
            return []
        if resp.error_code:
            raise KafkaError(resp.error_code, f"fetch from node {node} failed")
        out: list[Any] = []
        for rt in resp.responses:
            topic = rt.topic if version < 13 else (self.cluster.topic_name(rt.topic_id) or rt.topic)
            for rp in rt.partitions:
                tp = (topic, rp.partition_index)
                fetch_offset = self.positions.get(tp)
                if fetch_offset is None or fetch_offset != sent.get(tp):
                    continue  # unassigned, sought or reset while the fetch was in flight
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
                    msgs, nxt = decode(tp[0], tp[1], rp.records, fetch_offset, batch_filter, c.check_crcs)
                except CorruptRecordError as e:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{tp[0]}[{tp[1]}] at {fetch_offset}: {e}",
                                     retriable=False) from None
                self.positions[tp] = nxt
                out.extend(msgs)
        return out
