"""Driver-side offset planning: which partitions are read, where they start and end, how ranges are split.

End offsets are the last stable offset (ListOffsets latest with isolation_level=1) under read_committed, the high
watermark under read_uncommitted; below that bound nothing changes any more, so re-reading a range [start, end)
after a failure returns exactly the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from oncelog.client import Admin

from .options import EARLIEST, LATEST, OffsetSpec, OncelogOptionError, SourceOptions

__all__ = ["OffsetPlanner", "OffsetRange", "rate_limit", "split_ranges"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: records [start, end) of one topic-partition (pickled to the executor)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                 max_records: int, min_partitions: int | None = None) -> list[OffsetRange]:
    """One range per partition with new records, cut into pieces of at most ``max_records`` and into at
    least ``min_partitions`` pieces overall (big ranges get more pieces)."""
    ranges = [(tp, start.get(tp, 0), end[tp]) for tp in sorted(end) if end[tp] > start.get(tp, 0)]
    total = sum(e - s for _, s, e in ranges)
    out: list[OffsetRange] = []
    for (t, p), s, e in ranges:
        n = e - s
        pieces = math.ceil(n / max_records)
        if min_partitions and total:
            pieces = max(pieces, math.ceil(min_partitions * n / total))
        pieces = max(1, min(pieces, n))
        step, extra = divmod(n, pieces)
        pos = s
        for i in range(pieces):
            nxt = pos + step + (1 if i < extra else 0)
            out.append(OffsetRange(t, p, pos, nxt))
            pos = nxt
    return out


def rate_limit(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               max_rows: int) -> dict[TopicPartition, int]:
    """End offsets holding at most ``max_rows`` offsets past ``start`` in total, shared in proportion to the
    records each partition has waiting (largest remainders first, so the whole budget is used)."""
    avail = {tp: max(0, e - start.get(tp, 0)) for tp, e in end.items()}
    total = sum(avail.values())
    if total <= max_rows:
        return dict(end)
    share = {tp: max_rows * n / total for tp, n in avail.items()}
    take = {tp: math.floor(x) for tp, x in share.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(share, key=lambda tp: (take[tp] - share[tp], tp)):
        if left <= 0:
            break
        if take[tp] < avail[tp]:
            take[tp] += 1
            left -= 1
    return {tp: start.get(tp, 0) + take[tp] for tp in end}


class OffsetPlanner:
    """Partition discovery and offset lookups with one admin client (created lazily, never pickled)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: Admin | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.opts.admin_conf)
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions read now: assign as given; subscribe / subscribePattern from one fresh Metadata
        request (a subscribed topic that does not exist yet is read once it does)."""
        o = self.opts
        if o.assign is not None:
            return list(o.assign)
        counts = {t.name: t.partitions for t in self.admin.list_topics()}
        names = o.subscribe if o.subscribe is not None else [t for t in counts if o.matches(t)]
        return sorted((name, p) for name in names for p in range(counts.get(name, 0)))

    def _list(self, tps: Iterable[TopicPartition], spec: str) -> dict[TopicPartition, int]:
        tps = list(tps)
        if not tps:
            return {}
        level = 1 if (spec == "latest" and self.opts.read_committed) else 0
        listed = self.admin.list_offsets({tp: spec for tp in tps}, isolation_level=level)
        return {tp: listed[tp].offset for tp in tps}

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(tps, "earliest")

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The LSO under read_committed, else the high watermark."""
        return self._list(tps, "latest")

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], default: str,
                what: str) -> dict[TopicPartition, int]:
        """Concrete offsets for ``spec`` over ``tps``; JSON entries -2/-1 and partitions it omits use
        earliest/latest (``default`` for omitted ones). Offsets past the end are an error."""
        if spec in ("earliest", "latest"):
            return self.earliest(tps) if spec == "earliest" else self.latest(tps)
        assert isinstance(spec, dict)
        unknown = sorted(set(spec) - set(tps))
        if unknown and self.opts.assign is None:
            missing = ", ".join(f"{t}[{p}]" for t, p in unknown)
            raise OncelogOptionError(f"option {what!r} names partitions that are not read: {missing}")
        want = {tp: spec.get(tp, EARLIEST if default == "earliest" else LATEST) for tp in tps}
        out = {tp: off for tp, off in want.items() if off >= 0}
        out.update(self.earliest([tp for tp, off in want.items() if off == EARLIEST]))
        out.update(self.latest([tp for tp, off in want.items() if off == LATEST]))
        return out
