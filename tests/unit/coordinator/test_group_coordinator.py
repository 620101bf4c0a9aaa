"""The classic group coordinator as a state machine: an in-memory log, a MockClock, explicit ticks."""

from __future__ import annotations

import asyncio
import functools
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.runtime import LoadedMarker, LoadedRecord, LogEntry
from oncelog.coordinator.group.records import decode_key
from oncelog.coordinator.group.config import GroupConfig
from oncelog.coordinator.group.state import GroupState
from oncelog.protocol.coordinator_records import GroupMetadataKey, OffsetCommitKey
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from oncelog.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from oncelog.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from oncelog.testing import MockClock

N = 3
JV = 9  # JoinGroup version used unless a test says otherwise


class MemLog:
    """``__consumer_offsets`` in memory: per partition, the entries loading reads back (records and markers)."""

    def __init__(self) -> None:
        self.entries: dict[int, list[LogEntry]] = defaultdict(list)
        self.next: dict[int, int] = defaultdict(int)
        self.fail = False  # refuse writes at once
        self.fail_durable: Exception | None = None  # take writes, then fail their durability with this

    def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
               producer_id: int = -1, producer_epoch: int = -1, lazy: bool = False
               ) -> tuple[int, asyncio.Future[None]]:
        if self.fail:
            raise RuntimeError("disk on fire")
        base = self.next[partition]
        for i, (k, v) in enumerate(records):
            self.entries[partition].append(LoadedRecord(k, v, base + i, producer_id, producer_epoch))
        self.next[partition] += len(records)
        durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail_durable is not None:
            durable.get_loop().call_soon(durable.set_exception, self.fail_durable)
        else:
            durable.get_loop().call_soon(durable.set_result, None)
        return base, durable

    def marker(self, partition: int, pid: int, commit: bool) -> int:
        offset = self.next[partition]
        self.entries[partition].append(LoadedMarker(pid, 0, commit, offset))
        self.next[partition] += 1
        return offset

    def records(self, partition: int) -> list[LoadedRecord]:
        return [e for e in self.entries[partition] if isinstance(e, LoadedRecord)]

    def keys(self, partition: int) -> list[Any]:
        return [decode_key(e.key) for e in self.records(partition) if e.key is not None]


def cfg(**kw: Any) -> GroupConfig:
    base: dict[str, Any] = dict(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000)
    base.update(kw)
    return GroupConfig(**base)


async def make(log: MemLog | None = None, clock: MockClock | None = None,
               config: GroupConfig | None = None) -> tuple[GroupCoordinator, MemLog, MockClock]:
    log = log or MemLog()
    clock = clock or MockClock()
    coord = GroupCoordinator(log, N, clock, config or cfg())
    for p in range(N):
        await coord.load(p, 0, list(log.entries[p]))
    return coord, log, clock


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def wrapper(*a: Any, **kw: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*a, **kw), 5))
    return wrapper


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def join_req(group: str = "g", member_id: str = "", protocols: list[tuple[str, bytes]] | None = None,
             session: int = 10_000, rebalance: int = 30_000, instance: str | None = None,
             ptype: str = "consumer") -> JoinGroupRequest:
    protocols = protocols if protocols is not None else [("range", b"meta")]
    return JoinGroupRequest(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                            member_id=member_id, group_instance_id=instance, protocol_type=ptype,
                            protocols=[JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])


def start_join(coord: GroupCoordinator, req: JoinGroupRequest, version: int = JV,
               client: str = "c") -> asyncio.Task[Any]:
    return asyncio.ensure_future(coord.join_group(req, version, client, "/127.0.0.1"))


async def new_member_id(coord: GroupCoordinator, group: str = "g", **kw: Any) -> str:
    r = await coord.join_group(join_req(group, **kw), JV, "c", "/127.0.0.1")
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
    return str(r.member_id)


async def tick(coord: GroupCoordinator, clock: MockClock, ms: int = 0) -> None:
    await settle()  # let requests already started reach the coordinator first
    clock.advance(ms)
    await coord.tick()
    await settle()


async def sync(coord: GroupCoordinator, member: str, gen: int, assignments: dict[str, bytes] | None = None,
               group: str = "g") -> asyncio.Task[Any]:
    req = SyncGroupRequest(group_id=group, generation_id=gen, member_id=member,
                           assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a)
                                        for m, a in (assignments or {}).items()])
    t = asyncio.ensure_future(coord.sync_group(req, 5))
    await settle()
    return t


async def hb(coord: GroupCoordinator, member: str, gen: int, group: str = "g", instance: str | None = None) -> int:
    r = await coord.heartbeat(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member,
                                               group_instance_id=instance), 4)
    return int(r.error_code)


