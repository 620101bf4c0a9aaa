"""The consumer group coordinator (KIP-848) as a state machine: an in-memory ``__consumer_offsets``, a MockClock,
explicit ticks; every state change goes through the records it writes (a reload from the log gives the same
groups)."""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.coordinator.group.config import GroupConfig
from oncelog.coordinator.group.consumer_group import ConsumerGroupState, MemberState
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.topic_image import MemoryTopicImage
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from oncelog.protocol.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from oncelog.testing import MockClock

from .test_group_coordinator import N, MemLog, run, settle

Owned = dict[uuid.UUID, list[int]]


class Env:
    def __init__(self, config: GroupConfig | None = None) -> None:
        self.log = MemLog()
        self.clock = MockClock()
        self.image = MemoryTopicImage()
        self.t1 = self.image.add("t1", 6)
        self.t2 = self.image.add("t2", 4)
        self.config = config or GroupConfig(consumer_session_timeout_ms=10_000)
        self.coord = GroupCoordinator(self.log, N, self.clock, self.config, topics=self.image,
                                      partition_exists=lambda t, p: self.image.by_name(t) is not None)

    async def load(self) -> Env:
        for p in range(N):
            await self.coord.load(p, 0, list(self.log.entries[p]))
        return self

    async def reload(self) -> GroupCoordinator:
        """A fresh coordinator loaded from the log written so far (a failover)."""
        fresh = GroupCoordinator(self.log, N, self.clock, self.config, topics=self.image)
        for p in range(N):
            await fresh.load(p, 1, list(self.log.entries[p]))
        return fresh

    async def hb(self, member: str, epoch: int, topics: list[str] | None = None, owned: Owned | None = None,
                 rebalance: int = -1, instance: str | None = None, regex: str | None = None,
                 assignor: str | None = None, group: str = "g") -> ConsumerGroupHeartbeatResponse:
        req = ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
            rebalance_timeout_ms=rebalance, subscribed_topic_names=topics, subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=None if owned is None else [TopicPartitions(topic_id=t, partitions=p)
                                                          for t, p in owned.items()])
        resp = await self.coord.consumer_group_heartbeat(req, 1, "client", "/127.0.0.1")
        await settle()
        return resp

    async def join(self, member: str, topics: list[str] | None = None, **kw: Any) -> ConsumerGroupHeartbeatResponse:
        return await self.hb(member, 0, topics if topics is not None or "regex" in kw else ["t1"], owned={},
                             rebalance=30_000, **kw)

    async def tick(self, ms: int) -> None:
        await settle()
        self.clock.advance(ms)
        await self.coord.tick()
        await settle()


def assigned(resp: ConsumerGroupHeartbeatResponse) -> Owned:
    assert resp.assignment is not None
    return {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}


def count(owned: Owned) -> int:
    return sum(len(p) for p in owned.values())


@run
async def test_first_member_gets_every_partition() -> None:
    env = await Env().load()
    r = await env.join("m1")
    assert r.error_code == 0 and r.member_id == "m1" and r.member_epoch == 1
    assert r.heartbeat_interval_ms == 5000
    assert assigned(r) == {env.t1.topic_id: [0, 1, 2, 3, 4, 5]}
    group = env.coord.group("g")
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)
    # a plain heartbeat carries no assignment (nothing changed)
    r = await env.hb("m1", 1)
    assert r.error_code == 0 and r.member_epoch == 1 and r.assignment is None


@run
async def test_second_member_waits_for_the_first_to_revoke() -> None:
    env = await Env().load()
    r1 = await env.join("m1")
    r2 = await env.join("m2")
    # m2 is at epoch 2 but every partition of its target is still owned by m1
    assert r2.member_epoch == 2 and assigned(r2) == {}
    group = env.coord.group("g")
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    # m1 learns it must give up three partitions: it keeps three, its epoch stays 1
    r1 = await env.hb("m1", 1, owned=assigned(r1))
    kept = assigned(r1)
    assert r1.member_epoch == 1 and count(kept) == 3
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    # m2 asks again: still nothing (m1 has not revoked)
    assert (await env.hb("m2", 2, owned={})).assignment is None
    # m1 revoked: it moves to epoch 2; then m2 gets the rest
    r1 = await env.hb("m1", 1, owned=kept)
    assert r1.member_epoch == 2 and r1.assignment is None
    r2 = await env.hb("m2", 2, owned={})
    assert r2.member_epoch == 2 and count(assigned(r2)) == 3
    assert set(assigned(r2)[env.t1.topic_id]).isdisjoint(kept[env.t1.topic_id])
    assert group.state is ConsumerGroupState.STABLE
    # while the group reconciled its members were told to heartbeat faster; the heartbeat that made it Stable
    # (and every later one) gives the usual interval
    assert r1.heartbeat_interval_ms == 500 and r2.heartbeat_interval_ms == 5000
    assert (await env.hb("m1", 2)).heartbeat_interval_ms == 5000


