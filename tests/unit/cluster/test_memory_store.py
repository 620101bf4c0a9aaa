"""The in-memory MetadataStore keeps the protocol's rules (what the controller's tests rely on)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from oncelog.cluster.model import ClusterView, PartitionState, TopicMeta
from oncelog.cluster.store import (
    DuplicateBrokerError,
    MetadataUnavailableError,
    PartitionChange,
    TopicExistsInClusterError,
)
from oncelog.testing.memory_store import MemoryMetadataStore


def topic(name: str, n: int) -> TopicMeta:
    return TopicMeta(name, uuid.uuid4(), n)


def test_compare_and_swap_all_or_nothing() -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        await store.create_topic(topic("t", 2), [PartitionState((1,), (1,), 1)] * 2)
        r0 = store.view.partitions["t", 0].mod_revision
        r1 = store.view.partitions["t", 1].mod_revision
        new = PartitionState((1,), (1,), 1, 1, 1)
        # one stale compare fails the whole write
        assert not await store.update_partitions([PartitionChange(("t", 0), r0, new),
                                                  PartitionChange(("t", 1), r1 - 1, new)])
        assert store.view.partition("t", 0) == PartitionState((1,), (1,), 1)
        before = store.view.revision
        assert await store.update_partitions([PartitionChange(("t", 0), r0, new), PartitionChange(("t", 1), r1, new)])
        view = store.view
        assert view.revision == before + 1
        assert view.partitions["t", 0].mod_revision == view.partitions["t", 1].mod_revision == view.revision
        # 0: the key must not exist
        assert not await store.update_partitions([PartitionChange(("t", 1), 0, new)])
        assert await store.update_partitions([PartitionChange(("t", 7), 0, new)])
        with pytest.raises(ValueError, match="twice"):
            await store.update_partitions([PartitionChange(("t", 0), 0, new), PartitionChange(("t", 0), 0, new)])
        assert await store.update_partitions([])  # nothing to write: no new revision
        assert store.view.revision == view.revision + 1

    asyncio.run(main())


def test_controller_epoch_fences_a_deposed_controller() -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        await store.create_topic(topic("t", 1), [PartitionState((1,), (1,), 1)])
        c1 = store.elect_controller(1)
        assert c1.epoch == store.view.revision
        rev = store.view.partitions["t", 0].mod_revision
        change = PartitionChange(("t", 0), rev, PartitionState((1,), (1,), 1, 1, 1))
        store.resign_controller()
        c2 = store.elect_controller(2)
        assert c2.epoch > c1.epoch
        assert not await store.update_partitions([change], controller_epoch=c1.epoch)
        assert await store.update_partitions([change], controller_epoch=c2.epoch)

    asyncio.run(main())


def test_views_move_forward_and_wait_for_change() -> None:
    async def main() -> None:
        store = MemoryMetadataStore(lagging=True)
        seen: list[ClusterView] = []

        async def watch() -> None:
            seen.append(await store.wait_for_change(store.view.revision))

        task = asyncio.create_task(watch())
        await asyncio.sleep(0)
        info = store.register_broker(1)
        assert info.epoch == store.latest.revision and 1 not in store.view.brokers  # the watch is behind
        await asyncio.sleep(0)
        assert not seen
        store.publish()
        await task
        assert 1 in seen[0].brokers
        # a timeout returns the current view
        current = store.view
        assert await store.wait_for_change(current.revision, timeout=0.01) is current
        assert await store.wait_for_change(current.revision - 1) is current  # already newer: at once
        # read-your-writes: our own write publishes it and everything before it
        store.register_broker(2)
        await store.set_broker_configs(None, {"unclean.leader.election.enable": "true"})
        assert 2 in store.view.brokers and store.view.broker_configs[None]["unclean.leader.election.enable"] == "true"
        assert store.view.revision > current.revision

    asyncio.run(main())


def test_brokers_topics_configs_producer_ids() -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        b = store.register_broker(3, rack="r1")
        with pytest.raises(DuplicateBrokerError):
            store.register_broker(3)
        store.begin_controlled_shutdown(3)
        assert store.view.brokers[3].shutting_down and store.view.brokers[3].epoch == b.epoch
        store.expire_broker(3)
        again = store.register_broker(3)
        assert again.epoch > b.epoch and not again.shutting_down

        await store.create_topic(topic("t", 1), [PartitionState((3,), (3,), 3)])
        with pytest.raises(TopicExistsInClusterError):
            await store.create_topic(topic("t", 1), [PartitionState((3,), (3,), 3)])
        assert not await store.add_partitions("t", 2, [PartitionState((3,), (3,), 3)])
        assert await store.add_partitions("t", 1, [PartitionState((3,), (3,), 3)])
        assert store.view.topics["t"].num_partitions == 2 and store.view.partition("t", 1) is not None
        assert await store.set_topic_configs("t", {"retention.ms": "5"})
        assert store.view.topics["t"].configs == {"retention.ms": "5"}
        assert not await store.set_topic_configs("nope", {})
        assert await store.mark_topic_deleting("t") and store.view.topics["t"].deleting
        await store.remove_topic("t")
        assert "t" not in store.view.topics and not store.view.partitions

        blocks = [await store.allocate_producer_ids(1000) for _ in range(3)]
        assert blocks == [0, 1000, 2000]
        store.unavailable = True
        with pytest.raises(MetadataUnavailableError):
            await store.allocate_producer_ids(1000)

    asyncio.run(main())


def test_independent_changes_and_subscriptions() -> None:
    async def main() -> None:
        store = MemoryMetadataStore()
        sub = store.subscribe()
        await store.create_topic(topic("t", 3), [PartitionState((1,), (1,), 1)] * 3)
        change = await sub.next(timeout=1)
        assert change is not None and change.topics == {"t"} and change.partitions == {("t", i) for i in range(3)}
        ctl = store.elect_controller(1)
        revs = [store.view.partitions["t", i].mod_revision for i in range(3)]
        new = PartitionState((1,), (1,), 1, 1, 1)
        res = await store.apply_partition_changes(
            [PartitionChange(("t", 0), revs[0], new), PartitionChange(("t", 1), revs[1] - 1, new),
             PartitionChange(("t", 2), revs[2], new)], controller_epoch=ctl.epoch)
        assert res.applied == {("t", 0), ("t", 2)} and res.conflicts == {("t", 1)} and not res.fenced
        change = await sub.next(timeout=1)
        assert change is not None and change.partitions == {("t", 0), ("t", 2)} and change.controller
        res = await store.apply_partition_changes([PartitionChange(("t", 1), revs[1], new)],
                                                  controller_epoch=ctl.epoch - 1)
        assert res.fenced and not res.applied and store.view.partition("t", 1) == PartitionState((1,), (1,), 1)
        sub.close()

    asyncio.run(main())