async def stable_group(coord: GroupCoordinator, clock: MockClock, n: int = 2,
                       group: str = "g") -> tuple[list[str], int]:
    """n dynamic members joined and synced; returns (member ids, generation)."""
    ids = [await new_member_id(coord, group) for _ in range(n)]
    tasks = [start_join(coord, join_req(group, member_id=m)) for m in ids]
    await settle()
    await tick(coord, clock)
    resps = [await t for t in tasks]
    gen = resps[0].generation_id
    leader = resps[0].leader
    assert all(r.error_code == 0 and r.generation_id == gen for r in resps)
    syncs = [await sync(coord, m, gen, {x: x.encode() for x in ids} if m == leader else None, group) for m in ids]
    for m, t in zip(ids, syncs):
        r = await t
        assert r.error_code == 0 and r.assignment == m.encode()
    return ids, gen


# ------------------------------------------------------------------------------------------------ join
@run
async def test_member_id_required_then_initial_delay() -> None:
    coord, log, clock = await make(config=cfg(initial_rebalance_delay_ms=3000))
    r = await coord.join_group(join_req(), 4, "client-1", "/h")
    assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED and r.member_id.startswith("client-1-")
    t = start_join(coord, join_req(member_id=r.member_id))
    await tick(coord, clock, 2999)
    assert not t.done()
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE
    await tick(coord, clock, 1)
    resp = await t
    assert resp.error_code == 0 and resp.generation_id == 1 and resp.leader == r.member_id
    assert resp.protocol_name == "range" and resp.protocol_type == "consumer"
    assert [(m.member_id, m.metadata) for m in resp.members] == [(r.member_id, b"meta")]
    assert coord.group("g").state is GroupState.COMPLETING_REBALANCE


@run
async def test_initial_delay_extends_while_members_arrive() -> None:
    coord, log, clock = await make(config=cfg(initial_rebalance_delay_ms=3000))
    a = await new_member_id(coord)
    ta = start_join(coord, join_req(member_id=a, rebalance=10_000))
    await tick(coord, clock, 2000)
    b = await new_member_id(coord)
    tb = start_join(coord, join_req(member_id=b, rebalance=10_000))
    await tick(coord, clock, 1000)  # first delay over, a member arrived: wait another delay
    assert not ta.done()
    await tick(coord, clock, 3000)
    ra, rb = await ta, await tb
    assert ra.generation_id == rb.generation_id == 1 and ra.leader == a
    assert len(ra.members) == 2 and rb.members == []


@run
async def test_old_versions_join_without_member_id_round_trip() -> None:
    coord, log, clock = await make()
    t = start_join(coord, join_req(), version=3)
    await tick(coord, clock)
    r = await t
    assert r.error_code == 0 and r.generation_id == 1 and r.member_id.startswith("c-")


@run
async def test_protocol_vote_and_inconsistent_protocol() -> None:
    coord, log, clock = await make()
    a, b = await new_member_id(coord), await new_member_id(coord)
    ta = start_join(coord, join_req(member_id=a, protocols=[("roundrobin", b"A1"), ("range", b"A2")]))
    tb = start_join(coord, join_req(member_id=b, protocols=[("range", b"B2"), ("roundrobin", b"B1")]))
    await tick(coord, clock)
    ra, rb = await ta, await tb
    # one vote each: the tie goes to the leader's preference
    assert ra.protocol_name == rb.protocol_name == "roundrobin"
    assert {m.member_id: m.metadata for m in ra.members} == {a: b"A1", b: b"B1"}
    # a member with no protocol in common, or another protocol type, is refused
    r = await coord.join_group(join_req(protocols=[("sticky", b"")]), JV, "c", "h")
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    r = await coord.join_group(join_req(ptype="connect", protocols=[("range", b"")]), JV, "c", "h")
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # a third member supporting only range: range is the only candidate left
    c = await new_member_id(coord)
    tc = start_join(coord, join_req(member_id=c, protocols=[("range", b"C2")]))
    ta = start_join(coord, join_req(member_id=a, protocols=[("roundrobin", b"A1"), ("range", b"A2")]))
    tb = start_join(coord, join_req(member_id=b, protocols=[("range", b"B2"), ("roundrobin", b"B1")]))
    await settle()
    ra, rb, rc = await ta, await tb, await tc
    assert ra.generation_id == rb.generation_id == rc.generation_id == 2
    assert ra.protocol_name == rb.protocol_name == rc.protocol_name == "range"  # the only one c supports
    assert {m.member_id: m.metadata for m in ra.members} == {a: b"A2", b: b"B2", c: b"C2"}


@run
async def test_empty_protocols_and_bad_group_and_session_bounds() -> None:
    coord, log, clock = await make(config=cfg(min_session_timeout_ms=6000, max_session_timeout_ms=300_000))
    r = await coord.join_group(join_req(protocols=[]), JV, "c", "h")
    assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert (await coord.join_group(join_req(group=""), JV, "c", "h")).error_code == ErrorCode.INVALID_GROUP_ID
    assert (await coord.join_group(join_req(session=5999), JV, "c", "h")).error_code == \
        ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await coord.join_group(join_req(session=300_001), JV, "c", "h")).error_code == \
        ErrorCode.INVALID_SESSION_TIMEOUT
    assert (await coord.join_group(join_req(member_id="ghost", session=6000), JV, "c", "h")).error_code == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.group("g") is None


