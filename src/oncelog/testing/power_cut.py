"""Simulate a power cut on the data folder of a SIGKILLed broker.

A SIGKILL keeps everything the broker wrote (the page cache survives the process); a power cut keeps only what
was fsynced, plus any part of the rest the kernel happened to write back. To model it, the broker runs with
``ONCELOG_FSYNC_TRACE=<file>`` (see ``oncelog.storage.log``): after every fdatasync of a segment, and after
recovery made a segment durable, it appends the segment's path and the size that is now durable. After the kill,
:func:`cut_to_durable` cuts every segment back to a random length between that size and its current size, often
in the middle of a batch (a torn write). Whatever the broker acknowledged as durable must survive; the rest may
go. On a fast disk almost everything is durable a fraction of a millisecond after it is written, so a kill rarely
finds anything to cut: ``ONCELOG_FSYNC_DELAY_MS`` makes the broker's disk slow, and the windows wide.

What it does not model: lost directory entries (a segment file created but never fsynced into its directory), and
index, snapshot and checkpoint files, which are left as they are (recovery must cope with them pointing past a
shortened log).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.log import FSYNC_DELAY_ENV, FSYNC_TRACE_ENV

__all__ = ["FSYNC_DELAY_ENV", "FSYNC_TRACE_ENV", "Cut", "cut_to_durable", "durable_sizes"]


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


def cut_to_durable(data_dir: Path, trace: Path, rnd: random.Random) -> list[Cut]:
    """Cut the segments of every partition under ``data_dir`` back to random lengths at or above their durable
    size. A segment never fsynced is cut only if it is its partition's last (a roll's new active segment); an
    older one the broker did not write through the group commit (the log cleaner's output) is left alone."""
    durable = durable_sizes(trace)
    cuts: list[Cut] = []
    for part in sorted(p for p in Path(data_dir).iterdir() if p.is_dir()):
        segments = sorted(part.glob("*.log"))
        for i, seg in enumerate(segments):
            size = seg.stat().st_size
            if seg in durable:
                low = min(durable[seg], size)
            elif i == len(segments) - 1:
                low = 0
            else:
                continue
            kept = rnd.randint(low, size)
            if kept < size:
                os.truncate(seg, kept)
                cuts.append(Cut(seg, size, durable.get(seg, 0), kept))
    return cuts
