"""Connections from this broker to the other brokers of its cluster, one per peer, kept open between requests.

Used by the replica fetchers (Fetch from a partition's leader), the transaction marker channel (WriteTxnMarkers to
partition leaders) and the transaction verifier (AddPartitionsToTxn ``verify_only`` to a transaction's coordinator).
A peer is looked up in the current view at each (re)connection, so a broker that re-registered at another address is found again; a request that fails closes
its connection (the next one reconnects) and raises to the caller, which decides whether to retry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from oncelog.client.connection import BrokerConnection
from oncelog.client.errors import KafkaError
from oncelog.cluster.model import NO_LEADER, BrokerInfo
from oncelog.protocol.errors import ErrorCode

__all__ = ["PeerConnections"]


class PeerConnections:
    def __init__(self, node_id: int, address: Callable[[int], BrokerInfo | None], request_timeout_ms: int,
                 purpose: str) -> None:
        """``address``: a node id's live registration in the current view (None: not registered)."""
        self.node_id = node_id
        self._address = address
        self._timeout = request_timeout_ms / 1000
        self._client_id = f"{purpose}-{node_id}"
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def connection(self, broker: int) -> BrokerConnection:
        conn = self._conns.get(broker)
        if conn is not None and conn.connected:
            return conn
        lock = self._connecting.setdefault(broker, asyncio.Lock())
        async with lock:
            conn = self._conns.get(broker)
            if conn is not None and conn.connected:
                return conn
            if conn is not None:
                self._conns.pop(broker, None)
                with contextlib.suppress(Exception):
                    await conn.close()
            info = self._address(broker) if broker != NO_LEADER else None
            if info is None:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {broker} is not registered in the cluster")
            conn = BrokerConnection(info.host, info.port, client_id=self._client_id, node_id=broker,
                                    request_timeout=self._timeout, connect_timeout=min(self._timeout, 10.0))
            await conn.connect()
            self._conns[broker] = conn
            return conn

    async def send(self, broker: int, request: Any, version: int | None = None) -> Any:
        """Send ``request`` to ``broker`` and return its response; a failure closes the connection and raises."""
        conn = await self.connection(broker)
        try:
            return await conn.send(request, version=version)
        except Exception:
            await self.drop(broker, conn)
            raise

    async def drop(self, broker: int, conn: BrokerConnection | None = None) -> None:
        """Close the connection to ``broker`` (only if it is still ``conn``, when given): the next one reconnects."""
        current = self._conns.get(broker)
        if current is None or (conn is not None and current is not conn):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            return
        self._conns.pop(broker, None)
        with contextlib.suppress(Exception):
            await current.close()

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            with contextlib.suppress(Exception):
                await conn.close()
