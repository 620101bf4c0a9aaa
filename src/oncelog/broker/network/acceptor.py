"""The accept loop of a listener, with Kafka's connection limits (``connection_quotas.py``): one connection at a
time is accepted, delayed past ``max.connection.creation.rate``, held while the broker has ``max.connections``, then
served, or closed (at once past ``max.connections.per.ip``; after the throttle time past an ip's
``connection_creation_rate``). Other clients are served meanwhile: only accepting waits, never the event loop.

On a TLS listener (``ssl``: its context, renewed in place when its certificate is) the TLS handshake of each
connection runs in a task of its own, so a client that stalls its handshake holds up no one; one not done within
:data:`TLS_HANDSHAKE_TIMEOUT_S` is dropped, and a failed handshake is logged with what it most likely means.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl as _ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oncelog.security.quotas import normalize_ip

from .connection_quotas import ConnectionQuotas

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["Acceptor", "TLS_HANDSHAKE_TIMEOUT_S"]

TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a TLS handshake not done by then closes the connection (a stalled client)

log = logging.getLogger("oncelog.broker.acceptor")

#: accept errors that mean "out of resources now": wait a little and go on (Kafka's Acceptor logs and goes on)
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED, errno.EPROTO,
              errno.EPERM}


class Acceptor:
    def __init__(self, sock: socket.socket, listener: str, quotas: ConnectionQuotas,
                 protocol_factory: Callable[[], Connection], ssl: _ssl.SSLContext | None = None) -> None:
        self.sock = sock
        self.ssl = ssl
        self._handshakes: set[asyncio.Task[None]] = set()
        self.listener = listener
        self.quotas = quotas
        self.protocol_factory = protocol_factory
        self._slot_freed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_expiry = 0.0

    def start(self, backlog: int = 1024) -> None:
        self.sock.listen(backlog)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"acceptor-{self.listener}")

    def close(self) -> None:
        """Stop accepting (the open connections are the broker's to close; handshakes under way are dropped)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for task in list(self._handshakes):
            task.cancel()
        self.sock.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(self.sock)
            except OSError as e:
                if self.sock.fileno() < 0:
                    return
                log.warning("error accepting a connection on listener %s: %s", self.listener, e.strerror or e)
                await asyncio.sleep(0.1 if e.errno in _TRANSIENT else 1.0)
                continue
            try:
                await self._admit(conn, addr)
            except asyncio.CancelledError:
                conn.close()
                raise
            except Exception:
                log.exception("cannot serve a connection from %s on listener %s", addr, self.listener)
                conn.close()

    async def _admit(self, conn: socket.socket, addr: object) -> None:
        loop = asyncio.get_running_loop()
        peer = addr[0] if isinstance(addr, tuple) else str(addr)
        ip = normalize_ip(peer) or peer
        quotas = self.quotas
        delay_ms = quotas.creation_delay_ms()
        if delay_ms or not quotas.slot_available():
            # Kafka's waitForConnectionSlot: the acceptor waits out the creation-rate throttle and for a free slot
            deadline = loop.time() + delay_ms / 1000
            while True:
                remaining = deadline - loop.time()
                if remaining > 0:
                    await asyncio.sleep(remaining)
                elif quotas.slot_available():
                    break
                else:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
        if loop.time() - self._last_expiry > 60:
            self._last_expiry = loop.time()
            quotas.expire()
        admission = quotas.admit(ip)
        if not admission.serve:
            log.info("rejected connection from %s on listener %s: %s", peer, self.listener, admission.reason)
            if admission.delay_ms:
                loop.call_later(admission.delay_ms / 1000, conn.close)
            else:
                conn.close()
            return
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl is None:
            await self._serve(conn, ip, peer)
            return
        task = loop.create_task(self._serve(conn, ip, peer), name=f"tls-handshake-{peer}")
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _serve(self, conn: socket.socket, ip: str, peer: str) -> None:
        loop = asyncio.get_running_loop()
        made: list[Connection] = []

        def factory() -> Connection:
            protocol = self.protocol_factory()
            protocol.listener = self.listener
            protocol.on_lost = lambda: self._released(ip)
            made.append(protocol)
            return protocol

        tls: dict[str, Any] = {} if self.ssl is None else {"ssl": self.ssl,
                                                           "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        try:
            await loop.connect_accepted_socket(factory, conn, **tls)
        except (OSError, asyncio.CancelledError) as e:
            conn.close()
            if not made or made[0].transport is None:  # never served: connection_lost will not release it
                self._released(ip)
            if isinstance(e, asyncio.CancelledError):
                raise
            if self.ssl is not None:
                log.info("closed a connection from %s on listener %s: TLS handshake failed: %s", peer,
                         self.listener, _tls_failure(e))

    def _released(self, ip: str) -> None:
        self.quotas.release(ip)
        self._slot_freed.set()


def _tls_failure(e: BaseException) -> str:
    """What a failed TLS handshake most likely means, for the log."""
    if isinstance(e, TimeoutError):
        return f"no handshake within {TLS_HANDSHAKE_TIMEOUT_S:g} s (a stalled client, or one not speaking TLS)"
    reason = getattr(e, "reason", None) or str(e) or type(e).__name__
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"):
        return f"{reason} (a client speaking plaintext to a TLS listener?)"
    if reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA"):
        return f"{reason} (ssl.client.auth asks for a certificate signed by a CA of the truststore)"
    return str(reason)
