"""The leader-epoch cache of one partition and its ``leader-epoch-checkpoint`` file (Kafka's
``LeaderEpochFileCache`` and ``LeaderEpochCheckpointFile``, KIP-101 / KIP-279).

Entries (epoch, start offset): the first offset written by the leader of each epoch, both strictly increasing.
Every batch appended carries the epoch of the leader that wrote it (``partitionLeaderEpoch``); an append whose
batch carries a newer epoch adds an entry (leader and follower alike), and a leader records its epoch at its log
end as it takes over. A follower asks the leader for the end offset of its latest epoch (OffsetForLeaderEpoch,
answered by :meth:`LeaderEpochCache.end_offset_for`) and truncates its log there, so it never keeps a divergent
tail (KIP-101), even after several leader changes in a row (KIP-279).

The file is Kafka's text format, replaced atomically and durably on every change (``write_atomic``), except an
epoch a new leader records at its log end, which is written at the log's next flush (see :meth:`LeaderEpochCache.
assign`)::

    0                 version
    2                 number of entries
    0 0               epoch start_offset
    3 1200

Entries may be stale after a crash (a truncation of the log not yet reflected, or the reverse): loading the log
truncates the cache to the log's start and end (loader.py); a missing or unreadable file is rebuilt from the
batch headers.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

from .files import write_atomic

__all__ = ["LEADER_EPOCH_CHECKPOINT", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochCache",
           "LeaderEpochCheckpointError"]

log = logging.getLogger("oncelog.storage")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class LeaderEpochCheckpointError(ValueError):
    """The leader-epoch-checkpoint file does not parse; the loader rebuilds it from the log."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition, persisted to ``path`` on every change.

    Not thread-safe by itself: the owning PartitionLog calls it under its lock.
    """

    def __init__(self, path: Path, name: str, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self.name = name
        self._epochs: list[int] = []
        self._starts: list[int] = []
        #: the newest epoch with an entry, None if none (read-only outside: a plain attribute, read on appends)
        self.latest_epoch: int | None = None
        self._stale = False  # the file is not yet written, or not fsynced, with the latest entries (``durable=False``)
        for e in entries or ():
            self._assign(e.epoch, e.start_offset)

    # ---------------------------------------------------------------- file
    @classmethod
    def load(cls, path: Path, name: str) -> LeaderEpochCache:
        """The cache as the file holds it. Raises FileNotFoundError or LeaderEpochCheckpointError."""
        lines = path.read_text().split("\n")
        try:
            version, count = int(lines[0]), int(lines[1])
            if version != _VERSION:
                raise LeaderEpochCheckpointError(f"{path}: unknown version {version}")
            entries = []
            for line in lines[2:2 + count]:
                epoch, start = line.split()
                entries.append(EpochEntry(int(epoch), int(start)))
        except (ValueError, IndexError) as e:
            raise LeaderEpochCheckpointError(f"{path}: malformed ({e})") from e
        if len(entries) != count or any(line.strip() for line in lines[2 + count:]):
            raise LeaderEpochCheckpointError(f"{path}: expected {count} entries")
        for a, b in zip(entries, entries[1:]):
            if a.epoch < 0 or b.epoch <= a.epoch or b.start_offset <= a.start_offset:
                raise LeaderEpochCheckpointError(f"{path}: entries {a} and {b} are not increasing")
        return cls(path, name, entries)

    def _write(self, durable: bool = True) -> None:
        lines = [str(_VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts)]
        write_atomic(self.path, ("\n".join(lines) + "\n").encode(), durable=durable)
        self._stale = not durable

    def sync(self) -> None:
        """Write the entries assigned with ``durable=False`` and make the file durable (the log does it before its
        recovery point moves on)."""
        if self._stale:
            self._write()

    # ---------------------------------------------------------------- reads
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts)]

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._starts[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._starts[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the leader that wrote ``offset`` (the entry with the largest start offset <= it)."""
        i = bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, exactly as Kafka's LeaderEpochFileCache.endOffsetFor:

        * UNDEFINED_EPOCH requested: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        * the latest epoch: (it, ``log_end_offset``) (the epoch still being written to);
        * otherwise the largest epoch <= the requested one and the start offset of the first epoch above it;
          (requested, start of the first epoch above it) when every known epoch is above it;
          (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when every known epoch is below it (or none is known).
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epochs = self._epochs
        if epochs and epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return epochs[higher - 1], self._starts[higher]

    def __len__(self) -> int:
        return len(self._epochs)

    # ---------------------------------------------------------------- changes (each persisted)
    def assign(self, epoch: int, start_offset: int, *, durable: bool = True) -> bool:
        """Record that the leader of ``epoch`` wrote from ``start_offset`` on (Kafka's assign): a no-op if
        ``epoch`` is the latest and starts at or before ``start_offset``; otherwise entries with an epoch >=
        ``epoch`` or a start >= ``start_offset`` are dropped first (they conflict), and the file is rewritten.
        ``durable=False``: the file is written (and fsynced) at the next :meth:`sync`, which the log calls before
        anything written after the entry counts as flushed: an entry no record is durable under yet may be lost in
        a crash or a power cut, and recovery reads the epochs of the batches past the recovery point back from
        their headers (a broker taking over thousands of leaderships at once writes no file for each). True if
        the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset}) for {self.name}")
        if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
            return False
        self._assign(epoch, start_offset)
        if durable:
            self._write()
        else:
            self._stale = True
        return True

    def assign_all(self, entries: list[EpochEntry], *, persist: bool = False, durable: bool = True) -> bool:
        """Assign each entry in order and rewrite the file once if anything changed (or ``persist``)."""
        changed = False
        for e in entries:
            if e.epoch < 0 or e.start_offset < 0:
                raise ValueError(f"invalid leader epoch entry ({e.epoch}, {e.start_offset}) for {self.name}")
            if not (self._epochs and self._epochs[-1] == e.epoch and self._starts[-1] <= e.start_offset):
                self._assign(e.epoch, e.start_offset)
                changed = True
        if changed or persist:
            self._write(durable)
        return changed

    def _assign(self, epoch: int, start_offset: int) -> None:
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            removed.append(EpochEntry(self._epochs.pop(), self._starts.pop()))
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning("%s: leader epoch entry (%d, %d) replaced conflicting entries %s", self.name, epoch,
                        start_offset, removed[::-1])
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self.latest_epoch = epoch

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated there). True if changed."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        n = bisect_left(self._starts, end_offset)
        del self._epochs[n:], self._starts[n:]
        self.latest_epoch = self._epochs[-1] if self._epochs else None
        self._write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: entries starting at or before it are dropped, the latest of them
        kept as (its epoch, ``start_offset``). True if changed."""
        n = bisect_right(self._starts, start_offset)
        if n == 0 or (n == 1 and self._starts[0] == start_offset):
            return False
        epoch = self._epochs[n - 1]
        del self._epochs[:n], self._starts[:n]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        self._write()
        return True

    def clear(self) -> None:
        """Drop every entry (the log was emptied)."""
        self._epochs.clear()
        self._starts.clear()
        self.latest_epoch = None
        self._write()

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.name}, {list(zip(self._epochs, self._starts))})"
