"""The sans-I/O group membership state machine: transitions and error handling with an injected clock."""

from __future__ import annotations

import pytest

from oncelog.client.config import parse_consumer_config
from oncelog.client.consumer.membership import GroupMembership, MemberState, Step
from oncelog.client.errors import ConfigError, KafkaError
from oncelog.protocol.errors import ErrorCode


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def member(clock: Clock, instance: str | None = None) -> GroupMembership:
    return GroupMembership("g", group_instance_id=instance, session_timeout_ms=10000, rebalance_timeout_ms=20000,
                           heartbeat_interval_ms=1000, retry_backoff_ms=100, clock=clock)


PROTOS = [("range", b"r"), ("roundrobin", b"rr")]


def joined(clock: Clock, *, leader: bool = True, instance: str | None = None) -> GroupMembership:
    m = member(clock, instance)
    req = m.join_request(PROTOS)
    assert req.member_id == "" and req.protocol_type == "consumer" and req.group_instance_id == instance
    assert [p.name for p in req.protocols] == ["range", "roundrobin"]
    assert req.rebalance_timeout_ms == 20000 and req.session_timeout_ms == 10000
    res = m.on_join_response(0, generation_id=5, member_id="m1", leader="m1" if leader else "m0",
                             protocol_type="consumer", protocol_name="range",
                             members=[("m1", instance, b"s1"), ("m0", None, b"s0")])
    assert res.step is Step.SYNC and res.is_leader is leader and res.protocol == "range"
    assert res.members == ([("m1", instance, b"s1"), ("m0", None, b"s0")] if leader else [])
    assert m.state is MemberState.SYNCING
    sync = m.sync_request({"m1": b"a1", "m0": b"a0"} if leader else None)
    assert (sync.generation_id, sync.member_id, sync.protocol_name) == (5, "m1", "range")
    assert len(sync.assignments) == (2 if leader else 0)
    assert m.on_sync_response(0, "range") is Step.DONE
    assert m.stable and m.state is MemberState.STABLE and not m.take_lost()
    return m


def test_join_sync_leader_and_follower() -> None:
    clock = Clock()
    assert joined(clock, leader=True).is_leader
    assert not joined(clock, leader=False).is_leader


def test_member_id_required_rejoins_with_the_given_id() -> None:
    clock = Clock()
    m = member(clock)
    m.join_request(PROTOS)
    res = m.on_join_response(ErrorCode.MEMBER_ID_REQUIRED, member_id="given-1")
    assert res.step is Step.REJOIN and m.member_id == "given-1" and m.state is MemberState.UNJOINED
    assert m.join_request(PROTOS).member_id == "given-1"
    assert not m.take_lost()


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION])
def test_join_generation_errors_reset_member_id(code: ErrorCode) -> None:
    clock = Clock()
    m = joined(clock)
    m.request_rejoin("test")
    m.join_request(PROTOS)
    assert m.on_join_response(code).step is Step.REJOIN
    assert (m.member_id, m.generation_id) == ("", -1)
    assert m.take_lost() and not m.take_lost()


@pytest.mark.parametrize(("code", "step"), [
    (ErrorCode.REBALANCE_IN_PROGRESS, Step.REJOIN),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Step.RETRY),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, Step.FIND_COORDINATOR),
    (ErrorCode.NOT_COORDINATOR, Step.FIND_COORDINATOR),
])
def test_join_retriable_errors(code: ErrorCode, step: Step) -> None:
    m = member(Clock())
    m.join_request(PROTOS)
    assert m.on_join_response(code).step is step
    assert m.state is MemberState.UNJOINED


@pytest.mark.parametrize("code", [ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                  ErrorCode.INVALID_SESSION_TIMEOUT, ErrorCode.GROUP_MAX_SIZE_REACHED,
                                  ErrorCode.GROUP_AUTHORIZATION_FAILED])
def test_join_fatal_errors_name_the_group(code: ErrorCode) -> None:
    m = member(Clock())
    m.join_request(PROTOS)
    with pytest.raises(KafkaError) as ei:
        m.on_join_response(code)
    assert ei.value.code() == code and not ei.value.retriable() and "group 'g'" in str(ei.value)


def test_join_of_a_non_consumer_group_is_fatal() -> None:
    m = member(Clock())
    m.join_request(PROTOS)
    with pytest.raises(KafkaError) as ei:
        m.on_join_response(0, generation_id=1, member_id="a", leader="a", protocol_type="connect")
    assert ei.value.code() == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_sync_errors() -> None:
    clock = Clock()
    m = member(clock)
    m.join_request(PROTOS)
    m.on_join_response(0, generation_id=1, member_id="a", leader="b", protocol_name="range")
    assert m.on_sync_response(ErrorCode.REBALANCE_IN_PROGRESS) is Step.REJOIN
    assert (m.member_id, m.generation_id) == ("a", 1) and m.rejoin_needed  # kept for the rejoin
    m.join_request(PROTOS)
    m.on_join_response(0, generation_id=2, member_id="a", leader="b", protocol_name="range")
    assert m.on_sync_response(ErrorCode.ILLEGAL_GENERATION) is Step.REJOIN
    assert (m.member_id, m.generation_id) == ("", -1)
    m.join_request(PROTOS)
    m.on_join_response(0, generation_id=3, member_id="a", leader="b", protocol_name="range")
    assert m.on_sync_response(ErrorCode.NOT_COORDINATOR) is Step.FIND_COORDINATOR
    m.join_request(PROTOS)
    m.on_join_response(0, generation_id=4, member_id="a", leader="b", protocol_name="range")
    with pytest.raises(KafkaError):
        m.on_sync_response(ErrorCode.FENCED_INSTANCE_ID)
    with pytest.raises(RuntimeError):
        m.sync_request()  # not syncing any more


