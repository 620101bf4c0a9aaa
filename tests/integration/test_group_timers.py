"""A member's session expires at its deadline on a real broker (hardening issue, defect 5).

Before the fix the broker looked for expired sessions every 100 ms, so a DeleteGroups sent a few tens of
milliseconds after the session deadline of the group's last member usually still met the member
(NON_EMPTY_GROUP). Now one event-loop timer is armed at the earliest deadline.

Each group has one member that joins, syncs, heartbeats once and then goes silent (its connection stays open).
The broker last saw the member while it handled that heartbeat: no later than when its answer arrived here, so
the session deadline is at most ``answer + session.timeout.ms`` (the broker's monotonic clock is the same as ours).
DeleteGroups is sent ``MARGIN_MS`` after that bound. Several groups run side by side, their last heartbeats
``STAGGER_S`` apart: 270 ms is 70 ms past a multiple of 100 ms, so against a broker polling every ~100 ms the five
deadlines fall at phases spread over the polling period, and three of the five deletes find the member still there.
"""

from __future__ import annotations

import time

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.delete_groups_request import DeleteGroupsRequest
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from oncelog.testing.broker_process import BrokerProcess

from _rawclient import RawClient

JOIN_GROUP, HEARTBEAT, SYNC_GROUP, DELETE_GROUPS = 11, 12, 14, 42
SESSION_MS = 6_000  # group.min.session.timeout.ms of the shared broker (Kafka's default)
MARGIN_MS = 40
GROUPS = 5
STAGGER_S = 0.27


def _join(c: RawClient, group: str, member_id: str) -> int:
    return c.send(JOIN_GROUP, 5, JoinGroupRequest(
        group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=SESSION_MS, member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")]))


def test_delete_groups_right_after_the_last_session_deadline_succeeds(broker: BrokerProcess,
                                                                      topic_name: str) -> None:
    groups = [f"g-{topic_name}-{i}" for i in range(GROUPS)]
    members = [RawClient(broker.bootstrap, client_id=f"silent-{i}") for i in range(GROUPS)]
    admin = RawClient(broker.bootstrap, client_id="admin")
    try:
        ids = []
        for c, g in zip(members, groups):
            assert c.find_group_coordinator(g).error_code == ErrorCode.NONE
            r = c.recv(JOIN_GROUP, 5, _join(c, g, ""))
            assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED, r
            ids.append(r.member_id)
        corrs = [_join(c, g, m) for c, g, m in zip(members, groups, ids)]
        gens = []
        for c, corr in zip(members, corrs):  # answered when the join phase ends (group.initial.rebalance.delay.ms)
            r = c.recv(JOIN_GROUP, 5, corr)
            assert r.error_code == ErrorCode.NONE, r
            gens.append(r.generation_id)
        for c, g, m, gen in zip(members, groups, ids, gens):
            r = c.request(SYNC_GROUP, 3, SyncGroupRequest(
                group_id=g, generation_id=gen, member_id=m, group_instance_id=None,
                assignments=[SyncGroupRequestAssignment(member_id=m, assignment=b"")]))
            assert r.error_code == ErrorCode.NONE, r
        # the last time the broker hears of each member: one heartbeat each, staggered so the deletes do not crowd
        deadlines = []
        for i, (c, g, m, gen) in enumerate(zip(members, groups, ids, gens)):
            time.sleep(STAGGER_S if i else 0)
            r = c.request(HEARTBEAT, 3, HeartbeatRequest(group_id=g, generation_id=gen, member_id=m,
                                                         group_instance_id=None))
            assert r.error_code == ErrorCode.NONE, r
            deadlines.append(time.monotonic() + SESSION_MS / 1000)  # the broker's deadline is at or before this
        results = []
        for g, deadline in zip(groups, deadlines):
            time.sleep(max(deadline + MARGIN_MS / 1000 - time.monotonic(), 0))
            sent_after_ms = (time.monotonic() - deadline) * 1000
            r = admin.request(DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[g]))
            results.append((g, ErrorCode(r.results[0].error_code).name, round(sent_after_ms, 1)))
        assert all(code == "NONE" for _, code, _ in results), \
            f"DeleteGroups {MARGIN_MS} ms after the session deadline: {results}"
        r = admin.request(DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=groups))
        assert [x.error_code for x in r.results] == [ErrorCode.GROUP_ID_NOT_FOUND] * GROUPS  # deleted indeed
    finally:
        admin.close()
        for c in members:
            c.close()
