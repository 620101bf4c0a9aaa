"""A handler that finishes after its client reset the socket (the transport is already closed, connection_lost
not yet delivered) drops its answer quietly instead of raising from a callback (uvloop's writelines raises
RuntimeError on a closed transport)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.network.connection import Connection, _Slot
from oncelog.broker.context import BrokerContext
from oncelog.broker.router import Router
from oncelog.protocol.api import RequestHeader
from oncelog.protocol.messages.api_versions_response import ApiVersionsResponse
from oncelog.testing.connection import broker_context


class ClosedTransport:
    def __init__(self) -> None:
        self.written: list[Any] = []

    def is_closing(self) -> bool:
        return True

    def writelines(self, data: Any) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555)


class OpenTransport(ClosedTransport):
    def is_closing(self) -> bool:
        return False

    def writelines(self, data: Any) -> None:
        self.written.append(b"".join(bytes(d) for d in data))


ROUTER = Router.with_all_handlers()


@pytest.fixture
def context(tmp_path: Path) -> Iterator[BrokerContext]:
    ctx = broker_context(tmp_path / "data", router=ROUTER)
    yield ctx
    ctx.topics.logs.close()


def connection(context: BrokerContext, transport: ClosedTransport) -> Connection:
    conn = Connection(context, ROUTER)
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn


def slot() -> _Slot:
    s = _Slot(RequestHeader(18, 3, 7, "c"), ROUTER.routes[18], time.perf_counter())
    s.response = ApiVersionsResponse(error_code=0, api_keys=[])
    return s


def test_an_answer_for_a_reset_client_is_dropped_quietly(context: BrokerContext) -> None:
    conn = connection(context, ClosedTransport())
    conn._send(slot())  # does not raise


def test_an_answer_for_a_connected_client_is_written(context: BrokerContext) -> None:
    t = OpenTransport()
    conn = connection(context, t)
    conn._send(slot())
    assert len(t.written) == 1 and t.written[0][4:8] == (7).to_bytes(4, "big")  # size, then correlation id
