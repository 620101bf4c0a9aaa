"""The produce requests of each transactional id that wait for their transaction's coordinator before they append
(KIP-890: a check with a coordinator on another broker, or an add of a transactions V2 write's partitions), kept in
the order they arrived, so that pipelined requests of one producer append in that order: a later request, even one
that needs no coordinator, appends only after the earlier ones (its sequence numbers would be refused as out of
order otherwise, which librdkafka takes as fatal)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

__all__ = ["AppendOrder"]


class AppendOrder:
    """The produce requests of each transactional id still waiting to append (for a check with, or an add to,
    their transaction's coordinator), in the order they arrived."""

    def __init__(self) -> None:
        self._last_append: dict[str, asyncio.Future[None]] = {}  # transactional id -> its latest waiting produce

    def appending_after(self, transactional_id: str) -> asyncio.Future[None] | None:
        """Done when the latest produce request of ``transactional_id`` still waiting to append has appended;
        None when none is waiting."""
        return self._last_append.get(transactional_id)

    @contextlib.contextmanager
    def in_order(self, transactional_id: str) -> Iterator[asyncio.Future[None] | None]:
        """Queue a produce request of ``transactional_id`` behind the ones still waiting to append: yields the
        future of the one before it (await it before appending; None if there is none) and, on leaving, marks this
        one appended."""
        before = self._last_append.get(transactional_id)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_append[transactional_id] = mine
        try:
            yield before
        finally:
            mine.set_result(None)
            if self._last_append.get(transactional_id) is mine:
                del self._last_append[transactional_id]
