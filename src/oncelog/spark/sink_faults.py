"""Test hook: deterministic fault injection into the exactly-once sink, driven by one environment variable.

``ONCELOG_SPARK_SINK_FAULT`` holds comma-separated ``point:batch`` items (unset in production: every call here is
then a dictionary lookup that finds nothing). Driver-side points SIGKILL the whole driver (its process group:
the Python driver, the JVM with the in-process executors, and every Python worker), as a crash of the machine
would; run the driver in its own session (``start_new_session=True``) or set ``ONCELOG_SPARK_SINK_FAULT_PGID``.

Driver points (in ``commit``): ``kill-before-decision:B``, ``kill-after-decision:B`` (the decision of batch B is
durable, nothing is completed and Spark has not written its commit log), ``kill-after-complete:B`` (every decided
transaction is committed, Spark's commit log is not written). Executor points (in ``write``):
``kill-worker:B`` SIGKILLs the Python worker of partition 0, attempt 0 of batch B after its rows are flushed into
the open transaction (Spark retries the task); ``sleep-in-write:S`` sleeps S seconds (float) in every task before
preparing, to widen the window in which transactions are open.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["ENV", "PGID_ENV", "fault_points", "kill_driver_at", "kill_worker_at", "sleep_in_write"]

ENV = "ONCELOG_SPARK_SINK_FAULT"
PGID_ENV = "ONCELOG_SPARK_SINK_FAULT_PGID"


def fault_points() -> dict[str, str]:
    """The configured points, ``{"kill-after-decision": "2", ...}`` (empty when the variable is unset)."""
    spec = os.environ.get(ENV, "").strip()
    out: dict[str, str] = {}
    for item in spec.split(","):
        name, _, arg = item.strip().partition(":")
        if name:
            out[name] = arg.strip()
    return out


def _matches(point: str, batch_id: int) -> bool:
    arg = fault_points().get(point)
    return arg is not None and arg == str(batch_id)


def kill_driver_at(point: str, batch_id: int) -> None:
    """SIGKILL the driver's process group if ``point:batch_id`` is configured."""
    if not _matches(point, batch_id):
        return
    pgid = int(os.environ.get(PGID_ENV) or os.getpgrp())
    os.killpg(pgid, signal.SIGKILL)
    time.sleep(60)  # never returns: the signal is delivered to this process too


def kill_worker_at(batch_id: int, partition_id: int, attempt: int) -> None:
    """SIGKILL this Python worker if ``kill-worker:batch_id`` is configured (partition 0, first attempt only)."""
    if partition_id == 0 and attempt == 0 and _matches("kill-worker", batch_id):
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)


def sleep_in_write() -> None:
    arg = fault_points().get("sleep-in-write")
    if arg:
        time.sleep(float(arg))
