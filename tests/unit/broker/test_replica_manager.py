"""The replica manager against the in-memory metadata store and real logs: local logs follow the view, roles follow
the leader, and the leader's ISR expansion is written to the store as a compare-and-swap."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import MappingProxyType

from oncelog.broker.settings.config import BrokerConfig
from oncelog.broker.partition import Role
from oncelog.broker.replication.manager import ReplicaManager
from oncelog.broker.server import log_defaults
from oncelog.broker.topics import TopicRegistry
from oncelog.cluster.changes import diff
from oncelog.cluster.model import ClusterView, PartitionState, TopicMeta
from oncelog.protocol.records import RecordBatchBuilder, iter_batch_headers
from oncelog.storage import LogConfig, LogManager
from oncelog.testing import MockClock
from oncelog.testing.memory_store import MemoryMetadataStore


def _registry(tmp_path: Path) -> TopicRegistry:
    logs = LogManager.open(tmp_path / "data", LogConfig(), MockClock())
    return TopicRegistry(logs, durable_per_append=False, mark_dirty=lambda p, n, lazy: None, replicated=True)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_replicas_follow_the_view_and_the_leader_writes_its_isr(tmp_path: Path) -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        epochs = {n: store.register_broker(n, port=1).epoch for n in (1, 2, 3)}
        topics = _registry(tmp_path)
        stray = topics.create("stray", 1)  # a local topic the cluster does not have
        assert stray.partitions[0].role is Role.NONE
        meta = TopicMeta("t", uuid.uuid4(), 1, MappingProxyType({"min.insync.replicas": "2"}))
        await store.create_topic(meta, [PartitionState((1, 2, 3), (1, 2), 1, leader_epoch=3, partition_epoch=5)])
        now = [1_000]
        rm = ReplicaManager(BrokerConfig.load(None, {"node.id": 1}), topics, store, lambda: now[0], durable=False)
        heard: list[tuple[str, int, int | None]] = []
        rm.add_leadership_listener(lambda t, i, e: heard.append((t, i, e)))
        seen = store.view
        rm.on_view(diff(ClusterView(), seen))
        assert heard == [("t", 0, 3)]
        assert topics.get("stray") is None
        view = topics.get("t")
        assert view is not None and view.topic_id == meta.topic_id
        p = view.partitions[0]
        assert p.role is Role.LEADER and p.leader_epoch == 3 and p.log.latest_epoch == 3

        b = RecordBatchBuilder()
        b.append(0, None, b"v")
        buf = bytearray(b.build())
        p.append(buf, list(iter_batch_headers(buf)), None)
        p.on_replica_fetch(2, 1, 0, epochs[2])
        assert p.high_watermark == 1
        p.on_replica_fetch(3, 1, 0, epochs[3])  # caught up: the leader adds it (a CAS in the store)
        await _settle()
        state = store.view.partition("t", 0)
        assert state is not None and state.isr == (1, 2, 3) and state.partition_epoch == 6
        rm.on_view(diff(seen, store.view))
        seen = store.view
        assert p.leader_replicas is not None and p.leader_replicas.isr == {1, 2, 3}
        assert p.leader_replicas.pending is None

        store.put_partition(("t", 0), PartitionState((1, 2, 3), (2, 3), 2, leader_epoch=4, partition_epoch=7))
        rm.on_view(diff(seen, store.view))
        seen = store.view
        assert p.role is Role.FOLLOWER and p.leader_id == 2 and p.leader_epoch == 4
        assert heard == [("t", 0, 3), ("t", 0, None)]
        assert rm.fetchers.following(("t", 0)) == 2

        await store.mark_topic_deleting("t")
        rm.on_view(diff(seen, store.view))
        assert topics.get("t") is None and rm.fetchers.following(("t", 0)) is None
        assert p.deleted
        await rm.stop()
        topics.logs.close()

    asyncio.run(main())


def test_a_stale_isr_proposal_is_dropped_not_written(tmp_path: Path) -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        epochs = {n: store.register_broker(n, port=1).epoch for n in (1, 2)}
        topics = _registry(tmp_path)
        await store.create_topic(TopicMeta("t", uuid.uuid4(), 1),
                                 [PartitionState((1, 2), (1,), 1, leader_epoch=1, partition_epoch=1)])
        rm = ReplicaManager(BrokerConfig.load(None, {"node.id": 1}), topics, store, lambda: 0, durable=False)
        rm.on_view(diff(ClusterView(), store.view))
        p = topics.get("t").partitions[0]  # type: ignore[union-attr]
        # another writer changes the partition first: the leader's expansion (decided at epoch 1) loses
        store.interleave(lambda: store.put_partition(
            ("t", 0), PartitionState((1, 2), (1,), 1, leader_epoch=1, partition_epoch=2)))
        p.on_replica_fetch(2, 0, 0, epochs[2])
        await _settle()
        state = store.view.partition("t", 0)
        assert state is not None and state.isr == (1,)
        assert p.leader_replicas is not None and p.leader_replicas.pending is None  # decided again next fetch
        await rm.stop()
        topics.logs.close()

    asyncio.run(main())


def test_min_insync_replicas_of_the_broker_is_the_topic_default() -> None:
    assert log_defaults(BrokerConfig.load(None, {"min.insync.replicas": 2})).min_insync_replicas == 2
    assert log_defaults(BrokerConfig.load(None, {})).min_insync_replicas == 1


def test_closing_a_fetcher_ends_its_loop_even_when_a_cancellation_is_swallowed(tmp_path: Path) -> None:
    """Before Python 3.12, wait_for (the fetcher's request timeout) returns an answer and drops the cancellation
    that met it (gh-86296): close() must still end the fetcher's loop, or a broker's shutdown waits on it."""
    async def main() -> None:
        store = MemoryMetadataStore()
        for n in (1, 2):
            store.register_broker(n, port=1)  # nothing listens there: the follower's fetches fail and it pauses
        topics = _registry(tmp_path)
        meta = TopicMeta("t", uuid.uuid4(), 1, MappingProxyType({}))
        await store.create_topic(meta, [PartitionState((2, 1), (2, 1), 2, leader_epoch=1, partition_epoch=1)])
        config = BrokerConfig.load(None, {"node.id": 1, "replica.fetch.backoff.ms": 20})
        rm = ReplicaManager(config, topics, store, lambda: 0, durable=False)
        rm.on_view(diff(ClusterView(), store.view))
        fetcher = rm.fetchers.fetchers[2]
        swallowed: list[float] = []

        async def pause(seconds: float) -> None:
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(seconds)  # the first one, as wait_for drops one that meets a result

        fetcher._pause = pause  # type: ignore[method-assign]
        await asyncio.sleep(0.2)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(rm.fetchers.close(), 5)  # without the fix: the loop runs on until this times out
        assert swallowed, "the fetcher was not pausing when it was closed"
        assert loop.time() - start < 2

    asyncio.run(main())


def test_partition_changes_reconcile_those_partitions_and_their_topic_only_when_needed(tmp_path: Path) -> None:
    """After a broker loss thousands of partitions change one etcd transaction at a time: each view change
    reconciles the partitions it names, not every partition of their topics, unless the local log must follow."""

    class Recording(ReplicaManager):
        reconciled: list[tuple[str, int]] = []

        def _reconcile_partition(self, view: ClusterView, tp: tuple[str, int]) -> None:
            self.reconciled.append(tp)
            super()._reconcile_partition(view, tp)

    async def main() -> None:
        store = MemoryMetadataStore()
        for n in (1, 2, 3):
            store.register_broker(n, port=1)
        topics = _registry(tmp_path)
        await store.create_topic(TopicMeta("big", uuid.uuid4(), 300),
                                 [PartitionState((1, 2, 3), (1, 2, 3), 1 + i % 3, leader_epoch=1, partition_epoch=1)
                                  for i in range(300)])
        await store.create_topic(TopicMeta("elsewhere", uuid.uuid4(), 2),
                                 [PartitionState((2, 3), (2, 3), 2, leader_epoch=1, partition_epoch=1)] * 2)
        rm = Recording(BrokerConfig.load(None, {"node.id": 1}), topics, store, lambda: 0, durable=False)
        seen = store.view
        rm.on_view(diff(ClusterView(), seen))
        assert len(rm.reconciled) == 302 and topics.get("elsewhere") is None  # (no local log of "elsewhere")
        # broker 2 is lost: this broker leads two of its partitions, and leaves the ISR of a third
        rm.reconciled.clear()
        for i, state in ((1, PartitionState((1, 2, 3), (1, 3), 1, leader_epoch=2, partition_epoch=2)),
                         (4, PartitionState((1, 2, 3), (1, 3), 1, leader_epoch=2, partition_epoch=2)),
                         (0, PartitionState((1, 2, 3), (1, 3), 1, leader_epoch=1, partition_epoch=2))):
            store.put_partition(("big", i), state)
        rm.on_view(diff(seen, store.view))
        seen = store.view
        assert sorted(rm.reconciled) == [("big", 0), ("big", 1), ("big", 4)]
        big = topics.get("big")
        assert big is not None and [big.partitions[i].role for i in (1, 2, 4)] == [Role.LEADER, Role.FOLLOWER,
                                                                                     Role.LEADER]
        assert big.partitions[0].leader_replicas is not None and big.partitions[0].leader_replicas.isr == {1, 3}
        # a reassignment onto this broker, by a partition change only: its topic gets a local log here
        store.put_partition(("elsewhere", 1), PartitionState((2, 3, 1), (2, 3), 2, leader_epoch=1,
                                                             partition_epoch=2, adding=(1,)))
        rm.on_view(diff(seen, store.view))
        seen = store.view
        other = topics.get("elsewhere")
        assert other is not None and other.partitions[1].role is Role.FOLLOWER
        # ... and moved off again: the local log goes
        store.put_partition(("elsewhere", 1), PartitionState((2, 3), (2, 3), 2, leader_epoch=1, partition_epoch=3))
        rm.on_view(diff(seen, store.view))
        assert topics.get("elsewhere") is None
        await rm.stop()
        topics.logs.close()

    asyncio.run(main())
