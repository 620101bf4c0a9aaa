"""Coordinator timers keyed by deadline (hardening issue, defect 5).

Before: the broker called ``GroupCoordinator.tick()`` every 100 ms and every tick ran the expiry of every group, so a
session expired up to 100 ms after its deadline (a DeleteGroups right after it still answered NON_EMPTY_GROUP) and
the cost of a tick grew with the number of groups; transaction timeouts were a scan every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``. Now each shard keeps a timer per deadline, the broker
arms one event-loop timer at the earliest deadline (``DeadlineDriver``), and a tick looks only at what is due.

Time is a ``MockClock``; the driver's ``call_later`` is a fake timer list the test fires as the clock moves.
The transaction coordinator's timers are tested in ``test_txn_timers.py``.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from oncelog.broker.coordinators.timers import DeadlineDriver
from oncelog.coordinator.group import membership
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.group import ClassicGroup, Member
from oncelog.coordinator.group.records import group_record
from oncelog.coordinator.group.config import GroupConfig
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.runtime import LoadedRecord, LogEntry
from oncelog.coordinator.timers import DeadlineTimers
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from oncelog.testing import MockClock


N = 3
SESSION = 6_000


class MemLog:
    """``__consumer_offsets`` in memory; every write is durable at once."""

    def __init__(self) -> None:
        self.entries: dict[int, list[LogEntry]] = defaultdict(list)
        self.next: dict[int, int] = defaultdict(int)

    def append(self, partition: int, epoch: int, records: Sequence[tuple[bytes, bytes | None]],
               producer_id: int = -1, producer_epoch: int = -1, lazy: bool = False
               ) -> tuple[int, asyncio.Future[None]]:
        base = self.next[partition]
        for i, (k, v) in enumerate(records):
            self.entries[partition].append(LoadedRecord(k, v, base + i, producer_id, producer_epoch))
        self.next[partition] += len(records)
        durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        durable.set_result(None)
        return base, durable


class FakeTimers:
    """``call_later`` on the MockClock: ``advance_to`` moves the clock and runs what is due, in order."""

    def __init__(self, clock: MockClock) -> None:
        self.clock = clock
        self.pending: list[list[Any]] = []  # [when_ms, callback, cancelled]
        self.armed_delays: list[float] = []

    def call_later(self, delay: float, cb: Callable[[], None]) -> Any:
        self.armed_delays.append(delay)
        entry: list[Any] = [self.clock.monotonic_ms() + round(delay * 1000), cb, False]
        self.pending.append(entry)

        class Handle:
            def cancel(self) -> None:
                entry[2] = True

        return Handle()

    async def advance_to(self, t: int) -> None:
        while True:
            live = sorted((e for e in self.pending if not e[2] and e[0] <= t), key=lambda e: e[0])
            if not live:
                break
            entry = live[0]
            self.pending.remove(entry)
            self.clock.advance(max(entry[0] - self.clock.monotonic_ms(), 0))
            entry[1]()
            await settle()
        self.clock.advance(t - self.clock.monotonic_ms())
        await settle()


def run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def wrapper(*a: Any, **kw: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*a, **kw), 60))
    return wrapper


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def join_req(member_id: str = "", group: str = "g", session: int = SESSION) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=30_000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"meta")])


async def make_groups(clock: MockClock) -> GroupCoordinator:
    coord = GroupCoordinator(MemLog(), N, clock, GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000))
    for p in range(N):
        await coord.load(p, 0, [])
    return coord


# ------------------------------------------------------------------------------------------------ DeadlineTimers
def test_deadline_timers_replace_cancel_and_pop_due_in_order() -> None:
    told: list[int] = []
    t: DeadlineTimers[str] = DeadlineTimers(told.append)
    t.schedule("a", 50)
    t.schedule("b", 20)
    t.schedule("c", 30)
    t.schedule("a", 10)  # rescheduling replaces: "a" fires once, at 10
    t.schedule("b", 40)
    t.cancel("c")
    assert told == [50, 20, 10]  # each time a deadline became the earliest one
    assert t.next_deadline() == 10 and len(t) == 2
    assert t.pop_due(9) == []
    assert t.pop_due(40) == ["a", "b"]
    assert t.next_deadline() is None and t.pop_due(1_000) == []
    t.schedule_if_earlier("x", 100)
    t.schedule_if_earlier("x", 200)  # later: stays at 100
    assert t.deadline("x") == 100
    for i in range(5_000):  # stale heap entries are compacted away
        t.schedule("x", 100 + i)
    assert len(t._heap) < 3_000 and t.pop_due(10_000) == ["x"]


# ------------------------------------------------------------------------------------------------ (a) exact expiry
@run
async def test_a_session_expires_exactly_at_its_deadline_and_delete_groups_then_succeeds() -> None:
    clock = MockClock()
    timers = FakeTimers(clock)
    coord = await make_groups(clock)
    driver = DeadlineDriver("group-timers", clock.monotonic_ms, coord.next_deadline, coord.tick,
                            call_later=timers.call_later)
    coord.on_timer = driver.wake
    driver.start()

    first = await coord.join_group(join_req(), 9, "c", "h")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    join = asyncio.ensure_future(coord.join_group(join_req(first.member_id), 9, "c", "h"))
    await settle()
    await timers.advance_to(clock.monotonic_ms())  # the join phase ends now (no initial delay): the timer fires
    joined = await join
    assert joined.error_code == ErrorCode.NONE
    member = joined.member_id
    synced = await coord.sync_group(SyncGroupRequest(
        group_id="g", generation_id=joined.generation_id, member_id=member,
        assignments=[SyncGroupRequestAssignment(member_id=member, assignment=b"a")]), 5)
    assert synced.error_code == ErrorCode.NONE
    assert coord.group("g").state is GroupState.STABLE

    clock.advance(1_000)
    hb = await coord.heartbeat(HeartbeatRequest(group_id="g", generation_id=joined.generation_id, member_id=member), 4)
    assert hb.error_code == ErrorCode.NONE
    last_seen = clock.monotonic_ms()
    deadline = last_seen + SESSION

    # the member's old timer (at the SyncGroup) fires, finds the heartbeat, and is put back at the new deadline;
    # nothing happens in between, whatever the number of groups
    await timers.advance_to(deadline - 1)
    assert coord.group("g").state is GroupState.STABLE and member in coord.group("g").members
    assert driver.armed == deadline
    deleted = await coord.delete_groups(["g"])
    assert deleted[0].error_code == ErrorCode.NON_EMPTY_GROUP  # one millisecond before: still a member

    fired_before = driver.fired
    await timers.advance_to(deadline)
    assert driver.fired == fired_before + 1
    assert coord.group("g").state is GroupState.EMPTY and not coord.group("g").members
    deleted = await coord.delete_groups(["g"])
    assert deleted[0].error_code == ErrorCode.NONE
    # no polling: the event-loop timer was armed a handful of times, never every 100 ms
    assert driver.fired <= 6, driver.fired
    await driver.close()
    await coord.close()


# ------------------------------------------------------------------------------------------------ (c) many groups
def _loaded_groups(n: int, now_wall: int) -> dict[int, list[LogEntry]]:
    """``n`` Stable groups of one member each, as their GroupMetadata records on ``__consumer_offsets``."""
    from oncelog.coordinator.transaction.partitioner import partition_for

    entries: dict[int, list[LogEntry]] = defaultdict(list)
    for i in range(n):
        gid = f"group-{i}"
        g = ClassicGroup(gid, state=GroupState.STABLE, state_timestamp=now_wall, generation=1,
                         protocol_type="consumer", protocol_name="range", leader_id=f"m-{i}")
        g.members[f"m-{i}"] = Member(f"m-{i}", None, "c", "h", 30_000, SESSION, "consumer", [("range", b"x")],
                                     assignment=b"a")
        key, value = group_record(g)
        p = partition_for(gid, N)
        entries[p].append(LoadedRecord(key, value, len(entries[p])))
    return entries


@run
async def test_c_ten_thousand_groups_cost_nothing_per_tick_until_a_deadline_is_due(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = MockClock()
    coord = GroupCoordinator(MemLog(), N, clock, GroupConfig())
    loaded_at = clock.monotonic_ms()
    for p, entries in _loaded_groups(10_000, clock.wall_ms()).items():
        await coord.load(p, 0, entries)
    assert len(coord.list_groups()) == 10_000
    assert coord.next_deadline() == loaded_at + SESSION  # loaded members get a session from the load

    expiries = 0
    expire = membership.expire

    def counting(*a: Any, **kw: Any) -> Any:
        nonlocal expiries
        expiries += 1
        return expire(*a, **kw)

    monkeypatch.setattr(membership, "expire", counting)
    started = time.perf_counter()
    for _ in range(59):  # 5.9 s of 100 ms ticks, nothing due
        clock.advance(100)
        await coord.tick()
    idle = time.perf_counter() - started
    assert expiries == 0  # before: 10,000 group expiries per tick
    assert idle < 1.0, idle

    clock.advance(SESSION - 5_900)  # every member's deadline: each group is looked at once
    await coord.tick()
    assert expiries == 10_000
    assert all(g.group_state == GroupState.EMPTY.display_name for g in coord.list_groups())
    await coord.close()