@run
async def test_group_max_size() -> None:
    coord, log, clock = await make(config=cfg(max_size=2))
    ids = [await new_member_id(coord) for _ in range(3)]
    t1 = start_join(coord, join_req(member_id=ids[0]))
    await settle()
    t2 = start_join(coord, join_req(member_id=ids[1]))
    t3 = start_join(coord, join_req(member_id=ids[2]))
    await settle()
    r3 = await t3
    assert r3.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    await tick(coord, clock)
    assert (await t1).error_code == 0 and (await t2).error_code == 0
    assert len(coord.group("g").members) == 2


# ------------------------------------------------------------------------------------------------ sync
@run
async def test_sync_hands_out_leader_assignment_after_it_is_durable() -> None:
    coord, log, clock = await make()
    a, b = await new_member_id(coord), await new_member_id(coord)
    ta, tb = start_join(coord, join_req(member_id=a)), start_join(coord, join_req(member_id=b))
    await tick(coord, clock)
    ra = await ta
    await tb
    assert ra.leader == a
    follower = await sync(coord, b, 1)
    assert not follower.done()
    # errors while the group is completing
    assert (await (await sync(coord, b, 0))).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await (await sync(coord, "x", 1))).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await (await sync(coord, "x", 1, group="nope"))).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    bad = SyncGroupRequest(group_id="g", generation_id=1, member_id=b, protocol_type="consumer", protocol_name="rr")
    assert (await coord.sync_group(bad, 5)).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    follower = await sync(coord, b, 1)
    leader = await sync(coord, a, 1, {a: b"AA", b: b"BB"})
    assert (await leader).assignment == b"AA"
    fr = await follower
    assert fr.error_code == 0 and fr.assignment == b"BB" and fr.protocol_name == "range"
    g = coord.group("g")
    assert g.state is GroupState.STABLE
    p = coord.partition_for("g")
    assert any(isinstance(k, GroupMetadataKey) for k in log.keys(p))
    # in Stable, a sync answers at once with the member's assignment
    assert (await (await sync(coord, b, 1))).assignment == b"BB"


@run
async def test_a_follower_parked_in_sync_longer_than_its_session_gets_a_fresh_session_with_its_assignment() -> None:
    """Kafka's propagateAssignment schedules the next heartbeat expiration of every member it answers: a follower
    that waited in SyncGroup for the leader longer than its session timeout (the leader may take up to the
    rebalance timeout) must not be expired right after the group becomes Stable."""
    coord, log, clock = await make()
    a, b = await new_member_id(coord), await new_member_id(coord)
    ta = start_join(coord, join_req(member_id=a, session=6000))
    tb = start_join(coord, join_req(member_id=b, session=6000))
    await tick(coord, clock)
    assert (await ta).leader == a and (await tb).error_code == 0
    follower = await sync(coord, b, 1)
    for _ in range(4):  # the leader heartbeats but computes its assignment for 8 s (> 6 s session)
        await tick(coord, clock, 2000)
        await hb(coord, a, 1)
    leader = await sync(coord, a, 1, {a: b"A", b: b"B"})
    assert (await leader).error_code == 0 and (await follower).assignment == b"B"
    await tick(coord, clock, 1000)  # the follower's first heartbeat comes 1 s later
    assert await hb(coord, b, 1) == ErrorCode.NONE
    assert set(coord.group("g").members) == {a, b} and coord.group("g").state is GroupState.STABLE


@run
async def test_failed_assignment_write_fails_the_sync_and_rebalances() -> None:
    coord, log, clock = await make()
    a, b = await new_member_id(coord), await new_member_id(coord)
    ta, tb = start_join(coord, join_req(member_id=a)), start_join(coord, join_req(member_id=b))
    await tick(coord, clock)
    await ta, await tb
    follower = await sync(coord, b, 1)
    log.fail = True
    leader = await sync(coord, a, 1, {a: b"AA", b: b"BB"})
    assert (await leader).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (await follower).error_code != 0
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE


@run
async def test_member_that_lost_the_join_answer_gets_it_again() -> None:
    coord, log, clock = await make()
    a = await new_member_id(coord)
    t = start_join(coord, join_req(member_id=a))
    await tick(coord, clock)
    r1 = await t
    r2 = await coord.join_group(join_req(member_id=a), JV, "c", "h")
    assert (r2.generation_id, r2.leader, len(r2.members)) == (r1.generation_id, a, 1)


