"""Faults of etcd and of the way to it: killed and restarted, paused, history compacted while a store was cut off,
a broker cut off past its lease. The view keeps being served (marked stale), writes fail with a retriable error,
and everything resumes when etcd is back. With three members, one that stops answering or has no leader is left
for another within the session. Each test has an etcd of its own."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from oncelog.cluster._etcd import Etcd, EtcdUnavailable
from oncelog.cluster.metadata import EtcdMetadata, Session
from oncelog.cluster.model import BrokerInfo, PartitionState, TopicMeta
from oncelog.cluster.store import MetadataUnavailableError, PartitionChange
from oncelog.testing.broker_process import free_port
from oncelog.testing.etcd_process import EtcdCluster, EtcdProcess

SESSION_MS = 3000


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 120))


async def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - t0


async def connect(endpoint: str, cluster: str, timeout: float = 2.0) -> EtcdMetadata:
    return await EtcdMetadata.connect(endpoint, cluster, timeout, session_timeout_ms=SESSION_MS,
                                      heartbeat_interval_ms=750)


def states(n: int) -> list[PartitionState]:
    return [PartitionState((1, 2), (1, 2), 1) for _ in range(n)]


class Proxy:
    """A TCP proxy to etcd that can cut every connection and refuse new ones (a network partition)."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.refusing = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if self.refusing:
            w.close()
            return
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            w.close()
            return
        self._writers |= {w, tw}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(r, tw), pump(tr, w))
        self._writers -= {w, tw}

    def cut(self) -> None:
        self.refusing = True
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.refusing = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()


def test_view_survives_etcd_kill_and_restart(own_etcd: EtcdProcess) -> None:
    async def main() -> None:
        a = await connect(own_etcd.endpoint, "c")
        b = await connect(own_etcd.endpoint, "c")
        ea = (await a.register(BrokerInfo(1, "127.0.0.1", 9001))).epoch
        eb = (await b.register(BrokerInfo(2, "127.0.0.1", 9002))).epoch
        await a.create_topic(TopicMeta("t", uuid.uuid4(), 2), states(2))
        await wait_for(lambda: not b.stale and "t" in b.view.topics, 5, "b caught up")
        before = b.view

        own_etcd.kill()
        await wait_for(lambda: b.stale, 5, "b marked stale")
        assert b.view is before  # still served
        vp = a.view.partitions[("t", 0)]
        with pytest.raises(MetadataUnavailableError):
            await a.update_partitions([PartitionChange(("t", 0), vp.mod_revision, vp.state.with_isr((1,)))])
        await wait_for(lambda: not a.session.alive and not b.session.alive, SESSION_MS / 1000 + 2, "sessions lost")
        assert not a.session_valid()

        own_etcd.start()  # same data, same ports: etcd renews every lease when it comes back
        await wait_for(lambda: not b.stale and not a.stale, 10, "watch resumed")
        await wait_for(lambda: a.session.alive and b.session.alive, 10, "sessions confirmed")
        assert (a.session.broker.epoch, b.session.broker.epoch) == (ea, eb)  # type: ignore[union-attr]
        vp = a.view.partitions[("t", 0)]
        assert await a.update_partitions([PartitionChange(("t", 0), vp.mod_revision, vp.state.with_isr((1,)))])
        await wait_for(lambda: b.view.partition("t", 0) == a.view.partition("t", 0), 5, "b sees the write")
        assert set(b.view.brokers) == {1, 2}
        await a.close()
        await b.close()

    run(main)


