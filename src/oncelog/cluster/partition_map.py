"""The partition map of a :class:`~oncelog.cluster.model.ClusterView`: immutable, copy-on-write in buckets.

The map is split into buckets of 256 partitions of one topic; an update copies only the buckets it touches (plus
the small index of buckets), so a leader election of one partition among 10,000 copies ~300 references, not
10,000, and two views share every bucket neither changed: :meth:`PartitionMap.changed_since` yields only what may
differ between them (the controller's reconciliation after its own writes looks at those, not at every partition).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .model import TopicPartition, VersionedPartition

__all__ = ["PartitionMap", "changed_since"]

_BUCKET_BITS = 8

_Bucket = tuple[str, int]


def _bucket(tp: TopicPartition) -> _Bucket:
    return tp[0], tp[1] >> _BUCKET_BITS


class PartitionMap(Mapping[TopicPartition, VersionedPartition]):
    """An immutable mapping (topic, index) -> VersionedPartition whose updates share untouched buckets."""

    __slots__ = ("_buckets", "_len")

    def __init__(self, buckets: dict[_Bucket, dict[TopicPartition, VersionedPartition]] | None = None,
                 length: int = 0) -> None:
        self._buckets: dict[_Bucket, dict[TopicPartition, VersionedPartition]] = buckets or {}
        self._len = length

    @classmethod
    def build(cls, items: Iterable[tuple[TopicPartition, VersionedPartition]]) -> PartitionMap:
        buckets: dict[_Bucket, dict[TopicPartition, VersionedPartition]] = {}
        n = 0
        for tp, vp in items:
            b = buckets.setdefault(_bucket(tp), {})
            n += tp not in b
            b[tp] = vp
        return cls(buckets, n)

    def __getitem__(self, tp: TopicPartition) -> VersionedPartition:
        return self._buckets[_bucket(tp)][tp]

    def get(self, tp: TopicPartition, default: VersionedPartition | None = None  # type: ignore[override]
            ) -> VersionedPartition | None:
        b = self._buckets.get(_bucket(tp))
        return default if b is None else b.get(tp, default)

    def __contains__(self, tp: object) -> bool:
        if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int)):
            return False
        b = self._buckets.get(_bucket(tp))
        return b is not None and tp in b

    def __iter__(self) -> Iterator[TopicPartition]:
        for b in self._buckets.values():
            yield from b

    def __len__(self) -> int:
        return self._len

    def items(self) -> Iterator[tuple[TopicPartition, VersionedPartition]]:  # type: ignore[override]
        for b in self._buckets.values():
            yield from b.items()

    def values(self) -> Iterator[VersionedPartition]:  # type: ignore[override]
        for b in self._buckets.values():
            yield from b.values()

    def updated(self, puts: Mapping[TopicPartition, VersionedPartition],
                deletes: Iterable[TopicPartition]) -> PartitionMap:
        """A new map with ``puts`` set and ``deletes`` removed; this one is unchanged."""
        buckets = dict(self._buckets)
        copied: set[_Bucket] = set()
        n = self._len

        def writable(bk: _Bucket) -> dict[TopicPartition, VersionedPartition]:
            if bk not in copied:
                copied.add(bk)
                buckets[bk] = dict(buckets.get(bk, ()))
            return buckets[bk]

        for tp in deletes:
            bk = _bucket(tp)
            if bk in buckets and tp in buckets[bk]:
                b = writable(bk)
                del b[tp]
                n -= 1
                if not b:
                    del buckets[bk]
                    copied.discard(bk)
        for tp, vp in puts.items():
            b = writable(_bucket(tp))
            n += tp not in b
            b[tp] = vp
        return PartitionMap(buckets, n)

    def changed_since(self, older: PartitionMap) -> Iterator[tuple[TopicPartition, VersionedPartition]]:
        """The partitions of this map in buckets not shared with ``older`` (a superset of those added or
        changed since it, when this map was made from it by :meth:`updated`)."""
        theirs = older._buckets
        for bk, b in self._buckets.items():
            if theirs.get(bk) is not b:
                yield from b.items()


def changed_since(older: Mapping[TopicPartition, VersionedPartition],
                  newer: Mapping[TopicPartition, VersionedPartition]
                  ) -> Iterable[tuple[TopicPartition, VersionedPartition]]:
    """Partitions of ``newer`` that may be added or changed since ``older``: the buckets they do not share when
    both are :class:`PartitionMap`\\ s, every partition otherwise (any other mapping)."""
    if isinstance(older, PartitionMap) and isinstance(newer, PartitionMap):
        return newer.changed_since(older)
    return newer.items()
