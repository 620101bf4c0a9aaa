"""The Spark workers' malloc tuning: freed buffers' pages are reused (no page fault per buffer), opt-out works."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_PROGRAM = """
import resource
import pyarrow as pa
from oncelog.protocol.record_batch_columnar import build_batch_columnar
from oncelog.spark.worker_malloc import tune_worker_malloc
tuned = tune_worker_malloc()
values = pa.array([b"%020d" % i + b"x" * 80 for i in range(5000)], pa.binary())
build_batch_columnar(values, timestamps=0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    build_batch_columnar(values, timestamps=0)  # what the sink does for each batch of rows
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(env_value: str | None) -> tuple[bool, int]:
    env = dict(os.environ)
    env.pop("ONCELOG_WORKER_MALLOC_TOP_PAD", None)
    env.pop("MALLOC_TOP_PAD_", None)
    if env_value is not None:
        env["ONCELOG_WORKER_MALLOC_TOP_PAD"] = env_value
    out = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, check=True)
    tuned, faults = out.stdout.split()
    return tuned == "True", int(faults)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_tuned_workers_reuse_freed_pages_and_the_tuning_can_be_turned_off() -> None:
    tuned, faults = _run(None)
    off, faults_off = _run("0")
    bad, faults_bad = _run("lots")
    assert tuned and not off and not bad
    # 100 batches of ~550 kB (~135 pages), encoded through a few buffers of that size: untuned, each batch's buffers
    # are fresh pages; tuned, the pages of the buffers freed before are used again
    assert faults_off > 100 * 135 and faults_bad > 100 * 135, (faults_off, faults_bad)
    assert faults < 10 * 135, faults