def test_view_recovers_after_compaction_while_cut_off(own_etcd: EtcdProcess, caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    caplog.set_level(logging.INFO, "oncelog.cluster.metadata")

    async def main() -> None:
        proxy = await Proxy(own_etcd.client_port).start()
        a = await connect(own_etcd.endpoint, "c")
        b = await connect(proxy.endpoint, "c")
        await a.create_topic(TopicMeta("t", uuid.uuid4(), 10), states(10))
        await a.create_topic(TopicMeta("gone", uuid.uuid4(), 1), states(1))
        await wait_for(lambda: b.view.revision == a.view.revision and not b.stale, 5, "b caught up")
        sub = b.subscribe()

        proxy.cut()
        await wait_for(lambda: b.stale, 5, "b marked stale")
        for i in range(3):
            vp = a.view.partitions[("t", i)]
            assert await a.update_partitions([PartitionChange(("t", i), vp.mod_revision, vp.state.with_isr((2,)))])
        assert await a.mark_topic_deleting("gone")
        await a.remove_topic("gone")
        await a.create_topic(TopicMeta("new", uuid.uuid4(), 2), states(2))
        raw = Etcd([own_etcd.endpoint], 5.0)
        rev, _, _ = await raw.range(b"/")
        await raw.compact(rev)  # b's next revision is history now
        await raw.close()

        proxy.restore()
        await wait_for(lambda: not b.stale and b.view.revision >= a.view.revision, 10, "b reloaded")
        assert "reading everything again" in caplog.text  # the watch could not resume: history was compacted
        assert dict(b.view.partitions.items()) == dict(a.view.partitions.items())
        assert b.view.topics == a.view.topics
        change = await sub.next(timeout=1)
        assert change is not None
        assert change.topics == {"gone", "new"}
        assert change.partitions == {("t", 0), ("t", 1), ("t", 2), ("gone", 0), ("new", 0), ("new", 1)}
        await a.close()
        await b.close()
        await proxy.close()

    run(main)


def test_paused_etcd_marks_the_view_stale_and_writes_fail_in_time(own_etcd: EtcdProcess) -> None:
    async def main() -> None:
        a = await connect(own_etcd.endpoint, "c")
        await wait_for(lambda: not a.stale, 5, "caught up")
        own_etcd.pause()
        try:
            t0 = time.monotonic()
            with pytest.raises(MetadataUnavailableError):
                await a.allocate_producer_ids(10)
            assert time.monotonic() - t0 < 2.0 + 1.5  # the call's deadline, not forever
            took = await wait_for(lambda: a.stale, 6, "marked stale")
            print(f"stale {took:.2f} s after etcd stopped answering")
        finally:
            own_etcd.resume()
        await wait_for(lambda: not a.stale, 10, "fresh again")
        # the refused write may or may not have applied (etcd can have taken it just before the pause): either way
        # the counter moved in whole blocks and the next block follows it
        assert await a.allocate_producer_ids(10) in (0, 10)
        await a.close()

    run(main)


def test_a_broker_cut_off_past_its_lease_registers_again(own_etcd: EtcdProcess) -> None:
    async def main() -> None:
        proxy = await Proxy(own_etcd.client_port).start()
        watcher = await connect(own_etcd.endpoint, "c")
        b = await connect(proxy.endpoint, "c")
        first = await b.register(BrokerInfo(2, "127.0.0.1", 9002))
        await b.campaign()
        await wait_for(lambda: 2 in watcher.view.brokers and watcher.view.controller is not None, 5, "seen")
        proxy.cut()
        lost = await wait_for(lambda: not b.session.alive, SESSION_MS / 1000 + 1, "b knows it lost the lease")
        assert not b.is_controller()
        gone = await wait_for(lambda: 2 not in watcher.view.brokers, SESSION_MS / 1000 + 3, "others see b gone")
        print(f"cut-off broker: lease lost locally after {lost:.2f} s, gone from others' view {gone:.2f} s later")
        assert watcher.view.controller is None
        proxy.restore()
        await wait_for(lambda: b.session.alive, 10, "b registered again")
        again = b.session.broker
        assert again is not None and again.epoch > first.epoch
        await wait_for(lambda: 2 in watcher.view.brokers, 5, "others see b back")
        assert watcher.view.brokers[2].epoch == again.epoch and b.controller_epoch == 0
        await b.close()
        await watcher.close()
        await proxy.close()

    run(main)


def test_a_session_comes_back_only_with_a_view_as_new_as_etcd(own_etcd: EtcdProcess) -> None:
    """A broker cut off from etcd past its lease: meanwhile the controller moved its partition to another leader
    epoch. When the session comes back (registered again), the view it acts on already holds that move and its new
    registration: never the view from before the cut (which would make it lead at the old epoch again)."""
    async def main() -> None:
        proxy = await Proxy(own_etcd.client_port).start()
        a = await connect(own_etcd.endpoint, "c")
        await a.create_topic(TopicMeta("t", uuid.uuid4(), 1), states(1))
        b = await connect(proxy.endpoint, "c")
        await b.register(BrokerInfo(1, "127.0.0.1", 9001))
        at_return: list[tuple[int, int, int]] = []

        def on_session(s: Session) -> None:
            if s.alive and s.broker is not None:
                p = b.view.partition("t", 0)
                own = b.view.brokers.get(1)
                at_return.append((b.view.revision, p.leader_epoch if p else -1, own.epoch if own else -1))

        b.add_session_listener(on_session)
        proxy.cut()
        await wait_for(lambda: not b.session.alive, SESSION_MS / 1000 + 1, "b knows it lost the lease")
        vp = a.view.partitions[("t", 0)]
        moved = PartitionState((1, 2), (2,), 2, vp.state.leader_epoch + 1, vp.state.partition_epoch + 1)
        assert await a.update_partitions([PartitionChange(("t", 0), vp.mod_revision, moved)])
        written = a.view.revision
        await wait_for(lambda: 1 not in a.view.brokers, SESSION_MS / 1000 + 3, "b's lease expired in etcd")
        proxy.restore()
        await wait_for(lambda: b.session.alive, 15, "b registered again")
        assert b.session.broker is not None
        revision, epoch, own = at_return[0]
        assert revision >= written and epoch == moved.leader_epoch, (revision, written, epoch)
        assert own == b.session.broker.epoch  # its new registration is in the view it comes back with
        assert b.session.broker.process_epoch == b.session.broker.incarnation < b.session.broker.epoch
        await b.close()
        await a.close()
        await proxy.close()

    run(main)


def test_an_etcd_wiped_under_a_running_store_is_reported_not_followed(own_etcd: EtcdProcess,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """etcd's revisions never go back; if they do, etcd was replaced: the view is not silently mixed with it."""
    caplog.set_level(logging.INFO, "oncelog.cluster.metadata")

    async def main() -> None:
        a = await connect(own_etcd.endpoint, "c")
        for i in range(5):
            await a.create_topic(TopicMeta(f"t{i}", uuid.uuid4(), 1), states(1))
        own_etcd.kill()
        shutil.rmtree(own_etcd.data_dir)
        own_etcd.start()  # a new, empty etcd at revision 1
        await wait_for(lambda: "replaced or restored from a backup" in caplog.text, 10, "reported")
        other = await connect(own_etcd.endpoint, "c")  # the new etcd's history passes the old revision
        for i in range(10):
            await other.create_topic(TopicMeta(f"new{i}", uuid.uuid4(), 1), states(1))
        await asyncio.sleep(2)
        assert a.stale and set(a.view.topics) == {f"t{i}" for i in range(5)}
        await other.close()
        await a.close()

    run(main)


def test_a_member_without_a_leader_answers_at_once(etcd_members: EtcdCluster) -> None:
    """A member cut off from a majority of the others has no leader. Every call requires one, so it answers
    "no leader" at once, not at the call's deadline (nor does a watch on it just stay silent)."""
    alone = etcd_members.members[0]
    for m in etcd_members.members[1:]:
        m.kill()

    async def main() -> None:
        raw = Etcd([alone.endpoint], 5.0)
        try:
            await asyncio.sleep(2.0)  # it notices it lost its leader after an election timeout (1 s)
            # a watch 30 times: the member may refuse its stream before the create request is written, which
            # gRPC reports as "Internal error from Core" (about 1 in 4 here), and the reason must still show
            for what, call in [("range", lambda: raw.range(b"/x")), ("grant", lambda: raw.grant(5))] \
                    + [("watch", lambda: raw.watch(b"/x", 1).start())] * 30:
                t0 = time.monotonic()
                with pytest.raises(EtcdUnavailable, match="no leader"):
                    await call()
                assert time.monotonic() - t0 < 1.0, what
        finally:
            await raw.close()

    run(main)


def test_a_store_leaves_a_member_that_stops_answering_within_its_session(etcd_members: EtcdCluster) -> None:
    """The member a broker's store talks to stops answering (paused: cut off, or hung) while the other two go on:
    the store moves to another one before its lease can expire, so it keeps its session and its broker epoch, and
    its view follows what is written meanwhile."""
    etcd_members.move_leader(1)  # the paused member is a follower: the others need no election

    async def main() -> None:
        a = await connect(etcd_members.endpoint, "c")  # the first member first
        other = await connect(etcd_members.members[1].endpoint, "c")
        first = await a.register(BrokerInfo(1, "127.0.0.1", 9001))
        changes: list[Session] = []
        a.add_session_listener(changes.append)
        etcd_members.members[0].pause()
        try:
            await other.create_topic(TopicMeta("t", uuid.uuid4(), 1), states(1))
            await wait_for(lambda: "t" in a.view.topics, SESSION_MS / 1000, "a follows etcd through another member")
            await asyncio.sleep(2 * SESSION_MS / 1000)
            assert changes == [] and a.session.alive, changes
            assert other.view.brokers[1].epoch == first.epoch
        finally:
            etcd_members.members[0].resume()
        await a.close()
        await other.close()

    run(main)


def test_a_keep_alive_whose_channel_is_closed_as_it_starts_fails_in_time(own_etcd: EtcdProcess) -> None:
    """Another caller moves the channel on (closing the old one) just as a lease keep-alive starts on it: grpc.aio
    then never completes the stream's first write, whatever its deadline; the keep-alive must still fail within its
    timeout, or the session would silently end."""
    async def main() -> None:
        raw = Etcd([own_etcd.endpoint, own_etcd.endpoint], 5.0)
        try:
            lease, _ = await raw.grant(10)
            for _ in range(3):
                t0 = time.monotonic()
                call = asyncio.ensure_future(raw.keepalive(lease, timeout=1.0))
                await asyncio.sleep(0)  # the stream is created and waits to send
                raw._unavailable(raw._channel, EtcdUnavailable("another caller found it unavailable"))
                done, _ = await asyncio.wait({call}, timeout=3.0)
                assert done, "the keep-alive never returned"
                with pytest.raises(EtcdUnavailable):
                    call.result()
                assert time.monotonic() - t0 < 2.0
        finally:
            await raw.close()

    run(main)
