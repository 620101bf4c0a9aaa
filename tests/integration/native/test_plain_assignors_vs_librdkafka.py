"""librdkafka's group leader against our assignors and consumer protocol codecs, through the oncelog broker.

Three confluent-kafka consumers (different subscriptions) form a group with one assignor; once the group is
stable, DescribeGroups gives each member's JoinGroup metadata and SyncGroup assignment exactly as librdkafka
wrote them. Our codecs must decode them (and agree with what each consumer reports as its assignment), and our
assignor of the same name, run on those decoded subscriptions, must produce librdkafka's assignment."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest

from oncelog.client import Admin, BrokerConnection
from oncelog.protocol.assignors import Subscription, decode_assignment, decode_subscription, get_assignor
from oncelog.protocol.messages.describe_groups_request import DescribeGroupsRequest

TIMEOUT = 60.0
TP = tuple[str, int]


def describe(port: int, group: str) -> tuple[str, str, list[tuple[str, str, bytes, bytes]]]:
    """(state, protocol, [(member id, client id, metadata, assignment)])."""

    async def main() -> tuple[str, str, list[tuple[str, str, bytes, bytes]]]:
        conn = BrokerConnection("127.0.0.1", port)
        await conn.connect()
        try:
            resp = await conn.send(DescribeGroupsRequest(groups=[group]))
        finally:
            await conn.close()
        g = resp.groups[0]
        assert g.error_code == 0, g
        return g.group_state, g.protocol_data, [(m.member_id, m.client_id, bytes(m.member_metadata),
                                                 bytes(m.member_assignment)) for m in g.members]

    return asyncio.run(main())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_librdkafka_leader_matches_our_assignor(broker, topic_name: str, strategy: str) -> None:  # type: ignore[no-untyped-def]
    ppt = {f"{topic_name}-a": 5, f"{topic_name}-b": 3}
    ta, tb = list(ppt)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        for t, n in ppt.items():
            admin.create_topics(t, n)
    group = f"{topic_name}-g"
    subscriptions = {"c0": [ta, tb], "c1": [ta], "c2": [ta, tb]}
    if strategy == "cooperative-sticky":  # librdkafka's sticky assignors need equal subscriptions
        subscriptions = {"c0": [ta, tb], "c1": [ta, tb], "c2": [ta, tb]}
    consumers = {}
    for cid, topics in subscriptions.items():
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": cid,
                         "partition.assignment.strategy": strategy, "enable.auto.commit": False,
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        c.subscribe(topics)
        consumers[cid] = c
    try:
        # poll everyone until the group is stable and nobody's assignment changed for a while
        last: dict[str, set[TP]] = {}
        stable_since = time.monotonic()
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert time.monotonic() < deadline, f"group did not settle: {last}"
            for c in consumers.values():
                c.consume(10, 0.05)
            now = {cid: {(tp.topic, tp.partition) for tp in c.assignment()} for cid, c in consumers.items()}
            if now != last:
                last, stable_since = now, time.monotonic()
            elif (time.monotonic() - stable_since > 3 and sum(map(len, now.values())) == sum(ppt.values())
                  and describe(broker.port, group)[0] == "Stable"):
                break
        state, protocol, members = describe(broker.port, group)
        assert state == "Stable"
        assert protocol == strategy and len(members) == 3
        subs: dict[str, Subscription] = {}
        for member_id, client_id, metadata, assignment in members:
            sub = decode_subscription(metadata)
            assert sorted(sub.topics) == sorted(subscriptions[client_id])
            assert set(decode_assignment(assignment).partitions) == last[client_id]
            subs[member_id] = sub
        ours = get_assignor(strategy).assign(ppt, subs)
        by_client = {client_id: set(ours[member_id].partitions) for member_id, client_id, _, _ in members}
        assert by_client == last
    finally:
        for c in consumers.values():
            c.close()
