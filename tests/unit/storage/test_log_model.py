"""Random appends / reads / rolls / flushes / clean reopens / crashes with torn tails / DeleteRecords / retention
against an in-memory model of the log."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storage_helpers import append, batch

from oncelog.protocol.records import decode_records, iter_batch_headers
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
        self.lso = 0
        self.leo = 0
        self.tag = 0

    def teardown(self) -> None:
        self.log.close_without_flush()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=3))
    def do_append(self, sizes: list[tuple[int, int]]) -> None:
        batches = []
        for n, vs in sizes:
            self.tag += 1
            batches.append(batch(n, value_size=vs, tag=self.tag, ts=1_700_000_000_000 + self.tag))
        res = append(self.log, *batches)
        assert res.first_offset == self.leo
        for b in batches:
            for r in decode_records(b):
                self.records[self.leo + r.offset] = bytes(r.value or b"")
            self.leo += next(iter_batch_headers(b)).last_offset_delta + 1
        assert res.last_offset == self.leo - 1

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

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.root / "t-0", "t", 0, CFG, self.clock, clean_shutdown=True)

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
        for o in range(new_end, self.leo):
            self.records.pop(o, None)
        self.leo = new_end
        self.lso = min(self.lso, self.leo) if self.lso <= self.leo else self.lso
        assert self.log.durable_offset == self.leo

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        off = data.draw(st.integers(0, self.leo))
        assert self.log.delete_records_before(off) == max(self.lso, off)
        self.lso = max(self.lso, off)
        self.leo = max(self.leo, self.lso)

    @precondition(lambda self: self.leo > 0)
    @rule(limit=st.integers(0, 3000))
    def retention_bytes(self, limit: int) -> None:
        self.log.update_config(LogConfig(segment_bytes=CFG.segment_bytes, index_interval_bytes=150,
                                         retention_ms=-1, retention_bytes=limit))
        self.log.apply_retention(self.clock.wall_ms())
        self.log.update_config(CFG)
        assert self.log.log_start_offset >= self.lso
        self.lso = self.log.log_start_offset

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.lso
        seen = []
        for h, b in self.log.iter_batches(self.lso):
            for r in decode_records(b):
                seen.append(r.offset)
                assert self.records[r.offset] == bytes(r.value or b"")
        expect = [o for o in sorted(self.records) if o < self.leo]
        # batches straddling the log start offset are served whole
        assert [o for o in seen if o >= self.lso] == [o for o in expect if o >= self.lso]


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