# ------------------------------------------------------------------------------------------------ heartbeat, timeouts
@run
async def test_heartbeat_errors_and_rebalance_notice() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    assert await hb(coord, a, gen) == 0
    assert await hb(coord, a, gen + 1) == ErrorCode.ILLEGAL_GENERATION
    assert await hb(coord, "ghost", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert await hb(coord, a, gen, group="other") == ErrorCode.UNKNOWN_MEMBER_ID
    c = await new_member_id(coord)
    tc = start_join(coord, join_req(member_id=c))
    await settle()
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE
    assert await hb(coord, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    ta, tb = start_join(coord, join_req(member_id=a)), start_join(coord, join_req(member_id=b))
    await settle()
    assert {(await t).generation_id for t in (ta, tb, tc)} == {gen + 1}


@run
async def test_session_timeout_removes_silent_member_and_rebalances() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    for _ in range(2):
        await tick(coord, clock, 4000)
        assert await hb(coord, a, gen) == 0
    await tick(coord, clock, 2001)
    # b has been silent for 10.001 s > 10 s session timeout
    g = coord.group("g")
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert await hb(coord, b, gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert await hb(coord, a, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    r = await coord.join_group(join_req(member_id=a), JV, "c", "h")
    assert r.generation_id == gen + 1 and r.leader == a and [m.member_id for m in r.members] == [a]


@run
async def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    ta = start_join(coord, join_req(member_id=a, protocols=[("range", b"new")]))
    await settle()
    for _ in range(6):  # b keeps heartbeating but never rejoins (a slow poll loop: max.poll.interval.ms)
        await tick(coord, clock, 5000)
        await hb(coord, b, gen)
    r = await ta
    assert r.error_code == 0 and r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]
    assert b not in coord.group("g").members


@run
async def test_pending_member_id_expires() -> None:
    coord, log, clock = await make()
    a = await new_member_id(coord)
    assert a in coord.group("g").pending_members
    await tick(coord, clock, 10_000)
    assert a not in coord.group("g").pending_members


@run
async def test_member_that_never_syncs_is_removed() -> None:
    coord, log, clock = await make()
    a, b = await new_member_id(coord), await new_member_id(coord)
    ta, tb = start_join(coord, join_req(member_id=a)), start_join(coord, join_req(member_id=b))
    await tick(coord, clock)
    await ta, await tb
    leader = await sync(coord, a, 1, {a: b"A", b: b"B"})
    assert (await leader).error_code == 0
    for _ in range(6):  # b never sends SyncGroup within the rebalance timeout (30 s)
        await hb(coord, a, 1)
        await tick(coord, clock, 5000)
    assert b not in coord.group("g").members
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE


# ------------------------------------------------------------------------------------------------ leave
@run
async def test_leave_group_batched_and_to_empty() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    p = coord.partition_for("g")
    before = len(log.entries[p])
    r = await coord.leave_group(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=a),
                                                                        MemberIdentity(member_id="ghost")]), 3)
    assert [(m.member_id, m.error_code) for m in r.members] == [(a, 0), ("ghost", ErrorCode.UNKNOWN_MEMBER_ID)]
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE
    r = await coord.leave_group(LeaveGroupRequest(group_id="g", member_id=b), 0)
    assert r.members[0].error_code == 0
    g = coord.group("g")
    assert g.state is GroupState.EMPTY and g.generation == gen + 1 and not g.members
    assert len(log.entries[p]) == before + 1  # the Empty group was written
    r = await coord.leave_group(LeaveGroupRequest(group_id="nope", members=[MemberIdentity(member_id="x")]), 5)
    assert r.error_code == 0 and r.members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


@run
async def test_leave_during_join_completes_the_join_phase() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    ta = start_join(coord, join_req(member_id=a))
    await settle()
    assert not ta.done()
    await coord.leave_group(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=b)]), 3)
    await settle()
    r = await ta
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]


# ------------------------------------------------------------------------------------------------ static members
@run
async def test_static_member_rejoin_replaces_member_id_without_rebalance() -> None:
    coord, log, clock = await make()
    ta = start_join(coord, join_req(instance="i-a"))
    tb = start_join(coord, join_req(instance="i-b"))
    await tick(coord, clock)
    ra, rb = await ta, await tb
    a, b, gen = ra.member_id, rb.member_id, ra.generation_id
    await sync(coord, b, gen)
    await (await sync(coord, a, gen, {a: b"A", b: b"B"}))
    assert coord.group("g").state is GroupState.STABLE
    # b restarts: same instance id, no member id
    r = await coord.join_group(join_req(instance="i-b"), JV, "c", "h")
    b2 = r.member_id
    assert r.error_code == 0 and b2 != b and r.generation_id == gen and r.members == []
    g = coord.group("g")
    assert g.state is GroupState.STABLE and g.static_members["i-b"] == b2
    assert await hb(coord, b, gen, instance="i-b") == ErrorCode.FENCED_INSTANCE_ID
    assert await hb(coord, b2, gen, instance="i-b") == 0
    assert (await (await sync(coord, b2, gen))).assignment == b"B"
    # a fenced member cannot commit or leave
    commit = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=gen, member_id=b,
                                 group_instance_id="i-b", topics=[OffsetCommitRequestTopic(
                                     name="t", partitions=[OffsetCommitRequestPartition(partition_index=0,
                                                                                       committed_offset=1)])])
    assert (await coord.commit_offsets(commit, 7)).topics[0].partitions[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    r = await coord.leave_group(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=b,
                                                                                         group_instance_id="i-b")]), 4)
    assert r.members[0].error_code == ErrorCode.FENCED_INSTANCE_ID
    # the static leader rejoining with v9 learns it may skip the assignment
    r = await coord.join_group(join_req(instance="i-a"), 9, "c", "h")
    assert r.skip_assignment and r.leader == r.member_id and len(r.members) == 2 and r.generation_id == gen


