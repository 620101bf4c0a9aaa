"""A client whose connection closes while its JoinGroup / SyncGroup is parked (hardening issue, defect 1).

The broker cancels a closed connection's request tasks. The parked request belongs to the group, not to the
connection: as in Kafka (the request stays in purgatory whatever happens to the connection), the member still counts
as joined / as waiting for its assignment, its answer is dropped when the phase ends, and the next phase's session
timeout removes it. Before the fix the cancelled task cancelled the group's own future, so a new member killed while
its JoinGroup was parked stopped counting as joined while its 5-minute new-member timeout kept it in the group: the
live members' JoinGroup waited for the rebalance timeout (librdkafka: max.poll.interval.ms, 5 minutes by default).

Real connections (``ConnectionHarness`` over ``FakeTransport``), the real handlers, a real ``GroupCoordinator`` over
an in-memory ``__consumer_offsets``; time is a ``MockClock`` the test advances, then ``tick()``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.context import BrokerContext
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.config import GroupConfig
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.runtime import LoadedRecord
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from oncelog.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from oncelog.testing import MockClock
from oncelog.testing.connection import ConnectionHarness, broker_context

JOIN, SYNC, HEARTBEAT, OFFSET_COMMIT, WRITE_TXN_MARKERS = 11, 14, 12, 8, 27
JOIN_V, SYNC_V, HEARTBEAT_V = 9, 5, 4
SESSION_MS = 6_000  # the defect's librdkafka copiers
REBALANCE_MS = 300_000  # librdkafka's default max.poll.interval.ms, which it sends as the rebalance timeout
GROUP = "copiers"


class MemLog:
    """``__consumer_offsets`` in memory, durable on the next loop iteration."""

    def __init__(self) -> None:
        self.entries: dict[int, list[LoadedRecord]] = defaultdict(list)
        self.hold = False  # writes stay in flight until release()
        self.held: list[asyncio.Future[None]] = []

    def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
               producer_id: int = -1, producer_epoch: int = -1, lazy: bool = False
               ) -> tuple[int, asyncio.Future[None]]:
        base = len(self.entries[partition])
        for i, (k, v) in enumerate(records):
            self.entries[partition].append(LoadedRecord(k, v, base + i, producer_id, producer_epoch))
        durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.hold:
            self.held.append(durable)
        else:
            durable.get_loop().call_soon(durable.set_result, None)
        return base, durable

    def release(self) -> None:
        self.hold = False
        for f in self.held:
            f.set_result(None)
        self.held.clear()


@pytest.fixture
def context(tmp_path: Path) -> Iterator[BrokerContext]:
    ctx = broker_context(tmp_path / "data", clock=MockClock())
    yield ctx
    ctx.topics.logs.close()


def run(test: Any) -> None:
    asyncio.run(asyncio.wait_for(test, 10))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class Client:
    """One group member on its own connection."""

    def __init__(self, context: BrokerContext, name: str) -> None:
        self.h = ConnectionHarness(context, client_id=name)
        self.member_id = ""
        self.answers: dict[int, Any] = {}

    def send(self, api_key: int, version: int, message: Any) -> int:
        return self.h.send(api_key, version, message)

    async def answer(self, corr: int) -> Any | None:
        """The answer to request ``corr`` if it came (None while it is parked)."""
        await settle()
        for got, message in self.h.responses():
            self.answers[got] = message
        return self.answers.get(corr)

    def join(self) -> int:
        return self.send(JOIN, JOIN_V, JoinGroupRequest(
            group_id=GROUP, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            member_id=self.member_id, protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"meta")]))

    async def first_join(self) -> int:
        """MEMBER_ID_REQUIRED, then the JoinGroup with the id (returned: it may be parked)."""
        r = await self.answer(self.join())
        assert r is not None and r.error_code == ErrorCode.MEMBER_ID_REQUIRED
        self.member_id = r.member_id
        return self.join()

    def sync(self, generation: int, assignments: dict[str, bytes] | None = None) -> int:
        return self.send(SYNC, SYNC_V, SyncGroupRequest(
            group_id=GROUP, generation_id=generation, member_id=self.member_id, protocol_type="consumer",
            protocol_name="range", assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a)
                                                for m, a in (assignments or {}).items()]))

    async def heartbeat(self, generation: int) -> int:
        r = await self.answer(self.send(HEARTBEAT, HEARTBEAT_V, HeartbeatRequest(
            group_id=GROUP, generation_id=generation, member_id=self.member_id)))
        assert r is not None
        return int(r.error_code)

    async def crash(self) -> None:
        """The client process dies: its socket closes, the broker cancels the connection's request tasks."""
        self.h.transport.close()
        await settle()
        assert self.h.connection._closed and not self.h.connection._tasks


