"""What a broker on a fresh data folder imports before it listens: none of the handlers (each loads with its API's
first request), the group and transaction coordinators (built on first use), the partition log and record batches
(with the first topic), prometheus_client (with the first scrape) or the client. These kept a broker's start at
~0.4 s of CPU; a module that comes back onto the start path fails here (bench/startup_bench.py has the times)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from oncelog.broker.coordinators.groups import OFFSETS_TOPIC
from oncelog.broker.coordinators.local import INTERNAL_TOPICS
from oncelog.broker.coordinators.transactions import TRANSACTION_STATE_TOPIC

START = """
import asyncio, sys
from oncelog.broker.settings.config import BrokerConfig
from oncelog.broker.server import Broker

async def main():
    broker = Broker(BrokerConfig.load(None, {"log.dirs": sys.argv[1], "listeners": "127.0.0.1:0"}))
    await broker.start()
    loaded = sorted(sys.modules)
    await broker.stop()
    print(loaded)

asyncio.run(main())
"""

#: packages (a trailing dot) and modules a fresh broker must not import before it listens
OFF_THE_START_PATH = ("oncelog.broker.handlers.", "oncelog.coordinator.group.", "oncelog.client.",
                      "oncelog.coordinator.transaction.coordinator", "oncelog.storage.log", "oncelog.storage.cleaner",
                      "oncelog.protocol.records", "prometheus_client", "crc32c")


def _off_the_path(module: str) -> bool:
    return any(module.startswith(p) if p.endswith(".") else module == p or module.startswith(p + ".")
               for p in OFF_THE_START_PATH)


def test_a_fresh_broker_listens_without_loading_what_it_does_not_use(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", START, str(tmp_path / "data")], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    loaded = ast.literal_eval(out.strip().splitlines()[-1])
    early = [m for m in loaded if _off_the_path(m)]
    assert not early, f"imported before the broker listens: {early}"


def test_the_internal_topics_named_for_the_start_are_the_coordinators_own() -> None:
    assert INTERNAL_TOPICS == (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
