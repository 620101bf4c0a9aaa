"""The native client's KIP-848 membership (group.protocol=consumer) as a pure state machine."""

from __future__ import annotations

import uuid

import pytest

from oncelog.client.consumer.heartbeat_membership import CgState, HeartbeatMembership
from oncelog.client.consumer.membership import Step
from oncelog.client.errors import KafkaError
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.consumer_group_heartbeat_response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)

T = uuid.UUID(int=7)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def answer(epoch: int, parts: list[int] | None, interval: int = 2000, code: int = 0) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(
        error_code=code, member_epoch=epoch, heartbeat_interval_ms=interval,
        assignment=None if parts is None else Assignment(topic_partitions=[TopicPartitions(topic_id=T,
                                                                                          partitions=parts)]))


def joined(static: str | None = None) -> tuple[HeartbeatMembership, Clock]:
    clock = Clock()
    m = HeartbeatMembership("g", group_instance_id=static, rebalance_timeout_ms=30_000, clock=clock)
    m.subscribe(["t"], None)
    return m, clock


def test_join_reconcile_and_acknowledge() -> None:
    m, clock = joined()
    assert m.state is CgState.JOINING and m.heartbeat_delay() <= 0
    req = m.heartbeat_request()
    assert (req.member_epoch, req.subscribed_topic_names, req.topic_partitions) == (0, ["t"], [])
    assert req.rebalance_timeout_ms == 30_000 and req.member_id == m.member_id
    assert m.on_heartbeat_response(answer(3, [0, 1])) is Step.OK
    assert (m.state, m.target, m.member_epoch) == (CgState.RECONCILING, {(T, 0), (T, 1)}, 3)
    assert m.heartbeat_delay() == pytest.approx(2.0)  # the coordinator's interval
    m.reconciled({(T, 0), (T, 1)}, {(T, 0), (T, 1)})
    assert m.state is CgState.ACKNOWLEDGING and m.heartbeat_delay() <= 0  # reported at once
    req = m.heartbeat_request()
    assert [(tp.topic_id, tp.partitions) for tp in req.topic_partitions] == [(T, [0, 1])]
    assert m.state is CgState.STABLE
    # the same assignment again: nothing to do
    assert m.on_heartbeat_response(answer(3, [0, 1])) is Step.OK and m.state is CgState.STABLE


def test_a_newer_assignment_during_reconciliation_stays_to_apply() -> None:
    m, _ = joined()
    m.on_heartbeat_response(answer(3, [0, 1]))
    applied = m.target
    assert applied is not None
    m.on_heartbeat_response(answer(4, [1]))  # the coordinator moved on while the callbacks ran
    m.reconciled(set(applied), applied)
    assert m.state is CgState.RECONCILING and m.target == {(T, 1)}


def test_fenced_member_loses_its_partitions_and_rejoins_with_epoch_zero() -> None:
    m, _ = joined()
    m.on_heartbeat_response(answer(3, [0]))
    m.reconciled({(T, 0)}, {(T, 0)})
    member_id = m.member_id
    assert m.on_heartbeat_response(answer(0, None, code=ErrorCode.FENCED_MEMBER_EPOCH)) is Step.REJOIN
    assert m.take_lost() and not m.take_lost()
    assert (m.state, m.member_epoch, m.owned, m.member_id) == (CgState.JOINING, 0, set(), member_id)
    assert m.heartbeat_request().member_epoch == 0


def test_coordinator_errors_retry_and_fatal_errors_raise() -> None:
    m, clock = joined()
    assert m.on_heartbeat_response(answer(0, None, code=ErrorCode.NOT_COORDINATOR)) is Step.FIND_COORDINATOR
    assert m.on_heartbeat_response(answer(0, None, code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)) is Step.RETRY
    assert m.heartbeat_delay() > 0
    with pytest.raises(KafkaError) as e:
        m.on_heartbeat_response(answer(0, None, code=ErrorCode.UNRELEASED_INSTANCE_ID))
    assert e.value.code() == ErrorCode.UNRELEASED_INSTANCE_ID and not e.value.retriable()


def test_leaving_a_dynamic_member_uses_epoch_minus_one_a_static_one_minus_two() -> None:
    for static, epoch in ((None, -1), ("i", -2)):
        m, _ = joined(static)
        m.on_heartbeat_response(answer(3, []))
        req = m.leave_request()
        assert req is not None and req.member_epoch == epoch and req.instance_id == static
        assert m.state is CgState.LEAVING
        m.on_heartbeat_response(answer(epoch, None))
        assert m.state is CgState.UNSUBSCRIBED and not m.active


def test_a_commit_refused_as_stale_heartbeats_at_once() -> None:
    m, clock = joined()
    m.on_heartbeat_response(answer(3, []))
    assert m.heartbeat_delay() > 0
    m.on_commit_error(ErrorCode.STALE_MEMBER_EPOCH)
    assert m.heartbeat_delay() <= 0
