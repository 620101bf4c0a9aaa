"""Shared fixtures: one real broker process per test session (the oncelog pytest plugin's session broker); a test
that needs a broker of its own (settings, a kill) takes the plugin's ``kafka_broker_factory`` or, shared by a
module's tests, ``kafka_module_broker_factory`` (docs/testing.md)."""

from __future__ import annotations

import os
import uuid

from typing import Iterator

import pytest

from oncelog.testing.broker_process import BrokerProcess


@pytest.fixture(scope="session")
def broker(kafka_session_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The broker shared by every integration test of the session: the oncelog pytest plugin's session broker (a
    child process; settings from ``kafka_settings`` in pyproject.toml). Tests use their own topic names.

    Tests write records with historical CreateTimes (2023) on purpose; a partition that mixes them with current ones
    rolls its segment by time, and a retention pass in the middle of a test would then delete it (Kafka semantics:
    retention.ms against the segment's largest timestamp). Seen once in CI as a reader "missing" offsets 0-1. The
    shared broker keeps Kafka's 7-day retention.ms but checks it once a day (log.retention.check.interval.ms)."""
    yield kafka_session_broker
    rc = kafka_session_broker.stop()  # before the plugin's own stop, which would not see the exit code
    assert rc == 0, f"shared broker did not shut down cleanly (exit {rc}); log:\n{kafka_session_broker.log_tail()}"


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
    if not config.pluginmanager.has_plugin("oncelog"):  # a venv installed before the pytest11 entry point existed
        import oncelog.testing.pytest_plugin as plugin

        config.pluginmanager.register(plugin, "oncelog")

