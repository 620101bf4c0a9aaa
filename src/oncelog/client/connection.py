"""One asyncio connection to one broker: framing, correlation ids, pipelining, ApiVersions negotiation.

A request is written as soon as :meth:`BrokerConnection.send` is called (any number may be in flight); a single
reader task decodes responses and completes the caller's future by correlation id. Kafka answers in order on a
connection, so a response with an unexpected correlation id means the stream is out of sync: the connection is
closed and every pending request fails with :class:`KafkaConnectionError`, as it does on EOF. Whatever the event
loop raises when the socket breaks (OSError, or uvloop's RuntimeError for a write on a closed transport) becomes
that same retriable :class:`KafkaConnectionError`: callers never see a bare socket exception.

A request that is not answered within its timeout also closes the connection (Kafka's NetworkClient does the
same): the response may still arrive later and there is no safe way to resynchronise the stream without it.

With a :class:`~oncelog.client.security.ClientSecurity` the connection is TLS (``SSL``, ``SASL_SSL``) and/or
authenticates with SASL after ApiVersions (SaslHandshake v1 + SaslAuthenticate, KIP-152). When the broker limits
the session (``session_lifetime_ms``), the connection re-authenticates at 85-95% of it (KIP-368), holding new
requests meanwhile. A refused authentication raises a non-retriable SASL_AUTHENTICATION_FAILED; a TLS certificate
that does not verify, ``_SSL``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import socket
import ssl
from typing import Any

from oncelog.protocol.api import API_KEYS, RequestHeader, decode_response, encode_request
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import FrameDecoder
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from oncelog.protocol.messages.sasl_handshake_request import SaslHandshakeRequest

from .errors import LOCAL_CODES, KafkaConnectionError, KafkaError, KafkaTimeoutError, UnsupportedVersionError
from .security import PLAINTEXT, ClientSecurity

__all__ = ["CLIENT_VERSIONS", "BrokerConnection", "negotiate_versions"]

#: how long close() waits for the socket to close gracefully before dropping it
CLOSE_WAIT_S = 5.0

log = logging.getLogger(__name__)

#: API versions this client's code knows how to fill in and read, by api key. APIs not listed here may still be
#: sent with :meth:`BrokerConnection.send` at their codec's full range (the caller then owns the semantics).
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 11),  # Produce: record batch v2 only
    1: (4, 17),  # Fetch: topic ids from v13 (the cluster cache maps them back to names)
    2: (1, 9),  # ListOffsets
    3: (1, 12),  # Metadata: null topic list = all topics needs v1
    17: (1, 1),  # SaslHandshake: v1, the tokens in SaslAuthenticate
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics: v6 accepts names too
    21: (0, 2),  # DeleteRecords
    22: (0, 6),  # InitProducerId: v3 epoch bump (KIP-360), v6 two-phase commit (KIP-939)
    24: (0, 3),  # AddPartitionsToTxn: v4+ is the broker-to-broker batched form
    26: (0, 4),  # EndTxn: v5 is transactions V2 (KIP-890), which this client does not speak
    32: (1, 4),  # DescribeConfigs
    37: (0, 3),  # CreatePartitions
    36: (1, 2),  # SaslAuthenticate: v1+ tells the broker this client re-authenticates (KIP-368)
    44: (0, 1),  # IncrementalAlterConfigs
}

_API_VERSIONS_KEY = 18
_SOFTWARE_NAME = "oncelog-python"
_SOFTWARE_VERSION = "0.1.0"
_MAX_FRAME = 512 * 1024 * 1024


def _client_range(api_key: int) -> tuple[int, int] | None:
    rng = CLIENT_VERSIONS.get(api_key)
    if rng is not None:
        return rng
    spec = API_KEYS.get(api_key)
    return None if spec is None else (spec.min_version, spec.max_version)


def negotiate_versions(broker_ranges: dict[int, tuple[int, int]]) -> dict[int, int]:
    """For each API both sides know, the highest version both support; APIs with no common version are left out."""
    chosen: dict[int, int] = {}
    for key, (bmin, bmax) in broker_ranges.items():
        mine = _client_range(key)
        if mine is None:
            continue
        lo, hi = max(mine[0], bmin), min(mine[1], bmax)
        if lo <= hi:
            chosen[key] = hi
    return chosen


class BrokerConnection:
    """A connection to ``host:port``. Use ``await connect()``, then ``await send(request)``; ``close()`` when done."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "oncelog",
        node_id: int = -1,
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.versions: dict[int, int] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._correlation = itertools.count(1)
        self._closed_error: KafkaConnectionError | None = None
        self.security = security or PLAINTEXT
        self._ready = asyncio.Event()  # cleared while re-authenticating: new requests wait
        self._ready.set()
        self._reauth: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_error is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self) -> None:
        """Open the socket and negotiate API versions. Raises KafkaConnectionError / UnsupportedVersionError."""
        sec = self.security
        tls: dict[str, Any] = {}
        if sec.tls:
            tls = {"ssl": sec.ssl_context, "server_hostname": self.host if sec.check_hostname else None}
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, **tls), self.connect_timeout
            )
        except TimeoutError:
            raise KafkaConnectionError(
                f"could not connect to {self.address} within {self.connect_timeout:g} s"
            ) from None
        except ssl.SSLCertVerificationError as e:
            raise KafkaError(LOCAL_CODES["_SSL"], f"TLS handshake with {self.address} failed: {e.verify_message} "
                             f"(check ssl.ca.location, and that the broker's certificate names {self.host})",
                             retriable=False) from None
        except ssl.SSLError as e:
            raise KafkaConnectionError(f"TLS handshake with {self.address} failed: {e.reason or e} (is it a TLS "
                                       f"listener? security.protocol={sec.protocol})") from None
        except OSError as e:
            if sec.tls and not isinstance(e, (ConnectionRefusedError, socket.gaierror)):
                raise KafkaConnectionError(f"TLS handshake with {self.address} failed: the broker closed the "
                                           f"connection ({type(e).__name__}; is it a TLS listener? "
                                           f"security.protocol={sec.protocol})") from None
            raise KafkaConnectionError(f"could not connect to {self.address}: {e.strerror or e}") from None
        self._closed_error = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate()
            if sec.sasl:
                await self._authenticate()
        except BaseException:
            await self.close()
            raise

    async def _authenticate(self) -> None:
        """SaslHandshake v1 + SaslAuthenticate until the mechanism is done (also a KIP-368 re-authentication)."""
        mechanism = self.security.mechanism
        resp = await self.send(SaslHandshakeRequest(mechanism=mechanism), version=1, _gate=False)
        if resp.error_code:
            raise KafkaError(resp.error_code, f"{self.address} does not accept SASL mechanism {mechanism} (it "
                             f"enables {', '.join(resp.mechanisms) or 'none'}): set sasl.mechanism", retriable=False)
        client = self.security.sasl_client()
        token: bytes | None = client.first()
        lifetime = 0
        while token is not None:
            auth = await self.send(SaslAuthenticateRequest(auth_bytes=token), _gate=False)
            if auth.error_code:
                raise KafkaError(auth.error_code, f"{self.address}: {auth.error_message or 'authentication failed'}",
                                 retriable=False)
            lifetime = auth.session_lifetime_ms
            try:
                token = client.respond(bytes(auth.auth_bytes))
            except ValueError as e:
                raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"{self.address}: {e}",
                                 retriable=False) from None
        if lifetime > 0:  # KIP-368: authenticate again before the broker's session ends
            self._reauth = asyncio.get_running_loop().call_later(lifetime / 1000 * random.uniform(0.85, 0.95),
                                                                 self._start_reauth)

    def _start_reauth(self) -> None:
        self._reauth = None
        if self._closed_error is None:
            self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        self._ready.clear()
        try:
            await self._authenticate()
        except Exception as e:  # the broker closes the connection at the session's end: fail it now, cleanly
            log.warning("re-authentication with %s failed: %s", self.address, e)
            self._fail(KafkaConnectionError(f"re-authentication with {self.address} failed: {e}"))
        finally:
            self._ready.set()

    async def _negotiate(self) -> None:
        version = API_KEYS[_API_VERSIONS_KEY].max_version
        version = min(version, CLIENT_VERSIONS[_API_VERSIONS_KEY][1])
        req = ApiVersionsRequest(client_software_name=_SOFTWARE_NAME, client_software_version=_SOFTWARE_VERSION)
        for _ in range(2):
            resp = await self.send(req, version=version)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and _API_VERSIONS_KEY in ranges:
                # the broker answered in v0 with its own ApiVersions range: retry at the best common version
                _lo, hi = ranges[_API_VERSIONS_KEY]
                if hi < version:
                    version = hi
                    continue
            if resp.error_code:
                raise KafkaError(resp.error_code, f"ApiVersions to {self.address} failed")
            self.broker_versions = ranges
            self.versions = negotiate_versions(ranges)
            return
        raise UnsupportedVersionError(f"{self.address} supports no ApiVersions version this client can send")

    def version_for(self, api_key: int) -> int:
        """The negotiated version of ``api_key``; UnsupportedVersionError naming both ranges if there is none."""
        v = self.versions.get(api_key)
        if v is not None:
            return v
        spec = API_KEYS.get(api_key)
        name = spec.name if spec else f"api key {api_key}"
        mine = _client_range(api_key)
        theirs = self.broker_versions.get(api_key)
        if theirs is None:
            detail = "the broker does not implement it"
        else:
            detail = f"the broker supports v{theirs[0]}-v{theirs[1]}, this client v{mine[0]}-v{mine[1]}" if mine \
                else "this client has no codec for it"
        raise UnsupportedVersionError(f"{self.address} and this client share no version of {name}: {detail}")

    async def send(
        self,
        request: Any,
        *,
        version: int | None = None,
        expect_response: bool = True,
        timeout: float | None = None,
        _gate: bool = True,
    ) -> Any:
        """Send ``request`` (a generated ``*Request`` message) and return its decoded response.

        ``version`` defaults to the negotiated one. With ``expect_response=False`` (Produce with acks=0) returns
        None once the bytes are handed to the socket. ``timeout`` defaults to ``request_timeout``.
        """
        if _gate and not self._ready.is_set():  # a re-authentication is under way
            await self._ready.wait()
        if self._closed_error is not None:
            raise KafkaConnectionError(str(self._closed_error.message))
        writer = self._writer
        if writer is None:
            raise KafkaConnectionError(f"connection to {self.address} is not open")
        api_key = int(type(request).API_KEY)
        if version is None:
            version = self.version_for(api_key)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        header = RequestHeader(api_key, version, correlation_id, self.client_id)
        parts = encode_request(header, request)
        fut: asyncio.Future[Any] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (fut, api_key, version)
        try:
            # uvloop raises RuntimeError from writelines itself when the peer reset the socket before this write
            # (seen with a broker SIGKILLed right after accepting); asyncio raises from drain
            writer.writelines(parts)
            await writer.drain()
        except (OSError, RuntimeError) as e:
            error = KafkaConnectionError(f"write to {self.address} failed: {e}")
            self._fail(error)
            raise error from None
        if fut is None:
            return None
        wait = self.request_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except TimeoutError:
            name = API_KEYS[api_key].name
            err = KafkaTimeoutError(f"{name} request to {self.address} got no response within {wait:g} s")
            self._fail(KafkaConnectionError(f"closed after a timed-out {name} request"))
            raise err from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        decoder = FrameDecoder(_MAX_FRAME)
        reader = self._reader
        try:
            while True:
                chunk = await reader.read(256 * 1024)
                if not chunk:
                    self._fail(KafkaConnectionError(f"{self.address} closed the connection"))
                    return
                for frame in decoder.feed(chunk):
                    self._complete(frame)
        except asyncio.CancelledError:
            raise
        except KafkaError as e:
            self._fail(KafkaConnectionError(str(e)))
        except Exception as e:  # decode errors, socket errors: the stream can no longer be trusted
            self._fail(KafkaConnectionError(f"connection to {self.address} failed: {type(e).__name__}: {e}"))

    def _complete(self, frame: Any) -> None:
        correlation_id = int.from_bytes(bytes(frame[:4]), "big", signed=True)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                             f"{self.address} answered unknown correlation id {correlation_id}")
        fut, api_key, version = entry
        if fut.done():
            return
        try:
            _, message = decode_response(api_key, version, frame)
        except Exception as e:
            fut.set_exception(KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                         f"cannot decode {API_KEYS[api_key].name} v{version} response: {e}"))
            raise
        fut.set_result(message)

    def _fail(self, error: KafkaConnectionError) -> None:
        if self._reauth is not None:
            self._reauth.cancel()
            self._reauth = None
        if self._closed_error is None:
            self._closed_error = error
        pending, self._pending = self._pending, {}
        for fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(KafkaConnectionError(error.message))
                fut.exception()  # mark retrieved: a caller that timed out no longer awaits it
        writer = self._writer
        if writer is not None and not writer.is_closing():
            writer.close()

    async def close(self) -> None:
        """Close the socket; pending requests fail with KafkaConnectionError."""
        self._fail(KafkaConnectionError(f"connection to {self.address} was closed by the client"))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                # a peer that stopped reading (a paused process) keeps unsent bytes in the buffer and a graceful
                # close waiting for them: give it CLOSE_WAIT_S, then drop the connection
                await asyncio.wait_for(writer.wait_closed(), CLOSE_WAIT_S)
            except TimeoutError:
                writer.transport.abort()
            except (OSError, RuntimeError):
                pass
