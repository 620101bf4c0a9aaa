"""etcd for the cluster metadata tests: one per test module (tests use distinct cluster names), or a fresh one for a
test that kills, pauses or compacts it (``own_etcd``; ``etcd_members``: three members, of which it loses some).
Without etcd the tests are skipped, except in CI (which installs it)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing.etcd_process import EtcdCluster, EtcdProcess, EtcdUnavailable, find_etcd


def etcd_or_skip() -> None:
    try:
        find_etcd()
    except EtcdUnavailable as e:
        if os.environ.get("CI"):
            pytest.fail(f"{e} (CI must have etcd: .ci/run installs etcd-server)")
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """An etcd shared by the tests of one module."""
    etcd_or_skip()
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd") / "data").start()
    yield proc
    proc.stop()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """An etcd for one test only (it may be killed, paused, restarted)."""
    etcd_or_skip()
    proc = EtcdProcess(tmp_path / "etcd-data").start()
    yield proc
    proc.stop()


@pytest.fixture
def etcd_members(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A 3-member etcd cluster on 127.0.0.1 for one test only."""
    etcd_or_skip()
    members = EtcdCluster(tmp_path / "etcd", 3).start()
    yield members
    members.stop()


@pytest.fixture
def cluster_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"
