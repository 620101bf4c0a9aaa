"""The group driver (ConsumerCoordinator) against a scripted coordinator at the protocol level, no network:
the order of rebalance callbacks and requests (eager: revoke before JoinGroup; cooperative: revoke only what
moved, after SyncGroup, then join once more)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from oncelog.client.config import parse_consumer_config
from oncelog.client.consumer.group import ConsumerCoordinator, RebalanceHooks
from oncelog.client.consumer.subscription import SubscriptionState
from oncelog.protocol.assignors import Subscription, encode_subscription
from oncelog.protocol.messages.heartbeat_response import HeartbeatResponse
from oncelog.protocol.messages.join_group_response import JoinGroupResponse, JoinGroupResponseMember
from oncelog.protocol.messages.sync_group_response import SyncGroupResponse

TP = tuple[str, int]


class FakeCoordinator:
    """Answers JoinGroup (our member leads; ``others`` are the other members), SyncGroup and Heartbeat."""

    def __init__(self, events: list[Any], others: dict[str, bytes]) -> None:
        self.events, self.others, self.generation = events, others, 0
        self.connected = True
        self.address = "fake:0"

    async def send(self, req: Any, **_: Any) -> Any:
        name = type(req).__name__.removesuffix("Request")
        self.events.append(name)
        if name == "JoinGroup":
            if not req.member_id:
                return JoinGroupResponse(error_code=79, member_id="me")  # MEMBER_ID_REQUIRED (KIP-394)
            self.generation += 1
            proto = req.protocols[0]
            members = [JoinGroupResponseMember(member_id="me", metadata=proto.metadata)]
            members += [JoinGroupResponseMember(member_id=m, metadata=md) for m, md in self.others.items()]
            return JoinGroupResponse(generation_id=self.generation, protocol_type="consumer",
                                     protocol_name=proto.name, leader="me", member_id="me", members=members)
        if name == "SyncGroup":
            mine = next(a.assignment for a in req.assignments if a.member_id == "me")
            return SyncGroupResponse(protocol_type="consumer", protocol_name=req.protocol_name, assignment=mine)
        if name == "Heartbeat":
            return HeartbeatResponse()
        raise AssertionError(f"unexpected {name}")


class FakeCluster:
    def __init__(self, coordinator: FakeCoordinator, partitions: int) -> None:
        self.coordinator = coordinator
        self.topics: dict[str, Any] = {}
        self.partitions = partitions

    async def coordinator_connection(self, *_: Any, **__: Any) -> FakeCoordinator:
        return self.coordinator

    async def refresh(self, *_: Any) -> None:
        return None

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self.partitions)) if topic == "t" else []


def driver(strategy: str, others: dict[str, bytes]) -> tuple[ConsumerCoordinator, list[Any], SubscriptionState]:
    events: list[Any] = []
    sub = SubscriptionState()
    sub.subscribe(["t"])

    async def revoke(tps: list[TP]) -> None:
        events.append(("revoke", tps))
        sub.unassign(tps)

    async def lose(tps: list[TP]) -> None:
        events.append(("lost", tps))
        sub.unassign(tps)

    async def assign(tps: list[TP]) -> None:
        events.append(("assign", tps))
        sub.assign(tps, await_committed=False)

    conf = parse_consumer_config({"bootstrap.servers": "fake:0", "group.id": "g",
                                  "partition.assignment.strategy": strategy, "heartbeat.interval.ms": 100000,
                                  "session.timeout.ms": 300000})
    co = ConsumerCoordinator(FakeCluster(FakeCoordinator(events, others), 2), conf, sub,  # type: ignore[arg-type]
                             RebalanceHooks(revoke, lose, assign))
    return co, events, sub


async def settle(co: ConsumerCoordinator) -> None:
    for _ in range(5):
        await co.ensure_active(time.monotonic() + 2, block=True)
        if not co.needs_join() and not co.joining:
            return


def test_eager_revokes_everything_before_joining() -> None:
    async def main() -> None:
        co, events, _sub = driver("range", {})
        await settle(co)
        assert events == ["JoinGroup", "JoinGroup", "SyncGroup", ("assign", [("t", 0), ("t", 1)])]
        assert co.group_metadata().generation_id == 1 and co.group_metadata().member_id == "me"
        events.clear()
        co.membership.request_rejoin("test: the group rebalances")
        await settle(co)
        assert events == [("revoke", [("t", 0), ("t", 1)]), "JoinGroup", "SyncGroup",
                          ("assign", [("t", 0), ("t", 1)])]
        await co.close(leave=False)

    asyncio.run(main())


def test_cooperative_revokes_only_what_moves_then_rejoins() -> None:
    other = encode_subscription(Subscription(["t"], None, [], -1))
    async def main() -> None:
        co, events, sub = driver("cooperative-sticky", {})
        await settle(co)
        assert sub.assignment() == [("t", 0), ("t", 1)]
        events.clear()
        co.membership.request_rejoin("test: a member joins")
        co.cluster.coordinator.others = {"zz-other": other}  # type: ignore[attr-defined]
        await settle(co)
        # nothing revoked before JoinGroup; after SyncGroup only the partition given away, then one more join
        assert events[:2] == ["JoinGroup", "SyncGroup"]
        assert len(sub.assignment()) == 1
        moved = [tp for tp in [("t", 0), ("t", 1)] if tp not in sub.assignment()]
        assert events[2:] == [("revoke", moved), ("assign", []), "JoinGroup", "SyncGroup", ("assign", [])]
        await co.close(leave=False)

    asyncio.run(main())


def test_generation_reset_reports_lost_partitions() -> None:
    async def main() -> None:
        co, events, _sub = driver("range", {})
        await settle(co)
        events.clear()
        co.membership.reset_generation("test: fenced by the coordinator")
        await settle(co)
        assert events[0] == ("lost", [("t", 0), ("t", 1)])
        assert "revoke" not in [e[0] for e in events if isinstance(e, tuple)]
        assert events[-1] == ("assign", [("t", 0), ("t", 1)])
        await co.close(leave=False)

    asyncio.run(main())