class AppendFailed(RuntimeError):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.error_code = code


@run
async def test_failed_store_of_a_static_member_rejoin_answers_it_and_the_partition_goes_on() -> None:
    """Defect: the revert of a static member's replacement set a second result on the answered JoinGroup future;
    the exception escaped the runtime, so the rejoin was never answered and every later operation of the
    partition waited forever."""
    coord, log, clock = await make()
    ta = start_join(coord, join_req(instance="i-a"))
    tb = start_join(coord, join_req(instance="i-b"))
    await tick(coord, clock)
    ra, rb = await ta, await tb
    a, b, gen = ra.member_id, rb.member_id, ra.generation_id
    await sync(coord, b, gen)
    await (await sync(coord, a, gen, {a: b"A", b: b"B"}))
    assert coord.group("g").state is GroupState.STABLE
    # b restarts in a Stable group: its new member id is stored, but the write cannot be made durable; a heartbeat
    # of a is queued behind that write on the same partition
    log.fail_durable = AppendFailed(ErrorCode.NOT_ENOUGH_REPLICAS)
    rejoin = start_join(coord, join_req(instance="i-b"))
    beat = asyncio.ensure_future(hb(coord, a, gen, instance="i-a"))
    r = await asyncio.wait_for(rejoin, 1)
    assert (r.error_code, r.member_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
    assert await asyncio.wait_for(beat, 1) == 0
    # the replacement is reverted: b keeps its old member id, settings and assignment
    g = coord.group("g")
    assert g.state is GroupState.STABLE and g.static_members["i-b"] == b and set(g.members) == {a, b}
    assert g.generation == gen and g.members[b].session_timeout_ms == 10_000
    assert await asyncio.wait_for(hb(coord, b, gen, instance="i-b"), 1) == 0
    assert (await asyncio.wait_for(await sync(coord, b, gen), 1)).assignment == b"B"
    # a write refused at once is answered too (with the code mapped from the refusal)
    log.fail_durable, log.fail = None, True
    r = await asyncio.wait_for(coord.join_group(join_req(instance="i-b", session=20_000), JV, "c", "h"), 1)
    assert (r.error_code, r.member_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, "")
    assert g.static_members["i-b"] == b and g.members[b].session_timeout_ms == 10_000
    # once the log takes writes again, the rejoin replaces the member id
    log.fail = False
    r = await asyncio.wait_for(coord.join_group(join_req(instance="i-b"), JV, "c", "h"), 1)
    assert r.error_code == 0 and r.member_id not in (b, "") and g.static_members["i-b"] == r.member_id
    assert await asyncio.wait_for(hb(coord, b, gen, instance="i-b"), 1) == ErrorCode.FENCED_INSTANCE_ID


@run
async def test_static_member_not_removed_when_it_misses_a_join() -> None:
    coord, log, clock = await make()
    ta = start_join(coord, join_req(instance="i-a"))
    tb = start_join(coord, join_req(instance="i-b", session=20_000))
    await tick(coord, clock)
    a, b = (await ta).member_id, (await tb).member_id
    # a changes its subscription: rebalance; b (static) does not rejoin before the rebalance timeout
    ta = start_join(coord, join_req(member_id=a, instance="i-a", protocols=[("range", b"v2")]))
    await settle()
    for _ in range(3):
        assert await hb(coord, b, 1, instance="i-b") == ErrorCode.REBALANCE_IN_PROGRESS
        await tick(coord, clock, 10_000)
    r = await ta
    assert r.error_code == 0 and {m.member_id for m in r.members} == {a, b}


# ------------------------------------------------------------------------------------------------ offsets
def commit_req(group: str = "g", gen: int = -1, member: str = "", offsets: dict[tuple[str, int], int] | None = None,
               metadata: str = "") -> OffsetCommitRequest:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = defaultdict(list)
    for (t, p), o in (offsets or {}).items():
        by_topic[t].append(OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                        committed_metadata=metadata))
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                               topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])


