"""The producer's bulk path (``produce_batch``): records given as columns are partitioned, encoded into v2 record
batches and queued without a Python step per record.

* Partitioning, column-wise: an explicit partition for all records, or one per record (negative: not given);
  records without one and with a key go where Kafka's default partitioner puts that key
  (:func:`oncelog.protocol.partition_columnar.partition_column`: murmur2 of the whole key column with numpy, the
  choice :class:`.partitioner.Partitioner` makes record by record); the rest (null keys) go to the topic's sticky
  partition until a batch of ``message.max.bytes`` is full, then to the next sticky partition, as the per-record
  path moves on after a full batch (KIP-480; the batches queued here close the last one). Records are then grouped by partition with one stable sort, so each partition keeps their
  order.
* Encoding: each partition's records are cut into batches of at most ``message.max.bytes`` (uncompressed
  estimate) and built by :func:`oncelog.protocol.record_batch_columnar.build_batch_columnar` with the producer's
  ``compression.type``.
* Queueing: :meth:`.accumulator.RecordAccumulator.append_prebuilt`, after what was appended to each partition
  before; the sender gives every batch its producer id, epoch and sequences as to any batch (the same sequences
  as record by record).

Everything is checked and encoded before anything is queued: an error queues nothing. :class:`BulkAppender` takes
the producer's parts it uses (metadata, partitioner, accumulator, configuration); the producer checks its
transaction state before calling it.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.protocol import record_batch_columnar as _columnar
from oncelog.protocol.partition_columnar import partition_column
from oncelog.protocol.records import BATCH_HEADER_SIZE

from ..cluster import Cluster
from ..config import ProducerConfig
from ..errors import KafkaError
from ..message import Header
from .accumulator import DeliveryCallback, RecordAccumulator
from .partitioner import Partitioner

__all__ = ["RECORD_OVERHEAD", "BulkAppender"]

#: an upper bound of a record's bytes besides its key and value (varints, attributes, headerCount)
RECORD_OVERHEAD = 32

_Built = list[tuple[bytes, int, int]]


@dataclass(frozen=True, slots=True)
class BulkAppender:
    """Appends records given as columns to a producer's accumulator."""

    cluster: Cluster
    partitioner: Partitioner
    accumulator: RecordAccumulator
    config: ProducerConfig

    def append(self, topic: str, values: Any, keys: Any, partition: Any, timestamps: Any,
               headers: Sequence[list[Header]] | None, on_complete: DeliveryCallback | None) -> int:
        """See :meth:`.producer.AsyncProducer.append_batch` (``headers`` already normalised); returns the number
        of batches queued."""
        import numpy as np

        info = self.cluster.topics.get(topic)
        if info is None:
            raise KafkaError(3, f"topic {topic!r} is unknown (call ensure_topic first or create it)")
        vcol = _columnar.as_column(values, "values")
        n = len(vcol)
        kcol = _columnar.as_column(keys, "keys") if keys is not None else None
        if kcol is not None and len(kcol) != n:
            raise ValueError(f"keys has {len(kcol)} entries for {n} values")
        if headers is not None and len(headers) != n:
            raise ValueError(f"headers has {len(headers)} entries for {n} values")
        single = partition is not None and np.ndim(partition) == 0
        if single:
            partition = operator.index(partition)
            if partition not in info.partitions:
                raise KafkaError(3, f"partition {partition} of {topic!r} does not exist (it has "
                                    f"{len(info.partitions)})")
        if n == 0:
            return 0
        ts: Any
        if timestamps is None:
            ts = int(time.time() * 1000)
        elif np.ndim(timestamps) == 0:
            ts = operator.index(timestamps)
        else:
            ts = np.asarray(timestamps)
            if ts.shape != (n,) or ts.dtype.kind not in "iu":
                raise ValueError(f"timestamps must be one int or {n} ints, got {ts.dtype} of shape {ts.shape}")
            ts = ts.astype(np.int64, copy=False)
        sizes = vcol.byte_sizes() if kcol is None else vcol.byte_sizes() + kcol.byte_sizes()
        largest = int(sizes.max())
        if largest > self.config.message_max_bytes:
            raise KafkaError(10, f"a record of {largest} bytes for {topic!r} exceeds message.max.bytes="
                                 f"{self.config.message_max_bytes}")
        est = sizes + RECORD_OVERHEAD
        if headers is not None:
            est += np.fromiter((sum(len(k) + len(v or b"") + 10 for k, v in h) for h in headers), np.int64, n)
        if single:
            groups = [(int(partition), None)]
        else:
            groups = _partition_rows(self, topic, n, kcol, partition, sorted(info.partitions), est)
        built: list[tuple[int, _Built]] = []
        for part, rows in groups:
            if rows is None:
                built.append((part, _encode(self, vcol, kcol, ts, headers, est)))
            else:
                built.append((part, _encode(
                    self, vcol.take(rows), None if kcol is None else kcol.take(rows),
                    ts if isinstance(ts, int) else ts[rows],
                    None if headers is None else [headers[i] for i in rows.tolist()], est[rows])))
        for part, batches in built:
            self.accumulator.append_prebuilt((topic, part), batches, on_complete)
        return sum(len(b) for _, b in built)


