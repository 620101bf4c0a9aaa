"""Fixtures of the Spark suite: one SparkSession and one 2PC-enabled broker per test session.

Spark takes 5-10 s to start, so every test shares the session. ``local[2,4]``: 2 task slots and up to 4 attempts
per task, so a task that fails (a killed Python worker) is retried as on a cluster. Python workers must run the
venv's interpreter (PYSPARK_PYTHON), or they cannot import oncelog and pyarrow.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.broker_process import BrokerProcess

if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
    collect_ignore_glob = ["test_*.py"]  # install with: pip install -e '.[spark]' (make test does)

SPARK_MASTER = "local[2,4]"


def spark_env() -> dict[str, str]:
    """Environment for Spark drivers started by tests (in-process or child driver scripts)."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def new_spark_session(app_name: str = "oncelog-tests", master: str = SPARK_MASTER) -> Any:
    """A SparkSession tuned for small local tests, with the ``oncelog`` format registered."""
    os.environ.update(spark_env())
    from pyspark.sql import SparkSession

    from oncelog.spark import register

    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.streaming.stopTimeout", "30s")
             # small Arrow batches: a sink task gets many of them even in small tests (the path that once lost rows)
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime (17+): none on PATH and JAVA_HOME is unset")
    session = new_spark_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with KIP-939 two-phase commit enabled (the exactly-once sink needs it), 3 partitions default."""
    base = tmp_path_factory.mktemp("spark-broker")
    # (historical CreateTimes in the tests: see the shared broker in tests/conftest.py)
    proc = BrokerProcess(base / "data", settings={"num.partitions": 3,
                                                  "transaction.two.phase.commit.enable": "true",
                                                  "log.retention.check.interval.ms": 86_400_000})
    proc.start()
    yield proc
    rc = proc.stop()
    assert rc == 0, f"spark broker did not shut down cleanly (exit {rc}); log:\n{proc.log_tail()}"


@pytest.fixture
def spark_bootstrap(spark_broker: BrokerProcess) -> str:
    return spark_broker.bootstrap


@pytest.fixture
def spark_topic(request: pytest.FixtureRequest) -> str:
    """A unique topic name per test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"s-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
