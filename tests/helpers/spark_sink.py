"""Helpers of the sink tests: an independent read_committed reader (confluent-kafka) and open-transaction checks."""

from __future__ import annotations

import collections
import time
import uuid

import confluent_kafka as ck

from oncelog.client import Admin


def read_committed(bootstrap: str, topic: str, expect: int | None = None, timeout: float = 30.0,
                   settle: float = 0.3) -> list[bytes]:
    """Every value of ``topic`` a read_committed confluent-kafka consumer sees, up to the LSO of every partition.

    Reads until the positions reach the read_committed end offsets (the LSO); with ``expect`` also waits until that
    many values were read (or ``timeout``), then ``settle`` seconds more to catch duplicates.
    """
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        parts = sorted(md.partitions)
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        quiet_until: float | None = None
        admin = Admin({"bootstrap.servers": bootstrap})
        try:
            while time.monotonic() < deadline:
                batch = c.consume(10_000, 0.2)
                for m in batch:
                    if m.error() is None:
                        values.append(bytes(m.value() or b""))
                if batch:
                    quiet_until = None
                    continue
                ends = admin.list_offsets({(topic, p): "latest" for p in parts}, isolation_level=1)
                positions = c.position([ck.TopicPartition(topic, p) for p in parts])
                at_end = all(ends[(topic, tp.partition)].offset == 0 or tp.offset >= ends[(topic, tp.partition)].offset
                             for tp in positions)
                if at_end and (expect is None or len(values) >= expect):
                    if quiet_until is None:
                        quiet_until = time.monotonic() + settle
                    elif time.monotonic() >= quiet_until:
                        break
        finally:
            admin.close()
        return values
    finally:
        c.close()


def duplicates_and_missing(values: list[bytes], expected: set[bytes]) -> tuple[dict[bytes, int], set[bytes]]:
    counts = collections.Counter(values)
    dups = {v: n for v, n in counts.items() if n > 1}
    missing = expected - set(counts)
    extra = set(counts) - expected
    if extra:
        dups.update({v: -1 for v in extra})  # -1: a value that no input produced
    return dups, missing


def open_txns(bootstrap: str, prefix: str) -> list[str]:
    """Transactional ids starting with ``prefix`` that are still open (Ongoing/Prepare*) at the broker."""
    with Admin({"bootstrap.servers": bootstrap}) as a:
        return [t.transactional_id for t in a.list_transactions()
                if t.transactional_id.startswith(prefix)
                and t.state in ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")]
