"""Producer ids handed out in blocks whose upper bound is made durable before any id of the block is used.

Kafka's controller allocates blocks of 1000 ids (``ProducerIdManager``); oncelog is a single node, so the
high-water mark is a value the broker persists (``persist``) and reads back at start-up (``load``). Because
``persist(next_block_start)`` returns only once the new bound is durable, and ids are handed out only below it,
a restart resumes at a value no id was ever handed out from, so a producer id is never reused.
"""

from __future__ import annotations

from collections.abc import Callable

from oncelog.storage.files import write_atomic

__all__ = ["BLOCK_SIZE", "FileProducerIdStore", "ProducerIdManager", "ProducerIdsExhaustedError"]

BLOCK_SIZE = 1000
_MAX_PID = (1 << 63) - 1


class ProducerIdsExhaustedError(RuntimeError):
    pass


class ProducerIdManager:
    def __init__(self, load: Callable[[], int], persist: Callable[[int], None],
                 block_size: int = BLOCK_SIZE) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self._persist = persist
        self.block_size = block_size
        start = int(load())
        if start < 0:
            raise ValueError(f"persisted producer id high-water mark is negative: {start}")
        self._next = start  # next id to hand out
        self._block_end = start  # exclusive; nothing is usable until a block is persisted

    @property
    def next_id(self) -> int:
        return self._next

    @property
    def block_end(self) -> int:
        return self._block_end

    def generate(self) -> int:
        if self._next >= self._block_end:
            end = self._next + self.block_size
            if end > _MAX_PID:
                raise ProducerIdsExhaustedError("no producer ids left")
            self._persist(end)  # must be durable before any id below `end` is returned
            self._block_end = end
        pid = self._next
        self._next += 1
        return pid


class FileProducerIdStore:
    """A tiny durable store for the high-water mark, replaced atomically and durably (``write_atomic``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> int:
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode("ascii").strip()
        except FileNotFoundError:
            return 0
        return int(text) if text else 0

    def persist(self, next_block_start: int) -> None:
        write_atomic(self.path, f"{next_block_start}\n".encode("ascii"))
