"""Simulate a power cut on the data folder of a SIGKILLed broker.

A SIGKILL keeps everything the broker wrote (the page cache survives the process); a power cut keeps only what
was fsynced, plus any part of the rest the kernel happened to write back. To model it, the broker runs with
``ONCELOG_FSYNC_TRACE=<file>`` (see ``oncelog.storage.local_log``): after every fdatasync of a segment, and after
recovery made a segment durable, it appends the segment's path and the size that is now durable. After the kill,
:func:`cut_to_durable` cuts every segment back to a random length between that size and its current size, often
in the middle of a batch (a torn write). Whatever the broker acknowledged as durable must survive; the rest may
go. On a fast disk almost everything is durable a fraction of a millisecond after it is written, so a kill rarely
finds anything to cut: ``ONCELOG_FSYNC_DELAY_MS`` makes the broker's disk slow, and the windows wide, and
:func:`freeze_with_undurable` stops the broker inside such a window before it is killed.

What it does not model: lost directory entries (a segment file created but never fsynced into its directory), and
index, snapshot and checkpoint files, which are left as they are (recovery must cope with them pointing past a
shortened log).
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.local_log import FSYNC_DELAY_ENV, FSYNC_TRACE_ENV

__all__ = ["FSYNC_DELAY_ENV", "FSYNC_TRACE_ENV", "Cut", "cut_to_durable", "durable_sizes", "freeze_with_undurable",
           "is_stopped", "undurable"]


@dataclass(frozen=True)
class Cut:
    segment: Path
    size: int  # before the cut
    durable: int  # what the broker had made durable (0: never fsynced)
    kept: int  # after the cut

    def __str__(self) -> str:
        return f"{self.segment.parent.name}/{self.segment.name}: {self.size} -> {self.kept} (durable {self.durable})"


def durable_sizes(trace: Path) -> dict[Path, int]:
    """The last durable size the broker recorded for each segment (a segment recovery truncated gets a smaller
    size than an older line: the last line is the one that holds)."""
    out: dict[Path, int] = {}
    if not trace.exists():
        return out
    for line in trace.read_text().splitlines():
        path, _, size = line.rpartition(" ")
        if path:
            out[Path(path)] = int(size)
    return out


def undurable(data_dir: Path, trace: Path) -> dict[Path, tuple[int, int]]:
    """The segments under ``data_dir`` that hold bytes the broker has not made durable yet, each with (its durable
    size, its size). A segment never fsynced counts only if it is its partition's last (a roll's new active
    segment); an older one the broker did not write through the group commit (the log cleaner's output) is left
    alone."""
    durable = durable_sizes(trace)
    out: dict[Path, tuple[int, int]] = {}
    for part in sorted(p for p in Path(data_dir).iterdir() if p.is_dir()):
        segments = sorted(part.glob("*.log"))
        for i, seg in enumerate(segments):
            size = seg.stat().st_size
            if seg in durable:
                low = durable[seg]
            elif i == len(segments) - 1:
                low = 0
            else:
                continue
            if low < size:
                out[seg] = (low, size)
    return out


def cut_to_durable(data_dir: Path, trace: Path, rnd: random.Random) -> list[Cut]:
    """Cut every segment :func:`undurable` names back to a random length at or above its durable size."""
    cuts: list[Cut] = []
    for seg, (low, size) in undurable(data_dir, trace).items():
        kept = rnd.randint(low, size)
        if kept < size:
            os.truncate(seg, kept)
            cuts.append(Cut(seg, size, low, kept))
    return cuts


def freeze_with_undurable(pid: int, data_dir: Path, trace: Path, rnd: random.Random,
                          timeout: float = 5.0) -> dict[Path, tuple[int, int]]:
    """SIGSTOP the broker ``pid`` at moments when it has bytes written but not yet durable, and return them (see
    :func:`undurable`), leaving it stopped for the SIGKILL that follows. A kill at a random moment can land where
    everything is durable and a power cut would take nothing; this one lands inside a write window. The broker is
    stopped (every thread, so no fsync finishes under the look), looked at, and let go again a few milliseconds
    at a time until it has something undurable or ``timeout`` passes (then it returns {} and stays stopped)."""
    deadline = time.monotonic() + timeout
    while True:
        os.kill(pid, signal.SIGSTOP)
        _wait_stopped(pid)
        pending = undurable(data_dir, trace)
        if pending or time.monotonic() > deadline:
            return pending
        os.kill(pid, signal.SIGCONT)
        time.sleep(rnd.uniform(0.0005, 0.01))


def is_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (or ending: a zombie, dead); a thread inside fdatasync shows
    as running until the call returns."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended
            continue
        if stat[stat.rindex(")") + 2] not in "tTZX":
            return False
    return True


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not is_stopped(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not stop within {timeout} s of SIGSTOP")
        time.sleep(0.0002)
