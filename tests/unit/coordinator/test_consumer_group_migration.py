"""KIP-848's online migration, as a state machine: a classic group of the consumer protocol becomes a consumer
group when a member joins with ConsumerGroupHeartbeat, its classic members are served by the consumer group, and it
goes back to a classic group when the last member of the new protocol leaves."""

from __future__ import annotations

from oncelog.coordinator.group.config import GroupConfig
from oncelog.coordinator.group.consumer_group import ConsumerGroup, MemberState
from oncelog.coordinator.group.group import ClassicGroup
from oncelog.coordinator.group.state import GroupState
from oncelog.protocol.assignors import Assignment, Subscription, decode_assignment, encode_assignment
from oncelog.protocol.assignors import encode_subscription
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest

from .test_consumer_group_coordinator import Env, assigned
from .test_group_coordinator import JV, join_req, new_member_id, run, start_join, sync

SUB = encode_subscription(Subscription(["t1"]))


async def classic_pair(env: Env) -> tuple[list[str], int]:
    """Two classic members of group g with t1's six partitions split 0-2 / 3-5."""
    ids = [await new_member_id(env.coord, protocols=[("range", SUB)]) for _ in range(2)]
    joins = [start_join(env.coord, join_req(member_id=m, protocols=[("range", SUB)])) for m in ids]
    await env.tick(0)
    resps = [await j for j in joins]
    gen = resps[0].generation_id
    leader = resps[0].leader
    plan = {ids[0]: [("t1", p) for p in range(3)], ids[1]: [("t1", p) for p in range(3, 6)]}
    tasks = [await sync(env.coord, m, gen, {k: encode_assignment(Assignment(v)) for k, v in plan.items()}
                        if m == leader else None) for m in ids]
    for t in tasks:
        assert (await t).error_code == 0
    return ids, gen


@run
async def test_upgrade_serve_classic_members_and_downgrade() -> None:
    env = await Env(GroupConfig(consumer_session_timeout_ms=10_000, initial_rebalance_delay_ms=0)).load()
    ids, gen = await classic_pair(env)
    assert isinstance(env.coord.group("g"), ClassicGroup)
    # a member of the new protocol joins: the group is converted, the classic members are its members at `gen`
    r = await env.join("n1")
    group = env.coord.group("g")
    assert isinstance(group, ConsumerGroup) and r.error_code == 0
    assert group.group_epoch == gen + 1 and set(group.members) == {*ids, "n1"}
    for mid in ids:
        m = group.members[mid]
        assert m.classic is not None and m.member_epoch == gen
    assert r.member_epoch == gen + 1 and assigned(r) == {}  # the classic members still own everything
    # a classic member's heartbeat tells it to rejoin; its JoinGroup is answered at once, with its epoch
    hb = await env.coord.heartbeat(HeartbeatRequest(group_id="g", generation_id=gen, member_id=ids[0]), 4)
    assert hb.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    for mid in ids:  # eager: they rejoin owning nothing
        resp = await env.coord.join_group(join_req(member_id=mid, protocols=[("range", SUB)]), JV, "c", "/h")
        assert resp.error_code == 0 and resp.generation_id == gen + 1 and resp.leader == ""
        s = await (await sync(env.coord, mid, gen + 1))
        assert s.error_code == 0 and len(decode_assignment(s.assignment).partitions) == 2
        assert group.members[mid].state is MemberState.STABLE
    r = await env.hb("n1", gen + 1, owned={})
    assert sum(len(p) for p in assigned(r).values()) == 2 and group.state.display_name == "Stable"
    hb = await env.coord.heartbeat(HeartbeatRequest(group_id="g", generation_id=gen + 1, member_id=ids[0]), 4)
    assert hb.error_code == 0
    # the last member of the new protocol leaves: back to a classic group, which rebalances
    await env.hb("n1", -1)
    classic = env.coord.group("g")
    assert isinstance(classic, ClassicGroup) and set(classic.members) == set(ids)
    assert classic.state is GroupState.PREPARING_REBALANCE and classic.generation == gen + 1
    # the same after a failover: the log says classic group
    reloaded = (await env.reload()).group("g")
    assert isinstance(reloaded, ClassicGroup) and set(reloaded.members) == set(ids)


@run
async def test_a_classic_join_into_a_consumer_group_needs_a_common_protocol() -> None:
    env = await Env().load()
    await env.join("n1")
    t = start_join(env.coord, join_req(member_id="", protocols=[("range", SUB)]))
    assert (await t).error_code == ErrorCode.MEMBER_ID_REQUIRED
    bad = await env.coord.join_group(join_req(member_id="x", ptype="connect", protocols=[("range", SUB)]), JV,
                                     "c", "/h")
    assert bad.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
