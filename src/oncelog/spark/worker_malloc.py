"""glibc malloc tuning for the Python workers that run the source's reads and the sink's writes.

Each fetch decoded and each record batch encoded allocates buffers of a few hundred kilobytes to a few megabytes
(numpy arrays, Arrow buffers, the batch's bytes) and frees them right after. glibc returns such memory to the
kernel as soon as it is freed (the top of the heap is trimmed, large blocks are unmapped), so the next buffer is
fresh pages again, each one a page fault and a zeroing: measured, half of the sink's encoding time
(232 -> 112 ns/row for 5,000-record batches of 100 B values) and about a third of a sink worker's CPU. Keeping
``M_TOP_PAD`` bytes at the top of the heap when it shrinks (and asking for that much more when it grows) lets the
next buffer reuse the same pages. The cost: a worker keeps up to that much memory it touched once (64 MB by
default), as the JVM keeps its heap.

Set ``ONCELOG_WORKER_MALLOC_TOP_PAD`` (bytes) in the workers' environment to change it, ``0`` to leave malloc
alone. Only glibc on Linux is tuned; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading

__all__ = ["DEFAULT_TOP_PAD", "tune_worker_malloc"]

log = logging.getLogger(__name__)

DEFAULT_TOP_PAD = 64 << 20
_M_TOP_PAD = -2  # glibc's mallopt parameter number (malloc.h)
_lock = threading.Lock()
_tuned: bool | None = None


def tune_worker_malloc() -> bool:
    """Set glibc's ``M_TOP_PAD`` once per process; True when it is set (by this call or an earlier one)."""
    global _tuned
    with _lock:
        if _tuned is not None:
            return _tuned
        _tuned = False
        raw = os.environ.get("ONCELOG_WORKER_MALLOC_TOP_PAD", str(DEFAULT_TOP_PAD))
        try:
            pad = int(raw)
        except ValueError:
            log.warning("ONCELOG_WORKER_MALLOC_TOP_PAD=%r is not a number of bytes; malloc is left as it is", raw)
            return False
        if pad <= 0 or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
            return False
        try:
            _tuned = ctypes.CDLL(None).mallopt(_M_TOP_PAD, pad) == 1
        except (OSError, AttributeError) as e:
            log.debug("mallopt is not available here: %s", e)
        return _tuned
