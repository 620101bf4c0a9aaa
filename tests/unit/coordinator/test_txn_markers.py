"""The marker driver (Kafka's TransactionMarkerChannelManager + TransactionMarkerRequestCompletionHandler) behind the
transaction coordinator, with a scripted MarkerChannel whose partitions can have leaders on other brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from oncelog.coordinator.transaction.coordinator import TransactionCoordinator
from oncelog.coordinator.transaction.state import TxnState
from oncelog.protocol.errors import ErrorCode as E

from .txn_fakes import EPOCH, FakeLog, FakeMarkers, load_all, make_coordinator

TP_A = ("orders", 0)
TP_B = ("payments", 3)
TP_C = ("audit", 1)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(fn())


async def started(markers: FakeMarkers, log: FakeLog | None = None) -> TransactionCoordinator:
    log = log if log is not None else FakeLog()
    coord = make_coordinator(log=log, markers=markers)
    await load_all(coord, log)
    return coord


async def ongoing(coord: TransactionCoordinator, txn_id: str, partitions: list[tuple[str, int]]) -> tuple[int, int]:
    err, pid, epoch = await coord.init_producer_id(txn_id, 60_000)
    assert err is E.NONE
    assert set((await coord.add_partitions(txn_id, pid, epoch, partitions)).values()) == {E.NONE}
    return pid, epoch


def state(coord: TransactionCoordinator, txn_id: str) -> TxnState:
    shard = coord.runtime.shard(coord.partition_for(txn_id))
    assert shard is not None
    return shard.txns[txn_id].state


def test_markers_for_other_brokers_are_batched_per_destination() -> None:
    async def main() -> None:
        markers = FakeMarkers(leaders={TP_A: 1, TP_B: 2, TP_C: 1})
        coord = await started(markers)
        ids = ["tx-a", "tx-b", "tx-c"]
        pids = {t: await ongoing(coord, t, [TP_A, TP_B]) for t in ids}
        codes = await asyncio.gather(*[coord.end_txn(t, *pids[t], commit=True) for t in ids])
        assert codes == [E.NONE] * 3 and {state(coord, t) for t in ids} == {TxnState.COMPLETE_COMMIT}
        # each transaction sent one marker to each leader, and the markers of transactions completing together
        # left for a broker in one request
        assert sorted((c.broker, c.producer_id) for c in markers.calls) == sorted(
            (b, pids[t][0]) for t in ids for b in (1, 2))
        assert sum(n for _, n in markers.requests) == 6 and len(markers.requests) < 6
        assert all(c.coordinator_epoch == EPOCH for c in markers.calls)
        await coord.close()
    run(main)


def test_a_partition_that_moved_is_retried_at_its_new_leader() -> None:
    async def main() -> None:
        markers = FakeMarkers(leaders={TP_A: 1, TP_B: 0})
        coord = await started(markers)
        pid, epoch = await ongoing(coord, "t", [TP_A, TP_B])
        markers.script[TP_A] = [E.NOT_LEADER_OR_FOLLOWER]

        def moved() -> None:
            markers.leaders[TP_A] = 2  # the controller elected another leader meanwhile
        markers.after_write = moved
        assert await coord.end_txn("t", pid, epoch, commit=False) is E.NONE
        assert [(c.broker, c.partitions) for c in markers.calls] == [(0, [TP_B]), (1, [TP_A]), (2, [TP_A])]
        assert state(coord, "t") is TxnState.COMPLETE_ABORT
        await coord.close()
    run(main)


def test_a_request_that_fails_as_a_whole_retries_all_its_partitions() -> None:
    async def main() -> None:
        markers = FakeMarkers(leaders={TP_A: 1, TP_C: 1, TP_B: 2}, raise_next=1)
        coord = await started(markers)
        pid, epoch = await ongoing(coord, "t", [TP_A, TP_B, TP_C])
        assert await coord.end_txn("t", pid, epoch, commit=True) is E.NONE
        sent = [(c.broker, sorted(c.partitions)) for c in markers.calls]
        failed = sent[0]  # the first request to answer failed (connection lost): both of its partitions again
        assert sent.count(failed) == 2 and len(sent) == 3
        assert sorted(tp for tp, *_ in markers.written) == sorted([TP_A, TP_B, TP_C])
        await coord.close()
    run(main)


def test_unknown_partition_is_retried_until_the_lookup_says_its_topic_is_gone() -> None:
    async def main() -> None:
        markers = FakeMarkers(leaders={TP_A: 1})
        coord = await started(markers)
        pid, epoch = await ongoing(coord, "t", [TP_A, TP_B])
        # the leader does not know the partition (yet): retried while the lookup still finds a leader
        markers.script[TP_A] = [E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION]

        def deleted_after_two() -> None:
            if len([c for c in markers.calls if c.broker == 1]) == 2:
                markers.missing.add(TP_A)  # then the topic is deleted: its marker is not needed any more
        markers.after_write = deleted_after_two
        assert await coord.end_txn("t", pid, epoch, commit=True) is E.NONE
        assert [c.partitions for c in markers.calls if c.broker == 1] == [[TP_A]] * 2
        assert state(coord, "t") is TxnState.COMPLETE_COMMIT
        await coord.close()
    run(main)


def test_unsupported_partition_needs_no_marker() -> None:
    async def main() -> None:
        markers = FakeMarkers(script={TP_A: [E.UNSUPPORTED_FOR_MESSAGE_FORMAT]})
        coord = await started(markers)
        pid, epoch = await ongoing(coord, "t", [TP_A, TP_B])
        assert await coord.end_txn("t", pid, epoch, commit=True) is E.NONE
        assert len(markers.calls) == 1 and state(coord, "t") is TxnState.COMPLETE_COMMIT
        await coord.close()
    run(main)


def test_a_fenced_coordinator_stops_completing() -> None:
    for refusal in (E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED):
        async def main() -> None:
            markers = FakeMarkers(leaders={TP_A: 1}, script={TP_A: [refusal]})
            log = FakeLog()
            coord = await started(markers, log)
            pid, epoch = await ongoing(coord, "t", [TP_A, TP_B])
            # a newer coordinator (or producer epoch) owns the transaction now: no retry, no Complete* record
            assert await coord.end_txn("t", pid, epoch, commit=True) is E.NOT_COORDINATOR
            await coord.wait_idle()
            assert len([c for c in markers.calls if c.broker == 1]) == 1
            assert state(coord, "t") is TxnState.PREPARE_COMMIT
            await coord.close()
        run(main)


def test_a_coordinator_that_lost_the_partition_stops_completing() -> None:
    async def main() -> None:
        markers = FakeMarkers(script={TP_A: [E.NOT_ENOUGH_REPLICAS]})
        log = FakeLog()
        coord = await started(markers, log)
        pid, epoch = await ongoing(coord, "t", [TP_A])
        p = coord.partition_for("t")
        markers.after_write = lambda: coord.unload_partition(p, EPOCH + 1)  # leadership moved during the send
        assert await coord.end_txn("t", pid, epoch, commit=True) is E.NOT_COORDINATOR
        await coord.wait_idle()
        assert len(markers.calls) == 1  # not retried by the old coordinator
        # the new coordinator loads the partition and finishes what was decided
        markers.after_write = None
        await coord.load_partition(p, EPOCH + 1, log.read(p))
        await coord.wait_idle()
        assert state(coord, "t") is TxnState.COMPLETE_COMMIT
        assert [c.coordinator_epoch for c in markers.calls] == [EPOCH, EPOCH + 1]
        await coord.close()
    run(main)
