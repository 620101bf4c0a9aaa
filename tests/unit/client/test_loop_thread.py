"""LoopThread.stop(): nothing is left pending on the loop (no "Task was destroyed but it is pending!")."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from oncelog.client._sync import LoopThread


def test_stop_cancels_tasks_a_failed_close_left_behind(caplog: pytest.LogCaptureFixture) -> None:
    runner = LoopThread("test-loop")
    cleaned: list[str] = []

    async def sender() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append("sender")  # its finally blocks run, like a connection closing its socket

    async def start() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(sender(), name="sender")

    task = runner.run(start(), 5)
    with caplog.at_level(logging.DEBUG, logger="oncelog.client"):
        runner.stop()
    assert task.cancelled() and cleaned == ["sender"]
    assert not runner._thread.is_alive() and runner.loop.is_closed()
    assert "cancelling 1 task(s) left at shutdown: sender" in caplog.text
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        del task
        gc.collect()
    assert "Task was destroyed" not in caplog.text
    runner.stop()  # a second stop is a no-op


def test_stop_with_nothing_pending_is_quick_and_quiet(caplog: pytest.LogCaptureFixture) -> None:
    runner = LoopThread("test-loop")
    assert runner.run(asyncio.sleep(0, "done"), 5) == "done"
    with caplog.at_level(logging.DEBUG, logger="oncelog.client"):
        runner.stop()
    assert not runner._thread.is_alive()
    assert "left at shutdown" not in caplog.text
