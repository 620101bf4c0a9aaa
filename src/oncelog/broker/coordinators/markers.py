"""Transaction markers on this broker: the leader side of WriteTxnMarkers, and the single node's marker channel.

``LocalMarkerWriter`` appends a COMMIT/ABORT control batch for each marker to each of its partitions here (Kafka's
``KafkaApis.handleWriteTxnMarkersRequest`` -> ``ReplicaManager.appendRecords``), fenced by the coordinator epoch
in the partition's producer state (an older coordinator's marker gets TRANSACTION_COORDINATOR_FENCED). Once a
marker on a ``__consumer_offsets`` partition is durable, the group coordinator replays it (Kafka's
``GroupCoordinator.onTransactionCompleted``): the producer's pending offsets there become visible or are dropped
before anyone is answered. The WriteTxnMarkers handler and the local channel both write through it.

In a cluster a marker is written only by the partition's leader (NOT_LEADER_OR_FOLLOWER otherwise), with
``min.insync.replicas`` in the ISR (NOT_ENOUGH_REPLICAS), as Kafka appends markers with ``acks=-1``; its answer
waits until the high watermark passes it (every ISR member has it), and a partition whose leadership moves meanwhile
answers NOT_LEADER_OR_FOLLOWER, so the coordinator sends it again to the new leader.

``LocalMarkerChannel`` is the transaction coordinator's :class:`~oncelog.coordinator.transaction.MarkerChannel` on a
single node: this broker leads every partition, so each marker is written here, inside the ``send`` call (no
event-loop hop before the write), and the answer is ready once the markers are durable (one group-commit round).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.clock import Clock
from oncelog.coordinator.transaction.markers import MarkerResults, TxnMarker
from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from ..partition import Partition
    from ..topics import TopicRegistry

__all__ = ["LocalMarkerChannel", "LocalMarkerWriter", "OffsetsMarkerSink"]

log = logging.getLogger("oncelog.broker.coordinators.markers")

OFFSETS_TOPIC = "__consumer_offsets"


class OffsetsMarkerSink(Protocol):
    """Who replays markers written to ``__consumer_offsets`` (the group coordinator)."""

    async def replay_end_transaction_marker(self, partition: int, producer_id: int, producer_epoch: int,
                                            commit: bool, offset: int) -> None:
        ...


class _Written:
    """Markers written now: the answers are known; awaiting this waits until the written ones are durable."""

    __slots__ = ("results", "durable")

    def __init__(self, results: MarkerResults, durable: asyncio.Future[Any] | None) -> None:
        self.results = results
        self.durable = durable

    def __await__(self) -> Generator[Any, None, MarkerResults]:
        if self.durable is not None:
            # shielded: a waiter cancelled because its client's connection closed (a WriteTxnMarkers request) must
            # not cancel the replay of the markers into the group coordinator, or the producer's transactional
            # offsets on ``__consumer_offsets`` would stay pending after their marker is durable
            yield from asyncio.shield(self.durable).__await__()
        return self.results


class LocalMarkerWriter:
    def __init__(self, topics: TopicRegistry, clock: Clock,
                 offsets_sink: Callable[[], OffsetsMarkerSink | None] = lambda: None) -> None:
        self.topics = topics
        self.clock = clock
        self.offsets_sink = offsets_sink

    def write(self, markers: Sequence[TxnMarker]) -> _Written:
        """Append every marker to its partitions now; the returned awaitable gives each partition's error code
        once every written marker is durable (and replayed by the group coordinator on ``__consumer_offsets``)."""
        results: MarkerResults = []
        waits: list[asyncio.Future[None]] = []
        replicated: list[tuple[dict[tuple[str, int], int], tuple[str, int], asyncio.Future[int]]] = []
        offsets_markers: list[tuple[TxnMarker, int, int]] = []  # (marker, partition, offset)
        offsets_errors: list[dict[tuple[str, int], int]] = []  # each one's marker's answers
        now = self.clock.wall_ms()
        for m in markers:
            errors: dict[tuple[str, int], int] = {}
            results.append(errors)
            for tp in m.partitions:
                p = self.topics.partition(*tp)
                if p is None:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                refusal = _not_writable(p) if p.replicated else None
                if refusal is not None:
                    errors[tp] = refusal
                    continue
                try:
                    written = p.append_marker(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch, now)
                except Exception as e:
                    code = getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR)
                    log.warning("%s marker for producer %d epoch %d on %s-%d refused: %s",
                                "COMMIT" if m.commit else "ABORT", m.producer_id, m.producer_epoch, tp[0], tp[1], e)
                    errors[tp] = int(code)
                    continue
                errors[tp] = ErrorCode.NONE
                if tp[0] == OFFSETS_TOPIC:
                    offsets_markers.append((m, tp[1], written.first_offset))
                    offsets_errors.append(errors)
                if p.replicated:
                    replicated.append((errors, tp, p.wait_replicated(written.last_offset)))
                    continue
                waits.append(p.wait_durable(written.last_offset))
        sink = self.offsets_sink() if offsets_markers else None
        if replicated:
            return _Written(results, asyncio.ensure_future(
                self._when_replicated(replicated, offsets_markers, offsets_errors, sink)))
        if sink is not None:
            return _Written(results, asyncio.ensure_future(self._then_replay(waits, offsets_markers, sink)))
        if not waits:
            return _Written(results, None)
        # one partition (the common case): its own future, no gather and so one event-loop hop fewer
        return _Written(results, waits[0] if len(waits) == 1 else asyncio.gather(*waits))

    @staticmethod
    async def _then_replay(waits: list[asyncio.Future[None]], offsets_markers: list[tuple[TxnMarker, int, int]],
                           sink: OffsetsMarkerSink) -> None:
        """Once the markers are durable, the producer's pending transactional offset commits on those
        ``__consumer_offsets`` partitions become visible (COMMIT) or are dropped (ABORT) — before the
        transaction is completed and EndTxn answered, so the committer's next OffsetFetch sees them."""
        await asyncio.gather(*waits)
        for m, partition, offset in offsets_markers:
            await sink.replay_end_transaction_marker(partition, m.producer_id, m.producer_epoch, m.commit, offset)

    @staticmethod
    async def _when_replicated(replicated: list[tuple[dict[tuple[str, int], int], tuple[str, int],
                                                      asyncio.Future[int]]],
                               offsets_markers: list[tuple[TxnMarker, int, int]],
                               offsets_errors: list[dict[tuple[str, int], int]],
                               sink: OffsetsMarkerSink | None) -> None:
        """In a cluster: each partition's answer is known once the high watermark passed its marker (or leadership
        moved); the group coordinator replays a ``__consumer_offsets`` marker only once it is committed."""
        for errors, tp, fut in replicated:
            errors[tp] = await fut
        if sink is None:
            return
        for (m, partition, offset), answers in zip(offsets_markers, offsets_errors):
            if answers.get((OFFSETS_TOPIC, partition)) == ErrorCode.NONE:
                await sink.replay_end_transaction_marker(partition, m.producer_id, m.producer_epoch, m.commit,
                                                         offset)


def _not_writable(p: "Partition") -> int | None:
    """Why a replicated partition cannot take a marker now (None: it can)."""
    if not p.is_leader:
        return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    lr = p.leader_replicas
    if lr is not None and len(lr.isr) < lr.min_isr:
        return int(ErrorCode.NOT_ENOUGH_REPLICAS)
    return None


class LocalMarkerChannel:
    """The marker channel of a single node: every partition is led here."""

    def __init__(self, writer: LocalMarkerWriter, node_id: int) -> None:
        self.writer = writer
        self.local_node = node_id

    def leader(self, tp: tuple[str, int]) -> int | None:
        return self.local_node if self.writer.topics.partition(*tp) is not None else None

    def send(self, broker: int, markers: Sequence[TxnMarker]) -> Awaitable[MarkerResults]:
        if broker != self.local_node:
            raise RuntimeError(f"a single node has no broker {broker} to send transaction markers to")
        return self.writer.write(markers)
