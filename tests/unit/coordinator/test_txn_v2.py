"""Transactions V2 (KIP-890 part 2) at the transaction coordinator: every EndTxn v5 bumps the epoch, the markers carry
the bumped epoch, a retried EndTxn is answered from the epoch before the bump, a late EndTxn of an ended transaction
is fenced (KAFKA-17754), an exhausted epoch moves the producer to a new producer id, and fences bump twice.

Against the in-memory log of ``txn_fakes`` (real encoded records, replayed as a reload would) and a MockClock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from oncelog.coordinator.transaction.coordinator import EndTxnResult, TransactionCoordinator
from oncelog.coordinator.transaction.metadata import SHORT_MAX
from oncelog.coordinator.transaction.records import decode_key, decode_value
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ErrorCode as E
from oncelog.testing import MockClock

from .txn_fakes import FakeLog, FakeMarkers, load_all, make_coordinator

TP_A = ("orders", 0)
TP_B = ("payments", 3)
V2 = 5  # EndTxn v5: transactions V2
V1 = 4


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(fn())


async def started(log: FakeLog | None = None, **kw: Any) -> TransactionCoordinator:
    log = log if log is not None else FakeLog()
    coord = make_coordinator(log=log, **kw)
    await load_all(coord, log)
    return coord


def md(coord: TransactionCoordinator, txn_id: str) -> Any:
    shard = coord.runtime.shard(coord.partition_for(txn_id))
    assert shard is not None
    return shard.txns.get(txn_id)


def records(log: FakeLog, txn_id: str) -> list[tuple[str, int, int, int, int]]:
    """(state, producer id, epoch, next producer id, client transaction version) of every record of ``txn_id``."""
    out = []
    for recs in log.partitions.values():
        for k, v, _ in recs:
            if decode_key(k) == txn_id and v is not None:
                t = decode_value(v)
                out.append((t.state.display_name, t.producer_id, t.producer_epoch, t.next_producer_id,
                            t.client_transaction_version))
    return out


async def v2_add(coord: TransactionCoordinator, txn_id: str, pid: int, epoch: int,
                 tps: list[tuple[str, int]]) -> dict[tuple[str, int], E]:
    """What the leader of a partition does for a transactions V2 Produce: AddPartitionsToTxn v5, not verify_only."""
    return await coord.add_partitions(txn_id, pid, epoch, tps, client_transaction_version=2)


def test_every_end_bumps_the_epoch_and_the_markers_carry_it() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        assert await v2_add(coord, "t1", pid, e0, [TP_A]) == {TP_A: E.NONE}
        assert md(coord, "t1").client_transaction_version == 2
        assert await coord.end_txn_ex("t1", pid, e0, True, V2) == EndTxnResult(E.NONE, pid, e0 + 1)
        assert [(c.producer_id, c.producer_epoch, c.commit) for c in markers.calls] == [(pid, e0 + 1, True)]
        assert records(log, "t1")[-2:] == [("PrepareCommit", pid, e0 + 1, -1, 2), ("CompleteCommit", pid, e0 + 1, -1, 2)]
        d = coord.describe(["t1"])[0]
        assert (d.state, d.producer_epoch) == ("CompleteCommit", e0 + 1)
        # the next transaction runs at the new epoch; the old one is fenced everywhere
        assert await v2_add(coord, "t1", pid, e0, [TP_B]) == {TP_B: E.PRODUCER_FENCED}
        assert await v2_add(coord, "t1", pid, e0 + 1, [TP_B]) == {TP_B: E.NONE}
        assert coord.verify_partition(pid, e0, *TP_B) is E.PRODUCER_FENCED
        assert coord.verify_partition(pid, e0 + 1, *TP_B) is E.NONE
        assert await coord.end_txn_ex("t1", pid, e0 + 1, False, V2) == EndTxnResult(E.NONE, pid, e0 + 2)
        assert markers.calls[-1].producer_epoch == e0 + 2 and markers.calls[-1].commit is False
        await coord.close()
    run(main)


def test_a_retried_end_is_answered_from_the_epoch_before_the_bump() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        markers.gate = asyncio.Event()
        coord = await started(log, markers=markers)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        await v2_add(coord, "t1", pid, e0, [TP_A])
        first = asyncio.create_task(coord.end_txn_ex("t1", pid, e0, True, V2))
        for _ in range(20):
            await asyncio.sleep(0)
        assert md(coord, "t1").state is TxnState.PREPARE_COMMIT and md(coord, "t1").producer_epoch == e0 + 1
        # a retry while the markers are written waits for the same completion; the other outcome is refused
        retry = asyncio.create_task(coord.end_txn_ex("t1", pid, e0, True, V2))
        assert await coord.end_txn_ex("t1", pid, e0, False, V2) == EndTxnResult(E.INVALID_TXN_STATE)
        markers.gate.set()
        assert await first == await retry == EndTxnResult(E.NONE, pid, e0 + 1)
        assert len(markers.calls) == 1
        # after the completion: the same decision is a retry, the other one is not
        assert await coord.end_txn_ex("t1", pid, e0, True, V2) == EndTxnResult(E.NONE, pid, e0 + 1)
        assert await coord.end_txn_ex("t1", pid, e0, False, V2) == EndTxnResult(E.INVALID_TXN_STATE)
        # the retry is recognized after a reload too: the epoch is in the log
        coord2 = await started(log)
        assert await coord2.end_txn_ex("t1", pid, e0, True, V2) == EndTxnResult(E.NONE, pid, e0 + 1)
        assert await coord2.end_txn_ex("t1", pid, e0 - 1 if e0 else 9, True, V2) == EndTxnResult(E.PRODUCER_FENCED)
        await coord.close()
        await coord2.close()
    run(main)


def test_a_delayed_end_of_the_previous_transaction_commits_the_next_one_with_v1_and_is_fenced_with_v2() -> None:
    """KAFKA-17754: an EndTxn(commit) of transaction 1 delayed past the start of transaction 2. With transactions V1
    both carry the same epoch and the late request commits transaction 2 while it is still being written; with V2
    transaction 2 runs at the bumped epoch and the late request is fenced."""
    async def main() -> None:
        for version, expect in ((V1, E.NONE), (V2, E.PRODUCER_FENCED)):
            markers = FakeMarkers()
            coord = await started(markers=markers)
            _, pid, e1 = await coord.init_producer_id("t1", 10_000)
            await coord.add_partitions("t1", pid, e1, [TP_A], client_transaction_version=2 if version == V2 else 0)
            r1 = await coord.end_txn_ex("t1", pid, e1, True, version)
            assert r1.error_code is E.NONE
            e2 = r1.producer_epoch if version == V2 else e1
            await coord.add_partitions("t1", pid, e2, [TP_B], client_transaction_version=2 if version == V2 else 0)
            late = await coord.end_txn_ex("t1", pid, e1, True, version)  # transaction 1's EndTxn, delayed
            assert late.error_code is expect, version
            if version == V1:  # transaction 2 was committed by a request that was never about it
                assert md(coord, "t1").state is TxnState.COMPLETE_COMMIT
                assert [c.partitions for c in markers.calls] == [[TP_A], [TP_B]]
            else:
                assert md(coord, "t1").state is TxnState.ONGOING and md(coord, "t1").topic_partitions == {TP_B}
                assert [c.partitions for c in markers.calls] == [[TP_A]]
            await coord.close()
    run(main)


def test_an_abort_with_nothing_added_bumps_the_epoch() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        clock = MockClock()
        coord = await started(log, markers=markers, clock=clock)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        assert await coord.end_txn_ex("t1", pid, e0, True, V2) == EndTxnResult(E.INVALID_TXN_STATE)  # Empty
        clock.advance(7)
        assert await coord.end_txn_ex("t1", pid, e0, False, V2) == EndTxnResult(E.NONE, pid, e0 + 1)
        assert markers.calls == [] and md(coord, "t1").state is TxnState.COMPLETE_ABORT
        assert md(coord, "t1").txn_start_timestamp == clock.wall_ms()
        # from CompleteAbort at the current epoch: another empty abort; the previous epoch is its retry
        assert await coord.end_txn_ex("t1", pid, e0 + 1, False, V2) == EndTxnResult(E.NONE, pid, e0 + 2)
        assert await coord.end_txn_ex("t1", pid, e0 + 1, False, V2) == EndTxnResult(E.NONE, pid, e0 + 2)
        assert await coord.end_txn_ex("t1", pid, e0 + 2, True, V2) == EndTxnResult(E.INVALID_TXN_STATE)
        assert [r[0] for r in records(log, "t1")] == ["Empty", "PrepareAbort", "CompleteAbort", "PrepareAbort",
                                                      "CompleteAbort"]
        await coord.close()
    run(main)


def test_an_exhausted_epoch_moves_the_producer_to_a_new_producer_id() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers)
        _, pid, _ = await coord.init_producer_id("t1", 10_000)
        m = md(coord, "t1")
        m.producer_epoch = SHORT_MAX - 1  # fast-forward (test only): the last epoch a producer may hold
        await v2_add(coord, "t1", pid, SHORT_MAX - 1, [TP_A])
        result = await coord.end_txn_ex("t1", pid, SHORT_MAX - 1, True, V2)
        assert result.error_code is E.NONE and result.producer_id not in (pid, -1) and result.producer_epoch == 0
        new_pid = result.producer_id
        # the markers carry the old producer id at Short.MAX_VALUE; the Complete record moves to the new id
        assert [(c.producer_id, c.producer_epoch) for c in markers.calls] == [(pid, SHORT_MAX)]
        assert records(log, "t1")[-2:] == [("PrepareCommit", pid, SHORT_MAX, new_pid, 2),
                                           ("CompleteCommit", new_pid, 0, -1, 2)]
        assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (new_pid, 0, pid)
        assert coord.pid_index.get(new_pid) == "t1" and pid not in coord.pid_index
        # a retry across the overflow names the old id at its last epoch
        assert await coord.end_txn_ex("t1", pid, SHORT_MAX - 1, True, V2) == EndTxnResult(E.NONE, new_pid, 0)
        assert await coord.end_txn_ex("t1", pid, SHORT_MAX - 2, True, V2) == \
            EndTxnResult(E.INVALID_PRODUCER_ID_MAPPING)
        await v2_add(coord, "t1", new_pid, 0, [TP_B])
        assert await coord.end_txn_ex("t1", new_pid, 0, True, V2) == EndTxnResult(E.NONE, new_pid, 1)
        coord2 = await started(log)
        m2 = md(coord2, "t1")
        assert (m2.producer_id, m2.producer_epoch, m2.state) == (new_pid, 1, TxnState.COMPLETE_COMMIT)
        await coord.close()
        await coord2.close()
    run(main)


def test_fences_bump_twice_so_the_fenced_producer_is_never_a_retry() -> None:
    async def main() -> None:
        clock, markers = MockClock(), FakeMarkers()
        coord = await started(markers=markers, clock=clock)
        # a fencing InitProducerId
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        await v2_add(coord, "t1", pid, e0, [TP_A])
        assert (await coord.init_producer_id("t1", 10_000))[0] is E.CONCURRENT_TRANSACTIONS
        assert (markers.calls[-1].producer_epoch, markers.calls[-1].commit) == (e0 + 2, False)
        assert await coord.end_txn_ex("t1", pid, e0, False, V2) == EndTxnResult(E.PRODUCER_FENCED)
        assert await coord.init_producer_id("t1", 10_000) == (E.NONE, pid, e0 + 3)
        # a timeout
        _, pid2, s0 = await coord.init_producer_id("slow", 1_000)
        await v2_add(coord, "slow", pid2, s0, [TP_B])
        clock.advance(1_001)
        assert await coord.abort_timed_out_transactions() == ["slow"]
        await coord.wait_idle()
        assert (md(coord, "slow").state, md(coord, "slow").producer_epoch) == (TxnState.COMPLETE_ABORT, s0 + 2)
        assert markers.calls[-1].producer_epoch == s0 + 2
        assert await coord.end_txn_ex("slow", pid2, s0, False, V2) == EndTxnResult(E.PRODUCER_FENCED)
        assert await coord.end_txn_ex("slow", pid2, s0, False, V1) == EndTxnResult(E.PRODUCER_FENCED)
        await coord.close()
    run(main)


def test_a_prepared_v2_transaction_is_finished_after_a_reload_with_the_bumped_epoch() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        markers.gate = asyncio.Event()  # the markers never get written by the first coordinator
        coord = await started(log, markers=markers)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        await v2_add(coord, "t1", pid, e0, [TP_A, TP_B])
        end = asyncio.create_task(coord.end_txn_ex("t1", pid, e0, True, V2))
        for _ in range(20):
            await asyncio.sleep(0)
        assert [r[0] for r in records(log, "t1")][-1] == "PrepareCommit"
        end.cancel()
        markers2 = FakeMarkers()
        coord2 = await started(log, markers=markers2)  # a new coordinator loads the log and completes it
        await coord2.wait_idle()
        assert [(c.producer_epoch, c.commit, sorted(c.partitions)) for c in markers2.calls] == [
            (e0 + 1, True, sorted([TP_A, TP_B]))]
        assert (md(coord2, "t1").state, md(coord2, "t1").producer_epoch) == (TxnState.COMPLETE_COMMIT, e0 + 1)
        assert await coord2.end_txn_ex("t1", pid, e0, True, V2) == EndTxnResult(E.NONE, pid, e0 + 1)
        await coord2.close()
        markers.gate.set()
        await coord.close()
    run(main)


def test_transactions_v1_requests_keep_the_epoch_on_a_v2_coordinator() -> None:
    async def main() -> None:
        markers = FakeMarkers()
        coord = await started(markers=markers)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e0, [TP_A], version=3)
        assert md(coord, "t1").client_transaction_version == 0
        assert await coord.end_txn_ex("t1", pid, e0, True, V1) == EndTxnResult(E.NONE)
        assert md(coord, "t1").producer_epoch == e0 and markers.calls[-1].producer_epoch == e0
        assert await coord.end_txn_ex("t1", pid, e0, True, V1) == EndTxnResult(E.NONE)  # V1's retry
        await coord.close()
    run(main)
