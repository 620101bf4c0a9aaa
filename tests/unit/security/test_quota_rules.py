"""Client quotas without a broker: Kafka's rate and throttle arithmetic (the numbers of Kafka's own
ClientQuotaManagerTest), which quota applies to a client, and AlterClientQuotas / DescribeClientQuotas decisions
with Kafka's messages."""

from __future__ import annotations

import json

import pytest

from oncelog.protocol.errors import ErrorCode
from oncelog.security.quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Alteration,
    Entity,
    FilterComponent,
    QuotaError,
    QuotaIndex,
    RateSensor,
    Resolved,
    alter,
    describe,
    entity_of,
    normalize_ip,
    parse_records,
    record_key,
    throttle_time,
)


# ---------------------------------------------------------------------------------------------- rates
def test_a_spike_is_throttled_as_kafka_computes_it() -> None:
    """Kafka's ClientQuotaManagerTest.testQuotaViolation: 11 samples of 1 s, a quota of 500 B/s."""
    sensor, now = RateSensor(1000, 11), 0
    for _ in range(10):
        assert sensor.record_and_throttle(400, 500, now) == 0  # under the quota
        now += 1000
    now += 500
    # 400*10 + 2300 = 6300 bytes over 10.5 s = 600 B/s; (600 - 500) / 500 * 10.5 s = 2100 ms
    assert sensor.record_and_throttle(2300, 500, now) == 2100
    now += 2100
    throttled = []
    for _ in range(10):
        throttled.append(sensor.record_and_throttle(400, 500, now))
        now += 1000
    assert all(t > 0 for t in throttled[:8])  # until the spike's sample rolls out of the window
    assert sensor.record_and_throttle(0, 500, now) == 0


def test_the_rate_counts_at_least_num_minus_one_whole_windows() -> None:
    sensor = RateSensor(1000, 11)
    sensor.record(1000, 0)
    assert sensor.window_size(0) == 10_000  # a first burst is spread over 10 windows: 100/s, not infinite
    assert sensor.measure(0) == pytest.approx(100.0)
    assert sensor.window_size(10_500) == 10_500
    assert sensor.measure(11_000) == 0.0  # the sample is older than 11 windows: purged


def test_the_delay_brings_the_rate_back_to_the_quota() -> None:
    # O * W / (W + X) = T  ->  X = (O - T) / T * W
    assert throttle_time(150.0, 100.0, 10_000) == 5000
    assert throttle_time(100.0, 100.0, 10_000) == 0
    assert throttle_time(100.5, 100.0, 1000) == 5  # rounded as Java's Math.round (half up)


def test_a_request_percentage_throttle_is_bounded_by_one_window() -> None:
    """Kafka's ClientRequestQuotaManagerTest: quota 1% (10 ms a second), a 500 ms spike is throttled 1000 ms (the
    window), for as long as the spike is in the window."""
    sensor, now = RateSensor(1000, 11), 0
    for _ in range(10):
        assert sensor.record_and_throttle(0.4, 1, now, 1000) == 0  # 4 ms of handler time each second
        now += 1000
    now += 500
    assert sensor.record_and_throttle(6.71, 1, now, 1000) == 210  # (10.2 - 10) / 10 * 10.5 s
    now += 210
    for _ in range(11):
        sensor.record_and_throttle(0.4, 1, now, 1000)
        now += 1000
    assert sensor.record_and_throttle(0, 1, now, 1000) == 0
    assert sensor.record_and_throttle(50, 1, now, 1000) == 1000
    for _ in range(10):
        now += 1000
        assert sensor.record_and_throttle(0, 1, now, 1000) == 1000
    now += 1000
    assert sensor.record_and_throttle(0, 1, now, 1000) == 0


# ---------------------------------------------------------------------------------------------- which quota applies
def _index(*quotas: tuple[dict[str, str | None], str, float]) -> QuotaIndex:
    current: dict[Entity, dict[str, float]] = {}
    for entity, key, value in quotas:
        current.setdefault(entity_of(entity), {})[key] = value
    return QuotaIndex(current)


def test_the_most_specific_entity_wins_in_kafkas_order() -> None:
    levels = [
        ({USER: "alice", CLIENT_ID: "app"}, Resolved(1, "alice", "app")),
        ({USER: "alice", CLIENT_ID: None}, Resolved(2, "alice", "app")),
        ({USER: "alice"}, Resolved(3, "alice", "")),
        ({USER: None, CLIENT_ID: "app"}, Resolved(4, "alice", "app")),
        ({USER: None, CLIENT_ID: None}, Resolved(5, "alice", "app")),
        ({USER: None}, Resolved(6, "alice", "")),
        ({CLIENT_ID: "app"}, Resolved(7, "", "app")),
        ({CLIENT_ID: None}, Resolved(8, "", "app")),
    ]
    # with every level stored, removing the most specific one at a time walks down Kafka's list
    for i, (_, expected) in enumerate(levels):
        index = _index(*[(entity, PRODUCER_BYTE_RATE, float(n + 1)) for n, (entity, _) in enumerate(levels)
                         if n >= i])
        assert index.resolve(PRODUCER_BYTE_RATE, "alice", "app") == expected
    assert _index(*[(e, PRODUCER_BYTE_RATE, 1.0) for e, _ in levels]).resolve(CONSUMER_BYTE_RATE, "alice",
                                                                               "app") is None


