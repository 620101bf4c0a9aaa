"""Opening a partition log: find its segments, recover what a crash left, rebuild what is missing (Kafka's
``LogLoader``).

``partition.checkpoint`` (JSON, replaced atomically) keeps the log start offset and the recovery point: every
segment whose base offset is below the recovery point is complete on disk with its indexes (it was fsynced after
becoming inactive). After an unclean shutdown only segments at or above the recovery point are scanned (batch
structure + CRC32C) and truncated at the first bad batch; later segments are then dropped. Index files without a
segment, ``.tmp`` leftovers and interrupted cleaner swaps (``.cleaned`` / ``.swap`` / ``.deleted``) are finished
or rolled back first (Kafka's ``removeTempFilesAndCollectSwapFiles`` / ``completeSwapOperations``).

Producer state: the newest valid snapshot (``<offset>.snapshot``) at or below the first segment that needs
rebuilding is loaded and the batches after it are replayed (headers only; markers are decoded) with replication
semantics, rebuilding the ``.txnindex`` of every recovered segment and of every segment whose ``.txnindex`` is
missing or corrupt (:func:`rebuild_producer_state`, also what a truncation runs, as Kafka's
``rebuildProducerState``). Everything recovery keeps is fsynced before the log is served, so the durable offset
of a loaded log is its end.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from oncelog.clock import Clock
from oncelog.protocol.records import (
    ATTR_CONTROL,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    parse_control_record,
)

from .config import LogConfig
from .errors import ProducerStateError
from .files import TMP_SUFFIX, fsync_dir
from .leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache, LeaderEpochCheckpointError
from .local_log import create_segment, open_segment, trace_fsync
from .producer_state import ORIGIN_REPLICATION, ProducerStateManager
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    Segment,
    parse_segment_base,
    segment_file_name,
)
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex, TxnIndexCorruptError

__all__ = ["CHECKPOINT_FILE", "LoadedLog", "LogLoader", "encode_checkpoint", "rebuild_producer_state",
           "recover_cleaner_files"]

log = logging.getLogger("oncelog.storage")

CHECKPOINT_FILE = "partition.checkpoint"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXN_INDEX_SUFFIX)


def encode_checkpoint(log_start_offset: int, recovery_point: int) -> bytes:
    """The content of ``partition.checkpoint``."""
    return json.dumps({"version": 1, "log_start_offset": log_start_offset, "recovery_point": recovery_point}).encode()


def read_checkpoint(directory: Path, name: str) -> tuple[int, int] | None:
    """(log start offset, recovery point) from ``partition.checkpoint``; None if missing or unreadable."""
    p = directory / CHECKPOINT_FILE
    try:
        data = json.loads(p.read_text())
        return int(data["log_start_offset"]), int(data["recovery_point"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s: unreadable %s (%s); recovering every segment", name, p, e)
        return None


@dataclass(slots=True)
class LoadedLog:
    segments: list[Segment]
    log_start_offset: int
    recovery_point: int
    checkpoint: tuple[int, int] | None  # what partition.checkpoint held
    replayed: bool  # producer state was replayed from the log: a new snapshot saves the next open that work
    epochs: LeaderEpochCache
    #: a new log whose folder and files were created without fsync (``load(defer_sync=True)``): the log's first
    #: flush makes them durable
    unsynced: bool = False


class LogLoader:
    def __init__(self, directory: Path, name: str, config: LogConfig, clock: Clock, psm: ProducerStateManager) -> None:
        self.directory = directory
        self.name = name
        self.config = config
        self.clock = clock
        self.psm = psm
        self._opened: list[Segment] = []

    def load(self, clean_shutdown: bool, defer_sync: bool = False) -> LoadedLog:
        """Load (and after an unclean shutdown recover) the log; on failure every file it opened is closed.
        ``defer_sync``: a log created here (its folder did not exist) is created without fsync, for its first
        flush to make durable; a new topic's thousands of partitions cost no fsyncs up front (a power cut before
        that flush leaves an empty partition, or none: it is created again, empty, at the next start)."""
        self._opened = []
        try:
            return self._load(clean_shutdown, defer_sync)
        except BaseException:
            for s in self._opened:
                try:
                    s.close()
                except OSError:  # pragma: no cover - closing after a failed open
                    pass
            raise

    def _create(self, base: int) -> Segment:
        seg = create_segment(self.directory, base, self.config, self.clock.wall_ms())
        self._opened.append(seg)
        return seg

    def _load(self, clean_shutdown: bool, defer_sync: bool) -> LoadedLog:
        d = self.directory
        created = not d.exists()
        unsynced = created and defer_sync
        d.mkdir(parents=True, exist_ok=True)
        if created and not unsynced:
            fsync_dir(d.parent)
        else:
            recover_cleaner_files(d)  # finish or roll back a cleaner swap interrupted by a crash
        checkpoint = read_checkpoint(d, self.name)
        lso, rp = checkpoint if checkpoint is not None else (0, 0)
        dir_dirty = False
        segments, recovered = self._load_segments(self._segment_bases(), clean_shutdown, rp)
        if not segments:
            segments.append(self._create(max(lso, 0)))
            dir_dirty = True
        leo = segments[-1].next_offset
        if lso > leo:
            log.warning("%s: log start offset %d is beyond the recovered log end %d; starting an empty log at %d",
                        self.name, lso, leo, lso)
            for s in segments:
                s.delete()
            segments = [self._create(lso)]
            recovered = []
            leo = lso
        lso = max(lso, segments[0].base_offset)
        rebuild = {s.base_offset for s in recovered}
        for s in segments:
            if TXN_INDEX_SUFFIX not in s.companions:
                self._attach_txn_index(s, rebuild)
        replayed = rebuild_producer_state(self.name, self.psm, segments, lso, rebuild)
        epochs = self._load_epochs(segments, recovered, lso, durable=not unsynced)
        for s in recovered:  # what recovery kept is now made durable, so durable_offset = log end is true
            os.fdatasync(s.fd)
            s.flush_indexes()
            s.close_index_files()
        trace_fsync(recovered)
        for s in segments:
            if s.base_offset in rebuild:
                for c in s.companions.values():
                    c.flush()
        if (recovered or rebuild or dir_dirty) and not unsynced:
            fsync_dir(d)
        # never past the active segment's base: it is scanned after every unclean shutdown anyway
        return LoadedLog(segments, lso, segments[-1].base_offset, checkpoint, replayed, epochs, unsynced)

    def _segment_bases(self) -> list[int]:
        """Base offsets of the ``.log`` files; deletes ``.tmp`` leftovers and index files without a segment."""
        d = self.directory
        bases: list[int] = []
        for p in d.iterdir():
            if p.name.endswith(TMP_SUFFIX):
                p.unlink(missing_ok=True)
                continue
            base = parse_segment_base(p.name)
            if base is not None and p.name.endswith(LOG_SUFFIX):
                bases.append(base)
        bases.sort()
        base_set = set(bases)
        for p in d.iterdir():  # index files whose segment is gone
            base = parse_segment_base(p.name)
            if base is not None and base not in base_set and p.suffix in INDEX_SUFFIXES:
                p.unlink(missing_ok=True)
        return bases

    def _load_segments(self, bases: list[int], clean_shutdown: bool, rp: int) -> tuple[list[Segment], list[Segment]]:
        """(segments kept, segments scanned and recovered); everything after a torn or corrupt batch is deleted."""
        d = self.directory
        segments: list[Segment] = []
        recovered: list[Segment] = []
        now = self.clock.wall_ms()
        for i, base in enumerate(bases):
            seg = open_segment(d, base, self.config, now)
            self._opened.append(seg)
            segments.append(seg)
            last = i == len(bases) - 1
            needs_scan = not clean_shutdown and (base >= rp or last)
            if not needs_scan and seg.load_indexes():
                continue
            size_before = seg.size
            truncated, next_off = seg.recover(check_crc=True)
            recovered.append(seg)
            if truncated:
                log.warning(
                    "recovered %s: truncated segment %s at offset %d, dropping %d of %d bytes (torn or corrupt tail)",
                    self.name, seg.log_path.name, next_off, truncated, size_before,
                )
                rest = bases[i + 1:]
                if rest:
                    dropped = sum((d / segment_file_name(b, LOG_SUFFIX)).stat().st_size for b in rest)
                    log.warning("recovered %s: deleting %d later segment(s) from offset %d (%d bytes)",
                                self.name, len(rest), rest[0], dropped)
                    for b in rest:
                        s = Segment(d, b, index_interval_bytes=1, segment_index_bytes=8, created_ms=now,
                                    new_file=False)
                        s.delete()
                        (d / segment_file_name(b, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)
                break
        return segments, recovered

    def _load_epochs(self, segments: list[Segment], recovered: list[Segment], log_start: int, *,
                     durable: bool = True) -> LeaderEpochCache:
        """The leader-epoch cache: the checkpoint file, plus the epochs of recovered segments' batches (Kafka's
        LogSegment.recover; only batches at or after the log start); rebuilt from every batch header when the
        file is missing or unusable (a log written before leader epochs were kept: a one-time scan). Then
        truncated to the log's end and start: the file may be stale after a crash, as in Kafka's LogLoader."""
        path = self.directory / LEADER_EPOCH_CHECKPOINT
        try:
            epochs, scan, rebuilt = LeaderEpochCache.load(path, self.name), recovered, False
        except FileNotFoundError:
            epochs, scan, rebuilt = LeaderEpochCache(path, self.name), segments, True
            if segments[-1].next_offset > segments[0].base_offset:
                log.info("%s: %s is missing; rebuilding it from the batch headers", self.name, path.name)
        except (LeaderEpochCheckpointError, OSError) as e:
            log.warning("%s: rebuilding unusable leader epoch checkpoint from the batch headers: %s", self.name, e)
            epochs, scan, rebuilt = LeaderEpochCache(path, self.name), segments, True
        found: list[EpochEntry] = []
        latest = epochs.latest_epoch
        for seg in scan:
            if seg.next_offset <= log_start:
                continue
            for h in seg.scan(0, check_crc=False):
                epoch = h.partition_leader_epoch
                if epoch >= 0 and h.last_offset >= log_start and (latest is None or epoch > latest):
                    found.append(EpochEntry(epoch, max(h.base_offset, log_start)))
                    latest = epoch
        epochs.assign_all(found, persist=rebuilt, durable=durable)
        epochs.truncate_from_end(segments[-1].next_offset)
        epochs.truncate_from_start(log_start)
        return epochs

    def _attach_txn_index(self, seg: Segment, rebuild: set[int]) -> None:
        """Load the segment's .txnindex, or create an empty one and mark the segment for rebuilding."""
        path = self.directory / segment_file_name(seg.base_offset, TXN_INDEX_SUFFIX)
        if seg.base_offset not in rebuild:
            try:
                idx = TransactionIndex.load(path, seg.base_offset)
                if idx.entries and idx.entries[-1].last_offset >= seg.next_offset:
                    raise TxnIndexCorruptError(f"{path}: entries beyond the segment end {seg.next_offset}")
                seg.companions[TXN_INDEX_SUFFIX] = idx
                return
            except FileNotFoundError:
                log.info("%s: %s is missing; rebuilding it from the log", self.name, path.name)
            except (TxnIndexCorruptError, OSError) as e:
                log.warning("%s: rebuilding unusable transaction index: %s", self.name, e)
            rebuild.add(seg.base_offset)
        seg.companions[TXN_INDEX_SUFFIX] = TransactionIndex.create(path, seg.base_offset)


