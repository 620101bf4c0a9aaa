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
