"""A cluster's security records (ACLs, SCRAM credentials, quotas) in etcd, as a
:class:`~oncelog.security.store.SecurityStore`.

The records are keys of the cluster's etcd prefix and part of its view (``ClusterView.security``), so every broker
has the same records at the same revision, follows them with the watch it already has, and keeps the last ones
while etcd is away (no request is refused because etcd is slow: the view answers). A write is one etcd transaction
and returns once this broker's view has it; listeners hear every change, whichever broker wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol

from oncelog.cluster.changes import ViewSubscription
from oncelog.cluster.model import ClusterView
from oncelog.cluster.store import MetadataUnavailableError
from oncelog.security.store import KINDS, SecurityStoreError

__all__ = ["ClusterSecurityStore"]

log = logging.getLogger("oncelog.broker.security")
_EMPTY: Mapping[str, bytes] = MappingProxyType({})


class _Metadata(Protocol):
    """What this store uses of the cluster's metadata store (``EtcdMetadata``, or the in-memory one in tests)."""

    @property
    def view(self) -> ClusterView: ...

    def subscribe(self) -> ViewSubscription: ...

    async def write_security(self, kind: str, puts: Mapping[str, bytes], deletes: Sequence[str] = ()) -> None: ...


class ClusterSecurityStore:
    def __init__(self, metadata: _Metadata) -> None:
        self.metadata = metadata
        self._listeners: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None

    def records(self, kind: str) -> Mapping[str, bytes]:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of security record {kind!r}")
        return self.metadata.view.security.get(kind, _EMPTY)

    async def write(self, kind: str, puts: Mapping[str, bytes], deletes: Iterable[str] = ()) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of security record {kind!r}")
        try:
            await self.metadata.write_security(kind, puts, list(deletes))
        except MetadataUnavailableError as e:
            raise SecurityStoreError(f"etcd did not take the {kind} records: {e}") from None

    def add_listener(self, callback: Callable[[str], None]) -> None:
        self._listeners.append(callback)

    def start(self) -> None:
        """Follow the view: listeners hear each kind that changed."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._follow(self.metadata.subscribe()),
                                                                name="security-records")

    async def _follow(self, sub: ViewSubscription) -> None:
        async with sub:
            async for change in sub:
                for kind in sorted(change.security):
                    for callback in list(self._listeners):
                        try:
                            callback(kind)
                        except Exception:
                            log.exception("a listener of the %s records failed", kind)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
