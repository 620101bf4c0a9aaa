"""Random leader and follower appends / reads / rolls / flushes / clean reopens / crashes with torn tails /
DeleteRecords / retention / truncations (to an offset, and fully) against an in-memory model of the log and of
its leader-epoch cache."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storage_helpers import append, batch

from oncelog.protocol.records import RecordBatchBuilder, decode_records, iter_batch_headers
from oncelog.storage import LogConfig, OffsetOutOfRangeError, PartitionLog
from oncelog.testing import MockClock

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=150, retention_ms=-1)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="oncelog-model-"))
        self.clock = MockClock()
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, self.clock, clean_shutdown=False)
        self.records: dict[int, bytes] = {}  # offset -> value
        self.batches: list[tuple[int, int]] = []  # (base, last offset) of every batch written and not removed
        self.epochs: list[tuple[int, int]] = []  # the leader-epoch cache: (epoch, start offset)
        self.epoch = 0  # the leader epoch of leader appends
        self.origin = 0  # where the log (re)started: its end when no batch is left
        self.lso = 0
        self.leo = 0
        self.tag = 0

    # ---------------------------------------------------------------- the epoch cache model (Kafka's rules)
    def assign_epoch(self, epoch: int, start: int) -> None:
        if self.epochs and self.epochs[-1][0] == epoch and self.epochs[-1][1] <= start:
            return
        while self.epochs and (self.epochs[-1][0] >= epoch or self.epochs[-1][1] >= start):
            self.epochs.pop()
        self.epochs.append((epoch, start))

    def epochs_from_end(self, end: int) -> None:
        self.epochs = [e for e in self.epochs if e[1] < end]

    def epochs_from_start(self, start: int) -> None:
        below = [e for e in self.epochs if e[1] <= start]
        if below:
            self.epochs = [(below[-1][0], start)] + [e for e in self.epochs if e[1] > start]

    def drop_from(self, end: int) -> None:
        """Forget what the log no longer has at or after ``end``."""
        for o in [o for o in self.records if o >= end]:
            del self.records[o]
        self.batches = [b for b in self.batches if b[0] < end]
        self.epochs_from_end(end)

    def teardown(self) -> None:
        self.log.close_without_flush()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=3),
          bump=st.integers(0, 1))
    def do_append(self, sizes: list[tuple[int, int]], bump: int) -> None:
        self.epoch += bump
        batches = []
        for n, vs in sizes:
            self.tag += 1
            batches.append(batch(n, value_size=vs, tag=self.tag, ts=1_700_000_000_000 + self.tag))
        res = append(self.log, *batches, leader_epoch=self.epoch)
        assert res.first_offset == self.leo
        self.assign_epoch(self.epoch, self.leo)
        for b in batches:
            for r in decode_records(b):
                self.records[self.leo + r.offset] = bytes(r.value or b"")
            last = self.leo + next(iter_batch_headers(b)).last_offset_delta
            self.batches.append((self.leo, last))
            self.leo = last + 1
        assert res.last_offset == self.leo - 1

    @rule(sizes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 1)), min_size=1,
                         max_size=3))
    def follower_append(self, sizes: list[tuple[int, int, int]]) -> None:
        """Batches whose offsets and epochs a leader assigned (gaps: its log was compacted)."""
        data = []
        base = self.leo
        epoch = self.epochs[-1][0] if self.epochs else 0
        expected = []
        for gap, n, bump in sizes:
            base += gap
            epoch += bump
            self.tag += 1
            b = RecordBatchBuilder(base_offset=base, partition_leader_epoch=epoch)
            for i in range(n):
                b.append(1_700_000_000_000 + self.tag, f"k{i}".encode(), f"{self.tag}:{i}:f".encode())
            data.append(b.build())
            expected.append((base, base + n - 1, epoch))
            base += n
        buf = bytearray(b"".join(data))
        res = self.log.append_as_follower(buf, list(iter_batch_headers(buf, check_crc=True)))
        assert (res.first_offset, res.last_offset) == (expected[0][0], expected[-1][1])
        for (first, last, epoch), raw in zip(expected, data):
            self.assign_epoch(epoch, first)
            for r in decode_records(raw):
                self.records[r.offset] = bytes(r.value or b"")
            self.batches.append((first, last))
        self.leo = expected[-1][1] + 1
        self.epoch = max(self.epoch, expected[-1][2])

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.lso, self.leo + 2))
        removed = self.log.truncate_to(offset)
        if offset >= self.leo:
            assert not removed
            self.epochs_from_end(self.leo)
            return
        assert removed
        kept = [b for b in self.batches if b[1] < offset]  # a batch straddling the offset goes whole
        new_end = kept[-1][1] + 1 if kept else self.origin  # the end a reload finds: after the last batch kept
        event("truncated a straddled batch" if any(b[0] < offset <= b[1] for b in self.batches)
              else "truncated at a batch boundary")
        self.drop_from(new_end)
        self.leo = new_end
        self.lso = min(self.lso, new_end)

    @rule(offset=st.integers(0, 400))
    def truncate_fully(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.records.clear()
        self.batches.clear()
        self.epochs.clear()
        self.lso = self.leo = self.origin = offset

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.leo

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        off = data.draw(st.integers(max(0, self.lso - 2), self.leo + 1))
        max_bytes = data.draw(st.integers(0, 2000))
        max_offset = data.draw(st.integers(off, self.leo + 2))
        if off < self.lso or off > self.leo:
            try:
                self.log.read(off, max_bytes, max_offset)
            except OffsetOutOfRangeError:
                return
            raise AssertionError(f"read({off}) outside {self.lso}..{self.leo} did not raise")
        res = self.log.read(off, max_bytes, max_offset)
        data_bytes = b"".join(bytes(r) for r in res.records)
        assert len(data_bytes) == res.size
        hs = list(iter_batch_headers(data_bytes, check_crc=True))
        if off >= min(self.leo, max_offset):
            assert not hs
            return
        if hs:
            assert hs[0].base_offset <= off <= hs[0].last_offset or hs[0].base_offset > off
            assert res.first_batch_offset == hs[0].base_offset
            assert len(hs) == 1 or res.size <= max_bytes
            assert all(h.last_offset < max_offset for h in hs)
            for h in hs:
                for r in decode_records(data_bytes, h.position):
                    assert self.records[r.offset] == bytes(r.value or b"")
        else:  # only when the first batch crosses max_offset
            first_h = next(iter_batch_headers(b"".join(bytes(x) for x in self.log.read(off, 1, 10**9).records)))
            assert first_h.last_offset >= max_offset

    def loaded(self) -> None:
        """What loading does to the epoch cache: entries past the log end or before its start go (Kafka's
        LogLoader; an entry at the log end is a leader's that has written nothing yet)."""
        self.epochs_from_end(self.leo)
        self.epochs_from_start(self.lso)

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, self.clock, clean_shutdown=True)
        self.loaded()

    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        durable = self.log.durable_offset
        active = self.log.active_segment
        # byte position in the active segment below which everything is durable
        keep = 0
        for h in active.scan(0, check_crc=False):
            if h.base_offset < durable:
                keep = h.position + h.size
        size = active.size
        path = active.log_path
        self.log.close_without_flush()
        cut = data.draw(st.integers(keep, size))
        garbage = data.draw(st.sampled_from([b"", b"\x00" * 50, os.urandom(70)]))
        with open(path, "r+b") as f:
            f.truncate(cut)
            f.seek(cut)
            f.write(garbage)
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, self.clock, clean_shutdown=False)
        new_end = self.log.log_end_offset
        event("crash lost unflushed records" if new_end < self.leo else "crash lost nothing")
        assert durable <= new_end <= self.leo
        self.drop_from(new_end)
        if new_end == self.lso and not self.log.size_in_bytes:  # restarted empty at its log start
            self.batches.clear()
            self.origin = new_end
        self.leo = new_end
        self.lso = min(self.lso, self.leo) if self.lso <= self.leo else self.lso
        assert self.log.durable_offset == self.leo
        self.loaded()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        off = data.draw(st.integers(0, self.leo))
        assert self.log.delete_records_before(off) == max(self.lso, off)
        self.lso = max(self.lso, off)
        self.leo = max(self.leo, self.lso)
        self.epochs_from_start(self.lso)

    @precondition(lambda self: self.leo > 0)
    @rule(limit=st.integers(0, 3000))
    def retention_bytes(self, limit: int) -> None:
        self.log.update_config(LogConfig(segment_bytes=CFG.segment_bytes, index_interval_bytes=150,
                                         retention_ms=-1, retention_bytes=limit))
        self.log.apply_retention(self.clock.wall_ms())
        self.log.update_config(CFG)
        assert self.log.log_start_offset >= self.lso
        self.lso = self.log.log_start_offset
        self.epochs_from_start(self.lso)

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.lso
        assert [(e.epoch, e.start_offset) for e in self.log.leader_epoch_cache.entries()] == self.epochs
        seen = []
        for h, b in self.log.iter_batches(self.lso):
            for r in decode_records(b):
                seen.append(r.offset)
                assert self.records[r.offset] == bytes(r.value or b"")
        expect = [o for o in sorted(self.records) if o < self.leo]
        # batches straddling the log start offset are served whole
        assert [o for o in seen if o >= self.lso] == [o for o in expect if o >= self.lso]


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
