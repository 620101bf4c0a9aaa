"""Test doubles for the coordinator runtime: a shard that records what is replayed into it, and a log whose
writes become durable when the test says so."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


class ListShard:
    """Records every replayed entry: ("r", key, value, offset, producer id, producer epoch) for a record,
    ("m", producer id, producer epoch, commit) for a marker."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.entries: list[tuple[object, ...]] = []
        self.pending = False

    @property
    def replayed(self) -> list[tuple[bytes | None, bytes | None, int]]:
        """The records replayed, as (key, value, offset)."""
        return [(e[1], e[2], e[3]) for e in self.entries if e[0] == "r"]  # type: ignore[misc]

    def replay(self, key: bytes | None, value: bytes | None, offset: int, producer_id: int,
               producer_epoch: int) -> None:
        self.entries.append(("r", key, value, offset, producer_id, producer_epoch))

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.entries.append(("m", producer_id, producer_epoch, commit))


class ManualLog:
    """Written at once; durable when the test says so (``make_durable``). Refuses a write whose epoch is not the
    one set in ``epochs`` (when set), as the broker's internal-topic log does."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.writes: list[tuple[int, int, int, int, bool]] = []  # (partition, epoch, producer id, epoch, lazy)
        self.waiting: list[asyncio.Future[None]] = []
        self.fail: Exception | None = None
        self.epochs: dict[int, int] | None = None
        self.durable_at_once = False

    @property
    def lazy(self) -> list[bool]:
        """Per write: written lazy (no fsync round of its own)?"""
        return [w[4] for w in self.writes]

    def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
               producer_id: int = -1, producer_epoch: int = -1, lazy: bool = False
               ) -> tuple[int, asyncio.Future[None]]:
        if self.fail is not None:
            raise self.fail
        if self.epochs is not None and self.epochs.get(partition) != epoch:
            raise NotLeader(partition, epoch)
        base = len(self.records)
        self.records += records
        self.writes.append((partition, epoch, producer_id, producer_epoch, lazy))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.durable_at_once:
            fut.set_result(None)
        else:
            self.waiting.append(fut)
        return base, fut

    def make_durable(self) -> None:
        for f in self.waiting:
            if not f.done():
                f.set_result(None)
        self.waiting.clear()

    def fail_durability(self, exc: Exception) -> None:
        """Every write still waiting cannot be made durable: its future fails with ``exc``."""
        for f in self.waiting:
            if not f.done():
                f.set_exception(exc)
        self.waiting.clear()


class NotLeader(RuntimeError):
    error_code = 6  # NOT_LEADER_OR_FOLLOWER

    def __init__(self, partition: int, epoch: int) -> None:
        super().__init__(f"partition {partition} is not led with epoch {epoch} here")
