"""What a test of Kafka code checks at the end: the topic read back as a read_committed consumer sees it, each
expected record there exactly once, a group that has caught up, no transaction left open.

Each function takes the broker's bootstrap address (``host:port``) and uses oncelog's own client; a failed check
raises ``AssertionError`` saying what differed (records missing, duplicated or unexpected, by partition and
offset; the lag of each partition; the open transactions).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Record", "assert_exactly_once", "open_transactions", "read_committed", "wait_for_lag_zero"]

#: how many records of each kind a failure message lists
SHOW = 10


@dataclass(frozen=True)
class Record:
    """One record as a read_committed consumer sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _admin(bootstrap: str) -> Any:
    from oncelog.client.admin import Admin

    return Admin({"bootstrap.servers": bootstrap})


def read_committed(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Record]:
    """Every record of ``topic`` a read_committed consumer sees, up to each partition's last stable offset as it is
    now (records of transactions still open are not waited for), in partition and offset order."""
    from oncelog.client import OFFSET_BEGINNING, Consumer, TopicPartition

    admin = _admin(bootstrap)
    try:
        partitions = [p.partition for p in admin.describe_topic(topic).partitions]
        ends = admin.list_offsets({(topic, p): "latest" for p in partitions}, isolation_level=1)
    finally:
        admin.close()
    stop_at = {p: listed.offset for (_, p), listed in ends.items()}
    records: list[Record] = []
    todo = {p for p, end in stop_at.items() if end > 0}
    if not todo:
        return records
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"oncelog-read-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is not None:
                    continue
                p, offset = m.partition(), m.offset()
                if p is not None and offset is not None and p in todo and offset < stop_at[p]:
                    records.append(Record(p, offset, m.key(), m.value(), tuple(m.headers() or ())))
            for p in list(todo):  # the position passes control records and aborted batches too
                if consumer.position([TopicPartition(topic, p)])[0].offset >= stop_at[p]:
                    todo.discard(p)
        if todo:
            raise AssertionError(f"read_committed of {topic} did not reach the last stable offset of partition(s) "
                                 f"{sorted(todo)} ({ {p: stop_at[p] for p in sorted(todo)} }) within {timeout} s")
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def _where(records: list[Record], value: Any, of: Callable[[Record], Any]) -> str:
    return ", ".join(f"{r.partition}@{r.offset}" for r in records if of(r) == value)


def assert_exactly_once(bootstrap: str, topic: str, expected: Iterable[Any], *,
                        of: Callable[[Record], Any] = lambda r: r.value, timeout: float = 30.0) -> list[Record]:
    """Each of ``expected`` is in ``topic`` exactly once as a read_committed consumer sees it, and nothing else is:
    the outcome exactly-once processing promises. ``of`` picks what is compared (the value by default; e.g.
    ``lambda r: r.key``). Returns the records read; raises ``AssertionError`` listing what is missing, duplicated
    (with partition@offset of each copy) and unexpected."""
    records = read_committed(bootstrap, topic, timeout)
    want, got = Counter(expected), Counter(of(r) for r in records)
    missing = sorted((want - got).elements(), key=repr)
    duplicated = {v: n for v, n in got.items() if n > 1 and want.get(v, 0) <= 1}
    unexpected = sorted((v for v in got if v not in want), key=repr)
    if missing or duplicated or unexpected:
        lines = [f"{topic} (read_committed, {len(records)} record(s)) is not exactly the {sum(want.values())} "
                 f"expected once each:"]
        if missing:
            lines.append(f"  missing {len(missing)}: {missing[:SHOW]!r}{' ...' if len(missing) > SHOW else ''}")
        if duplicated:
            shown = list(duplicated.items())[:SHOW]
            lines.append(f"  duplicated {len(duplicated)}: " + "; ".join(
                f"{v!r} x{n} at {_where(records, v, of)}" for v, n in shown))
        if unexpected:
            lines.append(f"  unexpected {len(unexpected)}: " + "; ".join(
                f"{v!r} at {_where(records, v, of)}" for v in unexpected[:SHOW]))
        raise AssertionError("\n".join(lines))
    return records


def _lag(bootstrap: str, group: str, topic: str | None) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (committed offset, last stable offset) for what ``group`` has committed, and every
    partition of ``topic`` when given (a partition without a commit counts from 0)."""
    admin = _admin(bootstrap)
    try:
        committed: dict[tuple[str, int], int] = admin.list_group_offsets(group)
        tps = {tp for tp in committed if topic is None or tp[0] == topic}
        if topic is not None:
            tps |= {(topic, p.partition) for p in admin.describe_topic(topic).partitions}
        ends = admin.list_offsets({tp: "latest" for tp in tps}, isolation_level=1) if tps else {}
    finally:
        admin.close()
    return {tp: (max(committed.get(tp, 0), 0), listed.offset) for tp, listed in ends.items()}


def wait_for_lag_zero(bootstrap: str, group: str, topic: str | None = None, timeout: float = 30.0) -> None:
    """Wait until ``group`` has committed, on every partition (of ``topic``), the last stable offset: it has
    consumed everything committed so far. Raises ``AssertionError`` with each partition's lag at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        lag = _lag(bootstrap, group, topic)
        behind = {tp: (c, e) for tp, (c, e) in lag.items() if c < e}
        if lag and not behind:
            return
        if time.monotonic() >= deadline:
            what = "; ".join(f"{t}-{p}: committed {c}, end {e} (lag {e - c})" for (t, p), (c, e) in
                             sorted(behind.items())) or f"no committed offsets{f' on {topic}' if topic else ''}"
            raise AssertionError(f"group {group} still lags after {timeout} s: {what}")
        time.sleep(0.1)


def open_transactions(bootstrap: str) -> list[dict[str, Any]]:
    """The transactions the broker holds open (Ongoing, PrepareCommit, PrepareAbort), each as a dict:
    ``transactional_id``, ``state``, ``producer_id``, ``producer_epoch``, ``timeout_ms``, ``partitions``."""
    admin = _admin(bootstrap)
    try:
        listed = admin.list_transactions(states=["Ongoing", "PrepareCommit", "PrepareAbort"])
        if not listed:
            return []
        described = admin.describe_transactions([t.transactional_id for t in listed])
    finally:
        admin.close()
    out = []
    for tid, d in sorted(described.items()):
        out.append({"transactional_id": tid, "state": d.state, "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch, "timeout_ms": d.transaction_timeout_ms,
                    "partitions": sorted(d.topic_partitions)})
    return out