def _partition_rows(p: BulkAppender, topic: str, n: int, kcol: _columnar.Column | None, partition: Any,
                    partitions: list[int], est: Any) -> list[tuple[int, Any]]:
    """(partition, its rows in order, or None for all rows) for every partition that gets records."""
    import numpy as np

    chosen = np.full(n, -1, np.int64)
    if partition is not None:
        given = np.asarray(partition)
        if given.shape != (n,) or given.dtype.kind not in "iu":
            raise ValueError(f"partition must be one int or {n} ints, got {given.dtype} of shape {given.shape}")
        chosen[:] = given
        bad = (chosen >= 0) & ~np.isin(chosen, np.asarray(partitions, np.int64))
        if bad.any():
            raise KafkaError(3, f"partition {int(chosen[bad][0])} of {topic!r} does not exist (it has "
                                f"{len(partitions)})")
    if kcol is not None:
        free = chosen < 0
        if free.any():
            chosen = np.where(free, partition_column(kcol, len(partitions)), chosen)
    null_keys = np.flatnonzero(chosen < 0)
    if len(null_keys):  # the sticky partition until a batch of message.max.bytes is full, then the next (KIP-480)
        available = p.cluster.available_partitions_for(topic)
        batch_of = (np.cumsum(est[null_keys]) - 1) // max(1, p.config.message_max_bytes - BATCH_HEADER_SIZE)
        sticky = [p.partitioner.partition(topic, None, partitions, available)]
        sticky += [p.partitioner.move_on(topic, partitions, available) for _ in range(int(batch_of[-1]))]
        chosen[null_keys] = np.asarray(sticky, np.int64)[batch_of]
    first = int(chosen[0])
    if (chosen == first).all():
        return [(first, None)]
    order = np.argsort(chosen, kind="stable")
    cuts = np.flatnonzero(np.diff(chosen[order])) + 1
    return [(int(chosen[rows[0]]), rows) for rows in np.split(order, cuts)]


def _encode(p: BulkAppender, vcol: _columnar.Column, kcol: _columnar.Column | None, ts: Any,
            headers: Sequence[list[Header]] | None, est: Any) -> _Built:
    """One partition's records as batches of at most ``message.max.bytes`` (estimated)."""
    import numpy as np

    n = len(vcol)
    cum = np.cumsum(est)
    limit = max(1, p.config.message_max_bytes - BATCH_HEADER_SIZE)
    built: _Built = []
    start = 0
    while start < n:
        base = int(cum[start - 1]) if start else 0
        end = min(n, max(start + 1, int(np.searchsorted(cum, base + limit, side="right"))))
        raw = _columnar.build_batch_columnar(
            vcol.slice(start, end), None if kcol is None else kcol.slice(start, end),
            timestamps=ts if isinstance(ts, int) else ts[start:end],
            headers=None if headers is None else headers[start:end], compression=p.config.compression)
        built.append((raw, end - start, ts if isinstance(ts, int) else int(ts[start])))
        start = end
    return built
