"""The Spark job of docs/spark.md as written, from a fresh shell (no virtualenv on the PATH, no PYSPARK_PYTHON),
against the broker ``make serve`` starts (its command, on another port): batch write with the default save mode,
the exactly-once streaming sink, batch read (issue 17 findings 8 and 11)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oncelog.testing.broker_process import free_port

from helpers.doc_blocks import block, serve_command

pytestmark = pytest.mark.timeout(400)


def test_readme_spark_job_against_make_serve(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime (17+)")
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    broker = subprocess.Popen([*serve_command(), "--listen", f"127.0.0.1:{port}", "--data-dir",
                               str(tmp_path / "data")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and broker.poll() is None, (tmp_path / "broker.log").read_text()
                time.sleep(0.1)
        job = tmp_path / "upper.py"
        job.write_text(block("spark-job").replace("127.0.0.1:9092", f"127.0.0.1:{port}")
                       .replace("/tmp/oncelog-checkpoints", str(tmp_path / "checkpoints")))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
        env["PATH"] = "/usr/bin:/bin"
        r = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-4000:]
        table = r.stdout
        assert table.count("/HOME") == 1 and table.count("/CART") == 1, table
    finally:
        broker.terminate()
        broker.wait(30)
        log.close()
