"""The native client's suite runs against oncelog AND against Tansu (a broker we did not write).

``any_bootstrap`` is parametrized over both; tests that need oncelog-only features (read_committed visibility,
KIP-939) use the plain ``bootstrap`` fixture. Tansu is started once per session, in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.testing.broker_process import BrokerProcess
from oncelog.testing.tansu_process import TansuProcess


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuProcess]:
    proc = TansuProcess(tmp_path_factory.mktemp("tansu") / "tansu.log")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(params=["oncelog", "tansu"])
def any_bootstrap(request: pytest.FixtureRequest) -> str:
    """Bootstrap servers of the shared oncelog broker, then of the shared Tansu broker."""
    if request.param == "tansu":
        proc: TansuProcess | BrokerProcess = request.getfixturevalue("tansu")
    else:
        proc = request.getfixturevalue("broker")
    return proc.bootstrap
