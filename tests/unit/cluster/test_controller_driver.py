"""The controller driver against the in-memory MetadataStore: failover, bounces, controlled shutdown, lost races,
a lagging watch, deposition, an unreachable service, the periodic rebalance and request-driven decisions."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from oncelog.cluster.controller import (
    ControllerConfig,
    ElectionType,
    alter_reassignments,
    elect_leaders,
    leads_nothing,
)
from oncelog.cluster.controller_driver import ControllerDriver
from oncelog.cluster.model import NO_LEADER, ClusterView, TopicMeta
from oncelog.cluster.partition_change import expand_isr, shrink_isr
from oncelog.cluster.placement import new_topic_partitions
from oncelog.cluster.store import PartitionChange
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.memory_store import MemoryMetadataStore

from .views import check_state

NO_REBALANCE = ControllerConfig(auto_leader_rebalance_enable=False)


class ManualSleep:
    """An injected sleep: durations in ``manual`` wait for :meth:`wake`, others only yield."""

    def __init__(self, manual: frozenset[float] = frozenset()) -> None:
        self.manual = manual
        self.calls: list[float] = []
        self._waiting: list[asyncio.Future[None]] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if seconds not in self.manual:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        await fut

    def wake(self) -> None:
        waiting, self._waiting = self._waiting, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)


async def until(store: MemoryMetadataStore, pred: Callable[[ClusterView], bool], what: str) -> ClusterView:
    for _ in range(2000):
        if pred(store.view):
            return store.view
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}; view: {store.view}")


async def cluster(brokers: int = 3, partitions: int = 6, rf: int = 3,
                  store: MemoryMetadataStore | None = None) -> MemoryMetadataStore:
    store = store or MemoryMetadataStore()
    for b in range(1, brokers + 1):
        store.register_broker(b)
    store.publish()
    states = new_topic_partitions(store.view, partitions, rf, rng=random.Random(1))
    assert isinstance(states, list)
    await store.create_topic(TopicMeta("t", uuid.uuid4(), partitions), states)
    return store


def start(store: MemoryMetadataStore, node: int = 1, config: ControllerConfig = NO_REBALANCE,
          **kw: Any) -> tuple[ControllerDriver, asyncio.Task[None]]:
    info = store.elect_controller(node)
    driver = ControllerDriver(store, info.epoch, config, **kw)
    return driver, asyncio.create_task(driver.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 20))


def all_valid(view: ClusterView) -> bool:
    for vp in view.partitions.values():
        check_state(vp.state)
    return True


def led_by(view: ClusterView, broker: int) -> list[tuple[str, int]]:
    return sorted(tp for tp, vp in view.partitions.items() if vp.state.leader == broker)


def test_first_view_is_reconciled_and_failover_moves_leaders() -> None:
    async def main() -> None:
        store = await cluster()
        gone_early = led_by(store.view, 3)
        assert gone_early
        store.expire_broker(3)  # before any controller runs
        driver, task = start(store)
        view = await until(store, lambda v: not led_by(v, 3) and all(3 not in vp.state.isr
                                                                      for vp in v.partitions.values()),
                           "partitions led by the broker that died before the election to move")
        for tp in gone_early:
            assert view.partition(*tp).leader_epoch == 1  # type: ignore[union-attr]
        # a live failover
        before = view
        store.expire_broker(2)
        view = await until(store, lambda v: not led_by(v, 2), "failover of broker 2's partitions")
        for tp in led_by(before, 2):
            old, s = before.partition(*tp), view.partition(*tp)
            assert old is not None and s is not None
            assert (s.leader, s.isr, s.leader_epoch) == (1, (1,), old.leader_epoch + 1)
        led_by_2 = led_by(before, 2)
        assert all_valid(view) and driver.stats.leader_changes >= len(gone_early) + len(led_by_2)
        # both failovers were timed (the first view, then the view without broker 2)
        assert sum(driver.stats.election_counts) >= 2 and driver.stats.election_seconds > 0
        await stop(task)

    run(main)


def test_last_isr_member_lost_then_back() -> None:
    async def main() -> None:
        store = await cluster(brokers=2, partitions=2, rf=2)
        driver, task = start(store)
        await asyncio.sleep(0.01)
        store.expire_broker(2)
        await until(store, lambda v: all(vp.state.isr == (1,) for vp in v.partitions.values()), "ISR [1]")
        store.expire_broker(1)
        view = await until(store, lambda v: all(vp.state.leader == NO_LEADER for vp in v.partitions.values()),
                           "offline partitions")
        assert all(vp.state.isr == (1,) for vp in view.partitions.values())  # the last member stays
        store.register_broker(2)  # out of sync: never elected with unclean election off
        await asyncio.sleep(0.02)
        assert all(vp.state.leader == NO_LEADER for vp in store.view.partitions.values())
        store.register_broker(1)
        view = await until(store, lambda v: all(vp.state.leader == 1 for vp in v.partitions.values()), "1 back")
        assert all(vp.state.isr == (1,) for vp in view.partitions.values())  # 2 is not put back by the controller
        assert driver.stats.offline == 2
        await stop(task)

    run(main)


def test_after_an_etcd_outage_absent_brokers_are_waited_for() -> None:
    """A stall of etcd expires every lease at once; the brokers register again (same incarnation) within a
    heartbeat. A controller that saw the outage waits for them instead of moving their leaderships; without that
    hold (or once it ran out) it moves them, as for any expired lease."""
    async def main() -> None:
        store = await cluster()
        hold_until = [0.0]
        driver, task = start(store, hold_absent=lambda: hold_until[0])
        await asyncio.sleep(0.01)
        before = store.view
        loop = asyncio.get_running_loop()
        hold_until[0] = loop.time() + 5.0
        first = {b: i.epoch for b, i in before.brokers.items()}
        for b in (1, 2, 3):
            store.expire_broker(b)
        await asyncio.sleep(0.05)
        assert store.view.partitions == before.partitions  # nothing moved while they are away
        assert set(store.view.departed) == {1, 2, 3}
        for b in (1, 2, 3):
            store.register_broker(b, incarnation=first[b])
        await asyncio.sleep(0.05)
        assert store.view.partitions == before.partitions and driver.stats.changes == 0
        # a broker that does not come back: moved off once the hold runs out
        hold_until[0] = loop.time() + 0.5
        store.expire_broker(3)
        await asyncio.sleep(0.05)
        assert led_by(store.view, 3) == led_by(before, 3) != []
        await until(store, lambda v: not led_by(v, 3), "broker 3's partitions moved once the hold ran out")
        assert loop.time() >= hold_until[0]
        await stop(task)

    run(main)


def test_controlled_shutdown() -> None:
    async def main() -> None:
        store = await cluster()
        driver, task = start(store)
        await asyncio.sleep(0.01)
        assert led_by(store.view, 2)
        store.begin_controlled_shutdown(2)
        view = await until(store, lambda v: leads_nothing(v, 2), "broker 2 to lead nothing")
        assert all(2 not in vp.state.isr for vp in view.partitions.values())
        assert all_valid(view)
        await stop(task)

    run(main)


def test_lost_race_with_a_leader_is_decided_again_from_the_newer_view() -> None:
    async def main() -> None:
        store = await cluster(partitions=6)
        tp = min(store.view.partitions)
        state = store.view.partitions[tp].state
        follower = state.replicas[2]
        leader = state.leader
        driver, task = start(store, node=state.replicas[1])
        await asyncio.sleep(0.01)
        assert len(led_by(store.view, leader)) == 2  # the failed write carried both

        def leader_shrinks_isr() -> None:  # the partition's leader drops a follower just before our write lands
            vp = store.latest.partitions[tp]
            shrunk = shrink_isr(vp.state, leader, vp.state.leader_epoch, [follower])
            assert shrunk is not None
            store.put_partition(tp, shrunk)

        store.interleave(leader_shrinks_isr)
        store.expire_broker(leader)
        view = await until(store, lambda v: not led_by(v, leader) and all(leader not in vp.state.isr
                                                                          for vp in v.partitions.values()),
                           "new leaders after the lost race")
        s = view.partitions[tp].state
        assert s.isr == (s.leader,) and follower not in s.isr and driver.stats.lost_races >= 1
        await stop(task)

    run(main)


def test_lagging_watch() -> None:
    async def main() -> None:
        store = await cluster(store=MemoryMetadataStore(lagging=True))
        store.publish()
        (tp, *_) = sorted(store.view.partitions)
        leader = store.view.partitions[tp].state.leader
        driver, task = start(store)
        store.publish()
        await asyncio.sleep(0.01)
        store.expire_broker(leader)
        await asyncio.sleep(0.02)
        assert store.view.partitions[tp].state.leader == leader  # not seen yet: nothing decided
        store.publish()
        await until(store, lambda v: not led_by(v, leader), "failover once the watch delivers")
        await stop(task)

    run(main)


def test_deposed_controller_stops_and_its_write_is_refused() -> None:
    async def main() -> None:
        store = await cluster()
        driver, task = start(store)
        await asyncio.sleep(0.01)
        before = dict(store.view.partitions)

        def new_controller() -> None:
            store.resign_controller()
            store.elect_controller(2)

        store.interleave(new_controller)
        store.expire_broker(3)
        await asyncio.wait_for(task, 5)  # run() returns by itself
        assert driver.stats.lost_races == 1 and not driver.is_active()
        assert store.view.partitions == before  # nothing written by the deposed controller

    run(main)


def test_unreachable_metadata_service_is_retried() -> None:
    async def main() -> None:
        store = await cluster()
        sleep = ManualSleep()
        driver, task = start(store, sleep=sleep, retry_backoff_s=0.5)
        await asyncio.sleep(0.01)
        store.unavailable = True
        store.expire_broker(3)
        await asyncio.sleep(0.02)
        assert led_by(store.view, 3) and driver.stats.unavailable >= 1 and 0.5 in sleep.calls
        store.unavailable = False
        await until(store, lambda v: not led_by(v, 3), "failover once etcd is back")
        await stop(task)

    run(main)


def test_periodic_preferred_leader_rebalance() -> None:
    async def main() -> None:
        store = await cluster()
        sleep = ManualSleep(manual=frozenset({300.0}))
        preferred = {tp: vp.state.preferred_leader for tp, vp in store.view.partitions.items()}
        driver, task = start(store, config=ControllerConfig(), sleep=sleep)
        await asyncio.sleep(0.01)
        store.expire_broker(1)
        await until(store, lambda v: not led_by(v, 1), "failover off broker 1")
        store.register_broker(1)
        await asyncio.sleep(0.01)
        assert not led_by(store.view, 1)  # back, but out of every ISR
        for tp, vp in store.view.partitions.items():  # each leader adds 1 back once it has caught up
            grown = expand_isr(vp.state, vp.state.leader, vp.state.leader_epoch, [1])
            assert grown is not None
            assert await store.update_partitions([PartitionChange(tp, vp.mod_revision, grown)])
        await asyncio.sleep(0.01)
        assert not led_by(store.view, 1)  # nothing moves before the check interval
        sleep.wake()
        await until(store, lambda v: all(v.partitions[tp].state.leader == p for tp, p in preferred.items()),
                    "leaders back on their preferred replicas")
        assert driver.stats.rebalances == 1 and 300.0 in sleep.calls
        await stop(task)

    run(main)


def test_requests_through_apply_and_a_reassignment_to_the_end() -> None:
    async def main() -> None:
        store = await cluster(brokers=4, partitions=1)
        (tp,) = store.view.partitions
        driver, task = start(store)
        await asyncio.sleep(0.01)
        state = store.view.partitions[tp].state
        newcomer, dropped = 4, state.replicas[2]  # a follower makes room for broker 4, the new preferred leader
        target = [newcomer, *state.replicas[:2]]
        results = await driver.apply(lambda v: alter_reassignments(v, [(tp, target)], driver.config))
        assert results[tp].ok
        s = store.view.partitions[tp].state
        assert (s.replicas, s.adding, s.removing) == ((*target, dropped), (4,), (dropped,))
        # the new replica catches up; its leader adds it to the ISR; the controller completes the reassignment
        vp = store.view.partitions[tp]
        grown = expand_isr(vp.state, vp.state.leader, vp.state.leader_epoch, [newcomer])
        assert grown is not None
        assert await store.update_partitions([PartitionChange(tp, vp.mod_revision, grown)])
        view = await until(store, lambda v: not v.partitions[tp].state.removing, "the reassignment to complete")
        s = view.partitions[tp].state
        assert s.replicas == tuple(target) and set(s.isr) == set(target) and s.leader == state.leader
        assert s.leader_epoch == state.leader_epoch + 1  # a replica was dropped: its fetches must be fenced
        # ElectLeaders through apply, losing a race once: the written result is kept
        store.interleave(lambda: store.put_partition(tp, store.latest.partitions[tp].state))
        results = await driver.apply(lambda v: elect_leaders(v, ElectionType.PREFERRED, [tp], driver.config))
        assert results[tp].code in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
        assert store.view.partitions[tp].state.leader == newcomer and driver.stats.lost_races >= 1
        await stop(task)

    run(main)


def test_large_failover_is_written_in_batches() -> None:
    async def main() -> None:
        store = await cluster(partitions=300)
        led = set(led_by(store.view, 2))
        victim_led = len(led)
        driver, task = start(store, max_changes_per_write=40)
        await asyncio.sleep(0.01)
        writes = driver.stats.writes
        calls: list[list[PartitionChange]] = []
        apply = store.apply_partition_changes

        async def spy(changes: Any, **kw: Any) -> Any:
            calls.append(list(changes))
            return await apply(changes, **kw)

        store.apply_partition_changes = spy  # type: ignore[method-assign]
        last = max(store.view.partitions)
        for _ in range(3):  # leaders keep writing one of the partitions: smaller batches get through
            store.interleave(lambda: store.put_partition(last, store.latest.partitions[last].state))
        store.expire_broker(2)
        view = await until(store, lambda v: all(2 not in vp.state.isr for vp in v.partitions.values()),
                           "broker 2 out of every ISR")
        assert victim_led == 100 and all_valid(view)
        assert driver.stats.writes - writes >= 300 // 40  # 300 partitions changed, at most 40 per write
        assert driver.stats.lost_races >= 1
        # the elections of the partitions broker 2 led come first: the first calls hold only those
        first = [c for call in calls[:100 // 40] for c in call]
        assert len(first) == 80 and all(c.state.leader != 2 and c.tp in led for c in first)
        await stop(task)

    run(main)

