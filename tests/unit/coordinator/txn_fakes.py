"""In-memory fakes for the transaction coordinator tests: a CoordinatorLog keeping real encoded records, and a
MarkerChannel recording (and optionally failing) marker writes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.coordinator.runtime import LoadedRecord
from oncelog.coordinator.transaction import MarkerResults, TxnMarker
from oncelog.coordinator.transaction.coordinator import TransactionCoordinator, TxnCoordinatorConfig
from oncelog.coordinator.transaction.producer_ids import ProducerIdManager
from oncelog.protocol.errors import ErrorCode
from oncelog.testing import MockClock


class AppendFailed(RuntimeError):
    def __init__(self, code: ErrorCode = ErrorCode.NOT_ENOUGH_REPLICAS) -> None:
        super().__init__(code.name)
        self.error_code = code


class FakeLog:
    """A CoordinatorLog in memory: written at once; durable on the next loop iteration, or once ``gate`` is set."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
        self.fail_next = 0  # fail this many appends
        self.fail_code = ErrorCode.NOT_ENOUGH_REPLICAS
        self.appends = 0
        self.gate: asyncio.Event | None = None  # when set, writes become durable only once it is set
        self.epochs: dict[int, int] | None = None  # partition -> accepted epoch (None: any)
        self.written_epochs: list[int] = []

    def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
               producer_id: int = -1, producer_epoch: int = -1, lazy: bool = False
               ) -> tuple[int, asyncio.Future[None]]:
        self.appends += 1
        if self.epochs is not None and self.epochs.get(partition) != epoch:
            raise AppendFailed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self.fail_next > 0:
            self.fail_next -= 1
            raise AppendFailed(self.fail_code)
        self.written_epochs.append(epoch)
        log = self.partitions.setdefault(partition, [])
        base = len(log)
        for i, (k, v) in enumerate(records):
            assert isinstance(k, bytes) and (v is None or isinstance(v, bytes))
            log.append((k, v, base + i))
        loop = asyncio.get_running_loop()
        durable: asyncio.Future[None] = loop.create_future()
        if self.gate is None:
            loop.call_soon(durable.set_result, None)
        else:
            gate = self.gate

            async def later() -> None:
                await gate.wait()
                durable.set_result(None)
            loop.create_task(later())
        return base, durable

    def read(self, partition: int, upto: int | None = None) -> Iterator[LoadedRecord]:
        recs = self.partitions.get(partition, [])
        return iter([LoadedRecord(k, v, o) for k, v, o in (recs if upto is None else recs[:upto])])

    def cut(self, upto: dict[int, int]) -> FakeLog:
        """A copy holding only the first `upto[p]` records of each partition (a crash at that point)."""
        new = FakeLog()
        for p, recs in self.partitions.items():
            new.partitions[p] = list(recs[: upto.get(p, len(recs))])
        return new

    def total(self) -> int:
        return sum(len(r) for r in self.partitions.values())


@dataclass
class MarkerCall:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[tuple[str, int]]
    broker: int = 0


@dataclass
class FakeMarkers:
    """A MarkerChannel: records every marker sent, answers from a script, and can fail whole requests."""
    calls: list[MarkerCall] = field(default_factory=list)
    # (topic, p) -> list of error codes to return on successive attempts (then NONE)
    script: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    missing: set[tuple[str, int]] = field(default_factory=set)  # no leader: the topic was deleted
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)  # default: this broker (0)
    raise_next: int = 0
    gate: asyncio.Event | None = None
    written: list[tuple[tuple[str, int], int, int, bool]] = field(default_factory=list)
    requests: list[tuple[int, int]] = field(default_factory=list)  # (broker, markers in the request)
    after_write: Callable[[], None] | None = None
    local_node: int = 0
    immediate: bool = False  # answer at once (a future already done), as a local append that is already durable

    def leader(self, tp: tuple[str, int]) -> int | None:
        return None if tp in self.missing else self.leaders.get(tp, self.local_node)

    def send(self, broker: int, markers: Sequence[TxnMarker]) -> Awaitable[MarkerResults]:
        self.requests.append((broker, len(markers)))
        for m in markers:
            self.calls.append(MarkerCall(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch,
                                         list(m.partitions), broker))
        if self.immediate and self.gate is None and not self.raise_next:
            done: asyncio.Future[MarkerResults] = asyncio.get_running_loop().create_future()
            done.set_result([{tp: ErrorCode.NONE for tp in m.partitions} for m in markers])
            self.written += [(tp, m.producer_id, m.producer_epoch, m.commit) for m in markers for tp in m.partitions]
            return done
        return self._answer(markers)

    async def _answer(self, markers: Sequence[TxnMarker]) -> MarkerResults:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        if self.raise_next > 0:
            self.raise_next -= 1
            raise OSError("broker busy")
        results: MarkerResults = []
        for m in markers:
            out: dict[tuple[str, int], int] = {}
            results.append(out)
            for tp in m.partitions:
                seq = self.script.get(tp)
                if seq:
                    out[tp] = seq.pop(0)
                    continue
                out[tp] = ErrorCode.NONE
                self.written.append((tp, m.producer_id, m.producer_epoch, m.commit))
        if self.after_write is not None:
            self.after_write()
        return results


class PidStore:
    def __init__(self) -> None:
        self.value = 0
        self.persists: list[int] = []

    def load(self) -> int:
        return self.value

    def persist(self, v: int) -> None:
        self.value = v
        self.persists.append(v)


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def make_coordinator(log: FakeLog | None = None, markers: FakeMarkers | None = None,
                     clock: MockClock | None = None, store: PidStore | None = None,
                     num_partitions: int = 5, **cfg: Any) -> TransactionCoordinator:
    store = store or PidStore()
    return TransactionCoordinator(
        TxnCoordinatorConfig(**cfg), clock or MockClock(), log or FakeLog(), markers or FakeMarkers(),
        ProducerIdManager(store.load, store.persist), num_partitions=num_partitions, sleep=no_sleep)


#: the coordinator epoch tests load with (markers carry it)
EPOCH = 3


async def load_all(coord: TransactionCoordinator, log: FakeLog, complete_pending: bool = True,
                   epoch: int = EPOCH) -> None:
    for p in range(coord.num_partitions):
        await coord.load_partition(p, epoch, log.read(p), complete_pending=complete_pending)
