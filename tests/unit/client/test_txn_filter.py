"""The read_committed filter (client/consumer/txn_filter.py) on real record batches run through the fetcher's
decode path: three interleaved producers' aborted transactions, edge cases, and random interleavings checked
against a model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.consumer.fetcher import decode_fetched, make_batch_filter
from oncelog.client.consumer.txn_filter import AbortedTransactionFilter
from oncelog.protocol.records import RecordBatchBuilder, build_control_batch, parse_batch_header

READ_COMMITTED, READ_UNCOMMITTED = 1, 0


@dataclass
class Batch:
    """A batch in a test log: data (``records`` values) or a marker (``commit`` True/False)."""

    pid: int  # -1: not transactional, not idempotent
    records: list[bytes]
    commit: bool | None = None  # None: data batch

    def encode(self, base_offset: int) -> bytes:
        if self.commit is not None:
            return build_control_batch(producer_id=self.pid, producer_epoch=0, commit=self.commit,
                                       coordinator_epoch=0, timestamp_ms=1, base_offset=base_offset)
        b = RecordBatchBuilder(producer_id=self.pid, producer_epoch=0 if self.pid >= 0 else -1,
                               base_sequence=0 if self.pid >= 0 else -1, is_transactional=self.pid >= 0,
                               base_offset=base_offset)
        for v in self.records:
            b.append(1, None, v)
        return b.build()

    @property
    def size(self) -> int:
        return 1 if self.commit is not None else len(self.records)


def layout(batches: list[Batch], start: int = 0) -> tuple[bytes, list[int]]:
    """The log's bytes and each batch's base offset."""
    blob, bases, offset = bytearray(), [], start
    for b in batches:
        bases.append(offset)
        blob += b.encode(offset)
        offset += b.size
    return bytes(blob), bases


def consume(blob: bytes, fetch_offset: int, aborted: list[tuple[int, int]], level: int = READ_COMMITTED
            ) -> list[bytes]:
    msgs, _ = decode_fetched("t", 0, blob, fetch_offset, make_batch_filter(level, aborted))
    return [m.value() for m in msgs if m.value() is not None]


# --------------------------------------------------------------------------- three interleaved transactions
# Records 100..115 with their producers (absent: not transactional):
# pid 10 wrote 101, 102, 115; pid 11 wrote 103, 106, 110, 112; pid 12 wrote 104, 107, 108, 111.
PIDS = {101: 10, 102: 10, 115: 10, 103: 11, 106: 11, 110: 11, 112: 11, 104: 12, 107: 12, 108: 12, 111: 12}


def interleaved_log(aborted: list[tuple[int, int, int]]) -> tuple[bytes, list[tuple[int, int]]]:
    """Each record is a one-record batch at offset 2*o (value = str(o)); an aborted (pid, start, end) gets its
    ABORT marker at 2*end+1, other transactions commit at the end."""
    aborted_end = {end: pid for pid, _, end in aborted}
    batches: list[Batch] = []
    offsets: list[int] = []
    for o in range(100, 116):
        batches.append(Batch(PIDS.get(o, -1), [str(o).encode()]))
        offsets.append(2 * o)
        if o in aborted_end:
            batches.append(Batch(aborted_end[o], [], commit=False))
            offsets.append(2 * o + 1)
    for pid in sorted({p for p in PIDS.values()} - {p for p, _, _ in aborted}):
        batches.append(Batch(pid, [], commit=True))
        offsets.append(offsets[-1] + 1)
    blob = b"".join(b.encode(off) for b, off in zip(batches, offsets, strict=True))
    return blob, [(pid, 2 * start) for pid, start, _ in aborted]


def expand(spec: str) -> list[bytes]:
    out: list[bytes] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        out.extend(str(o).encode() for o in range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.parametrize(("aborted", "valid"), [
    ([], "100-115"),
    ([(10, 101, 115)], "100, 103-114"),
    ([(11, 110, 112)], "100-109, 111, 113-115"),
    ([(10, 101, 115), (11, 103, 106), (12, 104, 111)], "100, 105, 109, 110, 112, 113, 114"),
], ids=["none-aborted", "pid10-aborted", "pid11-late-txn-aborted", "three-aborted"])
def test_interleaved_aborted_transactions(aborted: list[tuple[int, int, int]], valid: str) -> None:
    blob, aborted_txns = interleaved_log(aborted)
    assert consume(blob, 200, aborted_txns) == expand(valid)
    assert consume(blob, 200, aborted_txns, READ_UNCOMMITTED) == expand("100-115")


def test_aborted_list_order_does_not_matter_and_pairs_are_accepted() -> None:
    blob, aborted_txns = interleaved_log([(10, 101, 115), (11, 103, 106), (12, 104, 111)])
    assert consume(blob, 200, list(reversed(aborted_txns))) == expand("100, 105, 109, 110, 112, 113, 114")


def test_control_batches_are_never_returned_and_unrelated_markers_are_harmless() -> None:
    log = [Batch(7, [b"a"]), Batch(7, [], commit=True), Batch(-1, [b"b"]), Batch(8, [], commit=False)]
    blob, _ = layout(log)
    assert consume(blob, 0, []) == [b"a", b"b"]
    f = AbortedTransactionFilter(None)
    headers = []
    pos = 0
    while pos < len(blob):
        h = parse_batch_header(blob, pos)
        headers.append(h)
        pos += h.size
    assert [f.accept(h) for h in headers] == [True, False, True, False]


def test_same_producer_aborts_then_commits() -> None:
    log = [Batch(5, [b"x1", b"x2"]), Batch(6, [b"other"]), Batch(5, [], commit=False), Batch(5, [b"y"]),
           Batch(5, [], commit=True), Batch(6, [], commit=True)]
    blob, bases = layout(log)
    assert consume(blob, 0, [(5, bases[0])]) == [b"other", b"y"]
    assert consume(blob, 0, [(5, bases[0])], READ_UNCOMMITTED) == [b"x1", b"x2", b"other", b"y"]


def test_commit_marker_type_given_keeps_the_producer_aborted() -> None:
    blob, _ = layout([Batch(3, [b"z"]), Batch(3, [], commit=True)])
    f = AbortedTransactionFilter([(3, 0)])
    h0 = parse_batch_header(blob, 0)
    h1 = parse_batch_header(blob, h0.size)
    assert f.accept(h0) is False
    assert f.accept(h1, marker_is_abort=False) is False and 3 in f.aborted_producer_ids
    assert f.accept(h1, marker_is_abort=True) is False and 3 not in f.aborted_producer_ids


# ------------------------------------------------------------------------ random interleavings vs a model


@st.composite
def txn_logs(draw: st.DrawFn) -> tuple[list[Batch], set[int]]:
    """A log where producers 1..4 run transactions one at a time each (interleaved with each other and with
    non-transactional batches), every transaction ending in COMMIT or ABORT; returns it and the indices of
    batches whose records a read_committed consumer must see."""
    n_steps = draw(st.integers(1, 40))
    open_txn: dict[int, list[int]] = {}  # pid -> indices of its data batches in the open transaction
    log: list[Batch] = []
    visible: set[int] = set()
    counter = 0

    def values(n: int) -> list[bytes]:
        nonlocal counter
        counter += n
        return [f"v{counter - n + i}".encode() for i in range(n)]

    def end(pid: int, commit: bool) -> None:
        if commit:
            visible.update(open_txn[pid])
        log.append(Batch(pid, [], commit=commit))
        del open_txn[pid]

    for _ in range(n_steps):
        kind = draw(st.sampled_from(["plain", "data", "data", "end"]))
        pid = draw(st.integers(1, 4))
        if kind == "plain":
            visible.add(len(log))
            log.append(Batch(-1, values(draw(st.integers(1, 3)))))
        elif kind == "data":
            open_txn.setdefault(pid, []).append(len(log))
            log.append(Batch(pid, values(draw(st.integers(1, 3)))))
        elif pid in open_txn:
            end(pid, draw(st.booleans()))
    for pid in sorted(open_txn):
        end(pid, draw(st.booleans()))
    if not log:
        visible.add(0)
        log.append(Batch(-1, values(1)))
    return log, visible


def aborted_txns_of(log: list[Batch], bases: list[int]) -> list[tuple[int, int, int]]:
    """(pid, first offset, marker offset) of every aborted transaction, as the broker's txn index holds them."""
    first: dict[int, int] = {}
    out = []
    for b, base in zip(log, bases, strict=True):
        if b.commit is None and b.pid >= 0:
            first.setdefault(b.pid, base)
        elif b.commit is not None:
            if not b.commit:
                out.append((b.pid, first[b.pid], base))
            first.pop(b.pid, None)
    return out


@settings(max_examples=300, deadline=None)
@given(txn_logs(), st.data())
def test_random_interleavings_match_the_model(case: tuple[list[Batch], set[int]], data: st.DataObject) -> None:
    log, visible = case
    blob, bases = layout(log, start=data.draw(st.integers(0, 1000)))
    expected = [v for i, b in enumerate(log) if i in visible for v in b.records]
    txns = aborted_txns_of(log, bases)
    # whole log in one fetch, with the broker's full aborted list
    assert consume(blob, bases[0], [(p, f) for p, f, _ in txns]) == expected
    # the same log fetched in pieces: each response carries only the aborted transactions overlapping its
    # range (Kafka's collectAbortedTxns: lastOffset >= fetchOffset and firstOffset < upper bound)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(log)), max_size=4)) + [len(log)]))
    got: list[bytes] = []
    lo = 0
    for hi in cuts:
        if hi <= lo:
            continue
        piece = b"".join(b.encode(base) for b, base in zip(log[lo:hi], bases[lo:hi], strict=True))
        start, upper = bases[lo], bases[hi - 1] + log[hi - 1].size
        overlapping = [(p, f) for p, f, last in txns if last >= start and f < upper]
        got += consume(piece, start, overlapping)
        lo = hi
    assert got == expected
