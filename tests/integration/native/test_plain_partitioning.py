"""Keyed records land on the same partitions from our producer as from librdkafka's murmur2_random partitioner
(Java's default for keyed records), on oncelog AND Tansu; explicit partitions win over keys."""

from __future__ import annotations

import confluent_kafka as ck
import pytest

from oncelog.client import Admin, Producer
from oncelog.protocol.murmur2 import partition_for_key

PARTITIONS = 7
TIMEOUT = 30.0
KEYS: list[bytes] = [
    b"", b"a", b"\x00", b"\xff" * 3, "\u00fcnicode-\u4e2d".encode(), b"k" * 1000,
    *(f"user-{i}".encode() for i in range(150)),
    *(bytes([i, (i * 7) % 256, (i * 13) % 256]) for i in range(50)),
]


@pytest.mark.timeout(120)
def test_keyed_partitions_match_librdkafka_murmur2_random(any_bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": any_bootstrap}) as admin:
        admin.create_topics(topic_name, PARTITIONS)
    ours: dict[bytes, int] = {}
    with Producer({"bootstrap.servers": any_bootstrap, "linger.ms": 5}) as p:
        for k in KEYS:
            p.produce(topic_name, b"ours", key=k, on_delivery=lambda e, m: ours.__setitem__(m.key(), m.partition()))
        assert p.flush(TIMEOUT) == 0
    theirs: dict[bytes, int] = {}
    ckp = ck.Producer({"bootstrap.servers": any_bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in KEYS:
        ckp.produce(topic_name, b"theirs", key=k, on_delivery=lambda e, m: theirs.__setitem__(m.key(), m.partition()))
    assert ckp.flush(TIMEOUT) == 0
    assert len(ours) == len(KEYS) and ours == theirs
    assert all(ours[k] == partition_for_key(k, PARTITIONS) for k in KEYS)
    assert len(set(ours.values())) == PARTITIONS  # the keys spread over every partition


@pytest.mark.timeout(60)
def test_explicit_partition_wins_over_key_and_null_keys_stay_in_range(any_bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": any_bootstrap}) as admin:
        admin.create_topics(topic_name, PARTITIONS)
    got: list[tuple[bytes | None, int]] = []
    with Producer({"bootstrap.servers": any_bootstrap}) as p:
        for k in KEYS[:20]:
            p.produce(topic_name, b"x", key=k, partition=3, on_delivery=lambda e, m: got.append((m.key(), m.partition())))
        for _ in range(20):
            p.produce(topic_name, b"y", on_delivery=lambda e, m: got.append((m.key(), m.partition())))
        assert p.flush(TIMEOUT) == 0
    assert [pt for k, pt in got if k is not None] == [3] * 20
    assert len([pt for k, pt in got if k is None and 0 <= pt < PARTITIONS]) == 20
