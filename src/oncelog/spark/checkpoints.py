"""Streaming checkpoints after a crash: remove what an interrupted run left half-written.

Spark writes every checkpoint file atomically: to a hidden temporary file (``.<name>.<uuid>.tmp``, with its
``.crc``) that is renamed into place once complete. A run killed in the middle of such a write leaves the temporary
file behind, and Spark never removes it. Mostly harmless, except before the query's first batch: Spark 4 then
requires ``offsets/`` to be empty (``MicroBatchExecution.verifyNewCheckpointDirectory``), counts the leftover, and
the restarted query fails at once with ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` (seen in the clickstream demo
when the job was killed while writing its first offsets).

:func:`remove_interrupted_writes` deletes those temporary files. Call it before starting the queries, and only
when no other run uses the checkpoints (a temporary file of a live run is a write in progress).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["remove_interrupted_writes"]

#: Hadoop's CheckpointFileManager temporary files (".0.<uuid>.tmp", "..0.<uuid>.tmp.crc")
_TEMP = re.compile(r"^\.{1,2}.+\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp(\.crc)?$")


def remove_interrupted_writes(checkpoint: str | Path) -> list[Path]:
    """Delete the temporary files of interrupted atomic writes under a local checkpoint folder (``file:`` URLs
    and plain paths; other file systems are left alone). Returns what was deleted."""
    text = str(checkpoint)
    if "://" in text and not text.startswith("file:"):
        return []
    root = Path(text.removeprefix("file://").removeprefix("file:"))
    removed = []
    if root.is_dir():
        for path in sorted(root.rglob(".*")):
            if path.is_file() and _TEMP.match(path.name):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
