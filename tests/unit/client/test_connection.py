"""BrokerConnection when the socket breaks: whatever the event loop raises (asyncio: ConnectionResetError from
drain; uvloop: RuntimeError from writelines on a closed transport) reaches the caller as a retriable
KafkaConnectionError. A bare RuntimeError used to escape; the producer's sender took it for an unknown bug, failed
the batch for good without resolving its sequence, and the next batch of the partition met a sequence gap
(OUT_OF_ORDER_SEQUENCE_NUMBER) after a broker was SIGKILLed right after accepting a connection."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

import pytest
import uvloop

from oncelog.client.connection import BrokerConnection
from oncelog.client.errors import KafkaConnectionError
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_write_after_the_peer_reset_the_socket_is_a_connection_error(loop_name: str) -> None:
    async def go() -> None:
        async def reset_at_once(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            # close with SO_LINGER 0: an RST, as from a broker killed right after accepting
            w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort()

        server = await asyncio.start_server(reset_at_once, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port, request_timeout=2.0)
        try:
            # the socket part of connect(), without the ApiVersions exchange the peer will never answer
            conn._reader, conn._writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(100):  # until the loop has seen the reset
                if conn._writer.transport.is_closing():
                    break
                await asyncio.sleep(0.01)
            assert conn._writer.transport.is_closing()
            req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            with pytest.raises(KafkaConnectionError) as e:
                await conn.send(req, version=3)
            assert e.value.retriable()
            assert not conn.connected and conn.in_flight == 0
            with pytest.raises(KafkaConnectionError):  # and every later request fails the same way at once
                await conn.send(req, version=3)
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()

    loop = LOOPS[loop_name]()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_close_does_not_wait_for_a_peer_that_stopped_reading(loop_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that accepts but never reads (a paused broker) leaves unsent bytes in the write buffer, and a graceful
    close waits for them: close() drops the connection after CLOSE_WAIT_S instead (a broker once hung >60 s at
    shutdown closing such a connection)."""
    import oncelog.client.connection as connection

    monkeypatch.setattr(connection, "CLOSE_WAIT_S", 0.5)

    async def go() -> None:
        accepted: list[asyncio.StreamWriter] = []

        async def never_read(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.append(w)  # keeps the socket open, reads nothing

        server = await asyncio.start_server(never_read, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port, request_timeout=2.0)
        try:
            conn._reader, conn._writer = await asyncio.open_connection("127.0.0.1", port)
            conn._writer.write(b"x" * (64 << 20))  # far more than the socket buffers take
            await asyncio.sleep(0.1)
            assert conn._writer.transport.get_write_buffer_size() > 0
            loop = asyncio.get_running_loop()
            started = loop.time()
            await asyncio.wait_for(conn.close(), 10)
            assert loop.time() - started < 3, "close() waited for a peer that does not read"
        finally:
            for w in accepted:
                w.transport.abort()
            server.close()
            await server.wait_closed()

    loop = LOOPS[loop_name]()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