# ==================================================================== producer state: snapshot + replay
def rebuild_producer_state(name: str, psm: ProducerStateManager, segments: list[Segment], log_start: int,
                           rebuild: set[int]) -> bool:
    """Load the newest snapshot at or below the first segment in ``rebuild`` (and the log end) and replay the
    batches after it; the ``.txnindex`` of the segments in ``rebuild`` is rebuilt from the replayed markers.
    Snapshots above the log end or below the log start are deleted first. True if it replayed."""
    leo = segments[-1].next_offset
    psm.delete_snapshots(above=leo, below=log_start)
    target = min(min(rebuild, default=leo), leo)
    snap = psm.load_latest_snapshot(target)
    start = log_start if snap is None else snap
    if start >= leo:
        psm.on_log_start_offset(log_start)
        return False
    n = 0
    for seg in segments:
        if seg.next_offset <= start:
            continue
        idx = seg.companions[TXN_INDEX_SUFFIX] if seg.base_offset in rebuild else None
        if idx is not None:
            assert isinstance(idx, TransactionIndex)
            idx.truncate_to(start)
        pos = seg.find_position(start) if start > seg.base_offset else 0
        for h in seg.scan(pos, check_crc=False):
            if h.producer_id < 0 or h.last_offset < start:
                continue
            _replay_batch(name, psm, seg, h, idx)
            n += 1
    psm.on_log_start_offset(log_start)
    log.info("%s: producer state loaded from %s and %d batch(es) replayed from offset %d: %d producer(s), "
             "%d ongoing transaction(s)", name, "no snapshot" if snap is None else f"snapshot {snap}",
             n, start, len(psm.producers), len(psm.ongoing))
    return True