async def fetched(coord: GroupCoordinator, group: str = "g", stable: bool = False,
                  topics: list[tuple[str, list[int]]] | None = None) -> dict[tuple[str, int], Any]:
    code, offs = await coord.fetch_offsets(group, topics, stable)
    assert code == 0
    return {(f.topic, f.partition): (f.offset if not f.error_code else ErrorCode(f.error_code)) for f in offs}


def codes(resp: Any) -> list[int]:
    return [p.error_code for t in resp.topics for p in t.partitions]


@run
async def test_simple_commit_and_fetch() -> None:
    coord, log, clock = await make()
    assert await fetched(coord, topics=[("t", [0])]) == {("t", 0): -1}
    r = await coord.commit_offsets(commit_req(offsets={("t", 0): 5, ("t", 1): 7}, metadata="m"), 8)
    assert codes(r) == [0, 0]
    assert await fetched(coord) == {("t", 0): 5, ("t", 1): 7}
    assert await fetched(coord, topics=[("t", [1, 2])]) == {("t", 1): 7, ("t", 2): -1}
    g = coord.group("g")
    assert g.state is GroupState.EMPTY and g.protocol_type is None
    r = await coord.commit_offsets(commit_req(offsets={("t", 0): 1}, metadata="x" * 5000), 8)
    assert codes(r) == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
    r = await coord.commit_offsets(commit_req(group="h", gen=3, offsets={("t", 0): 1}), 8)
    assert codes(r) == [ErrorCode.ILLEGAL_GENERATION]


@run
async def test_member_commit_checks() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    assert codes(await coord.commit_offsets(commit_req(gen=gen, member=a, offsets={("t", 0): 3}), 8)) == [0]
    assert codes(await coord.commit_offsets(commit_req(gen=gen + 1, member=a, offsets={("t", 0): 3}), 8)) == \
        [ErrorCode.ILLEGAL_GENERATION]
    assert codes(await coord.commit_offsets(commit_req(gen=gen, member="x", offsets={("t", 0): 3}), 8)) == \
        [ErrorCode.UNKNOWN_MEMBER_ID]
    assert codes(await coord.commit_offsets(commit_req(gen=-1, offsets={("t", 0): 3}), 8)) == \
        [ErrorCode.UNKNOWN_MEMBER_ID]
    # a member may still commit for its generation while the group prepares a rebalance
    c = await new_member_id(coord)
    start_join(coord, join_req(member_id=c))
    await settle()
    assert codes(await coord.commit_offsets(commit_req(gen=gen, member=b, offsets={("t", 1): 9}), 8)) == [0]
    assert await fetched(coord) == {("t", 0): 3, ("t", 1): 9}


def txn_req(pid: int, offsets: dict[tuple[str, int], int], group: str = "g", gen: int = -1,
            member: str = "") -> TxnOffsetCommitRequest:
    by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = defaultdict(list)
    for (t, p), o in offsets.items():
        by_topic[t].append(TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o))
    return TxnOffsetCommitRequest(transactional_id="tx", group_id=group, producer_id=pid, producer_epoch=0,
                                  generation_id=gen, member_id=member,
                                  topics=[TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])


@run
async def test_txn_offsets_pending_until_commit_marker() -> None:
    coord, log, clock = await make()
    await coord.commit_offsets(commit_req(offsets={("t", 0): 1}), 8)
    r = await coord.txn_offset_commit(txn_req(42, {("t", 0): 10, ("t", 1): 11}), 3)
    assert codes(r) == [0, 0]
    p = coord.partition_for("g")
    assert [e.producer_id for e in log.records(p)][-2:] == [42, 42]  # a transactional batch of producer 42
    assert await fetched(coord) == {("t", 0): 1}
    assert await fetched(coord, stable=True, topics=[("t", [0, 1, 2])]) == {
        ("t", 0): ErrorCode.UNSTABLE_OFFSET_COMMIT, ("t", 1): ErrorCode.UNSTABLE_OFFSET_COMMIT, ("t", 2): -1}
    await coord.replay_end_transaction_marker(p, 42, 0, True, log.marker(p, 42, True))
    assert await fetched(coord, stable=True) == {("t", 0): 10, ("t", 1): 11}


@run
async def test_txn_offsets_dropped_on_abort_and_newer_plain_commit_wins() -> None:
    coord, log, clock = await make()
    p = coord.partition_for("g")
    await coord.txn_offset_commit(txn_req(7, {("t", 0): 10}), 3)
    await coord.replay_end_transaction_marker(p, 7, 0, False, log.marker(p, 7, False))
    assert await fetched(coord, stable=True, topics=[("t", [0])]) == {("t", 0): -1}
    await coord.txn_offset_commit(txn_req(8, {("t", 0): 20}), 3)
    await coord.commit_offsets(commit_req(offsets={("t", 0): 25}), 8)  # written after the pending one
    await coord.replay_end_transaction_marker(p, 8, 0, True, log.marker(p, 8, True))
    assert await fetched(coord) == {("t", 0): 25}


