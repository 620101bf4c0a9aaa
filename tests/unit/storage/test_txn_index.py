"""TransactionIndex / AbortedTxn: Kafka's file format and collectAbortedTxns semantics."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from oncelog.storage import AbortedTxn, TransactionIndex
from oncelog.storage.txn_index import ABORTED_TXN_SIZE, TxnIndexCorruptError

KAFKA_EXAMPLE = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
                 AbortedTxn(3, 32, 50, 40)]


def collect(idx: TransactionIndex, fetch: int, upper: int) -> tuple[list[AbortedTxn], bool]:
    out: list[AbortedTxn] = []
    complete = idx.collect(fetch, upper, out)
    return out, complete


def make(tmp_path: Path, entries: list[AbortedTxn]) -> TransactionIndex:
    idx = TransactionIndex.create(tmp_path / "00000000000000000000.txnindex", 0)
    for e in entries:
        idx.append(e)
    return idx


def test_entry_layout_is_kafkas() -> None:
    txn = AbortedTxn(983493, 137, 299, 200)
    raw = txn.to_bytes()
    assert len(raw) == ABORTED_TXN_SIZE == 34
    assert raw == struct.pack(">hqqqq", 0, 983493, 137, 299, 200)
    assert AbortedTxn.from_bytes(raw) == txn


@pytest.mark.parametrize(("fetch", "upper", "expected", "complete"), [
    (0, 100, slice(0, 4), False),
    (0, 32, slice(0, 3), True),
    (0, 35, slice(0, 4), True),
    (10, 35, slice(0, 4), True),
    (11, 35, slice(1, 4), True),
    (20, 41, slice(2, 4), False),
])
def test_collect_like_kafka(tmp_path: Path, fetch: int, upper: int, expected: slice, complete: bool) -> None:
    """The cases of Kafka's TransactionIndexTest.testCollectAbortedTransactions."""
    idx = make(tmp_path, KAFKA_EXAMPLE)
    assert collect(idx, fetch, upper) == (KAFKA_EXAMPLE[expected], complete)
    # the same answers after reloading the file
    idx.close()
    again = TransactionIndex.load(idx.path, 0)
    assert again.entries == KAFKA_EXAMPLE
    assert collect(again, fetch, upper) == (KAFKA_EXAMPLE[expected], complete)


def test_collect_matches_linear_scan(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    entries: list[AbortedTxn] = []
    last = 0
    for pid in range(200):
        last += rng.randint(1, 20)
        first = max(0, last - rng.randint(0, 60))
        lso = rng.randint(first, last + 1)  # not even monotonic: the early stop must still match Kafka's scan
        entries.append(AbortedTxn(pid, first, last, lso))
    idx = make(tmp_path, entries)

    def linear(fetch: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        out = []
        for t in entries:
            if t.last_offset >= fetch and t.first_offset < upper:
                out.append(t)
            if t.last_stable_offset >= upper:
                return out, True
        return out, False

    for _ in range(500):
        fetch = rng.randint(0, last + 10)
        upper = fetch + rng.randint(1, 300)
        assert collect(idx, fetch, upper) == linear(fetch, upper)


def test_truncate_and_reset(tmp_path: Path) -> None:
    entries = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    idx = make(tmp_path, entries)
    idx.truncate_to(51)
    assert collect(idx, 0, 100)[0] == entries
    idx.truncate_to(50)
    assert collect(idx, 0, 100)[0] == entries[:3]
    assert idx.path.stat().st_size == 3 * ABORTED_TXN_SIZE
    idx.append(AbortedTxn(9, 40, 45, 46))
    assert TransactionIndex.load(idx.path, 0).entries == [*entries[:3], AbortedTxn(9, 40, 45, 46)]
    idx.reset()
    assert collect(idx, 0, 100) == ([], False) and idx.path.stat().st_size == 0


def test_append_must_increase(tmp_path: Path) -> None:
    idx = make(tmp_path, [AbortedTxn(0, 0, 10, 11)])
    with pytest.raises(ValueError, match="increasing"):
        idx.append(AbortedTxn(1, 5, 10, 11))


def test_load_rejects_malformed_files(tmp_path: Path) -> None:
    p = tmp_path / "00000000000000000100.txnindex"
    p.write_bytes(AbortedTxn(1, 100, 110, 111).to_bytes() + b"\x00" * 5)
    with pytest.raises(TxnIndexCorruptError, match="multiple"):
        TransactionIndex.load(p, 100)
    p.write_bytes(AbortedTxn(1, 100, 110, 111).to_bytes() + AbortedTxn(2, 100, 105, 111).to_bytes())
    with pytest.raises(TxnIndexCorruptError):
        TransactionIndex.load(p, 100)
    p.write_bytes(AbortedTxn(1, 10, 50, 51).to_bytes())  # below the segment base
    with pytest.raises(TxnIndexCorruptError):
        TransactionIndex.load(p, 100)
    with pytest.raises(FileNotFoundError):
        TransactionIndex.load(tmp_path / "missing.txnindex", 0)


def test_companion_protocol(tmp_path: Path) -> None:
    idx = make(tmp_path, [])
    assert idx.sync_fd() is None
    idx.append(AbortedTxn(1, 0, 3, 4))
    fd = idx.sync_fd()
    assert fd is not None
    import os

    os.fsync(fd)
    os.close(fd)
    assert idx.sync_fd() is None
    idx.flush()
    idx.delete()
    assert not idx.path.exists()
