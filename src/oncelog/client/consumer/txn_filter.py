"""The read_committed filter: which fetched batches belong to aborted transactions (Kafka's Fetcher,
``nextFetchedRecord`` with ``abortedProducerIds``, now in CompletedFetch; KIP-98).

A read_committed fetch response carries, per partition, the aborted transactions that overlap the fetched range
as (producer id, first offset). Batches are then walked in offset order:

* before looking at a batch that has a producer id, every aborted transaction whose first offset is at or below
  the batch's last offset is popped from a min-heap (by first offset) into the set of aborted producer ids;
* a control batch of a producer in that set is its ABORT marker: the producer leaves the set;
* a transactional data batch of a producer in the set is skipped;
* control batches are never returned.

Why a control batch of a producer in the set is its ABORT marker without reading the marker record: the
producer was added because one of its aborted transactions starts at or below this batch's offset, a producer
has at most one open transaction, and markers are one-record batches, so the first marker of that producer at or
after the transaction's first offset is the one that ends it, and it ends it with ABORT. ``accept`` can also be
given the control record type (``marker_is_abort``) to check it, as Kafka's ``containsAbortMarker`` does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from oncelog.protocol.records import BatchHeader

__all__ = ["AbortedTransactionFilter"]


class AbortedTransactionFilter:
    """Stateful per fetched partition: feed it the partition's batches in offset order."""

    __slots__ = ("_heap", "aborted_producer_ids")

    def __init__(self, aborted_transactions: Iterable[Any] | None) -> None:
        """``aborted_transactions``: FetchResponse AbortedTransaction objects (``producer_id``,
        ``first_offset``) or (producer_id, first_offset) pairs; None or empty when there are none."""
        heap: list[tuple[int, int]] = []
        for txn in aborted_transactions or ():
            if isinstance(txn, tuple):
                producer_id, first_offset = txn
            else:
                producer_id, first_offset = txn.producer_id, txn.first_offset
            heap.append((int(first_offset), int(producer_id)))
        heapq.heapify(heap)
        self._heap = heap
        self.aborted_producer_ids: set[int] = set()

    def _consume_aborted_up_to(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            self.aborted_producer_ids.add(heapq.heappop(heap)[1])

    def accept(self, header: BatchHeader, marker_is_abort: bool | None = None) -> bool:
        """Whether the records of this batch go to the application (call for every batch, in order)."""
        if header.producer_id >= 0:
            if self._heap:
                self._consume_aborted_up_to(header.last_offset)
            pid = header.producer_id
            if header.is_control:
                if pid in self.aborted_producer_ids and marker_is_abort is not False:
                    self.aborted_producer_ids.discard(pid)
                return False
            return not (header.is_transactional and pid in self.aborted_producer_ids)
        return not header.is_control
