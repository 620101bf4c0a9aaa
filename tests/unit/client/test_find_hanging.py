"""AsyncAdmin.find_hanging_transactions: which open transactions count as hanging (no broker: the admin's
DescribeProducers / ListTransactions / DescribeTransactions calls are replaced by canned answers)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from oncelog.client.admin import AsyncAdmin, ProducerState, TransactionDescription, TransactionListing
from oncelog.client.errors import KafkaError
from oncelog.protocol.errors import ErrorCode

MAX_TIMEOUT = 900_000


def admin_with(producers: dict[tuple[str, int], list[ProducerState]], listings: list[TransactionListing],
               descriptions: dict[str, TransactionDescription | KafkaError]) -> AsyncAdmin:
    admin = AsyncAdmin({"bootstrap.servers": "127.0.0.1:1"})
    topics = {t for t, _ in producers}
    parts = {t: {p: None for tt, p in producers if tt == t} for t in topics}

    async def noop(*a: Any, **k: Any) -> None:
        return None

    async def describe_producers(tps: Any) -> Any:
        return {tp: producers[tp] for tp in tps}

    async def list_transactions(states: Any = None, producer_ids: Any = None, min_duration_ms: int = -1) -> Any:
        return [t for t in listings if producer_ids is None or t.producer_id in producer_ids]

    async def describe(ids: Any) -> Any:
        return {i: descriptions.get(i, KafkaError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)) for i in ids}

    async def max_timeout() -> int:
        return MAX_TIMEOUT

    admin.start = noop  # type: ignore[method-assign]
    admin.cluster = SimpleNamespace(refresh=noop, topic=lambda n: SimpleNamespace(partitions=parts[n]))  # type: ignore[assignment]
    admin.describe_producers = describe_producers  # type: ignore[method-assign]
    admin.list_transactions = list_transactions  # type: ignore[method-assign]
    admin._describe_transactions = describe  # type: ignore[method-assign]
    admin._transaction_max_timeout_ms = max_timeout  # type: ignore[method-assign]
    return admin


def state(pid: int, start: int | None, age_ms: int) -> ProducerState:
    return ProducerState(pid, 0, 5, int(time.time() * 1000) - age_ms, 0, start)


def desc(txn_id: str, pid: int, st: str, tps: list[tuple[str, int]], running_ms: int = 1000,
         timeout_ms: int = 60_000) -> TransactionDescription:
    return TransactionDescription(txn_id, 0, st, pid, 0, timeout_ms, int(time.time() * 1000) - running_ms, tps)


def test_hanging_reasons() -> None:
    producers = {
        ("t", 0): [state(1, 10, 5000),   # live, coordinator ongoing with t-0: not hanging
                   state(2, 20, 5000),   # pid unknown to every coordinator
                   state(3, None, 5000),  # no open transaction
                   state(4, 30, 10)],    # open but written to recently: not a candidate
        ("t", 1): [state(1, 40, 5000),   # txn "a" does not include t-1
                   state(5, 50, 5000),   # txn "e" unknown to its coordinator
                   state(6, 60, 5000),   # txn "f" is CompleteCommit
                   state(7, 70, 5000),   # txn "g" ongoing far past transaction.max.timeout.ms
                   state(8, 80, 5000)],  # 2PC txn "h" (timeout above the max) running long: fine
    }
    listings = [TransactionListing(i, pid, "Ongoing", 0) for i, pid in
                [("a", 1), ("e", 5), ("f", 6), ("g", 7), ("h", 8)]]
    descriptions: dict[str, TransactionDescription | KafkaError] = {
        "a": desc("a", 1, "Ongoing", [("t", 0)]),
        "f": desc("f", 6, "CompleteCommit", []),
        "g": desc("g", 7, "Ongoing", [("t", 1)], running_ms=MAX_TIMEOUT + 120_000),
        "h": desc("h", 8, "Ongoing", [("t", 1)], running_ms=MAX_TIMEOUT * 10, timeout_ms=2**31 - 1),
    }
    admin = admin_with(producers, listings, descriptions)
    found = asyncio.run(admin.find_hanging_transactions(1000, ["t"]))
    got = {(h.partition, h.producer_id, h.start_offset): (h.transactional_id, h.reason) for h in found}
    assert set(got) == {(0, 2, 20), (1, 1, 40), (1, 5, 50), (1, 6, 60), (1, 7, 70)}
    assert got[(0, 2, 20)] == (None, "the coordinator knows no transactional id for this producer id")
    assert got[(1, 1, 40)][1] == "transaction 'a' is Ongoing without this partition"
    assert got[(1, 5, 50)][1] == "transactional id 'e' is unknown to the coordinator"
    assert got[(1, 6, 60)][1] == "transaction 'f' is CompleteCommit without this partition"
    assert "longer than transaction.max.timeout.ms" in got[(1, 7, 70)][1]
    assert all(h.duration_ms >= 1000 for h in found)
    # a larger max duration leaves out the younger candidates; one partition narrows the search
    assert asyncio.run(admin.find_hanging_transactions(60_000, ["t"])) == []
    assert {h.producer_id for h in asyncio.run(admin.find_hanging_transactions(0, ["t"], partition=0))} == {2, 4}


def test_other_describe_errors_are_raised() -> None:
    admin = admin_with({("t", 0): [state(1, 0, 5000)]}, [TransactionListing("a", 1, "Ongoing", 0)],
                       {"a": KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "loading")})
    try:
        asyncio.run(admin.find_hanging_transactions(0, ["t"]))
    except KafkaError as e:
        assert e.code() == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    else:
        raise AssertionError("expected a KafkaError")
