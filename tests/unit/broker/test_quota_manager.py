"""The broker's quota decisions with a mock clock: how requests are charged (produce bytes, a consumer's fetched
bytes, handler time), what is exempt, and which connections are served, delayed or closed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from oncelog.broker.settings.config import BrokerConfig, ConfigError
from oncelog.broker.settings.values import parse_overrides
from oncelog.broker.network.connection_quotas import ConnectionQuotas
from oncelog.broker.security.quotas import ClientQuotaManager
from oncelog.broker.request import RequestContext
from oncelog.protocol.messages.fetch_request import FetchRequest
from oncelog.protocol.messages.fetch_response import FetchableTopicResponse, FetchResponse, PartitionData
from oncelog.protocol.messages.metadata_response import MetadataResponse
from oncelog.protocol.messages.produce_request import ProduceRequest
from oncelog.security.principal import KafkaPrincipal
from oncelog.security.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Alteration,
    alter,
    parse_records,
)
from oncelog.security.store import QUOTAS, MemorySecurityStore
from oncelog.testing import MockClock

PRODUCE, FETCH, METADATA, WRITE_TXN_MARKERS = 0, 1, 3, 27


def _set(store: MemorySecurityStore, entity: dict[str, str | None], key: str, value: float | None) -> None:
    outcome = alter(parse_records(store.records(QUOTAS)), [Alteration(entity, [(key, value)])])
    asyncio.run(store.write(QUOTAS, outcome.puts, outcome.deletes))


def _ctx(api_key: int, client_id: str = "app", user: str = "ANONYMOUS", version: int = 9) -> RequestContext:
    return RequestContext(1, "127.0.0.1:5000", client_id, api_key, version, 1, KafkaPrincipal("User", user))


def _manager() -> tuple[ClientQuotaManager, MemorySecurityStore, MockClock]:
    clock, store = MockClock(), MemorySecurityStore()
    return ClientQuotaManager(clock, 1, 11, store), store, clock


def test_without_quotas_nothing_is_charged_and_quotas_apply_as_soon_as_stored() -> None:
    quotas, store, _ = _manager()
    assert not quotas.enabled
    _set(store, {CLIENT_ID: "app"}, PRODUCER_BYTE_RATE, 500)
    assert quotas.enabled
    assert quotas.on_request(_ctx(PRODUCE, "other"), ProduceRequest(acks=1), 10_000, 0.0) is None
    _set(store, {CLIENT_ID: "app"}, PRODUCER_BYTE_RATE, None)
    assert not quotas.enabled


def test_produce_bytes_are_throttled_as_kafka_and_the_response_says_how_long() -> None:
    quotas, store, clock = _manager()
    _set(store, {CLIENT_ID: None}, PRODUCER_BYTE_RATE, 500)
    for _ in range(10):
        assert quotas.on_request(_ctx(PRODUCE), ProduceRequest(acks=1), 400, 0.0) is None
        clock.advance(1000)
    clock.advance(500)
    charge = quotas.on_request(_ctx(PRODUCE), ProduceRequest(acks=1), 2300, 0.0)
    assert charge is not None and charge.throttle_ms == 2100  # Kafka's ClientQuotaManagerTest numbers
    response = MetadataResponse()
    assert quotas.on_response(charge, response) == 2100 and response.throttle_time_ms == 2100
    # a default client-id quota is one rate per client id: another client id is not throttled
    assert quotas.on_request(_ctx(PRODUCE, "other"), ProduceRequest(acks=1), 2300, 0.0) is None
    assert quotas.rate(PRODUCER_BYTE_RATE, "ANONYMOUS", "app") == pytest.approx(6300 / 10.5)


def test_a_user_quota_is_shared_by_the_users_client_ids() -> None:
    quotas, store, _ = _manager()
    _set(store, {USER: "ANONYMOUS"}, PRODUCER_BYTE_RATE, 100)
    assert quotas.on_request(_ctx(PRODUCE, "a"), ProduceRequest(acks=1), 900, 0.0) is None
    charge = quotas.on_request(_ctx(PRODUCE, "b"), ProduceRequest(acks=1), 200, 0.0)
    assert charge is not None and charge.throttle_ms == 1000  # 1100 B over 10 s: (110 - 100) / 100 * 10 s


def test_request_time_is_charged_except_for_acks_0_and_broker_requests() -> None:
    quotas, store, _ = _manager()
    _set(store, {CLIENT_ID: "app"}, REQUEST_PERCENTAGE, 1)  # 10 ms of handler time a second
    charge = quotas.on_request(_ctx(METADATA), None, 100, 0.5)  # 500 ms at once: bounded by one window
    assert charge is not None and charge.throttle_ms == 1000
    assert quotas.on_request(_ctx(PRODUCE), ProduceRequest(acks=0), 100, 0.5) is None
    assert quotas.on_request(_ctx(WRITE_TXN_MARKERS), None, 100, 0.5) is None
    assert quotas.on_request(_ctx(METADATA, "other"), None, 100, 0.5) is None


def _fetch_response(size: int) -> FetchResponse:
    """A response with ``size`` bytes of records, as the log hands them over: a list of chunks."""
    return FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
        PartitionData(partition_index=0, records=[memoryview(b"x" * (size // 2)), b"x" * (size - size // 2)])])])


def test_a_throttled_fetch_is_answered_empty_and_its_bytes_are_taken_back() -> None:
    quotas, store, clock = _manager()
    _set(store, {CLIENT_ID: "app"}, CONSUMER_BYTE_RATE, 1000)
    assert quotas.fetch_max_bytes("ANONYMOUS", "app") == 10_000  # the quota over quota.window.num - 1 windows
    assert quotas.fetch_max_bytes("ANONYMOUS", "other") is None
    charge = quotas.on_request(_ctx(FETCH, version=12), FetchRequest(replica_id=-1), 100, 0.0)
    assert charge is not None and charge.throttle_ms == 0
    first = _fetch_response(10_000)
    assert quotas.on_response(charge, first) == 0 and first.responses  # within the quota: sent
    clock.advance(100)
    charge = quotas.on_request(_ctx(FETCH, version=12), FetchRequest(replica_id=-1), 100, 0.0)
    assert charge is not None
    second = _fetch_response(5000)
    # 15 000 B over 10.1 s = 1485 B/s: (1485 - 1000) / 1000 * 10.1 s
    assert quotas.on_response(charge, second) == 4900
    assert second.responses == [] and second.throttle_time_ms == 4900
    assert quotas.rate(CONSUMER_BYTE_RATE, "ANONYMOUS", "app") == pytest.approx(10_000 / 10.1)  # 5000 B taken back
    # a follower's fetch is exempt (v15+ names the replica in replica_state)
    follower = FetchRequest(replica_id=1)
    assert quotas.on_request(_ctx(FETCH, version=12), follower, 100, 0.0) is None


# ---------------------------------------------------------------------------------------------- connections
@dataclass
class _Limits:
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    max_connections_per_ip_overrides: str = ""
    max_connection_creation_rate: int = 2**31 - 1
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1


def test_an_address_past_its_maximum_is_refused_and_others_are_not() -> None:
    limits = _Limits(max_connections_per_ip=2, max_connections_per_ip_overrides="127.0.0.2:3, [::1]:0")
    quotas = ConnectionQuotas(limits, MockClock())
    assert quotas.admit("127.0.0.1").serve and quotas.admit("127.0.0.1").serve
    refused = quotas.admit("127.0.0.1")
    assert not refused.serve and refused.delay_ms == 0 and "maximum of 2 connections" in refused.reason
    assert all(quotas.admit("127.0.0.2").serve for _ in range(3)) and not quotas.admit("127.0.0.2").serve
    assert not quotas.admit("::1").serve  # an override of 0: never
    assert quotas.total == 5 and quotas.count("127.0.0.1") == 2
    quotas.release("127.0.0.1")
    assert quotas.admit("127.0.0.1").serve
    limits.max_connections_per_ip = 5  # a dynamic change applies to the next connection
    assert quotas.admit("127.0.0.1").serve


def test_the_broker_waits_for_a_slot_at_max_connections() -> None:
    limits = _Limits(max_connections=2)
    quotas = ConnectionQuotas(limits, MockClock())
    quotas.admit("10.0.0.1")
    assert quotas.slot_available()
    quotas.admit("10.0.0.2")
    assert not quotas.slot_available()
    quotas.release("10.0.0.2")
    assert quotas.slot_available()


def test_connections_past_the_creation_rate_are_delayed_at_most_one_window() -> None:
    clock = MockClock()
    quotas = ConnectionQuotas(_Limits(max_connection_creation_rate=5), clock)
    assert [quotas.creation_delay_ms() for _ in range(50)] == [0] * 50  # 50 over 10 windows: 5/s
    assert quotas.creation_delay_ms() == 200  # 51 over 10 s: (5.1 - 5) / 5 * 10 s
    assert max(quotas.creation_delay_ms() for _ in range(100)) == 1000  # bounded by quota.window.size.seconds


def test_an_address_past_its_connection_rate_quota_is_closed_late_and_not_counted() -> None:
    clock = MockClock()
    limits = _Limits(max_connection_creation_rate=1000)
    quotas = ConnectionQuotas(limits, clock, ip_rate=lambda ip: 1 if ip == "10.0.0.9" else None)
    assert all(quotas.admit("10.0.0.9").serve for _ in range(10))  # 10 over 10 s: 1/s
    late = quotas.admit("10.0.0.9")
    assert not late.serve and late.delay_ms == 1000 and "connection_creation_rate" in late.reason
    assert quotas.count("10.0.0.9") == 10 and quotas.admit("10.0.0.8").serve


def test_overrides_parse_and_bad_ones_fail_the_start() -> None:
    assert parse_overrides(" a.example:5 ,127.0.0.1:0,[::1]:7") == {"a.example": 5, "127.0.0.1": 0, "::1": 7}
    with pytest.raises(ValueError, match="HOST:COUNT"):
        parse_overrides("127.0.0.1")
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        BrokerConfig.load(overrides={"max.connections.per.ip.overrides": "x:y"})
    with pytest.raises(ConfigError, match="only if max.connections.per.ip.overrides"):
        BrokerConfig.load(overrides={"max.connections.per.ip": 0})
    assert BrokerConfig.load(overrides={"max.connections.per.ip": 0,
                                        "max.connections.per.ip.overrides": "10.0.0.1:5"}).max_connections_per_ip == 0