def _replay_batch(name: str, psm: ProducerStateManager, seg: Segment, h: BatchHeader,
                  idx: TransactionIndex | None) -> None:
    info = psm.prepare_update(h.producer_id, ORIGIN_REPLICATION)
    try:
        if h.attributes & ATTR_CONTROL:
            if not h.records_count:  # emptied by the cleaner: its transaction is gone from the log
                return
            marker = parse_control_record(seg.pread(h.position, h.size))
            if not marker.is_known:
                return
            txn = info.append_end_txn_marker(marker.commit, marker.coordinator_epoch, h.producer_epoch,
                                             h.base_offset, h.max_timestamp)
            psm.update(info)
            if txn is not None:
                if txn.is_aborted and idx is not None:
                    idx.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                          psm.last_stable_offset(txn)))
                psm.complete_txn(txn)
        else:
            info.append_data_batch(h.producer_epoch, h.base_sequence, h.last_sequence, h.max_timestamp,
                                   h.base_offset, h.last_offset, h.is_transactional)
            psm.update(info)
    except (ProducerStateError, CorruptRecordError, ValueError) as e:  # pragma: no cover - validated on append
        log.warning("%s: skipping batch at offset %d while rebuilding producer state: %s", name, h.base_offset, e)


# ==================================================================== interrupted cleaner swaps
def _swap_next_offset(path: Path) -> int | None:
    """Next offset after the last whole batch of a .swap log (headers only); None if it holds no batch."""
    nxt = None
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos + BATCH_HEADER_SIZE <= size:
            hdr = os.pread(fd, BATCH_HEADER_SIZE, pos)
            length = int.from_bytes(hdr[8:12], "big", signed=True)
            if len(hdr) < BATCH_HEADER_SIZE or length < BATCH_HEADER_SIZE - LOG_OVERHEAD or \
                    pos + length + LOG_OVERHEAD > size:
                break
            nxt = int.from_bytes(hdr[0:8], "big", signed=True) + int.from_bytes(hdr[23:27], "big", signed=True) + 1
            pos += length + LOG_OVERHEAD
    finally:
        os.close(fd)
    return nxt