@run
async def test_leave_hands_the_partitions_over_at_the_next_heartbeat() -> None:
    env = await Env().load()
    await env.join("m1")
    await env.join("m2")
    await env.hb("m1", 1, owned={env.t1.topic_id: [0, 1, 2, 3, 4, 5]})
    group = env.coord.group("g")
    mine = {t: sorted(p) for t, p in group.members["m1"].assigned.items()}
    await env.hb("m1", 1, owned=mine)
    await env.hb("m2", 2, owned={})
    r = await env.hb("m2", -1)
    assert r.error_code == 0 and r.member_epoch == -1
    assert set(group.members) == {"m1"} and group.group_epoch == 3
    # the new target was computed with the leave (no heartbeat needed for it)
    assert group.assignment_epoch == 3
    r1 = await env.hb("m1", 2, owned=mine)
    assert r1.member_epoch == 3 and count(assigned(r1)) == 6


@run
async def test_session_expiry_fences_the_member() -> None:
    env = await Env().load()
    await env.join("m1")
    await env.join("m2")
    await env.tick(9_000)
    await env.hb("m1", 1, owned=None)  # m1 heartbeats, m2 stays silent
    await env.tick(1_500)
    group = env.coord.group("g")
    assert set(group.members) == {"m1"}
    # m2 is gone: its heartbeat is refused and it must rejoin
    assert (await env.hb("m2", 2)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


@run
async def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    env = await Env().load()
    r1 = await env.hb("m1", 0, ["t1"], owned={}, rebalance=3_000)
    await env.join("m2")
    await env.hb("m1", 1, owned=assigned(r1))  # told to revoke, with 3 s to do it
    group = env.coord.group("g")
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(2):
        await env.tick(1_000)
        await env.hb("m1", 1, owned=assigned(r1))  # keeps heartbeating, never revokes
        await env.hb("m2", 2, owned={})
    await env.tick(999)
    assert set(group.members) == {"m1", "m2"}
    await env.tick(1)
    assert set(group.members) == {"m2"}
    r2 = await env.hb("m2", 2, owned={})
    assert count(assigned(r2)) == 6


@run
async def test_member_epoch_checks() -> None:
    env = await Env().load()
    r1 = await env.join("m1")
    await env.join("m2", topics=["t1", "t2"])  # epoch 2: m1 must revoke half of t1
    r1 = await env.hb("m1", 1, owned=assigned(r1))
    r1 = await env.hb("m1", 1, owned=assigned(r1))
    assert r1.member_epoch == 2
    assert (await env.hb("m1", 3)).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # the previous epoch is accepted with a subset of the assignment (the bumped answer was lost)
    group = env.coord.group("g")
    mine = {t: sorted(p) for t, p in group.members["m1"].assigned.items()}
    assert (await env.hb("m1", 1, owned=mine)).error_code == 0
    assert (await env.hb("m1", 1, owned={env.t2.topic_id: [0]})).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert (await env.hb("nobody", 2)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # epoch 0 is a rejoin: the member gets its assignment again
    r = await env.join("m1")
    assert r.error_code == 0 and r.member_epoch == 2 and assigned(r) == mine


@run
async def test_invalid_requests() -> None:
    env = await Env().load()
    assert (await env.hb("m", 0, ["t1"], owned={})).error_code == ErrorCode.INVALID_REQUEST  # no rebalance timeout
    assert (await env.hb("m", 0, None, owned={}, rebalance=1)).error_code == ErrorCode.INVALID_REQUEST
    assert (await env.hb("m", -3)).error_code == ErrorCode.INVALID_REQUEST
    assert (await env.join("m", assignor="sticky")).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert (await env.join("m", topics=[], regex="(")).error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert (await env.hb("m", 1, group="none")).error_code == ErrorCode.GROUP_ID_NOT_FOUND


@run
async def test_static_member_rejoins_with_its_assignment() -> None:
    env = await Env().load()
    ra = await env.join("a1", instance="ia")
    await env.join("b1", instance="ib")
    ra = await env.hb("a1", 1, owned=assigned(ra))
    ra = await env.hb("a1", 1, owned=assigned(ra))
    await env.hb("b1", 2, owned={})
    group = env.coord.group("g")
    before = dict(group.members["a1"].assigned)
    # a new process of instance ia while a1 still holds it
    assert (await env.join("a2", instance="ia")).error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    # a1 leaves for a while (-2): it keeps its place and partitions
    r = await env.hb("a1", -2, instance="ia")
    assert r.member_epoch == -2 and group.members["a1"].member_epoch == -2
    epoch = group.group_epoch
    r = await env.join("a2", instance="ia")
    assert r.error_code == 0 and r.member_epoch == epoch
    assert {t: frozenset(p) for t, p in assigned(r).items()} == before
    assert set(group.members) == {"a2", "b1"} and group.group_epoch == epoch  # no rebalance
    assert (await env.hb("a1", epoch, instance="ia")).error_code == ErrorCode.FENCED_INSTANCE_ID


@run
async def test_static_member_gone_for_its_session_is_removed() -> None:
    env = await Env().load()
    await env.join("a1", instance="ia")
    await env.hb("a1", -2, instance="ia")
    await env.tick(10_001)
    assert env.coord.group("g").members == {}


@run
async def test_regex_subscription_resolved_on_the_server() -> None:
    env = await Env().load()
    r = await env.join("m1", topics=[], regex="t.*")
    assert r.error_code == 0
    assert assigned(r) == {env.t1.topic_id: [0, 1, 2, 3, 4, 5], env.t2.topic_id: [0, 1, 2, 3]}
    group = env.coord.group("g")
    assert group.resolved_regexes["t.*"].topics == {"t1", "t2"}
    # a topic created later is picked up when the regex is refreshed (at most every 10 s)
    t3 = env.image.add("t3", 2)
    await env.tick(5_000)
    assert (await env.hb("m1", 1)).member_epoch == 1
    await env.tick(6_000)
    r = await env.hb("m1", 1)
    assert r.member_epoch == 2 and assigned(r)[t3.topic_id] == [0, 1]
    # the member switches to names: the regex goes
    r = await env.hb("m1", 2, topics=["t1"], regex="")
    assert group.resolved_regexes == {}


@run
async def test_new_partitions_bump_the_group_epoch() -> None:
    env = await Env().load()
    await env.join("m1")
    env.image.add("t1", 8)
    r = await env.hb("m1", 1)
    assert r.member_epoch == 2 and count(assigned(r)) == 8


@run
async def test_reload_from_the_log_gives_the_same_groups() -> None:
    env = await Env().load()
    r1 = await env.join("m1", instance="i1")
    await env.join("m2", topics=["t1", "t2"], regex="x.*", assignor="range")
    await env.hb("m1", 1, owned=assigned(r1))
    before = env.coord.group("g")
    fresh = await env.reload()
    after = fresh.group("g")
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.members == before.members and after.target == before.target
    assert after.partition_epochs == before.partition_epochs and after.static_members == before.static_members
    assert after.subscription_metadata == before.subscription_metadata
    assert after.resolved_regexes.keys() == before.resolved_regexes.keys()


@run
async def test_offset_commits_are_checked_against_member_epochs() -> None:
    env = await Env().load()
    r1 = await env.join("m1")

    def commit(member: str, epoch: int, version: int = 9) -> OffsetCommitRequest:
        return OffsetCommitRequest(group_id="g", member_id=member, generation_id_or_member_epoch=epoch, topics=[
            OffsetCommitRequestTopic(name="t1", partitions=[OffsetCommitRequestPartition(partition_index=0,
                                                                                         committed_offset=5)])])

    async def code(req: OffsetCommitRequest, version: int = 9) -> int:
        return int((await env.coord.commit_offsets(req, version)).topics[0].partitions[0].error_code)

    assert await code(commit("m1", r1.member_epoch)) == 0
    assert await code(commit("m1", 7)) == ErrorCode.STALE_MEMBER_EPOCH
    assert await code(commit("zz", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert await code(commit("m1", 1), 8) == ErrorCode.UNSUPPORTED_VERSION
    assert await code(commit("", -1)) == ErrorCode.UNKNOWN_MEMBER_ID  # not Empty: no commit without a member

    async def txn(member: str, epoch: int) -> int:
        req = TxnOffsetCommitRequest(transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g",
                                     member_id=member, generation_id=epoch, topics=[TxnOffsetCommitRequestTopic(
                                         name="t1", partitions=[TxnOffsetCommitRequestPartition(partition_index=0,
                                                                                                committed_offset=9)])])
        return int((await env.coord.txn_offset_commit(req, 4)).topics[0].partitions[0].error_code)

    assert await txn("m1", 1) == 0
    assert await txn("m1", 4) == ErrorCode.ILLEGAL_GENERATION  # KIP-447's code for a stale epoch
    assert await txn("", -1) == 0  # no member named: not checked
    code_, _ = await env.coord.fetch_offsets("g", None, False, "m1", 9)
    assert code_ == ErrorCode.STALE_MEMBER_EPOCH
    code_, offsets = await env.coord.fetch_offsets("g", None, False, "m1", 1)
    assert code_ == 0 and [(o.topic, o.partition, o.offset) for o in offsets] == [("t1", 0, 5)]


@run
async def test_describe_list_and_delete() -> None:
    env = await Env().load()
    await env.join("m1", assignor="range")
    d = env.coord.consumer_group_describe("g")
    assert (d.error_code, d.group_state, d.group_epoch, d.assignor_name) == (0, "Stable", 1, "range")
    assert [(m.member_id, m.assignment.topic_partitions[0].topic_name) for m in d.members] == [("m1", "t1")]
    assert env.coord.consumer_group_describe("nope").error_code == ErrorCode.GROUP_ID_NOT_FOUND
    classic = env.coord.describe_group("g")
    assert (classic.protocol_type, classic.group_state, classic.protocol_data) == ("consumer", "Stable", "range")
    listed = env.coord.list_groups()
    assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [("g", "consumer", "Stable")]
    assert env.coord.list_groups(types=["classic"]) == []
    assert env.coord.list_groups(states=["empty"]) == []
    assert (await env.coord.delete_groups(["g"]))[0].error_code == ErrorCode.NON_EMPTY_GROUP
    await env.hb("m1", -1)
    assert env.coord.list_groups(states=["EMPTY"])[0].group_id == "g"
    assert (await env.coord.delete_groups(["g"]))[0].error_code == 0
    assert env.coord.group("g") is None
    assert (await env.reload()).group("g") is None


@run
async def test_a_commit_with_an_older_epoch_is_accepted_for_partitions_owned_since(  # KIP-1251
        ) -> None:
    env = await Env().load()
    r1 = await env.join("m1")  # epoch 1: every partition of t1
    await env.join("m2")  # epoch 2
    r1 = await env.hb("m1", 1, owned=assigned(r1))
    kept = assigned(r1)[env.t1.topic_id]
    r1 = await env.hb("m1", 1, owned=assigned(r1))
    assert r1.member_epoch == 2
    r2 = await env.hb("m2", 2, owned={})
    theirs = assigned(r2)[env.t1.topic_id]

    async def code(member: str, epoch: int, partition: int) -> int:
        req = OffsetCommitRequest(group_id="g", member_id=member, generation_id_or_member_epoch=epoch, topics=[
            OffsetCommitRequestTopic(name="t1", partitions=[OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=1)])])
        return int((await env.coord.commit_offsets(req, 9)).topics[0].partitions[0].error_code)

    # m1's commit sent at epoch 1, arriving after its epoch moved to 2: fine for what it has owned since epoch 1
    assert await code("m1", 1, kept[0]) == 0
    # not for a partition it gave up, nor for m2's (owned only since epoch 2), nor from the future
    assert await code("m1", 1, theirs[0]) == ErrorCode.STALE_MEMBER_EPOCH
    assert await code("m2", 1, theirs[0]) == ErrorCode.STALE_MEMBER_EPOCH
    assert await code("m1", 3, kept[0]) == ErrorCode.STALE_MEMBER_EPOCH
    # the same holds after a failover (the epochs come back from the log)
    env.coord = await env.reload()
    assert await code("m1", 1, kept[0]) == 0
