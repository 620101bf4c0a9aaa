"""What changed between two cluster views, and subscriptions that deliver it (any ``MetadataStore`` can use them).

The broker reconciles its replicas "only for the partitions that changed": a :class:`ViewSubscription` hands it one
:class:`ViewChange` per read, the union of every change since its previous read, so a slow reader never misses a
change and never queues more than one set per kind of key (memory bounded by the number of keys, not of events).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .model import ClusterView, TopicPartition

__all__ = ["ViewChange", "ViewSubscription", "diff"]

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class ViewChange:
    """The keys that differ between the view at revision ``since`` and ``view``.

    ``partitions`` holds every partition that appeared, changed or disappeared in the view (a topic created,
    grown or removed lists all of its partitions); ``controller``/``cluster_id``: that value changed.
    """

    view: ClusterView
    since: int
    brokers: frozenset[int] = frozenset()
    topics: frozenset[str] = frozenset()
    partitions: frozenset[TopicPartition] = frozenset()
    broker_configs: frozenset[int | None] = frozenset()
    controller: bool = False
    cluster_id: bool = False
    security: frozenset[str] = frozenset()  # kinds of security records that changed

    @property
    def empty(self) -> bool:
        return not (self.brokers or self.topics or self.partitions or self.broker_configs or self.controller
                    or self.cluster_id or self.security)

    def then(self, later: ViewChange) -> ViewChange:
        """This change followed by ``later``: one change from ``self.since`` to ``later.view``."""
        return ViewChange(later.view, self.since, self.brokers | later.brokers, self.topics | later.topics,
                          self.partitions | later.partitions, self.broker_configs | later.broker_configs,
                          self.controller or later.controller, self.cluster_id or later.cluster_id,
                          self.security | later.security)


def diff(old: ClusterView, new: ClusterView) -> ViewChange:
    """Everything that differs between two views, compared key by key (O(partitions): for a full reload, not for
    each event)."""

    def keys(a: Mapping[K, object], b: Mapping[K, object]) -> frozenset[K]:
        return frozenset(k for k in set(a) | set(b) if a.get(k) != b.get(k))

    return ViewChange(new, old.revision, keys(old.brokers, new.brokers), keys(old.topics, new.topics),
                      keys(old.partitions, new.partitions), keys(old.broker_configs, new.broker_configs),
                      old.controller != new.controller, old.cluster_id != new.cluster_id,
                      keys(old.security, new.security))


class ViewSubscription:
    """Changes of the view after ``view`` (the view current when subscribing), coalesced between reads.

    ``async for change in subscription`` or ``await subscription.next(timeout)``; ``close()`` (or leaving an
    ``async with``) ends it. Single reader.
    """

    def __init__(self, view: ClusterView, on_close: Callable[[ViewSubscription], None] | None = None) -> None:
        self._revision = view.revision
        self._pending: ViewChange | None = None
        self._ready = asyncio.Event()
        self._closed = False
        self._on_close = on_close

    @property
    def revision(self) -> int:
        """The revision of the view the last change handed out reached (or the one subscribed at)."""
        return self._revision

    def publish(self, change: ViewChange) -> None:
        """Called by the store for each new view (in revision order)."""
        if self._closed or change.view.revision <= self._revision:
            return
        self._pending = change if self._pending is None else self._pending.then(change)
        self._ready.set()

    async def next(self, timeout: float | None = None) -> ViewChange | None:
        """Everything that changed since the previous call; ``None`` after ``timeout`` seconds or once closed."""
        if self._pending is None and not self._closed:
            waiter = asyncio.ensure_future(self._ready.wait())
            try:  # asyncio.wait, not wait_for: a cancellation of the reader is never swallowed (gh-86296)
                done, _ = await asyncio.wait({waiter}, timeout=timeout)
            finally:
                waiter.cancel()
            if not done:
                return None
        change, self._pending = self._pending, None
        self._ready.clear()
        if change is not None:
            self._revision = change.view.revision
        return change

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ready.set()
            if self._on_close is not None:
                self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __aiter__(self) -> ViewSubscription:
        return self

    async def __anext__(self) -> ViewChange:
        change = await self.next()
        if change is None:
            raise StopAsyncIteration
        return change

    async def __aenter__(self) -> ViewSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