def test_other_clients_fall_to_the_defaults_and_each_key_resolves_alone() -> None:
    index = _index(({CLIENT_ID: "app"}, PRODUCER_BYTE_RATE, 100), ({CLIENT_ID: None}, PRODUCER_BYTE_RATE, 50),
                   ({USER: "bob"}, CONSUMER_BYTE_RATE, 10))
    assert index.resolve(PRODUCER_BYTE_RATE, "ANONYMOUS", "other") == Resolved(50, "", "other")  # its own rate
    assert index.resolve(PRODUCER_BYTE_RATE, "bob", "app") == Resolved(100, "", "app")  # bob's quota is fetch only
    assert index.resolve(CONSUMER_BYTE_RATE, "bob", "any") == Resolved(10, "bob", "")  # shared by bob's clients
    assert index.resolve(REQUEST_PERCENTAGE, "bob", "app") is None
    assert index.has(PRODUCER_BYTE_RATE) and not index.has(REQUEST_PERCENTAGE)


def test_ip_quotas_apply_to_their_address_else_the_default() -> None:
    index = _index(({IP: "127.0.0.2"}, CONNECTION_CREATION_RATE, 5), ({IP: None}, CONNECTION_CREATION_RATE, 50))
    assert index.ip_rate("127.0.0.2") == 5 and index.ip_rate("10.0.0.1") == 50
    assert _index().ip_rate("127.0.0.2") is None
    assert not index.has(CONNECTION_CREATION_RATE)  # ip quotas do not turn on the client quotas
    assert normalize_ip("::ffff:127.0.0.1") == "127.0.0.1" and normalize_ip("localhost") is None


# ---------------------------------------------------------------------------------------------- AlterClientQuotas
def _apply(current: dict[Entity, dict[str, float]], *alterations: Alteration) -> dict[Entity, dict[str, float]]:
    outcome = alter(current, alterations)
    records = {record_key(e, k): json.dumps(v).encode() for e, values in current.items() for k, v in values.items()}
    for key in outcome.deletes:
        del records[key]
    records.update(outcome.puts)
    return parse_records(records)


def test_alterations_set_change_and_remove_quotas() -> None:
    app = entity_of({CLIENT_ID: "app"})
    default_user = entity_of({USER: None})
    current = _apply({}, Alteration({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 1024), (REQUEST_PERCENTAGE, 12.5)]),
                     Alteration({USER: None}, [(CONSUMER_BYTE_RATE, 2048)]))
    assert current == {app: {PRODUCER_BYTE_RATE: 1024.0, REQUEST_PERCENTAGE: 12.5},
                       default_user: {CONSUMER_BYTE_RATE: 2048.0}}
    current = _apply(current, Alteration({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 4096), (REQUEST_PERCENTAGE, None)]),
                     Alteration({USER: None}, [(CONSUMER_BYTE_RATE, None), (PRODUCER_BYTE_RATE, None)]))
    assert current == {app: {PRODUCER_BYTE_RATE: 4096.0}}
    unchanged = alter(current, [Alteration({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 4096)])])
    assert not unchanged.puts and not unchanged.deletes and unchanged.results[app] == (ErrorCode.NONE, None)


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ({CLIENT_ID: "app"}, [("producer_bytes_rate", 1)], "Invalid configuration key producer_bytes_rate"),
    ({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, -5)], "Quota producer_byte_rate must be greater than 0"),
    ({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 0)], "Quota producer_byte_rate must be greater than 0"),
    ({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 10.5)], "producer_byte_rate cannot be a fractional value."),
    ({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 1e19)], "Proposed value for producer_byte_rate is too large for a "
                                                       "LONG."),
    ({IP: "10.0.0.1"}, [(CONNECTION_CREATION_RATE, 3e9)], "Proposed value for connection_creation_rate is too "
                                                          "large for an INT."),
    ({IP: "10.0.0.1"}, [(PRODUCER_BYTE_RATE, 1)], "Invalid configuration key producer_byte_rate"),
    ({CLIENT_ID: "app"}, [(CONNECTION_CREATION_RATE, 1)], "Invalid configuration key connection_creation_rate"),
    ({}, [(PRODUCER_BYTE_RATE, 1)], "Invalid empty client quota entity"),
    ({"group": "g"}, [(PRODUCER_BYTE_RATE, 1)], "Unhandled client quota entity type: group"),
    ({USER: ""}, [(PRODUCER_BYTE_RATE, 1)], "Empty user not supported"),
    ({IP: "10.0.0.1", USER: "a"}, [(CONNECTION_CREATION_RATE, 1)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ({IP: "no such host"}, [(CONNECTION_CREATION_RATE, 1)], "no such host is not a valid IP or resolvable host."),
    ({CLIENT_ID: "app"}, [(PRODUCER_BYTE_RATE, 1), (PRODUCER_BYTE_RATE, 2)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=app})"),
])
def test_a_bad_alteration_is_refused_with_kafkas_message_and_nothing_of_it_is_written(
        entity: dict[str, str | None], ops: list[tuple[str, float | None]], message: str) -> None:
    good = Alteration({USER: "alice"}, [(PRODUCER_BYTE_RATE, 100)])
    outcome = alter({}, [good, Alteration(entity, ops)])
    assert outcome.results[entity_of(entity)] == (ErrorCode.INVALID_REQUEST, message)
    assert outcome.results[entity_of({USER: "alice"})] == (ErrorCode.NONE, None)
    assert list(outcome.puts) == [record_key(entity_of({USER: "alice"}), PRODUCER_BYTE_RATE)]  # the good one only


