"""The coordinators' internal-topic log on real storage: writes carry the coordinator epoch and are refused when the
broker does not lead the partition with it; loading reads records, transactional records and markers back in log
order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.broker.coordinators.internal_log import CoordinatorLogError, InternalTopicLog
from oncelog.broker.topics import TopicRegistry
from oncelog.coordinator.runtime import LoadedMarker, LoadedRecord
from oncelog.protocol.errors import ErrorCode
from oncelog.storage import LogConfig, LogManager
from oncelog.testing import MockClock


def test_epoch_fencing_and_reading_back(tmp_path: Path) -> None:
    async def main() -> None:
        clock = MockClock()
        logs = LogManager.open(tmp_path, LogConfig(), clock)
        topics = TopicRegistry(logs, durable_per_append=False, mark_dirty=lambda p, n, lazy: None)
        log = InternalTopicLog(topics, clock, "__consumer_offsets", 2, {"cleanup.policy": "compact"})
        log.ensure()
        with pytest.raises(CoordinatorLogError) as e:  # not led here yet
            log.append(0, 0, [(b"k", b"v")])
        assert e.value.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
        log.become_leader(0, 4)
        base, durable = log.append(0, 4, [(b"k", b"v")])
        await durable
        assert base == 0
        with pytest.raises(CoordinatorLogError) as e:  # a write decided under an older epoch
            log.append(0, 3, [(b"k", b"w")])
        assert e.value.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
        base, _ = log.append(0, 4, [(b"o", b"1"), (b"o", b"2")], producer_id=7, producer_epoch=2)
        assert base == 1
        p = topics.partition("__consumer_offsets", 0)
        assert p is not None
        p.append_marker(7, 2, True, coordinator_epoch=4, timestamp_ms=clock.wall_ms())
        assert list(log.read(0)) == [LoadedRecord(b"k", b"v", 0), LoadedRecord(b"o", b"1", 1, 7, 2),
                                     LoadedRecord(b"o", b"2", 2, 7, 2), LoadedMarker(7, 2, True, 3)]
        log.resign(0)
        with pytest.raises(CoordinatorLogError):
            log.append(0, 4, [(b"k", b"x")])
        logs.close()
    asyncio.run(main())
