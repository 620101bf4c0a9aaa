"""Idempotence bookkeeping (KIP-98): the producer id/epoch and the next sequence number of every partition.

A batch gets its base sequence when it is first drained, and keeps it across retries, so the broker can drop a
duplicate and detect a gap. Sequences are int32 and wrap from 2**31 - 1 to 0, as Kafka's do. After an epoch bump
(KIP-360: UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER for the idempotent producer) every sequence restarts
at 0 and a batch stamped with the old epoch is stamped again.

The producer id, epoch and base sequence are written into the built batch's header by :func:`stamp_batch` (the
builder in ``oncelog.protocol.records`` fills them with "none" when the batch is built).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from oncelog.protocol.records import ATTR_TRANSACTIONAL, ATTRIBUTES_OFFSET, CRC_OFFSET

__all__ = ["NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "ProducerIdAndEpoch", "SequenceNumbers", "stamp_batch"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_INT32_LIMIT = 2**31
_PID_OFFSET = 43  # baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4, ts 8+8
_PID_EPOCH_SEQ = struct.Struct(">qhi")
_ATTRS = struct.Struct(">h")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_PRODUCER_EPOCH

    @property
    def valid(self) -> bool:
        return self.producer_id >= 0


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` in Kafka's int32 sequence space (wraps to 0 after 2**31 - 1)."""
    return (sequence + increment) % _INT32_LIMIT


class SequenceNumbers:
    """The next base sequence per partition for the current producer id/epoch."""

    def __init__(self) -> None:
        self.pid = ProducerIdAndEpoch()
        self._next: dict[tuple[str, int], int] = {}

    def set_producer(self, pid: ProducerIdAndEpoch) -> None:
        """A new producer id or epoch: every partition starts again at sequence 0."""
        self.pid = pid
        self._next.clear()

    def next_sequence(self, tp: tuple[str, int]) -> int:
        return self._next.get(tp, 0)

    def assign(self, tp: tuple[str, int], record_count: int) -> int:
        """Reserve ``record_count`` sequences of ``tp``; returns the batch's base sequence."""
        base = self._next.get(tp, 0)
        self._next[tp] = increment_sequence(base, record_count)
        return base

    def rewind(self, tp: tuple[str, int], base_sequence: int) -> None:
        """The batch at ``base_sequence`` (the last one assigned) was rejected, not written: reuse its sequences."""
        self._next[tp] = base_sequence

    def reset_partition(self, tp: tuple[str, int]) -> None:
        self._next.pop(tp, None)


def stamp_batch(raw: bytes, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> bytes:
    """``raw`` (one v2 record batch) with the producer id, epoch, base sequence and transactional flag set and the
    CRC recomputed."""
    buf = bytearray(raw)
    _PID_EPOCH_SEQ.pack_into(buf, _PID_OFFSET, producer_id, epoch, base_sequence)
    if transactional:
        (attrs,) = _ATTRS.unpack_from(buf, ATTRIBUTES_OFFSET)
        _ATTRS.pack_into(buf, ATTRIBUTES_OFFSET, attrs | ATTR_TRANSACTIONAL)
    _CRC.pack_into(buf, CRC_OFFSET, int(crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])))
    return bytes(buf)