def recover_cleaner_files(directory: Path) -> bool:
    """Finish or roll back cleaner swaps interrupted by a crash (see cleaner.py); True if anything was changed.

    ``<base>.log.swap``: the cleaned segment was committed. Every old ``.log`` whose base lies in its offset range is
    removed with its indexes; its ``.cleaned`` indexes (complete: fsynced before the commit) replace the final ones,
    otherwise final index files of ``base`` are the new ones already (renamed before the crash). Then ``.deleted``
    and left-over ``.cleaned`` files are removed and the swap gets its final name.
    """
    try:
        names = [p.name for p in directory.iterdir()]
    except FileNotFoundError:
        return False
    changed = False
    for name in sorted(names):
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        base = parse_segment_base(name)
        if base is None:
            continue
        swap = directory / name
        nxt = _swap_next_offset(swap)
        end = max(nxt if nxt is not None else base, base + 1)
        for other in names:
            ob = parse_segment_base(other)
            if ob is not None and other.endswith(LOG_SUFFIX) and base <= ob < end:
                (directory / other).unlink(missing_ok=True)
                for suf in INDEX_SUFFIXES:
                    if ob != base or (directory / segment_file_name(base, suf + CLEANED_SUFFIX)).exists():
                        (directory / segment_file_name(ob, suf)).unlink(missing_ok=True)
        for suf in INDEX_SUFFIXES:
            cleaned = directory / segment_file_name(base, suf + CLEANED_SUFFIX)
            if cleaned.exists():
                os.replace(cleaned, directory / segment_file_name(base, suf))
        os.replace(swap, directory / segment_file_name(base, LOG_SUFFIX))
        log.warning("%s: completed an interrupted cleaner swap of the segment at offset %d (up to offset %s)",
                    directory.name, base, nxt)
        changed = True
    for p in directory.iterdir():
        if p.name.endswith(DELETED_SUFFIX) or p.name.endswith(CLEANED_SUFFIX) or p.name.endswith(SWAP_SUFFIX):
            p.unlink(missing_ok=True)
            changed = True
    if changed:
        fsync_dir(directory)
    return changed