@run
async def test_txn_offset_commit_kip447_checks() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}, gen=gen, member=a), 3)) == [0]
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}, gen=gen + 1, member=a), 3)) == \
        [ErrorCode.ILLEGAL_GENERATION]
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}, gen=gen, member="x"), 3)) == \
        [ErrorCode.UNKNOWN_MEMBER_ID]
    # v0-2 carry no member information: accepted
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}, gen=gen + 5, member="x"), 2)) == [0]

    checked: list[tuple[str, int, int, int]] = []

    def refuse(tid: str, pid: int, epoch: int, partition: int) -> int:
        checked.append((tid, pid, epoch, partition))
        return ErrorCode.INVALID_TXN_STATE
    coord.verify_transaction = refuse
    n = len(log.entries[coord.partition_for("g")])
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}), 3)) == [ErrorCode.INVALID_TXN_STATE]
    assert checked == [("tx", 1, 0, coord.partition_for("g"))] and len(log.entries[coord.partition_for("g")]) == n
    coord.verify_transaction = lambda tid, pid, epoch, partition: ErrorCode.PRODUCER_FENCED
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}), 3)) == [ErrorCode.PRODUCER_FENCED]
    assert codes(await coord.txn_offset_commit(txn_req(1, {("t", 0): 1}), 2)) == [ErrorCode.INVALID_PRODUCER_EPOCH]


@run
async def test_reload_restores_offsets_groups_and_resolves_pending_txn() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    await coord.commit_offsets(commit_req(gen=gen, member=a, offsets={("t", 0): 5}), 8)
    await coord.commit_offsets(commit_req(group="simple", offsets={("u", 0): 3}), 8)
    await coord.txn_offset_commit(txn_req(1, {("t", 1): 11}), 3)
    await coord.txn_offset_commit(txn_req(2, {("t", 2): 12}), 3)
    await coord.txn_offset_commit(txn_req(3, {("t", 3): 13}), 3)
    p = coord.partition_for("g")
    log.marker(p, 1, True)
    log.marker(p, 2, False)  # 3 stays open
    await coord.close()

    coord2, _, _ = await make(log, clock)
    assert await fetched(coord2) == {("t", 0): 5, ("t", 1): 11}
    assert await fetched(coord2, stable=True, topics=[("t", [2, 3])]) == {
        ("t", 2): -1, ("t", 3): ErrorCode.UNSTABLE_OFFSET_COMMIT}
    assert await fetched(coord2, "simple") == {("u", 0): 3}
    g = coord2.group("g")
    assert g.state is GroupState.STABLE and g.generation == gen and set(g.members) == {a, b}
    assert g.members[b].assignment == b.encode()
    assert await hb(coord2, a, gen) == 0
    await coord2.replay_end_transaction_marker(p, 3, 0, True, log.marker(p, 3, True))
    assert (await fetched(coord2))[("t", 3)] == 13
    # loaded members that never heartbeat again time out
    await tick(coord2, clock, 11_000)
    assert coord2.group("g").state is GroupState.EMPTY and coord2.group("g").generation == gen + 1


@run
async def test_reload_of_empty_group_and_deleted_group() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    await coord.leave_group(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=a),
                                                                    MemberIdentity(member_id=b)]), 3)
    await coord.commit_offsets(commit_req(group="d", offsets={("t", 0): 1}), 8)
    assert [r.error_code for r in await coord.delete_groups(["d"])] == [0]
    coord2, _, _ = await make(log, clock)
    g = coord2.group("g")
    assert g.state is GroupState.EMPTY and g.generation == gen + 1 and g.protocol_type == "consumer"
    assert coord2.group("d") is None


# ------------------------------------------------------------------------------------------------ retention, admin
@run
async def test_offsets_of_simple_group_expire_and_group_goes() -> None:
    coord, log, clock = await make(config=cfg(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1000))
    await coord.commit_offsets(commit_req(offsets={("t", 0): 1}), 8)
    await tick(coord, clock, 30_000)
    await coord.commit_offsets(commit_req(offsets={("t", 1): 2}), 8)
    await tick(coord, clock, 31_000)
    assert await fetched(coord) == {("t", 1): 2}
    await tick(coord, clock, 30_000)
    assert coord.group("g") is None
    p = coord.partition_for("g")
    tomb = [decode_key(e.key) for e in log.records(p) if e.key is not None and e.value is None]
    assert [type(k) for k in tomb] == [OffsetCommitKey, OffsetCommitKey, GroupMetadataKey]