def test_sync_with_another_protocol_is_fatal() -> None:
    m = member(Clock())
    m.join_request(PROTOS)
    m.on_join_response(0, generation_id=1, member_id="a", leader="b", protocol_name="range")
    with pytest.raises(KafkaError):
        m.on_sync_response(0, "roundrobin")


def test_heartbeat_schedule_and_session_expiry() -> None:
    clock = Clock()
    m = member(clock)
    assert m.heartbeat_delay() == 1.0  # not a member yet: nothing due
    m = joined(clock)
    assert m.heartbeat_delay() == pytest.approx(1.0)
    clock.now += 0.4
    assert m.heartbeat_delay() == pytest.approx(0.6)
    clock.now += 0.6
    assert m.heartbeat_delay() == 0
    req = m.heartbeat_request()
    assert (req.generation_id, req.member_id) == (5, "m1")
    assert m.heartbeat_delay() == 1.0  # in flight: no second one
    clock.now += 0.05
    assert m.on_heartbeat_response(0) is Step.OK
    assert m.heartbeat_delay() == pytest.approx(0.95)
    clock.now += 5
    m.heartbeat_request()
    m.on_heartbeat_failure()
    assert m.heartbeat_delay() == pytest.approx(0.1)  # retry backoff
    assert not m.session_expired()
    clock.now += 5.1  # 10.1 s since the last answered heartbeat
    assert m.session_expired()


def test_heartbeat_rebalance_in_progress_requests_rejoin_keeping_generation() -> None:
    clock = Clock()
    m = joined(clock)
    m.heartbeat_request()
    assert m.on_heartbeat_response(ErrorCode.REBALANCE_IN_PROGRESS) is Step.REJOIN
    assert m.rejoin_needed and not m.stable and m.generation_id == 5 and not m.take_lost()
    assert m.join_request(PROTOS).member_id == "m1"


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION])
def test_heartbeat_generation_errors_lose_partitions(code: ErrorCode) -> None:
    clock = Clock()
    m = joined(clock)
    m.heartbeat_request()
    assert m.on_heartbeat_response(code) is Step.REJOIN
    assert m.state is MemberState.UNJOINED and m.member_id == "" and m.take_lost()


def test_heartbeat_coordinator_errors_and_fatal() -> None:
    clock = Clock()
    m = joined(clock)
    m.heartbeat_request()
    assert m.on_heartbeat_response(ErrorCode.NOT_COORDINATOR) is Step.FIND_COORDINATOR
    assert m.state is MemberState.STABLE  # still a member: heartbeats go to the new coordinator
    assert m.heartbeat_delay() == pytest.approx(0.1)
    m.heartbeat_request()
    with pytest.raises(KafkaError) as ei:
        m.on_heartbeat_response(ErrorCode.FENCED_INSTANCE_ID)
    assert "group.instance.id" in str(ei.value)


def test_stale_heartbeat_answer_is_ignored() -> None:
    clock = Clock()
    m = joined(clock)
    m.heartbeat_request()
    assert m.on_heartbeat_response(ErrorCode.ILLEGAL_GENERATION, sent_generation=4) is Step.OK
    assert m.stable


def test_poll_interval_expiry_and_leave() -> None:
    clock = Clock()
    m = joined(clock)
    m.on_poll()
    clock.now += 19
    assert not m.poll_timeout_expired(20000)
    clock.now += 2
    assert m.poll_timeout_expired(20000)
    req = m.leave_request("poll timeout")
    assert req is not None and req.member_id == "m1" and req.members[0].member_id == "m1"
    assert m.state is MemberState.UNJOINED and m.rejoin_needed and m.take_lost()
    assert not m.poll_timeout_expired(20000)  # not a member any more
    assert m.leave_request("again") is None


def test_static_member_never_sends_leave() -> None:
    clock = Clock()
    m = joined(clock, instance="inst-1")
    assert m.heartbeat_request().group_instance_id == "inst-1"
    assert m.leave_request("close") is None
    assert m.member_id == "" and m.generation_id == -1


def test_commit_errors_feed_membership() -> None:
    clock = Clock()
    m = joined(clock)
    m.on_commit_error(ErrorCode.REBALANCE_IN_PROGRESS)
    assert m.rejoin_needed and m.generation_id == 5
    m = joined(clock)
    m.on_commit_error(ErrorCode.ILLEGAL_GENERATION)
    assert m.generation_id == -1 and m.take_lost()


def test_consumer_group_config_validation() -> None:
    base = {"bootstrap.servers": "127.0.0.1:9"}
    c = parse_consumer_config({**base, "group.id": "g"})
    assert c.enable_auto_commit and c.assignors == ("range", "cooperative-sticky")
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.max_poll_interval_ms) == (45000, 3000, 300000)
    assert not parse_consumer_config(base).enable_auto_commit
    c = parse_consumer_config({**base, "group.id": "g", "partition.assignment.strategy":
                               "org.apache.kafka.clients.consumer.RoundRobinAssignor, sticky"})
    assert c.assignors == ("roundrobin", "sticky")
    for bad, words in [({"group.instance.id": "i"}, "needs group.id"),
                       ({"enable.auto.commit": True}, "needs group.id"),
                       ({"group.id": "g", "heartbeat.interval.ms": 45000}, "lower than session.timeout.ms"),
                       ({"group.id": "g", "partition.assignment.strategy": "fair"}, "unknown assignor 'fair'"),
                       ({"group.id": ""}, "must not be empty")]:
        with pytest.raises(ConfigError, match=words):
            parse_consumer_config({**base, **bad})
