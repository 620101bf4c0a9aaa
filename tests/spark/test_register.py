"""``oncelog.spark.register``: the data source's environment survives concurrent query starts, and its Python
workers run this interpreter in local mode without PYSPARK_PYTHON (a job started from a fresh shell)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from oncelog.client import Producer

pytestmark = pytest.mark.timeout(300)


def test_registered_environment_is_a_concurrent_map(spark: Any) -> None:
    """Spark shares this map between every function of the data source and every query; PySpark's own register()
    makes it a java.util.HashMap, which concurrent starts of streaming queries write into unsynchronised."""
    ds = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("oncelog")
    assert ds.dataSourceCls().envVars().getClass().getName() == "java.util.concurrent.ConcurrentHashMap"


def test_a_job_from_a_fresh_shell_needs_no_pyspark_python(spark_bootstrap: str, spark_topic: str,
                                                          tmp_path: Path) -> None:
    p = Producer({"bootstrap.servers": spark_bootstrap})
    for i in range(10):
        p.produce(spark_topic, f"v{i}")
    assert p.flush(30) == 0
    p.close()
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        from oncelog.spark import register
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        register(spark)
        df = (spark.read.format("oncelog").option("kafka.bootstrap.servers", "{spark_bootstrap}")
              .option("subscribe", "{spark_topic}").load())
        print("ROWS", df.count())
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"  # no virtualenv on the PATH: 'python3' there has neither pyspark nor oncelog
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=240)
    assert "ROWS 10" in r.stdout, r.stderr[-3000:]
