"""A replicated partition on real log files: the leader's high watermark over the ISR (its own durable end in the
durable default), acks=all waiters, leadership changes, ISR expansion proposals, and where a follower truncates."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from oncelog.broker.handlers._fetch_read import _replica_fetch
from oncelog.broker.partition import Partition, Role
from oncelog.broker.replication.fetcher import epoch_end_for, truncation_of
from oncelog.cluster.replica import IsrChange
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition
from oncelog.protocol.messages.fetch_response import PartitionData
from oncelog.protocol.records import RecordBatchBuilder, iter_batch_headers
from oncelog.storage import LogConfig, PartitionLog
from oncelog.testing import MockClock


class _Host:
    def __init__(self, node_id: int = 1) -> None:
        self.node_id = node_id
        self.now = 1_000
        self.epochs = {1: 10, 2: 20, 3: 30}
        self.changes: list[IsrChange] = []

    def now_ms(self) -> int:
        return self.now

    def live_broker_epochs(self) -> dict[int, int]:
        return dict(self.epochs)

    def write_isr_change(self, partition: Partition, change: IsrChange) -> None:
        self.changes.append(change)


def _partition(tmp_path: Path, *, durable: bool = False, min_isr: int = 2) -> Partition:
    plog = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(min_insync_replicas=min_isr), MockClock(),
                             clean_shutdown=True)
    return Partition("t", 0, uuid.uuid4(), plog, durable_per_append=durable, mark_dirty=lambda p, n, lazy: None,
                     replicated=True)


def _append(p: Partition, n: int) -> int:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(1_700_000_000_000, None, b"v%d" % i)
    buf = bytearray(b.build())
    return p.append(buf, list(iter_batch_headers(buf)), None).last_offset


def test_new_partition_has_no_role_and_no_epoch_entry(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    assert p.role is Role.NONE and not p.is_leader
    assert p.log.latest_epoch is None  # a single node would have recorded epoch 0 here


def test_leader_high_watermark_is_the_minimum_over_the_isr(tmp_path: Path) -> None:
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path)
        assert p.make_leader(host, 5, (1, 2, 3), (1, 2, 3), 7, 100, 30_000)
        assert p.log.latest_epoch == 5
        last = _append(p, 3)
        waiter = p.wait_replicated(last)
        assert p.high_watermark == 0 and not waiter.done()  # the followers have not fetched yet
        assert p.on_replica_fetch(2, 3, 0, 20)
        assert p.high_watermark == 0  # 3 is in the ISR and still at -1
        assert p.on_replica_fetch(3, 2, 0, 30)
        assert p.high_watermark == 2 and not waiter.done()
        assert p.on_replica_fetch(3, 3, 0, 30)
        assert p.high_watermark == 3
        assert waiter.done() and waiter.result() == ErrorCode.NONE
        assert not p.on_replica_fetch(9, 3, 0, 90)  # not a replica

    asyncio.run(main())


def test_durable_leader_counts_its_own_durable_end(tmp_path: Path) -> None:
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path, durable=True)
        p.make_leader(host, 1, (1, 2), (1, 2), 1, 100, 30_000)
        _append(p, 4)
        p.on_replica_fetch(2, 4, 0, 20)
        assert p.high_watermark == 0  # the leader has not fsynced yet
        p.on_durable(p.log.flush())
        assert p.high_watermark == 4

    asyncio.run(main())


def test_high_watermark_does_not_advance_under_min_isr(tmp_path: Path) -> None:
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path, min_isr=2)
        p.make_leader(host, 1, (1, 2, 3), (1,), 3, 100, 30_000)
        _append(p, 2)
        p.on_replica_fetch(2, 2, 0, 20)
        assert p.high_watermark == 0
        assert host.changes == [IsrChange((1, 2), 3, added=2)]  # caught up: proposed for the ISR
        p.make_leader(host, 1, (1, 2, 3), (1, 2), 4, 101, 30_000)  # the view shows it: same epoch, new ISR
        assert p.leader_replicas is not None and p.leader_replicas.pending is None
        assert p.high_watermark == 2

    asyncio.run(main())


def test_losing_leadership_fails_acks_all_waiters(tmp_path: Path) -> None:
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path)
        p.make_leader(host, 1, (1, 2), (1, 2), 1, 100, 30_000)
        waiter = p.wait_replicated(_append(p, 1))
        p.make_follower(2, 2)
        assert waiter.result() == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert p.role is Role.FOLLOWER and p.leader_epoch == 2 and p.leader_replicas is None
        assert p.wait_replicated(0).result() == ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(main())


def test_shrink_drops_a_follower_that_stopped_fetching(tmp_path: Path) -> None:
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path)
        p.make_leader(host, 1, (1, 2, 3), (1, 2, 3), 1, 100, 1_000)
        _append(p, 1)
        host.now += 500
        p.on_replica_fetch(2, 1, 0, 20)
        host.now += 1_000
        p.maybe_shrink_isr()
        assert host.changes == [IsrChange((1, 2), 1, removed=frozenset({3}))]

    asyncio.run(main())


def test_epoch_end_for() -> None:
    entries = [(1, 0), (3, 10), (4, 20)]
    assert epoch_end_for(entries, 30, 0) is None
    assert epoch_end_for(entries, 30, 1) == (1, 10)
    assert epoch_end_for(entries, 30, 2) == (1, 10)
    assert epoch_end_for(entries, 30, 3) == (3, 20)
    assert epoch_end_for(entries, 30, 4) == (4, 30)
    assert epoch_end_for(entries, 30, 9) == (4, 30)
    assert epoch_end_for([], 0, 1) is None


def test_follower_truncates_where_the_epochs_diverge(tmp_path: Path) -> None:
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path)
        p.make_leader(host, 1, (1, 2), (1, 2), 1, 100, 30_000)
        _append(p, 5)  # 0-4 at epoch 1
        p.make_leader(host, 3, (1, 2), (1, 2), 2, 101, 30_000)
        _append(p, 5)  # 5-9 at epoch 3, never replicated
        p.make_follower(2, 4)
        # the new leader had epoch 1 up to 7 (it never saw epoch 3): it answers (1, 7) for our epoch 3
        cut = truncation_of(p, 1, 7)
        assert cut.offset == 5 and cut.done  # our epoch 1 ends at 5: min(5, 7)
        # the leader knows epoch 3 but it ended at 6 there
        cut = truncation_of(p, 3, 6)
        assert cut.offset == 6 and cut.done
        # the leader's answer is an epoch we do not have (2): back to our end of epoch 1, ask again
        cut = truncation_of(p, 2, 8)
        assert cut.offset == 5 and not cut.done

    asyncio.run(main())


def test_replica_fetch_answers_a_diverging_epoch(tmp_path: Path) -> None:
    """Kafka's Partition.fetchRecords: a follower whose last fetched epoch ends here below its fetch offset gets
    the epoch and end offset to truncate to, and its fetch offset is not recorded."""
    async def main() -> None:
        host = _Host()
        p = _partition(tmp_path)
        p.make_leader(host, 1, (1, 2), (1, 2), 1, 100, 30_000)
        _append(p, 5)  # 0-4 at epoch 1
        p.make_leader(host, 3, (1, 2), (1, 2), 2, 101, 30_000)
        _append(p, 3)  # 5-7 at epoch 3

        def fetch(last_epoch: int, offset: int, replica: int = 2) -> tuple[bool, PartitionData]:
            out = PartitionData()
            ok = _replica_fetch(p, FetchPartition(partition=0, current_leader_epoch=3, fetch_offset=offset,
                                                  last_fetched_epoch=last_epoch), out, replica, -1, 15)
            return ok, out

        ok, out = fetch(2, 7)  # epoch 2 is not here: epoch 1, which ended at 5
        assert not ok and (out.diverging_epoch.epoch, out.diverging_epoch.end_offset) == (1, 5)
        ok, out = fetch(1, 6)  # epoch 1 ended at 5, below the fetch offset
        assert not ok and (out.diverging_epoch.epoch, out.diverging_epoch.end_offset) == (1, 5)
        ok, out = fetch(3, 9)  # past the log end of the current epoch
        assert not ok and (out.diverging_epoch.epoch, out.diverging_epoch.end_offset) == (3, 8)
        assert p.leader_replicas is not None and p.leader_replicas.followers[2].end_offset == -1
        ok, out = fetch(1, 5)  # consistent: recorded
        assert ok and out.diverging_epoch.epoch == -1 and p.leader_replicas.followers[2].end_offset == 5
        ok, out = fetch(3, 8, replica=7)  # not a replica
        assert not ok and out.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(main())
