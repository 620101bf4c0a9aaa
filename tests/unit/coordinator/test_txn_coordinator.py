"""Transaction coordinator flows against an in-memory log (real encoded records) and a fake marker writer.

Fences (a second InitProducerId, a timeout) are checked here with a transactions V1 coordinator
(``transaction_version=1``: one epoch bump); ``test_txn_v2.py`` checks transactions V2, fences included."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oncelog.coordinator.transaction.coordinator import OFFSETS_TOPIC, TransactionCoordinator
from oncelog.coordinator.transaction.metadata import SHORT_MAX
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.coordinator.transaction.records import decode_key, decode_value
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ErrorCode as E
from oncelog.testing import MockClock

from .txn_fakes import EPOCH, FakeLog, FakeMarkers, PidStore, load_all, make_coordinator

TP_A = ("orders", 0)
TP_B = ("payments", 3)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(fn())


async def started(log: FakeLog | None = None, **kw: Any) -> TransactionCoordinator:
    log = log if log is not None else FakeLog()
    coord = make_coordinator(log=log, **kw)
    await load_all(coord, log)
    return coord


def states_in_log(log: FakeLog, txn_id: str) -> list[str]:
    out = []
    for recs in log.partitions.values():
        for k, v, _ in recs:
            if decode_key(k) == txn_id:
                out.append("tombstone" if v is None else decode_value(v).state.display_name)
    return out


def md(coord: TransactionCoordinator, txn_id: str) -> Any:
    shard = coord.runtime.shard(coord.partition_for(txn_id))
    assert shard is not None
    return shard.txns.get(txn_id)


# ---------------------------------------------------------------------------- InitProducerId
def test_idempotent_producer_gets_fresh_ids() -> None:
    async def main() -> None:
        coord = await started()
        a = await coord.init_producer_id(None, 60_000)
        b = await coord.init_producer_id(None, 60_000)
        assert a == (E.NONE, 0, 0) and b == (E.NONE, 1, 0)
        await coord.close()
    run(main)


def test_init_validation() -> None:
    async def main() -> None:
        coord = await started()
        assert (await coord.init_producer_id("", 1000))[0] is E.INVALID_REQUEST
        assert (await coord.init_producer_id("t", 0))[0] is E.INVALID_TRANSACTION_TIMEOUT
        assert (await coord.init_producer_id("t", 900_001))[0] is E.INVALID_TRANSACTION_TIMEOUT
        assert (await coord.init_producer_id("t", 1000, expected_producer_id=5))[0] is E.INVALID_REQUEST
        assert (await coord.init_producer_id("t", 1000, enable_2pc=True))[0] is E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert md(coord, "t") is None
        await coord.close()
    run(main)


def test_init_creates_then_bumps() -> None:
    async def main() -> None:
        log = FakeLog()
        coord = await started(log)
        err, pid, epoch = await coord.init_producer_id("t1", 10_000)
        assert (err, epoch) == (E.NONE, 0)
        assert states_in_log(log, "t1") == ["Empty"]
        assert await coord.init_producer_id("t1", 10_000) == (E.NONE, pid, 1)
        assert coord.describe(["t1"])[0].state == "Empty"
        await coord.close()
    run(main)


def test_init_append_failure_leaves_nothing_behind() -> None:
    async def main() -> None:
        log = FakeLog()
        coord = await started(log)
        log.fail_next = 1
        assert (await coord.init_producer_id("t1", 10_000))[0] is E.COORDINATOR_NOT_AVAILABLE
        assert md(coord, "t1") is None and coord.describe(["t1"])[0].error_code is E.TRANSACTIONAL_ID_NOT_FOUND
        err, _pid, epoch = await coord.init_producer_id("t1", 10_000)
        assert err is E.NONE and epoch == 0
        # existing id: failure keeps the old epoch
        log.fail_next = 1
        assert (await coord.init_producer_id("t1", 10_000))[0] is E.COORDINATOR_NOT_AVAILABLE
        m = md(coord, "t1")
        assert m.producer_epoch == 0 and m.pending_state is None
        await coord.close()
    run(main)


# ---------------------------------------------------------------------------- full transactions
def test_commit_flow() -> None:
    async def main() -> None:
        log, markers, clock = FakeLog(), FakeMarkers(), MockClock()
        coord = await started(log, markers=markers, clock=clock)
        _, pid, epoch = await coord.init_producer_id("t1", 10_000)
        assert await coord.add_partitions("t1", pid, epoch, [TP_A]) == {TP_A: E.NONE}
        assert coord.verify_partition(pid, epoch, *TP_A) is E.NONE
        assert coord.verify_partition(pid, epoch, *TP_B) is E.INVALID_TXN_STATE
        n = log.total()
        assert await coord.add_partitions("t1", pid, epoch, [TP_A]) == {TP_A: E.NONE}
        assert log.total() == n  # already added: no write
        assert await coord.add_offsets("t1", pid, epoch, "group-1") is E.NONE
        offsets_tp = (OFFSETS_TOPIC, partition_for("group-1", 50))
        d = coord.describe(["t1"])[0]
        assert d.state == "Ongoing" and d.transaction_start_time_ms == clock.wall_ms()
        assert d.topics == {"__consumer_offsets": [offsets_tp[1]], "orders": [0]}
        assert await coord.end_txn("t1", pid, epoch, commit=True) is E.NONE
        assert states_in_log(log, "t1") == ["Empty", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"]
        assert len(markers.calls) == 1
        c = markers.calls[0]
        assert (c.producer_id, c.producer_epoch, c.commit, c.coordinator_epoch) == (pid, epoch, True, 3)
        assert sorted(c.partitions) == sorted([TP_A, offsets_tp])
        assert coord.describe(["t1"])[0].state == "CompleteCommit"
        assert coord.verify_partition(pid, epoch, *TP_A) is E.INVALID_TXN_STATE
        # a retry of the same decision is fine; the opposite one is not
        assert await coord.end_txn("t1", pid, epoch, commit=True) is E.NONE
        assert await coord.end_txn("t1", pid, epoch, commit=False) is E.INVALID_TXN_STATE
        # the next transaction can start at once
        assert await coord.add_partitions("t1", pid, epoch, [TP_B]) == {TP_B: E.NONE}
        assert await coord.end_txn("t1", pid, epoch, commit=False) is E.NONE
        assert markers.calls[-1].commit is False and markers.calls[-1].partitions == [TP_B]
        await coord.close()
    run(main)


def test_end_and_add_errors() -> None:
    async def main() -> None:
        coord = await started()
        assert await coord.end_txn("nope", 1, 0, True) is E.INVALID_PRODUCER_ID_MAPPING
        assert await coord.add_partitions("nope", 1, 0, [TP_A]) == {TP_A: E.INVALID_PRODUCER_ID_MAPPING}
        _, pid, epoch = await coord.init_producer_id("t1", 10_000)
        assert await coord.end_txn("t1", pid, epoch, True) is E.INVALID_TXN_STATE  # Empty
        assert await coord.end_txn("t1", pid + 1, epoch, True) is E.INVALID_PRODUCER_ID_MAPPING
        assert await coord.add_partitions("t1", pid, epoch + 1, [TP_A]) == {TP_A: E.PRODUCER_FENCED}
        assert await coord.add_partitions("t1", pid, epoch + 1, [TP_A], version=1) == {
            TP_A: E.INVALID_PRODUCER_EPOCH}
        assert await coord.end_txn("t1", pid, epoch + 1, True) is E.PRODUCER_FENCED
        assert await coord.end_txn("t1", pid, epoch + 1, True, version=1) is E.INVALID_PRODUCER_EPOCH
        assert await coord.end_txn("", pid, epoch, True) is E.INVALID_REQUEST
        await coord.close()
    run(main)


def test_concurrent_transactions_while_completing() -> None:
    async def main() -> None:
        markers = FakeMarkers()
        markers.gate = asyncio.Event()
        coord = await started(markers=markers)
        _, pid, epoch = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, epoch, [TP_A])
        end = asyncio.create_task(coord.end_txn("t1", pid, epoch, True))
        for _ in range(20):
            await asyncio.sleep(0)
        assert md(coord, "t1").state is TxnState.PREPARE_COMMIT
        assert await coord.add_partitions("t1", pid, epoch, [TP_B]) == {TP_B: E.CONCURRENT_TRANSACTIONS}
        assert (await coord.init_producer_id("t1", 10_000))[0] is E.CONCURRENT_TRANSACTIONS
        assert await coord.end_txn("t1", pid, epoch, False) is E.INVALID_TXN_STATE
        assert coord.verify_partition(pid, epoch, *TP_A) is E.CONCURRENT_TRANSACTIONS  # ending: retry
        retry = asyncio.create_task(coord.end_txn("t1", pid, epoch, True))  # waits for the same completion
        markers.gate.set()
        assert await end is E.NONE and await retry is E.NONE
        assert len(markers.calls) == 1
        await coord.close()
    run(main)



@pytest.mark.parametrize("spins", range(4))
def test_an_end_txn_caller_resuming_after_its_completion_sends_no_second_markers(spins: int) -> None:
    """The completion starts when PrepareCommit is replayed; with markers answered at once it can be finished
    (CompleteCommit applied) before the EndTxn caller runs again. The caller must get NONE, and no second
    completion may start: it answered INVALID_TXN_STATE (a fatal error for librdkafka, seen in the EOS copy test)
    and sent the COMMIT marker again, which with the same producer epoch would commit the producer's next
    transaction on that partition early."""
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers(immediate=True)
        coord = await started(log, markers=markers)
        _, pid, epoch = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, epoch, [TP_A])
        end = asyncio.create_task(coord.end_txn("t1", pid, epoch, True))
        for _ in range(spins):
            await asyncio.sleep(0)
        assert await end is E.NONE
        await coord.runtime.wait_idle()
        for _ in range(20):
            await asyncio.sleep(0)
        assert [(c.commit, c.partitions) for c in markers.calls] == [(True, [TP_A])]
        assert states_in_log(log, "t1")[-2:] == ["PrepareCommit", "CompleteCommit"]
        await coord.close()
    run(main)


def test_completion_starts_even_if_the_end_txn_caller_is_gone() -> None:
    """The caller of EndTxn is cancelled (its client disconnected) while the PrepareCommit append is in flight:
    the completion starts when the record is replayed, not when the caller resumes; a late retry finds it."""
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers)
        _, pid, epoch = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, epoch, [TP_A])
        log.gate = asyncio.Event()
        end = asyncio.create_task(coord.end_txn("t1", pid, epoch, True))
        for _ in range(5):
            await asyncio.sleep(0)
        end.cancel()
        log.gate.set()
        for _ in range(200):  # the append, then the completion (markers, CompleteCommit), all in the background
            await asyncio.sleep(0)
        await coord.runtime.wait_idle()
        assert md(coord, "t1").state is TxnState.COMPLETE_COMMIT
        assert states_in_log(log, "t1")[-2:] == ["PrepareCommit", "CompleteCommit"]
        assert [(c.commit, c.partitions) for c in markers.calls] == [(True, [TP_A])]
        assert await coord.end_txn("t1", pid, epoch, True) is E.NONE
        await coord.close()
    run(main)


def test_fencing_abort_completes_even_if_the_init_caller_is_gone() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers, transaction_version=1)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e0, [TP_A])
        log.gate = asyncio.Event()
        init = asyncio.create_task(coord.init_producer_id("t1", 10_000))  # a new instance fences the old one
        for _ in range(5):
            await asyncio.sleep(0)
        init.cancel()
        log.gate.set()
        for _ in range(200):
            await asyncio.sleep(0)
        await coord.runtime.wait_idle()
        assert md(coord, "t1").state is TxnState.COMPLETE_ABORT
        assert [(c.commit, c.producer_epoch) for c in markers.calls] == [(False, e0 + 1)]
        assert await coord.init_producer_id("t1", 10_000) == (E.NONE, pid, e0 + 2)
        await coord.close()
    run(main)


# ---------------------------------------------------------------------------- fencing
def test_second_init_fences_and_aborts_ongoing_txn() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers, transaction_version=1)
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e0, [TP_A, TP_B])
        # a new instance with the same transactional id
        assert (await coord.init_producer_id("t1", 10_000))[0] is E.CONCURRENT_TRANSACTIONS
        assert states_in_log(log, "t1")[-2:] == ["PrepareAbort", "CompleteAbort"]
        c = markers.calls[-1]
        assert c.commit is False and c.producer_epoch == e0 + 1 and sorted(c.partitions) == sorted([TP_A, TP_B])
        err, pid2, e2 = await coord.init_producer_id("t1", 10_000)  # the retry
        assert (err, pid2, e2) == (E.NONE, pid, e0 + 2)
        # the zombie is fenced everywhere
        assert await coord.add_partitions("t1", pid, e0, [TP_A]) == {TP_A: E.PRODUCER_FENCED}
        assert await coord.end_txn("t1", pid, e0, True) is E.PRODUCER_FENCED
        assert coord.verify_partition(pid, e0, *TP_A) is E.PRODUCER_FENCED
        await coord.close()
    run(main)


def test_kip360_expected_epoch() -> None:
    async def main() -> None:
        coord = await started()
        _, pid, e0 = await coord.init_producer_id("t1", 10_000)
        # the producer recovers with its own id/epoch: bumped
        assert await coord.init_producer_id("t1", 10_000, pid, e0) == (E.NONE, pid, e0 + 1)
        # a retry of that call (response lost): same epoch again
        assert await coord.init_producer_id("t1", 10_000, pid, e0) == (E.NONE, pid, e0 + 1)
        # a stale epoch / wrong producer id: fenced
        assert (await coord.init_producer_id("t1", 10_000, pid, e0 - 1 if e0 else 7))[0] is E.PRODUCER_FENCED
        assert (await coord.init_producer_id("t1", 10_000, pid + 99, 0))[0] is E.PRODUCER_FENCED
        assert (await coord.init_producer_id("t1", 10_000, pid + 99, 0, version=3))[0] is E.INVALID_PRODUCER_EPOCH
        await coord.close()
    run(main)


def test_epoch_exhaustion_rotates_producer_id() -> None:
    async def main() -> None:
        log = FakeLog()
        coord = await started(log, transaction_version=1)
        _, pid, _ = await coord.init_producer_id("t1", 10_000)
        m = md(coord, "t1")
        m.producer_epoch = SHORT_MAX - 2  # fast-forward (test only)
        assert await coord.init_producer_id("t1", 10_000) == (E.NONE, pid, SHORT_MAX - 1)
        err, pid2, e2 = await coord.init_producer_id("t1", 10_000)
        assert err is E.NONE and pid2 != pid and e2 == 0
        assert m.previous_producer_id == pid
        assert coord.pid_index.get(pid2) == "t1" and pid not in coord.pid_index
        # fencing an ongoing txn at MAX-1 takes the epoch to MAX; the retry rotates
        m.producer_epoch = SHORT_MAX - 1
        await coord.add_partitions("t1", pid2, SHORT_MAX - 1, [TP_A])
        assert (await coord.init_producer_id("t1", 10_000))[0] is E.CONCURRENT_TRANSACTIONS
        assert m.producer_epoch == SHORT_MAX and m.state is TxnState.COMPLETE_ABORT
        err, pid3, e3 = await coord.init_producer_id("t1", 10_000)
        assert err is E.NONE and pid3 not in (pid, pid2) and e3 == 0
        # the log says the same after a reload
        coord2 = make_coordinator(log=log)
        await load_all(coord2, log)
        m2 = md(coord2, "t1")
        assert (m2.producer_id, m2.producer_epoch, m2.state) == (pid3, 0, TxnState.EMPTY)
        await coord.close()
        await coord2.close()
    run(main)


# ---------------------------------------------------------------------------- timers
def test_timed_out_transaction_is_aborted_and_producer_fenced() -> None:
    async def main() -> None:
        clock, markers, log = MockClock(), FakeMarkers(), FakeLog()
        coord = await started(log, markers=markers, clock=clock, transaction_version=1)
        _, pid, e0 = await coord.init_producer_id("slow", 1_000)
        _, pid_f, ef = await coord.init_producer_id("fast", 60_000)
        await coord.add_partitions("slow", pid, e0, [TP_A])
        await coord.add_partitions("fast", pid_f, ef, [TP_B])
        clock.advance(1_000)
        assert await coord.abort_timed_out_transactions() == []  # not past the timeout yet
        clock.advance(1)
        assert await coord.abort_timed_out_transactions() == ["slow"]
        await coord.wait_idle()
        assert md(coord, "slow").state is TxnState.COMPLETE_ABORT and md(coord, "slow").producer_epoch == e0 + 1
        assert markers.calls[-1].producer_epoch == e0 + 1 and markers.calls[-1].commit is False
        assert md(coord, "fast").state is TxnState.ONGOING
        # the late producer is fenced
        assert await coord.end_txn("slow", pid, e0, True) is E.PRODUCER_FENCED
        assert await coord.end_txn("slow", pid, e0, True, version=0) is E.INVALID_PRODUCER_EPOCH
        assert await coord.add_partitions("slow", pid, e0, [TP_A]) == {TP_A: E.PRODUCER_FENCED}
        assert await coord.abort_timed_out_transactions() == []
        await coord.close()
    run(main)


def test_a_produce_check_while_a_timed_out_transaction_is_being_fenced_is_retriable() -> None:
    """The fence-and-abort record of a timed-out transaction is being written: a batch of the producer's current
    epoch is told to retry (CONCURRENT_TRANSACTIONS, NOT_ENOUGH_REPLICAS in Produce), not INVALID_TXN_STATE; once
    the epoch is bumped it is fenced."""
    async def main() -> None:
        clock, log = MockClock(), FakeLog()
        coord = await started(log, clock=clock)
        _, pid, e0 = await coord.init_producer_id("slow", 1_000)
        await coord.add_partitions("slow", pid, e0, [TP_A])
        assert coord.verify_partition(pid, e0, *TP_A, transactional_id="slow") is E.NONE
        clock.advance(1_001)
        log.gate = asyncio.Event()  # the record is written, not durable yet
        aborting = asyncio.create_task(coord.abort_timed_out_transactions())
        for _ in range(20):
            await asyncio.sleep(0)
        assert md(coord, "slow").pending_state is TxnState.PREPARE_ABORT
        assert coord.verify_partition(pid, e0, *TP_A, transactional_id="slow") is E.CONCURRENT_TRANSACTIONS
        log.gate.set()
        assert await aborting == ["slow"]
        await coord.wait_idle()
        assert coord.verify_partition(pid, e0, *TP_A, transactional_id="slow") is E.PRODUCER_FENCED
        await coord.close()
    run(main)


def test_transactional_id_expiry() -> None:
    async def main() -> None:
        clock, log = MockClock(), FakeLog()
        coord = await started(log, clock=clock, transactional_id_expiration_ms=10_000)
        _, pid, _e = await coord.init_producer_id("idle", 60_000)
        _, pid_b, eb = await coord.init_producer_id("busy", 60_000)
        clock.advance(5_000)
        await coord.add_partitions("busy", pid_b, eb, [TP_A])  # Ongoing: never expired
        clock.advance(5_000)
        assert await coord.expire_transactional_ids() == ["idle"]
        assert states_in_log(log, "idle") == ["Empty", "tombstone"]
        assert coord.describe(["idle"])[0].error_code is E.TRANSACTIONAL_ID_NOT_FOUND
        assert pid not in coord.pid_index
        clock.advance(100_000)
        assert await coord.expire_transactional_ids() == []
        # reload: the tombstone removes it
        coord2 = make_coordinator(log=log)
        await load_all(coord2, log)
        assert md(coord2, "idle") is None and md(coord2, "busy") is not None
        # a new init gets a new producer id
        err, pid2, e2 = await coord.init_producer_id("idle", 60_000)
        assert err is E.NONE and pid2 != pid and e2 == 0
        await coord.close()
        await coord2.close()
    run(main)


# ---------------------------------------------------------------------------- markers
def test_marker_failures_are_retried_and_deleted_partitions_skipped() -> None:
    async def main() -> None:
        markers = FakeMarkers()
        markers.script[TP_A] = [E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR]
        markers.missing.add(("gone", 0))
        markers.raise_next = 1
        coord = await started(markers=markers)
        _, pid, e = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e, [TP_A, TP_B, ("gone", 0)])
        assert await coord.end_txn("t1", pid, e, True) is E.NONE
        assert md(coord, "t1").state is TxnState.COMPLETE_COMMIT
        # the deleted partition has no leader: skipped; a failed request retries all of its partitions
        assert [sorted(c.partitions) for c in markers.calls] == [sorted([TP_A, TP_B]), sorted([TP_A, TP_B]),
                                                                 [TP_A], [TP_A]]
        assert sorted(tp for tp, *_ in markers.written) == sorted([TP_A, TP_B])
        await coord.close()
    run(main)


def test_complete_write_failure_is_retried() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers)
        _, pid, e = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e, [TP_A])
        markers.after_write = lambda: setattr(log, "fail_next", 2)  # the CompleteCommit append fails twice
        assert await coord.end_txn("t1", pid, e, True) is E.NONE
        assert states_in_log(log, "t1")[-2:] == ["PrepareCommit", "CompleteCommit"]
        await coord.close()
    run(main)


def test_prepare_write_failure_answers_error_and_allows_retry() -> None:
    async def main() -> None:
        log = FakeLog()
        coord = await started(log)
        _, pid, e = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e, [TP_A])
        log.fail_next = 1
        assert await coord.end_txn("t1", pid, e, True) is E.COORDINATOR_NOT_AVAILABLE
        assert md(coord, "t1").state is TxnState.ONGOING and md(coord, "t1").pending_state is None
        assert await coord.end_txn("t1", pid, e, True) is E.NONE
        await coord.close()
    run(main)


# ---------------------------------------------------------------------------- crash / reload
@pytest.mark.parametrize("cut_after,decided,final", [
    ("Ongoing", None, TxnState.ONGOING),
    ("PrepareCommit", True, TxnState.COMPLETE_COMMIT),
    ("CompleteCommit", None, TxnState.COMPLETE_COMMIT),
    ("PrepareAbort", False, TxnState.COMPLETE_ABORT),
])
def test_crash_at_every_cut_point(cut_after: str, decided: bool | None, final: TxnState) -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers)
        _, pid, e = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e, [TP_A, TP_B])
        await coord.end_txn("t1", pid, e, commit=cut_after != "PrepareAbort")
        await coord.close()
        p = coord.partition_for("t1")
        recs = log.partitions[p]
        idx = next(i for i, (k, v, _) in enumerate(recs)
                   if decode_key(k) == "t1" and v is not None and decode_value(v).state.display_name == cut_after)
        crashed = log.cut({p: idx + 1})

        markers2 = FakeMarkers()
        coord2 = make_coordinator(log=crashed, markers=markers2, store=PidStore())
        await load_all(coord2, crashed)
        await coord2.wait_idle()
        m = md(coord2, "t1")
        assert m.state is final and m.producer_id == pid and m.producer_epoch == e
        if decided is None:
            assert markers2.calls == []
        else:
            c = markers2.calls[0]
            assert c.commit is decided and sorted(c.partitions) == sorted([TP_A, TP_B]) and c.producer_epoch == e
            assert states_in_log(crashed, "t1")[-1] == final.display_name
        if final is TxnState.ONGOING:  # the producer carries on after the coordinator moved
            assert await coord2.end_txn("t1", pid, e, True) is E.NONE
            assert markers2.calls[-1].commit is True
        await coord2.close()
    run(main)


def test_reload_after_many_transactions_matches_memory() -> None:
    async def main() -> None:
        log, clock = FakeLog(), MockClock()
        coord = await started(log, clock=clock)
        ids = [f"txn-{i}" for i in range(12)]
        for i, t in enumerate(ids):
            _, pid, e = await coord.init_producer_id(t, 20_000)
            await coord.add_partitions(t, pid, e, [("t", i % 3)])
            if i % 3 == 0:
                await coord.end_txn(t, pid, e, True)
            elif i % 3 == 1:
                await coord.end_txn(t, pid, e, False)
            clock.advance(7)
        coord2 = make_coordinator(log=log)
        await load_all(coord2, log)
        d1 = coord.describe(ids)
        d2 = coord2.describe(ids)
        assert d1 == d2
        assert coord.list().transactions == coord2.list().transactions
        await coord.close()
        await coord2.close()
    run(main)


def test_producer_ids_never_reused_across_reload() -> None:
    async def main() -> None:
        log, store = FakeLog(), PidStore()
        coord = await started(log, store=store)
        pids = {(await coord.init_producer_id(f"t{i}", 1000))[1] for i in range(5)}
        pids |= {(await coord.init_producer_id(None, 1000))[1] for _ in range(3)}
        await coord.close()
        coord2 = make_coordinator(log=log, store=store)
        await load_all(coord2, log)
        new = {(await coord2.init_producer_id(f"n{i}", 1000))[1] for i in range(5)}
        new.add((await coord2.init_producer_id(None, 1000))[1])
        assert not pids & new and len(pids) == 8
        await coord2.close()
    run(main)


def test_loading_a_prepare_epoch_fence_record_aborts_it() -> None:
    async def main() -> None:
        from oncelog.coordinator.transaction.metadata import TransactionMetadata
        from oncelog.coordinator.transaction.records import encode_txn_record
        log, markers = FakeLog(), FakeMarkers()
        coord = make_coordinator(log=log, markers=markers, transaction_version=1)
        m = TransactionMetadata("f", producer_id=77, producer_epoch=4, state=TxnState.ONGOING,
                                topic_partitions={TP_A}, txn_start_timestamp=1, txn_last_update_timestamp=1)
        fence = m.prepare_fence_producer_epoch()
        p = coord.partition_for("f")
        log.partitions[p] = [(*encode_txn_record("f", fence), 0)]  # type: ignore[list-item]
        await load_all(coord, log)
        await coord.wait_idle()
        got = md(coord, "f")
        assert got.state is TxnState.COMPLETE_ABORT and got.producer_epoch == 5
        assert markers.calls[0].commit is False and markers.calls[0].producer_epoch == 5
        await coord.close()
    run(main)


# ---------------------------------------------------------------------------- describe / list / verify
def test_describe_and_list() -> None:
    async def main() -> None:
        clock = MockClock()
        coord = await started(clock=clock)
        _, p1, e1 = await coord.init_producer_id("a", 10_000)
        _, p2, e2 = await coord.init_producer_id("b", 10_000)
        await coord.add_partitions("a", p1, e1, [TP_A])
        clock.advance(500)
        await coord.add_partitions("b", p2, e2, [TP_B])
        await coord.end_txn("b", p2, e2, True)
        res = coord.list()
        assert res.error_code is E.NONE
        assert {(t.transactional_id, t.state) for t in res.transactions} == {("a", "Ongoing"),
                                                                           ("b", "CompleteCommit")}
        assert [t.transactional_id for t in coord.list(["Ongoing"]).transactions] == ["a"]
        assert [t.transactional_id for t in coord.list(producer_id_filters=[p2]).transactions] == ["b"]
        r = coord.list(["Bogus"])
        assert r.unknown_state_filters == ["Bogus"] and r.transactions == []
        assert [t.transactional_id for t in coord.list(duration_filter_ms=400).transactions] == ["a"]
        d = coord.describe(["a", "zzz", ""])
        assert d[0].state == "Ongoing" and d[0].producer_id == p1 and d[0].transaction_timeout_ms == 10_000
        assert d[1].error_code is E.TRANSACTIONAL_ID_NOT_FOUND and d[2].error_code is E.INVALID_REQUEST
        await coord.close()
    run(main)


def test_verify_only_add_partitions_and_verify_partition() -> None:
    async def main() -> None:
        log = FakeLog()
        coord = await started(log)
        _, pid, e = await coord.init_producer_id("t1", 10_000)
        await coord.add_partitions("t1", pid, e, [TP_A])
        n = log.total()
        assert await coord.add_partitions("t1", pid, e, [TP_A, TP_B], verify_only=True) == {
            TP_A: E.NONE, TP_B: E.INVALID_TXN_STATE}
        assert await coord.add_partitions("t1", pid, e + 1, [TP_A], verify_only=True) == {TP_A: E.PRODUCER_FENCED}
        assert log.total() == n
        assert coord.verify_partition(pid, e, *TP_A, transactional_id="t1") is E.NONE
        assert coord.verify_partition(pid + 1000, e, *TP_A) is E.INVALID_TXN_STATE
        assert coord.verify_partition(pid, e + 1, *TP_A) is E.PRODUCER_FENCED
        await coord.close()
    run(main)


def test_not_coordinator_for_unloaded_partition() -> None:
    async def main() -> None:
        coord = make_coordinator()
        assert (await coord.init_producer_id("t1", 1000))[0] is E.NOT_COORDINATOR
        assert coord.describe(["t1"])[0].error_code is E.NOT_COORDINATOR
        await coord.close()
    run(main)


def test_unload_forgets_the_partition_and_a_reload_at_a_newer_epoch_serves_it_with_that_epoch() -> None:
    async def main() -> None:
        log, markers = FakeLog(), FakeMarkers()
        coord = await started(log, markers=markers)
        _, pid, epoch = await coord.init_producer_id("t1", 10_000)
        assert await coord.add_partitions("t1", pid, epoch, [TP_A]) == {TP_A: E.NONE}
        p = coord.partition_for("t1")
        coord.unload_partition(p, epoch=EPOCH + 1)  # another broker leads it now
        assert pid not in coord.pid_index  # nothing of the partition stays in memory
        assert coord.verify_partition(pid, epoch, *TP_A) is E.INVALID_TXN_STATE
        assert await coord.end_txn("t1", pid, epoch, True) is E.NOT_COORDINATOR
        assert log.written_epochs == [EPOCH, EPOCH]
        # leadership comes back with a newer epoch: the state is read back from the log and writes carry the epoch
        await coord.load_partition(p, EPOCH + 2, log.read(p))
        assert coord.verify_partition(pid, epoch, *TP_A) is E.NONE
        assert await coord.end_txn("t1", pid, epoch, True) is E.NONE
        assert log.written_epochs[2:] == [EPOCH + 2, EPOCH + 2]
        assert [c.coordinator_epoch for c in markers.calls] == [EPOCH + 2]
        await coord.close()
    run(main)


# ---------------------------------------------------------------------------- KIP-939
def test_two_phase_commit_prepared_txn_survives_timeout_and_keep_prepared_init() -> None:
    async def main() -> None:
        clock, markers, log = MockClock(), FakeMarkers(), FakeLog()
        coord = await started(log, markers=markers, clock=clock, transaction_two_phase_commit_enable=True)
        err, pid, e = await coord.init_producer_id("spark-0", 60_000, enable_2pc=True)
        assert err is E.NONE and md(coord, "spark-0").txn_timeout_ms == 2147483647
        await coord.add_partitions("spark-0", pid, e, [TP_A])
        clock.advance(10 * 24 * 3600 * 1000)
        assert await coord.abort_timed_out_transactions() == []  # a prepared 2PC txn never times out
        # a restarted writer keeps the prepared transaction and learns about it
        r = await coord.init_producer_id_ex("spark-0", 60_000, enable_2pc=True, keep_prepared_txn=True)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, pid, e + 1)
        assert (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (pid, e)
        m = md(coord, "spark-0")
        assert m.state is TxnState.ONGOING and m.topic_partitions == {TP_A} and markers.calls == []
        # the old instance is fenced; the new one commits the kept transaction
        assert await coord.end_txn("spark-0", pid, e, True) is E.PRODUCER_FENCED
        assert await coord.end_txn("spark-0", pid, e + 1, True) is E.NONE
        assert markers.calls[-1].commit is True and markers.calls[-1].producer_epoch == e + 1
        # survives a reload
        coord2 = make_coordinator(log=log, transaction_two_phase_commit_enable=True)
        await load_all(coord2, log)
        assert md(coord2, "spark-0").state is TxnState.COMPLETE_COMMIT
        # a plain init (no keep) still aborts an ongoing 2PC transaction
        await coord.add_partitions("spark-0", pid, e + 1, [TP_B])
        assert (await coord.init_producer_id("spark-0", 60_000, enable_2pc=True))[0] is E.CONCURRENT_TRANSACTIONS
        assert markers.calls[-1].commit is False
        await coord.close()
        await coord2.close()
    run(main)


def test_two_phase_commit_needs_the_broker_setting() -> None:
    async def main() -> None:
        coord = await started()
        assert (await coord.init_producer_id("x", 1000, keep_prepared_txn=True))[0] is \
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert (await coord.init_producer_id(None, 1000, enable_2pc=True))[0] is E.INVALID_REQUEST
        await coord.close()
    run(main)