def test_a_damaged_record_is_skipped() -> None:
    good = record_key(entity_of({CLIENT_ID: "a"}), PRODUCER_BYTE_RATE)
    assert parse_records({good: b"10", "not json": b"1", record_key((), "k"): b"1", good + " ": b"x"}) == {
        entity_of({CLIENT_ID: "a"}): {PRODUCER_BYTE_RATE: 10.0}}


# ---------------------------------------------------------------------------------------------- DescribeClientQuotas
CURRENT = {
    entity_of({USER: "alice"}): {PRODUCER_BYTE_RATE: 1.0},
    entity_of({USER: None}): {PRODUCER_BYTE_RATE: 2.0},
    entity_of({USER: "alice", CLIENT_ID: "app"}): {CONSUMER_BYTE_RATE: 3.0},
    entity_of({CLIENT_ID: "app"}): {REQUEST_PERCENTAGE: 4.0},
    entity_of({IP: "10.0.0.1"}): {CONNECTION_CREATION_RATE: 5.0},
}


def _values(components: list[FilterComponent], strict: bool = False) -> list[float]:
    return sorted(v for _, values in describe(CURRENT, components, strict) for v in values.values())


def test_describe_matches_exact_default_and_specified_names_as_kip_546() -> None:
    assert _values([FilterComponent(USER, MATCH_EXACT, "alice")]) == [1.0, 3.0]
    assert _values([FilterComponent(USER, MATCH_EXACT, "alice")], strict=True) == [1.0]
    assert _values([FilterComponent(USER, MATCH_DEFAULT, None)]) == [2.0]
    assert _values([FilterComponent(USER, MATCH_SPECIFIED, None)]) == [1.0, 2.0, 3.0]  # KRaft: defaults too
    assert _values([FilterComponent(CLIENT_ID, MATCH_SPECIFIED, None)], strict=True) == [4.0]
    assert _values([FilterComponent(USER, MATCH_EXACT, "alice"), FilterComponent(CLIENT_ID, MATCH_EXACT, "app")]) \
        == [3.0]
    assert _values([FilterComponent(IP, MATCH_SPECIFIED, None)]) == [5.0]
    assert _values([]) == [1.0, 2.0, 3.0, 4.0, 5.0] and _values([], strict=True) == []


@pytest.mark.parametrize(("components", "code", "message"), [
    ([FilterComponent("", MATCH_EXACT, "a")], ErrorCode.INVALID_REQUEST, "Invalid empty entity type."),
    ([FilterComponent(USER, MATCH_DEFAULT, None), FilterComponent(USER, MATCH_EXACT, "a")], ErrorCode.INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([FilterComponent("group", MATCH_EXACT, "a")], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([FilterComponent(USER, MATCH_EXACT, None)], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([FilterComponent(USER, MATCH_DEFAULT, "a")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([FilterComponent(USER, 7, None)], ErrorCode.INVALID_REQUEST, "Unknown match type 7"),
    ([FilterComponent(IP, MATCH_SPECIFIED, None), FilterComponent(USER, MATCH_SPECIFIED, None)],
     ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter component should not be "
                                "used with user or clientId filter component."),
])
def test_a_bad_filter_is_refused_with_kafkas_message(components: list[FilterComponent], code: ErrorCode,
                                                      message: str) -> None:
    with pytest.raises(QuotaError) as e:
        describe(CURRENT, components, False)
    assert (e.value.code, e.value.message) == (code, message)