async def coordinator(context: BrokerContext) -> tuple[GroupCoordinator, MockClock]:
    clock = context.clock
    assert isinstance(clock, MockClock)
    coord = GroupCoordinator(MemLog(), 1, clock, GroupConfig(initial_rebalance_delay_ms=0))
    await coord.load(0, 0, [])
    context.group_coordinator = coord
    return coord, clock


async def tick(coord: GroupCoordinator, clock: MockClock, ms: int) -> None:
    await settle()
    clock.advance(ms)
    await coord.tick()
    await settle()


async def stable_alone(a: Client, coord: GroupCoordinator, clock: MockClock) -> int:
    """``a`` alone in the group, Stable; returns the generation."""
    corr = await a.first_join()
    await tick(coord, clock, 0)  # the initial delay (0) ends the first join phase
    r = await a.answer(corr)
    assert r is not None and r.error_code == 0 and r.leader == a.member_id
    s = await a.answer(a.sync(r.generation_id, {a.member_id: b"A"}))
    assert s is not None and s.error_code == 0 and s.assignment == b"A"
    return int(r.generation_id)


def test_a_member_whose_connection_closed_during_its_join_still_counts_as_joined(context: BrokerContext) -> None:
    async def main() -> None:
        coord, clock = await coordinator(context)
        a, c = Client(context, "live"), Client(context, "killed")
        gen = await stable_alone(a, coord, clock)
        parked = await c.first_join()  # a new member: the group prepares a rebalance, c's JoinGroup is parked
        assert await c.answer(parked) is None
        await c.crash()  # SIGKILLed while its JoinGroup is parked
        group = coord.group(GROUP)
        assert group.state is GroupState.PREPARING_REBALANCE

        # the live member learns of the rebalance and rejoins: every member has joined, the phase ends at once
        # (before the fix: parked until the rebalance timeout, 5 minutes, while c's new-member timeout held it)
        assert await a.heartbeat(gen) == ErrorCode.REBALANCE_IN_PROGRESS
        rejoin = a.join()
        await tick(coord, clock, 1_000)
        r = await a.answer(rejoin)
        assert r is not None, "the live member's JoinGroup is still parked"
        assert r.error_code == 0 and r.generation_id == gen + 1 and r.leader == a.member_id
        assert sorted(m.member_id for m in r.members) == sorted([a.member_id, c.member_id])
        s = await a.answer(a.sync(gen + 1, {a.member_id: b"A", c.member_id: b"C"}))
        assert s is not None and s.error_code == 0 and s.assignment == b"A"
        assert group.state is GroupState.STABLE

        # the dead member never heartbeats: its session (6 s) removes it, and the live member alone is stable again
        for _ in range(3):
            await tick(coord, clock, SESSION_MS // 3)
            assert await a.heartbeat(gen + 1) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        await tick(coord, clock, 1)
        assert c.member_id not in group.members
        assert await a.heartbeat(gen + 1) == ErrorCode.REBALANCE_IN_PROGRESS
        r = await a.answer(a.join())
        assert r is not None and r.error_code == 0 and r.generation_id == gen + 2
        assert [m.member_id for m in r.members] == [a.member_id]
        s = await a.answer(a.sync(gen + 2, {a.member_id: b"A2"}))
        assert s is not None and s.error_code == 0 and s.assignment == b"A2"
        await coord.close()
    run(main())


def test_a_member_whose_connection_closed_during_its_sync_still_waits_for_its_assignment(
        context: BrokerContext) -> None:
    async def main() -> None:
        coord, clock = await coordinator(context)
        a, b = Client(context, "live"), Client(context, "killed")
        ja = await a.first_join()
        jb = await b.first_join()
        await tick(coord, clock, 0)
        ra, rb = await a.answer(ja), await b.answer(jb)
        assert ra is not None and rb is not None and ra.error_code == rb.error_code == 0
        gen, leader = ra.generation_id, ra.leader
        live, dead = (a, b) if leader == a.member_id else (b, a)
        parked = dead.sync(gen)  # the follower's SyncGroup waits for the leader's assignment
        assert await dead.answer(parked) is None
        await dead.crash()
        group = coord.group(GROUP)

        # the leader is slow: its assignment comes after the dead follower's session timeout, within the
        # rebalance timeout. A member waiting for its assignment is not expired by its session (Kafka's
        # hasSatisfiedHeartbeat); before the fix the cancelled sync made it count as silent, it was removed and the
        # leader's SyncGroup failed with REBALANCE_IN_PROGRESS
        for _ in range(4):  # the leader heartbeats while it computes the assignment
            await tick(coord, clock, SESSION_MS // 4)
            assert await live.heartbeat(gen) == ErrorCode.NONE
        await tick(coord, clock, 1)
        assert dead.member_id in group.members and group.state is GroupState.COMPLETING_REBALANCE
        s = await live.answer(live.sync(gen, {live.member_id: b"L", dead.member_id: b"D"}))
        assert s is not None and s.error_code == 0 and s.assignment == b"L"
        assert group.state is GroupState.STABLE

        # the dead follower's answer was dropped; it never heartbeats, so its session removes it
        for _ in range(3):
            await tick(coord, clock, SESSION_MS // 3)
            await live.heartbeat(gen)
        await tick(coord, clock, 1)
        assert dead.member_id not in group.members
        assert await live.heartbeat(gen) == ErrorCode.REBALANCE_IN_PROGRESS
        r = await live.answer(live.join())
        assert r is not None and r.error_code == 0 and r.generation_id == gen + 1
        assert [m.member_id for m in r.members] == [live.member_id]
        await coord.close()
    run(main())


def test_a_closed_connection_does_not_drop_its_queued_group_operation(context: BrokerContext) -> None:
    """A JoinGroup queued on the coordinator partition behind a write in flight still runs when its connection
    closes before it starts: the runtime's operation future is not the caller's to cancel."""
    async def main() -> None:
        coord, clock = await coordinator(context)
        log = coord.runtime._log
        assert isinstance(log, MemLog)
        a, c, other = Client(context, "live"), Client(context, "killed"), Client(context, "committer")
        await stable_alone(a, coord, clock)
        r = await c.answer(c.join())
        assert r is not None and r.error_code == ErrorCode.MEMBER_ID_REQUIRED
        c.member_id = r.member_id
        log.hold = True  # the next write stays in flight until released
        commit = other.send(OFFSET_COMMIT, 8, OffsetCommitRequest(group_id="another-group", topics=[
            OffsetCommitRequestTopic(name="t", partitions=[OffsetCommitRequestPartition(committed_offset=5)])]))
        await settle()
        join = c.join()  # queued behind the commit's write
        await c.crash()
        log.release()
        r = await other.answer(commit)
        assert r is not None and r.topics[0].partitions[0].error_code == 0
        await settle()
        group = coord.group(GROUP)
        assert c.member_id in group.members and group.members[c.member_id].awaiting_join, \
            "the JoinGroup of a closed connection was dropped"
        assert group.state is GroupState.PREPARING_REBALANCE
        del join
        await coord.close()
    run(main())


def test_a_closed_write_txn_markers_connection_does_not_stop_the_offsets_replay(context: BrokerContext) -> None:
    """WriteTxnMarkers on ``__consumer_offsets``: once the marker is durable the group coordinator replays it (the
    producer's pending offsets become visible). The requesting connection closing meanwhile must not cancel that
    replay, or the offsets would stay pending (OffsetFetch with require_stable: UNSTABLE_OFFSET_COMMIT) until a
    reload."""
    async def main() -> None:
        context.topics.create("__consumer_offsets", 1)
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        replayed: list[tuple[int, int, bool]] = []

        class Sink:
            async def replay_end_transaction_marker(self, partition: int, producer_id: int, producer_epoch: int,
                                                    commit: bool, offset: int) -> None:
                await gate  # the coordinator partition is busy with a write in flight
                replayed.append((partition, producer_id, commit))

        context.marker_writer.offsets_sink = lambda: Sink()
        h = ConnectionHarness(context, client_id="coordinator-of-another-broker")
        h.send(WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=7, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[WritableTxnMarkerTopic(name="__consumer_offsets", partition_indexes=[0])])]))
        await settle()
        h.transport.close()
        await settle()
        gate.set_result(None)
        await settle()
        assert replayed == [(0, 7, True)]
    run(main())