@run
async def test_offsets_of_consumer_group_expire_from_when_it_became_empty() -> None:
    coord, log, clock = await make(config=cfg(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1000))
    (a, b), gen = await stable_group(coord, clock)
    await coord.commit_offsets(commit_req(gen=gen, member=a, offsets={("t", 0): 1}), 8)
    for _ in range(10):  # a Stable group keeps its offsets (they are of a subscribed topic or unknown metadata)
        await tick(coord, clock, 9000)
        await hb(coord, a, gen)
        await hb(coord, b, gen)
    assert await fetched(coord) == {("t", 0): 1}
    await coord.leave_group(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=a),
                                                                    MemberIdentity(member_id=b)]), 3)
    await tick(coord, clock, 59_000)
    assert await fetched(coord) == {("t", 0): 1}
    await tick(coord, clock, 2000)
    assert await fetched(coord) == {} and coord.group("g") is None


@run
async def test_delete_groups_and_offset_delete() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    await coord.commit_offsets(commit_req(gen=gen, member=a, offsets={("t", 0): 1}), 8)
    res = await coord.delete_groups(["g", "nope", ""])
    assert [r.error_code for r in res] == [ErrorCode.NON_EMPTY_GROUP, ErrorCode.GROUP_ID_NOT_FOUND,
                                           ErrorCode.INVALID_GROUP_ID]
    od = OffsetDeleteRequest(group_id="g", topics=[OffsetDeleteRequestTopic(
        name="t", partitions=[OffsetDeleteRequestPartition(partition_index=0)])])
    # subscription metadata b"meta" does not parse: the coordinator must assume the topic is subscribed
    assert codes(await coord.delete_offsets(od)) == [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC]
    assert (await coord.delete_offsets(OffsetDeleteRequest(group_id="nope"))).error_code == \
        ErrorCode.GROUP_ID_NOT_FOUND
    await coord.leave_group(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=a),
                                                                    MemberIdentity(member_id=b)]), 3)
    assert codes(await coord.delete_offsets(od)) == [0]
    assert await fetched(coord) == {}
    assert [r.error_code for r in await coord.delete_groups(["g"])] == [0]
    assert coord.group("g") is None
    assert coord.describe_group("g").group_state == "Dead"


def subscription(*topics: str) -> bytes:
    import struct
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


@run
async def test_offset_delete_of_unsubscribed_topic_in_stable_group() -> None:
    coord, log, clock = await make()
    a = await new_member_id(coord)
    t = start_join(coord, join_req(member_id=a, protocols=[("range", subscription("t"))]))
    await tick(coord, clock)
    gen = (await t).generation_id
    await (await sync(coord, a, gen, {a: b""}))
    await coord.commit_offsets(commit_req(gen=gen, member=a, offsets={("t", 0): 1, ("old", 0): 2}), 8)
    od = OffsetDeleteRequest(group_id="g", topics=[
        OffsetDeleteRequestTopic(name=n, partitions=[OffsetDeleteRequestPartition(partition_index=0)])
        for n in ("t", "old")])
    assert codes(await coord.delete_offsets(od)) == [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, 0]
    assert await fetched(coord) == {("t", 0): 1}


@run
async def test_describe_and_list() -> None:
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    await coord.commit_offsets(commit_req(group="simple", offsets={("t", 0): 1}), 8)
    d = coord.describe_group("g")
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert {(m.member_id, m.member_metadata, m.member_assignment) for m in d.members} == {
        (a, b"meta", a.encode()), (b, b"meta", b.encode())}
    assert coord.describe_group("zzz").group_state == "Dead"
    listed = {(x.group_id, x.group_state, x.protocol_type) for x in coord.list_groups()}
    assert listed == {("g", "Stable", "consumer"), ("simple", "Empty", "")}
    assert {x.group_id for x in coord.list_groups(states=["empty"])} == {"simple"}
    assert coord.list_groups(types=["consumer"]) == []
    assert len(coord.list_groups(types=["Classic"])) == 2


@run
async def test_cooperative_rejoins_relay_metadata_and_assignments_faithfully() -> None:
    """cooperative-sticky: members rejoin twice in a row with their owned partitions in the metadata; the
    coordinator relays every byte to the leader and every assignment back, generation by generation."""
    coord, log, clock = await make()
    (a, b), gen = await stable_group(coord, clock)
    for round_ in range(3):
        metas = {a: f"A-owned-{round_}".encode(), b: f"B-owned-{round_}".encode()}
        ta = start_join(coord, join_req(member_id=a, protocols=[("range", metas[a])]))
        tb = start_join(coord, join_req(member_id=b, protocols=[("range", metas[b])]))
        await settle()
        ra, rb = await ta, await tb
        assert ra.generation_id == rb.generation_id == gen + round_ + 1
        assert {m.member_id: m.metadata for m in ra.members} == metas
        g = ra.generation_id
        fb = await sync(coord, b, g)
        fa = await sync(coord, a, g, {a: b"x" * round_, b: b"y" * round_})
        assert ((await fa).assignment, (await fb).assignment) == (b"x" * round_, b"y" * round_)
