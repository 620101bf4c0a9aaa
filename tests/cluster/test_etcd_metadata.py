"""The etcd metadata store against a real etcd: registration and its lease, controller election and fencing,
compare-and-swap conflicts, producer-id blocks, topics written in several transactions, clear start-up errors.

Brokers that must die like brokers (SIGKILL, SIGSTOP) run as ``_member.py`` processes; the others are stores in
the test's own event loop. Sessions use a 3 s lease (etcd's minimum is 2 s) to keep the tests short.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from _member import Member

from oncelog.cluster._etcd import Etcd, Put
from oncelog.cluster.metadata import EtcdMetadata, EtcdUnreachableError, Session
from oncelog.cluster.model import BrokerInfo, Keys, PartitionState, TopicMeta
from oncelog.cluster.store import DuplicateBrokerError, PartitionChange, TopicExistsInClusterError
from oncelog.testing.broker_process import free_port
from oncelog.testing.etcd_process import EtcdProcess

SESSION_MS = 3000
SLACK_S = 3.0  # etcd checks expiry every 500 ms; a loaded 2-core box adds scheduling delays


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 120))


async def connect(etcd: EtcdProcess, cluster: str, **kw: Any) -> EtcdMetadata:
    kw.setdefault("session_timeout_ms", SESSION_MS)
    kw.setdefault("heartbeat_interval_ms", 750)
    return await EtcdMetadata.connect([etcd.endpoint], cluster, **kw)


def states(n: int, leader: int = 1) -> list[PartitionState]:
    return [PartitionState((1, 2, 3), (1, 2, 3), leader) for _ in range(n)]


async def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``cond()``; fails the test after ``timeout``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


def test_cluster_id_is_created_once_and_shared(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        stores = await asyncio.gather(*(connect(etcd, cluster_name) for _ in range(4)))
        ids = {s.cluster_id for s in stores}
        assert len(ids) == 1 and len(ids.pop()) == 22  # Kafka's format: a UUID in URL-safe base64
        other = await connect(etcd, cluster_name + "-other")
        assert other.cluster_id != stores[0].cluster_id
        for s in [*stores, other]:
            await s.close()

    run(main)


def test_unreachable_at_start_is_one_clear_line() -> None:
    async def main() -> None:
        port = free_port()
        t0 = time.monotonic()
        with pytest.raises(EtcdUnreachableError) as err:
            await EtcdMetadata.connect(f"etcd://127.0.0.1:{port}", "c", timeout=1.0)
        msg = str(err.value)
        assert time.monotonic() - t0 < 5
        assert "\n" not in msg and f"127.0.0.1:{port}" in msg and "etcd" in msg and "--metadata" in msg

    run(main)


def test_duplicate_node_id_refused_while_the_first_lives_accepted_after_its_lease_expires(
        etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        first = await Member(etcd.endpoint, cluster_name, 1, 9101, SESSION_MS).start()
        epoch1 = (await first.expect("registered"))["registered"]
        second = await connect(etcd, cluster_name)
        try:
            with pytest.raises(DuplicateBrokerError) as err:
                await second.register(BrokerInfo(1, "127.0.0.1", 9102))
            assert "node id 1" in str(err.value) and "127.0.0.1:9101" in str(err.value)
            assert "\n" not in str(err.value)
            assert second.view.brokers[1].port == 9101  # the first keeps its registration
            await asyncio.sleep(SESSION_MS / 1000 + 1)  # the first still lives: still refused
            with pytest.raises(DuplicateBrokerError):
                await second.register(BrokerInfo(1, "127.0.0.1", 9102))

            await first.kill()  # dies without deregistering: its lease has to expire
            t0 = time.monotonic()
            while True:
                try:
                    me = await second.register(BrokerInfo(1, "127.0.0.1", 9102))
                    break
                except DuplicateBrokerError:
                    await asyncio.sleep(0.1)
            took = time.monotonic() - t0
            assert took < SESSION_MS / 1000 + SLACK_S, took
            assert me.epoch > epoch1 and second.view.brokers[1] == me
        finally:
            await first.kill()
            await second.close()

    run(main)


def test_a_restarted_broker_takes_over_its_own_stale_registration(etcd: EtcdProcess, cluster_name: str) -> None:
    """Same node id and same listener: the old process is gone (the new one holds the listener), no waiting."""

    async def main() -> None:
        old = await Member(etcd.endpoint, cluster_name, 2, 9201, 60_000).start()
        old_epoch = (await old.expect("registered"))["registered"]
        await old.kill()
        new = await connect(etcd, cluster_name)
        t0 = time.monotonic()
        me = await new.register(BrokerInfo(2, "127.0.0.1", 9201))
        assert time.monotonic() - t0 < 2 and me.epoch > old_epoch and new.session.alive
        await new.close()

    run(main)


def test_lease_expiry_removes_a_killed_broker_from_another_view(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        watcher = await connect(etcd, cluster_name)
        sub = watcher.subscribe()
        member = await Member(etcd.endpoint, cluster_name, 3, 9301, SESSION_MS).start()
        epoch = (await member.expect("registered"))["registered"]
        await wait_for(lambda: 3 in watcher.view.brokers, 5, "registration seen")
        assert watcher.view.brokers[3].epoch == epoch
        member.signal(signal.SIGKILL)
        gone = await wait_for(lambda: 3 not in watcher.view.brokers, SESSION_MS / 1000 + SLACK_S, "broker gone")
        print(f"killed broker left the view after {gone:.2f} s (lease {SESSION_MS / 1000:g} s)")
        change = await sub.next(timeout=1)
        assert change is not None and 3 in change.brokers
        await member.kill()
        await watcher.close()

    run(main)


def test_clean_shutdown_deregisters_at_once(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        watcher = await connect(etcd, cluster_name)
        b = await connect(etcd, cluster_name)
        await b.register(BrokerInfo(4, "127.0.0.1", 9401))
        await b.campaign()
        await wait_for(lambda: 4 in watcher.view.brokers and watcher.view.controller is not None, 5, "seen")
        await b.close()
        took = await wait_for(lambda: 4 not in watcher.view.brokers and watcher.view.controller is None, 2, "gone")
        assert took < 1.0
        await watcher.close()

    run(main)


def test_controller_failover_and_the_deposed_controller_cannot_write(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        old = await Member(etcd.endpoint, cluster_name, 1, 9501, SESSION_MS, campaign=True).start()
        broker_epoch = (await old.expect("registered"))["registered"]
        old_epoch = (await old.expect("controller"))["controller"]
        new = await connect(etcd, cluster_name)
        await new.register(BrokerInfo(2, "127.0.0.1", 9502))
        await new.create_topic(TopicMeta("orders", uuid.uuid4(), 1), states(1))
        election = asyncio.ensure_future(new.campaign())
        await asyncio.sleep(1)
        assert not election.done()  # the live controller keeps the role

        old.signal(signal.SIGSTOP)  # paused past its lease
        t0 = time.monotonic()
        won = await asyncio.wait_for(election, SESSION_MS / 1000 + SLACK_S)
        print(f"controller failover after {time.monotonic() - t0:.2f} s")
        assert won.node_id == 2 and won.epoch > old_epoch and new.is_controller()
        vp = new.view.partitions[("orders", 0)]

        old.signal(signal.SIGCONT)  # the zombie wakes up and writes with its old epoch
        assert await old.expect("session") == {"session": False, "epoch": broker_epoch}
        await old.send(op="update", topic="orders", index=0, expected=vp.mod_revision, leader=1,
                       controller_epoch=old_epoch)
        assert (await old.expect("update"))["update"] is False
        assert new.view.partitions[("orders", 0)] == vp
        # the new controller's write with its epoch goes through
        assert await new.update_partitions([PartitionChange(("orders", 0), vp.mod_revision, vp.state.with_leader(
            2, (2,)))], controller_epoch=won.epoch)
        await old.kill()
        await new.close()

    run(main)


def test_isr_change_and_election_race_exactly_one_wins(etcd: EtcdProcess, cluster_name: str) -> None:
    """Kafka's AlterPartition vs. a controller election on the same partition: the partition epoch decides."""

    async def main() -> None:
        leader = await connect(etcd, cluster_name)
        ctl = await connect(etcd, cluster_name)
        await leader.register(BrokerInfo(1, "127.0.0.1", 9601))
        await ctl.register(BrokerInfo(2, "127.0.0.1", 9602))
        epoch = (await ctl.campaign()).epoch
        await ctl.create_topic(TopicMeta("race", uuid.uuid4(), 20), states(20))
        await wait_for(lambda: "race" in leader.view.topics, 5, "topic seen")
        for i in range(20):
            tp = ("race", i)
            vp = leader.view.partitions[tp]
            assert ctl.view.partitions[tp] == vp
            shrink = PartitionChange(tp, vp.mod_revision, vp.state.with_isr((1, 2)))
            elect = PartitionChange(tp, vp.mod_revision, vp.state.with_leader(2, (2, 3)))
            a, b = await asyncio.gather(leader.update_partitions([shrink]),
                                        ctl.update_partitions([elect], controller_epoch=epoch))
            assert a != b, (i, a, b)
            want = (shrink if a else elect).state
            assert leader.view.partition(*tp) == want  # read-your-writes for the winner and the loser
            assert ctl.view.partition(*tp) == want
        await leader.close()
        await ctl.close()

    run(main)


