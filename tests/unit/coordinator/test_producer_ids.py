"""Producer id blocks: the high-water mark is durable before an id of its block is handed out."""

from __future__ import annotations

import os

import pytest

from oncelog.coordinator.transaction.producer_ids import FileProducerIdStore, ProducerIdManager

from .txn_fakes import PidStore


def test_blocks_are_persisted_before_use() -> None:
    store = PidStore()
    seen: list[int] = []

    def persist(v: int) -> None:
        # every id handed out so far lies below the bound being persisted now or an earlier one
        assert all(pid < v for pid in seen)
        store.persist(v)

    m = ProducerIdManager(store.load, persist, block_size=10)
    for _ in range(25):
        pid = m.generate()
        assert pid < store.value  # never hand out an id at or above the durable bound
        seen.append(pid)
    assert seen == list(range(25))
    assert store.persists == [10, 20, 30]


def test_restart_never_reuses_an_id() -> None:
    store = PidStore()
    used: set[int] = set()
    for _restart in range(5):
        m = ProducerIdManager(store.load, store.persist, block_size=1000)
        for _ in range(7):  # a "crash" after a few ids: the rest of the block is skipped, never reused
            pid = m.generate()
            assert pid not in used
            used.add(pid)
    assert store.value == 5000 and min(used) == 0


def test_failed_persist_hands_out_nothing() -> None:
    calls = 0

    def persist(v: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("disk full")

    m = ProducerIdManager(lambda: 0, persist, block_size=3)
    with pytest.raises(OSError):
        m.generate()
    assert m.generate() == 0  # the retry persists the block first


def test_file_store_round_trip(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "producer_ids")
    store = FileProducerIdStore(path)
    assert store.load() == 0
    m = ProducerIdManager(store.load, store.persist)
    assert [m.generate() for _ in range(3)] == [0, 1, 2]
    m2 = ProducerIdManager(FileProducerIdStore(path).load, store.persist)
    assert m2.generate() == 1000


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ProducerIdManager(lambda: 0, lambda v: None, block_size=0)
    with pytest.raises(ValueError):
        ProducerIdManager(lambda: -1, lambda v: None)
