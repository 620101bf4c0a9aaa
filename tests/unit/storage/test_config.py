from __future__ import annotations

import pytest

from oncelog.storage import TOPIC_CONFIG_KEYS, InvalidConfigError, LogConfig


def test_defaults_match_kafka() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.segment_ms == 7 * 24 * 3600 * 1000
    assert c.index_interval_bytes == 4096
    assert c.segment_index_bytes == 10 * 1024 * 1024
    assert c.retention_ms == 7 * 24 * 3600 * 1000 and c.retention_bytes == -1
    assert c.cleanup_policy == "delete" and c.max_message_bytes == 1048588
    assert c.message_timestamp_type == "CreateTime"
    kafka = c.to_kafka()
    assert kafka["flush.messages"] == str(2**63 - 1)
    assert set(kafka) == set(TOPIC_CONFIG_KEYS)


def test_from_kafka_overrides_and_roundtrip() -> None:
    base = LogConfig(segment_bytes=1000)
    c = LogConfig.from_kafka({"retention.ms": "-1", "cleanup.policy": "compact, delete", "preallocate": "TRUE",
                              "min.cleanable.dirty.ratio": "0.25"}, base)
    assert c.segment_bytes == 1000 and c.retention_ms == -1 and c.compact and c.delete_enabled
    assert c.preallocate is True and c.min_cleanable_dirty_ratio == 0.25
    assert LogConfig.from_kafka(c.to_kafka()) == c


@pytest.mark.parametrize(
    "key,value",
    [("segment.bytes", "10"), ("segment.bytes", "abc"), ("retention.ms", "-2"), ("cleanup.policy", "shred"),
     ("message.timestamp.type", "Now"), ("flush.messages", "0"), ("segment.bytes", str(2**31)),
     ("preallocate", "yes"), ("no.such.key", "1"), ("cleanup.policy", "")],
)
def test_invalid_values_rejected(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as ei:
        LogConfig.from_kafka({key: value})
    assert key in str(ei.value) and ei.value.key == key


def test_validate_overrides_normalises() -> None:
    assert LogConfig.validate_overrides({"cleanup.policy": " delete ,compact", "retention.bytes": " 5"}) == {
        "cleanup.policy": "delete,compact", "retention.bytes": "5"}
