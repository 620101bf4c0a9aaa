"""``AdminBase``: what every admin operation builds on: the admin's configuration and :class:`~..cluster.Cluster`
(connections, metadata), start and close, and where a request goes: the controller (topic and config operations),
each partition's leader (grouped by leader), or a coordinator, retried while it loads or moves."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Self

from ..cluster import COORDINATOR_RETRIABLE, Cluster
from ..config import AdminConfig, parse_admin_config
from ..errors import KafkaError
from .results import TopicPartition

__all__ = ["AdminBase"]


class AdminBase:
    """The admin client's connections and request routing; :class:`~.async_admin.AsyncAdmin` adds the operations."""

    def __init__(self, conf: Mapping[str, Any] | AdminConfig) -> None:
        self.config = conf if isinstance(conf, AdminConfig) else parse_admin_config(conf)
        c = self.config
        self.timeout = c.request_timeout_ms / 1000
        self.cluster = Cluster.from_config(c)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.cluster.bootstrap()
            self._started = True

    async def close(self) -> None:
        await self.cluster.close()
        self._started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _controller_send(self, request: Any) -> Any:
        await self.start()
        conn = await self.cluster.controller_connection()
        return await conn.send(request)

    async def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        await self.start()
        tps = list(tps)
        if any(self.cluster.topic(t) is None for t, _ in tps):
            await self.cluster.refresh()
        groups: dict[int, list[TopicPartition]] = defaultdict(list)
        for t, p in tps:
            try:
                groups[self.cluster.leader_for(t, p)].append((t, p))
            except KafkaError as e:
                raise KafkaError(int(e.code()), f"{t}[{p}]: {e.message}") from None
        return groups

    async def _retry_coordinator(self, op: Any) -> Any:
        """Run ``op()`` again while the coordinator is loading or moving (bounded by the request timeout)."""
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            try:
                return await op()
            except KafkaError as e:
                if e.code() not in COORDINATOR_RETRIABLE or time.monotonic() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
