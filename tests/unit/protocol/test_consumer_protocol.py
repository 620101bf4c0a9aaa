"""The consumer protocol's Subscription/Assignment codecs, checked against kafka-python's independent codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment  # type: ignore[import-untyped]
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from oncelog.protocol._runtime import ProtocolDecodeError
from oncelog.protocol.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

topics_st = st.lists(st.text(min_size=1, max_size=8), max_size=4, unique=True)
owned_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 50)), max_size=6, unique=True)


def _grouped(owned: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Owned partitions come back grouped by topic (first-appearance order), like Kafka's collection."""
    order = list(dict.fromkeys(t for t, _ in owned))
    return [(t, p) for t in order for tt, p in owned if tt == t]


def _kp_subscription(sub: Subscription, version: int) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sub.owned_partitions:
        by_topic.setdefault(t, []).append(p)
    kp = KpSubscription(
        topics=sub.topics,
        user_data=sub.user_data,
        owned_partitions=[KpSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in by_topic.items()],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
        version=version,
    )
    return bytes(kp.encode())


def test_subscription_v0_bytes() -> None:
    assert encode_subscription(Subscription(["a"]), version=0) == b"\x00\x00" + b"\x00\x00\x00\x01\x00\x01a" + (
        b"\xff\xff\xff\xff"
    )


def test_subscription_v3_known_bytes() -> None:
    sub = Subscription(["a", "b"], b"x", [("a", 1), ("a", 2)], 7, "r1")
    expected = (
        b"\x00\x03\x00\x00\x00\x02\x00\x01a\x00\x01b\x00\x00\x00\x01x\x00\x00\x00\x01\x00\x01a"
        b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x07\x00\x02r1"
    )
    assert encode_subscription(sub) == expected
    assert decode_subscription(expected) == sub


@given(topics_st, st.none() | st.binary(max_size=10), owned_st, st.integers(-1, 2**31 - 1),
       st.none() | st.text(min_size=1, max_size=5), st.integers(0, 3))
def test_subscription_matches_kafka_python(
    topics: list[str], user_data: bytes | None, owned: list[tuple[str, int]], generation: int,
    rack: str | None, version: int,
) -> None:
    sub = Subscription(topics, user_data, owned, generation, rack)
    ours = encode_subscription(sub, version)
    assert ours == _kp_subscription(sub, version)
    back = decode_subscription(ours)
    assert back.topics == topics and back.user_data == user_data
    assert back.owned_partitions == (_grouped(owned) if version >= 1 else [])
    assert back.generation_id == (generation if version >= 2 else -1)
    assert back.rack_id == (rack if version >= 3 else None)


@given(owned_st, st.none() | st.binary(max_size=10), st.integers(0, 3))
def test_assignment_matches_kafka_python(parts: list[tuple[str, int]], user_data: bytes | None, version: int) -> None:
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    kp = KpAssignment(
        assigned_partitions=[KpAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in by_topic.items()],
        user_data=user_data,
        version=version,
    )
    ours = encode_assignment(Assignment(parts, user_data), version)
    assert ours == bytes(kp.encode())
    assert decode_assignment(ours) == Assignment(_grouped(parts), user_data)


def test_newer_version_with_trailing_fields_decodes_with_our_newest() -> None:
    sub = Subscription(["t"], None, [("t", 0)], 4, "rack")
    body = encode_subscription(sub)[2:]
    future = b"\x00\x05" + body + b"\x00\x00\x00\x2a" + b"\xde\xad"  # a v5 that appended fields
    assert decode_subscription(future) == sub
    asg = encode_assignment(Assignment([("t", 1)], b"u"))
    assert decode_assignment(b"\x00\x09" + asg[2:] + b"\x01\x02\x03") == Assignment([("t", 1)], b"u")


def test_older_version_fields_default() -> None:
    back = decode_subscription(encode_subscription(Subscription(["t"], b"d", [("t", 3)], 9, "r"), version=1))
    assert back == Subscription(["t"], b"d", [("t", 3)], -1, None)


def test_empty_assignment_bytes_is_empty_assignment() -> None:
    assert decode_assignment(b"") == Assignment([])


@pytest.mark.parametrize("data", [b"\xff\xff" + encode_subscription(Subscription(["t"]))[2:], b"\x00", b""])
def test_bad_subscription_version_is_an_error(data: bytes) -> None:
    with pytest.raises(ProtocolDecodeError, match="subscription"):
        decode_subscription(data)


def test_truncated_data_is_an_error() -> None:
    full = encode_subscription(Subscription(["topic"], b"12345"))
    with pytest.raises(ProtocolDecodeError):
        decode_subscription(full[:-3])
    with pytest.raises(ProtocolDecodeError):
        decode_assignment(encode_assignment(Assignment([("t", 0)]))[:-6])


def test_encode_unknown_version_is_an_error() -> None:
    with pytest.raises(ValueError, match="versions 0-3"):
        encode_subscription(Subscription([]), version=4)
    with pytest.raises(ValueError, match="versions 0-3"):
        encode_assignment(Assignment([]), version=-1)
