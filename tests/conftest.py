"""Shared fixtures: one real broker process per test session (integration tests), fresh ones where a test kills."""

from __future__ import annotations

import os
import uuid

from typing import Iterator

import pytest

from oncelog.testing.broker_process import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker shared by every integration test of the session. Tests use their own topic names."""
    base = tmp_path_factory.mktemp("shared-broker")
    # Tests write records with historical CreateTimes (2023) on purpose; a partition that mixes them with
    # current ones rolls its segment by time, and a retention pass in the middle of a test would then delete it
    # (Kafka semantics: retention.ms against the segment's largest timestamp). Seen once in CI as a reader
    # "missing" offsets 0-1. The shared broker keeps Kafka's 7-day retention.ms but checks it once a day.
    proc = BrokerProcess(base / "data", settings={"num.partitions": 3,
                                                  "log.retention.check.interval.ms": 86_400_000})
    proc.start()
    yield proc
    rc = proc.stop()
    assert rc == 0, f"shared broker did not shut down cleanly (exit {rc}); log:\n{proc.log_tail()}"


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A unique topic name per test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONHASHSEED", "0")

