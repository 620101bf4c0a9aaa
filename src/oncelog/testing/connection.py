"""A broker connection without a socket: drive ``oncelog.broker.network.connection.Connection`` with bytes and read
back what it wrote, whether it paused reading, and whether it closed.

``FakeTransport`` stands in for the asyncio transport (it records writes and flow control, and delivers
``connection_lost`` on close as the event loop does); ``ConnectionHarness`` speaks the client side of the protocol
(encode requests, split and decode the written responses); ``broker_context`` builds a real
:class:`~oncelog.broker.context.BrokerContext` over a data folder (topics and partitions on real storage, no
coordinators), so tests can use the real handlers, or their own routes.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from oncelog.broker.settings.config import BrokerConfig
from oncelog.broker.network.connection import Connection
from oncelog.broker.context import BrokerContext
from oncelog.broker.coordinators.markers import LocalMarkerWriter
from oncelog.broker.metrics.counts import BrokerMetrics
from oncelog.broker.router import Router
from oncelog.broker.server import log_defaults
from oncelog.broker.topics import TopicRegistry
from oncelog.clock import Clock
from oncelog.protocol import api as kapi
from oncelog.storage import LogManager

from . import MockClock

__all__ = ["ConnectionHarness", "FakeTransport", "broker_context"]


class FakeTransport(asyncio.Transport):
    """An in-memory transport: what the protocol wrote, its flow control, and its closing."""

    def __init__(self, peer: tuple[str, int] = ("127.0.0.1", 50_000)) -> None:
        super().__init__()
        self.peer = peer
        self.written = bytearray()
        self.reading_paused = False
        self.closed = False
        self.protocol: asyncio.Protocol | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def write(self, data: Any) -> None:
        if self.closed:  # uvloop raises too: writing after close is a bug of the caller
            raise RuntimeError("write on a closed transport")
        self.written += bytes(data)

    def writelines(self, list_of_data: Iterable[Any]) -> None:
        for data in list_of_data:
            self.write(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.protocol is not None:  # the event loop tells the protocol on its next iteration
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def is_reading(self) -> bool:
        return not self.reading_paused and not self.closed


class ConnectionHarness:
    """A client on the other end of a :class:`Connection`: sends requests as bytes, decodes what comes back."""

    def __init__(self, context: BrokerContext, client_id: str = "harness", router: Router | None = None) -> None:
        self.context = context
        self.client_id = client_id
        self.registry: set[Connection] = set()
        self.connection = Connection(context, router or Router.with_all_handlers(), self.registry)
        self.transport = FakeTransport()
        self.transport.protocol = self.connection
        self.connection.connection_made(self.transport)
        self._sent: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self._next = 0
        self._read = 0  # bytes of ``transport.written`` already returned by responses()

    def request_bytes(self, api_key: int, version: int, message: Any, correlation_id: int | None = None) -> bytes:
        if correlation_id is None:
            self._next += 1
            correlation_id = self._next
        self._sent[correlation_id] = (api_key, version)
        header = kapi.RequestHeader(api_key, version, correlation_id, self.client_id)
        return b"".join(bytes(b) for b in kapi.encode_request(header, message))

    def send(self, api_key: int, version: int, message: Any) -> int:
        """Deliver one request to the connection; returns its correlation id."""
        data = self.request_bytes(api_key, version, message)
        self.connection.data_received(data)
        return self._next

    def send_raw(self, data: bytes) -> None:
        self.connection.data_received(data)

    def frames(self) -> list[bytes]:
        """The response frames written since the last call (without their size prefix)."""
        out: list[bytes] = []
        buf = self.transport.written
        while len(buf) - self._read >= 4:
            (size,) = struct.unpack_from(">i", buf, self._read)
            if len(buf) - self._read - 4 < size:
                break
            out.append(bytes(buf[self._read + 4:self._read + 4 + size]))
            self._read += 4 + size
        return out

    def responses(self) -> list[tuple[int, Any]]:
        """(correlation id, decoded response) of each response written since the last call, in write order."""
        out: list[tuple[int, Any]] = []
        for frame in self.frames():
            (corr,) = struct.unpack_from(">i", frame, 0)
            api_key, version = self._sent[corr]
            got, message = kapi.decode_response(api_key, version, frame)
            out.append((got, message))
        return out

    @property
    def closed(self) -> bool:
        return self.transport.closed


def broker_context(data_dir: Path, config: BrokerConfig | None = None, router: Router | None = None,
                   clock: Clock | None = None) -> BrokerContext:
    """A real BrokerContext over ``data_dir``: settings, metrics, topics on real storage, ApiVersions answering the
    APIs of ``router`` (all of the broker's by default); no coordinators. Close ``context.topics.logs`` when
    done."""
    config = config or BrokerConfig(data_dir=data_dir)
    clock = clock or MockClock()
    logs = LogManager.open(data_dir, log_defaults(config), clock)
    topics = TopicRegistry(logs, durable_per_append=False, mark_dirty=lambda p, n, lazy: None)
    writer = LocalMarkerWriter(topics, clock)
    return BrokerContext(config, clock, BrokerMetrics(), (router or Router.with_all_handlers()).api_versions(),
                         topics, logs.cluster_id, writer)
