"""Producer ids handed out in blocks whose upper bound is made durable before any id of the block is used.

Kafka's controller allocates blocks of 1000 ids (``ProducerIdManager``). On a single node the high-water mark is a
value the broker persists (``persist``) and reads back at start-up (``load``). Because ``persist(next_block_start)``
returns only once the new bound is durable, and ids are handed out only below it, a restart resumes at a value no id
was ever handed out from, so a producer id is never reused.

In a cluster (:meth:`ProducerIdManager.from_allocator`) every block comes from a cluster-wide counter (a
compare-and-swap in etcd, ``MetadataStore.allocate_producer_ids``), so no two brokers ever hand out the same id and
none is reused after a restart or a coordinator move. That call is asynchronous: the coordinator awaits
:meth:`ProducerIdManager.ensure_available` before a decision that may take an id, and :meth:`generate` (called
inside the decision) refuses with COORDINATOR_NOT_AVAILABLE rather than wait when the block ran out meanwhile
(Kafka's RPCProducerIdManager answers the same while its next block is being fetched).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from oncelog.protocol.errors import ErrorCode
from oncelog.storage.files import write_atomic

from .metadata import TxnError

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
        self._allocate: Callable[[int], Awaitable[int]] | None = None
        self._fetching: asyncio.Future[None] | None = None

    @classmethod
    def from_allocator(cls, allocate: Callable[[int], Awaitable[int]],
                       block_size: int = BLOCK_SIZE) -> "ProducerIdManager":
        """Blocks from a cluster-wide allocator: ``allocate(block_size)`` returns the first id of a block nobody
        else was or will be given."""
        manager = cls(lambda: 0, lambda _end: None, block_size)
        manager._allocate = allocate
        return manager

    async def ensure_available(self) -> None:
        """With an allocator: make sure an id is at hand (fetch the next block if this one is used up). Raises what
        the allocator raises (the cluster metadata unreachable). One fetch at a time serves every waiter."""
        if self._allocate is None or self._next < self._block_end:
            return
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch_block(self._allocate))
        await asyncio.shield(self._fetching)

    async def _fetch_block(self, allocate: Callable[[int], Awaitable[int]]) -> None:
        start = await allocate(self.block_size)
        if start < 0 or start + self.block_size > _MAX_PID:
            raise ProducerIdsExhaustedError(f"the allocator returned an unusable block start {start}")
        if self._next >= self._block_end:
            self._next, self._block_end = start, start + self.block_size

    @property
    def next_id(self) -> int:
        return self._next

    @property
    def block_end(self) -> int:
        return self._block_end

    def generate(self) -> int:
        if self._next >= self._block_end and self._allocate is not None:
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no producer id block at hand; retry")
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