def test_a_write_is_in_the_writers_view_when_it_returns(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        a = await connect(etcd, cluster_name)
        await a.create_topic(TopicMeta("ryw", uuid.uuid4(), 1), states(1))
        for leader in range(2, 52):
            vp = a.view.partitions[("ryw", 0)]
            new = vp.state.with_leader(leader, (leader,))
            assert await a.update_partitions([PartitionChange(("ryw", 0), vp.mod_revision, new)])
            assert a.view.partition("ryw", 0) == new  # no await in between
            stale = PartitionChange(("ryw", 0), vp.mod_revision, vp.state.with_isr(()))
            assert not await a.update_partitions([stale])
        assert await a.set_topic_configs("ryw", {"x": "1"}) and a.view.topics["ryw"].configs == {"x": "1"}
        await a.set_broker_configs(3, {"y": "2"})
        assert a.view.broker_config(3, "y") == "2"
        await a.close()

    run(main)


def test_producer_id_blocks_are_unique_under_concurrent_allocation(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        stores = await asyncio.gather(*(connect(etcd, cluster_name) for _ in range(4)))
        starts = await asyncio.gather(*(s.allocate_producer_ids(1000) for s in stores for _ in range(25)))
        assert sorted(starts) == [i * 1000 for i in range(100)]
        assert await stores[0].allocate_producer_ids(10) == 100_000
        for s in stores:
            await s.close()

    run(main)


def test_300_partitions_are_never_seen_half_created(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        writer = await connect(etcd, cluster_name)
        rival = await connect(etcd, cluster_name)
        watcher = await connect(etcd, cluster_name)
        sub = watcher.subscribe()
        views = []

        async def observe() -> None:
            async for change in sub:
                views.append(change)

        task = asyncio.ensure_future(observe())
        meta = TopicMeta("big", uuid.uuid4(), 300)
        created = await asyncio.gather(writer.create_topic(meta, states(300, 1)),
                                       rival.create_topic(TopicMeta("big", uuid.uuid4(), 300), states(300, 2)),
                                       return_exceptions=True)
        errors = [r for r in created if isinstance(r, Exception)]
        assert len(errors) == 1 and isinstance(errors[0], TopicExistsInClusterError), created
        winner = writer if created[0] is None else rival
        await wait_for(lambda: "big" in watcher.view.topics, 5, "topic seen")
        await asyncio.sleep(0.2)
        task.cancel()
        for change in views:
            v = change.view
            if "big" in v.topics:
                assert len(list(v.topic_partitions("big"))) == 300
            else:
                assert not any(t == "big" for t, _ in v.partitions)
        v = watcher.view
        assert v.topics["big"] == winner.view.topics["big"]
        leaders = {s.leader for _, s in v.topic_partitions("big")}
        assert len(leaders) == 1  # all partitions from the same creation, none of the loser's
        revisions = {vp.mod_revision for (t, _), vp in v.partitions.items() if t == "big"}
        assert len(revisions) >= 3, "300 partitions must have needed several transactions"
        # the same request again (a retry after a timeout) is not an error; another topic id is
        await winner.create_topic(winner.view.topics["big"], states(300, 1))
        with pytest.raises(TopicExistsInClusterError):
            await writer.create_topic(TopicMeta("big", uuid.uuid4(), 1), states(1))
        for s in (writer, rival, watcher):
            await s.close()

    run(main)


def test_a_creation_cut_short_leaves_nothing_visible_and_the_next_one_cleans_up(
        etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        store = await connect(etcd, cluster_name)
        keys = Keys(cluster_name)
        raw = Etcd([etcd.endpoint], 5.0)
        # what a creator that died after two of its transactions leaves behind
        for chunk in (range(0, 100), range(100, 200)):
            await raw.txn([], [Put(keys.partition("t", i), states(1)[0].encode()) for i in chunk])
        await store.wait_for_change(0, timeout=0.5)
        assert "t" not in store.view.topics and not any(t == "t" for t, _ in store.view.partitions)
        await store.create_topic(TopicMeta("t", uuid.uuid4(), 3), states(3, 2))
        assert [s.leader for _, s in store.view.topic_partitions("t")] == [2, 2, 2]
        _, left, _ = await raw.range(keys.partitions_of("t"), keys.partitions_of("t")[:-1] + b"0")
        assert len(left) == 3  # the 197 others were deleted
        await raw.close()
        await store.close()

    run(main)


def test_partition_writes_all_or_nothing_and_independent(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        a = await connect(etcd, cluster_name)
        await a.register(BrokerInfo(1, "127.0.0.1", 9701))
        epoch = (await a.campaign()).epoch
        await a.create_topic(TopicMeta("p", uuid.uuid4(), 300), states(300))
        parts = {i: a.view.partitions[("p", i)] for i in range(300)}

        def change(i: int, leader: int, stale: bool = False) -> PartitionChange:
            vp = parts[i]
            return PartitionChange(("p", i), vp.mod_revision - stale, vp.state.with_leader(leader, (leader,)))

        # all-or-nothing: one stale change fails the whole write
        assert not await a.update_partitions([change(0, 2), change(1, 2, stale=True)], controller_epoch=epoch)
        assert a.view.partitions[("p", 0)] == parts[0]
        with pytest.raises(ValueError, match="apply_partition_changes"):
            await a.update_partitions([change(i, 2) for i in range(128)], controller_epoch=epoch)
        # independent changes: any number; the stale ones are reported, the others applied
        res = await a.apply_partition_changes([change(i, 3, stale=i % 50 == 7) for i in range(300)],
                                              controller_epoch=epoch)
        lost = {("p", i) for i in range(300) if i % 50 == 7}
        assert res.conflicts == lost and res.applied == {("p", i) for i in range(300)} - lost and not res.fenced
        assert all(a.view.partition("p", i).leader == 3 for i in range(300) if ("p", i) not in lost)
        # with a controller epoch that is no longer the active one: fenced, nothing written
        await a.resign()
        parts = {i: a.view.partitions[("p", i)] for i in range(300)}
        res = await a.apply_partition_changes([change(i, 4) for i in range(300)], controller_epoch=epoch)
        assert res.fenced and not res.applied
        assert all(a.view.partitions[("p", i)] == parts[i] for i in range(300))
        await a.close()

    run(main)


def test_pipelined_partition_writes_report_exactly_the_races_lost(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        a = await connect(etcd, cluster_name)
        b = await connect(etcd, cluster_name)
        await a.register(BrokerInfo(1, "127.0.0.1", 9711))
        epoch = (await a.campaign()).epoch
        n = 700  # 6 transactions of 127 changes (+ the fence), all in flight at once
        await a.create_topic(TopicMeta("r", uuid.uuid4(), n), states(n))
        parts = {i: a.view.partitions[("r", i)] for i in range(n)}
        # another writer (a leader shrinking its ISR) wins the race on three partitions of the third transaction
        raced = [260, 300, 380]
        assert await b.update_partitions([PartitionChange(("r", i), parts[i].mod_revision,
                                                          parts[i].state.with_isr((1, 2))) for i in raced])
        res = await a.apply_partition_changes(
            [PartitionChange(("r", i), parts[i].mod_revision, parts[i].state.with_leader(2, (2, 3)))
             for i in range(n)], controller_epoch=epoch)
        lost = {("r", i) for i in raced}
        assert res.conflicts == lost and not res.fenced
        assert res.applied == {("r", i) for i in range(n)} - lost
        # the view shows every applied change once the call returns; the lost ones keep the winner's state
        for i in range(n):
            s = a.view.partitions[("r", i)].state
            assert (s.leader, s.isr) == ((1, (1, 2)) if i in raced else (2, (2, 3))), i
        await b.close()
        await a.close()

    run(main)


def test_topic_lifecycle_is_seen_by_another_store(etcd: EtcdProcess, cluster_name: str) -> None:
    async def main() -> None:
        a = await connect(etcd, cluster_name)
        b = await connect(etcd, cluster_name)
        sub = b.subscribe()
        tid = uuid.uuid4()
        await a.create_topic(TopicMeta("life", tid, 2, {"cleanup.policy": "compact"}), states(2))
        assert await a.add_partitions("life", 2, states(3))
        assert not await a.add_partitions("life", 2, states(1))  # the count moved on
        assert await a.add_partitions("life", 5, states(200))  # more than one transaction
        assert await a.set_topic_configs("life", {"retention.ms": "1000"})
        await a.set_broker_configs(None, {"log.retention.ms": "5"})
        await a.set_broker_configs(7, {"log.retention.ms": "6"})
        await wait_for(lambda: b.view.revision == a.view.revision, 5, "b caught up")
        t = b.view.topics["life"]
        assert (t.topic_id, t.num_partitions, dict(t.configs)) == (tid, 205, {"retention.ms": "1000"})
        assert len(list(b.view.topic_partitions("life"))) == 205
        assert b.view.broker_config(7, "log.retention.ms") == "6" and b.view.broker_config(8, "log.retention.ms") == "5"
        change = await sub.next(timeout=1)
        assert change is not None and change.topics == {"life"} and len(change.partitions) == 205
        assert change.broker_configs == {None, 7}

        with pytest.raises(ValueError, match="not marked for deletion"):
            await a.remove_topic("life")
        assert await a.mark_topic_deleting("life") and b.view.topics.get("life") is not None
        await wait_for(lambda: b.view.topics["life"].deleting, 5, "deleting seen")
        await a.remove_topic("life")
        await wait_for(lambda: "life" not in b.view.topics, 5, "removed")
        assert not any(t == "life" for t, _ in b.view.partitions)
        assert not await a.mark_topic_deleting("life") and not await a.set_topic_configs("life", {})
        for s in (a, b):
            await s.close()

    run(main)


def test_session_listener_sees_a_paused_process_lose_and_regain_its_registration(
        etcd: EtcdProcess, cluster_name: str) -> None:
    """A process paused past its lease (here: its event loop blocked) reports the loss as soon as it runs again,
    then registers anew with a new broker epoch."""

    async def main() -> None:
        store = await connect(etcd, cluster_name)
        sessions: list[Session] = []
        store.add_session_listener(sessions.append)
        me = await store.register(BrokerInfo(5, "127.0.0.1", 9801))
        time.sleep(SESSION_MS / 1000 + 1.5)  # the whole process stops running, as under SIGSTOP
        assert not store.session_valid()  # known without asking etcd
        await wait_for(lambda: store.session.alive and store.session.broker is not None
                       and store.session.broker.epoch > me.epoch, 10, "registered again")
        assert [s.alive for s in sessions] == [True, False, True]
        assert store.view.brokers[5].epoch == store.session.broker.epoch  # type: ignore[union-attr]
        await store.close()

    run(main)
