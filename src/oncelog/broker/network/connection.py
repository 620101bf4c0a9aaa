"""One client connection: frames in, handlers called in request order, responses out in request order.

Requests are pipelined: a handler that has to wait (acks=all fsync, long-poll fetch) does not stop the next request
from being read and started, but responses always leave in the order their requests arrived. Anything a client
sends that cannot be understood closes this connection only; the broker and other connections go on.

Security belongs to the connection, before routing (``ListenerSecurity`` of its listener,
``broker/security/authentication.py``): on a TLS listener the server completed the TLS handshake before the
connection is made (a client certificate gives the principal on an SSL listener); on a SASL listener the requests
go to a :class:`~oncelog.security.authenticator.SaslServerAuthenticator` until it completes, and handlers see only
authenticated requests, with their principal. A failed authentication is answered and the connection closed after
``connection.failed.authentication.delay.ms`` (reading stops meanwhile: no CPU is spent on the client).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from oncelog.protocol import api as kapi
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.framing import FrameDecoder, FrameTooLargeError
from oncelog.protocol.api import ProtocolDecodeError, RequestHeader
from oncelog.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from oncelog.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from oncelog.security.authenticator import SASL_AUTHENTICATE, SASL_HANDSHAKE, AuthFailure, SaslServerAuthenticator, State
from oncelog.security.principal_mapping import NoMatchingRule

from ..security.authorization import audit_failed_login
from ..request import ANONYMOUS, NO_RESPONSE, KafkaPrincipal, RequestContext
from ..router import Route, Router

if TYPE_CHECKING:
    from ..security.authentication import ListenerSecurity
    from ..context import BrokerContext
    from ..security.quotas import Charge

__all__ = ["Connection"]

log = logging.getLogger("oncelog.broker.connection")

API_VERSIONS_KEY = 18
MAX_PENDING = 100  # pipelined requests per connection before we stop reading from it


class _Slot:
    __slots__ = ("header", "route", "response", "ready", "started", "charge")

    def __init__(self, header: RequestHeader, route: Route, started: float) -> None:
        self.header = header
        self.route = route
        self.response: Any = None
        self.ready = False
        self.started = started
        self.charge: Charge | None = None  # what the response owes the client quotas (broker/security/quotas.py)


class Connection(asyncio.Protocol):
    _next_id = 0

    def __init__(self, broker: "BrokerContext", router: Router, registry: set[Connection] | None = None,
                 security: "ListenerSecurity | None" = None) -> None:
        self.broker = broker  # what handlers see; the connection itself uses its settings and metrics
        self.router = router
        self.security = security  # its listener's TLS and SASL (None: a plain PLAINTEXT connection)
        self.listener = security.name if security is not None else "PLAINTEXT"  # the listener it came in on
        self.principal: KafkaPrincipal = ANONYMOUS  # who the client is (set once it authenticates)
        self.registry = registry if registry is not None else set()  # the broker's open connections
        Connection._next_id += 1
        self.id = Connection._next_id
        self.sasl: SaslServerAuthenticator | None = security.authenticator() if security and security.sasl else None
        limit = broker.config.socket_request_max_bytes
        # before authentication a client may send only small requests (Kafka's sasl.server.max.receive.size)
        self.decoder = FrameDecoder(min(limit, broker.config.sasl_server_max_receive_size) if self.sasl else limit)
        self.transport: asyncio.Transport | None = None
        self._auth_failed = False
        self.peer = "?"
        self._slots: deque[_Slot] = deque()
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self.on_lost: Callable[[], None] | None = None  # the acceptor's: the connection no longer counts
        self._muted: asyncio.TimerHandle | None = None  # a throttled client is not read until this fires
        self._held: deque[memoryview | bytearray] = deque()  # requests read while muted: handled once unmuted
        self._quotas = broker.quotas  # client quotas: charge requests when any is set

    # -- asyncio.Protocol -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.registry.add(self)
        self.broker.metrics.connections.inc()
        sec = self.security
        if sec is not None and sec.tls and not sec.sasl:  # an SSL listener: the client certificate says who
            assert self.broker.auth is not None
            ssl_object = transport.get_extra_info("ssl_object")
            try:
                self.principal = sec.ssl_principal(ssl_object.getpeercert(binary_form=True) if ssl_object else None)
            except NoMatchingRule as e:
                self.broker.auth.metrics.failure(self.listener)
                audit_failed_login(self.broker.metrics, "unknown", self._host(), self.listener, "SSL", str(e))
                self.close(f"its certificate gives no principal: {e}")
                return
            self.broker.auth.metrics.success(self.listener)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.registry.discard(self)
        self.broker.metrics.connections.dec()
        for task in list(self._tasks):
            task.cancel()
        if self._muted is not None:
            self._muted.cancel()
        if self.on_lost is not None:
            self.on_lost()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed or self._auth_failed:
            return
        try:
            frames = self.decoder.feed(data)
        except FrameTooLargeError as e:
            if self.sasl is not None and self.sasl.authenticating:
                self.close(f"failing SASL authentication due to an invalid receive size ({e}; before authenticating "
                           f"the limit is sasl.server.max.receive.size={self.broker.config.sasl_server_max_receive_size})")
                return
            tls = " (a TLS handshake: the client speaks TLS to a plaintext listener?)" \
                if bytes(data[:2]) == b"\x16\x03" else ""
            self.close(f"request frame too large ({e}); the limit is socket.request.max.bytes="
                       f"{self.broker.config.socket_request_max_bytes}{tls}")
            return
        except ProtocolDecodeError as e:
            self.close(f"malformed frame: {e}")
            return
        for frame in frames:
            if self._closed or self._auth_failed:
                return
            if self._muted is not None:  # (frames are held only while muted)
                self._held.append(frame)  # Kafka reads a throttled client's next request after its throttle time
                continue
            sasl = self.sasl
            if sasl is not None and sasl.bare_tokens and sasl.state is State.AUTHENTICATE:
                self._bare_token(sasl, frame)
                continue
            self._handle_frame(frame)
        self._update_reading()

    # -- request handling -------------------------------------------------------------------------------------
    def _handle_frame(self, frame: bytes | bytearray | memoryview) -> None:
        started = time.perf_counter()
        try:
            header, offset = kapi.decode_request_header(frame)
        except ProtocolDecodeError as e:
            self.close(f"malformed request header: {e}")
            return
        route = self.router.get(header.api_key, header.api_version)
        if route is None:
            if header.api_key == API_VERSIONS_KEY:
                self._answer_unsupported_api_versions(header)
                return
            name = kapi.API_KEYS[header.api_key].name if header.api_key in kapi.API_KEYS else "unknown API"
            self.close(f"client {header.client_id!r} sent {name} (key {header.api_key}) version "
                       f"{header.api_version}, which this broker does not serve; see ApiVersions")
            return
        try:
            request = kapi.decode_request(header.api_key, header.api_version, frame, offset)
        except ProtocolDecodeError as e:
            self.close(f"cannot decode {route.name} v{header.api_version} from client {header.client_id!r}: {e}")
            return
        sasl = self.sasl
        if sasl is not None:
            if sasl.accepts(header.api_key):
                if self._authenticate(sasl, header, route, request, started):
                    return
            elif sasl.session_expired():
                assert self.broker.auth is not None
                self.broker.auth.metrics.expired.labels(self.listener).inc()
                self.close("its SASL session expired (connections.max.reauth.ms, or its credential's expiry) and it "
                           "did not re-authenticate")
                return
        ctx = RequestContext(self.id, self.peer, header.client_id, header.api_key, header.api_version,
                             header.correlation_id, self.principal, self.listener)
        try:
            result = route.handle(self.broker, ctx, request)
        except Exception:
            log.exception("handler %s v%d failed for client %r; closing its connection", route.name,
                          header.api_version, header.client_id)
            self.close(None)
            return
        charge = None
        quotas = self._quotas
        if quotas is not None and quotas.enabled:
            charge = quotas.on_request(ctx, request, len(frame), time.perf_counter() - started)
        if result is NO_RESPONSE:
            self.broker.metrics.observe_request(route.name, time.perf_counter() - started)
            if charge is not None:
                self.mute_for(charge.throttle_ms)
            return
        slot = _Slot(header, route, started)
        if charge is not None:
            slot.charge = charge
        if hasattr(type(result), "__await__"):  # a coroutine or future (cheaper than inspect.isawaitable)
            self._slots.append(slot)
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(lambda t, s=slot: self._complete(s, t))  # type: ignore[misc]
        elif not self._slots:
            slot.response = result
            self._send(slot)
        else:
            slot.response = result
            slot.ready = True
            self._slots.append(slot)

    # -- SASL (security/authenticator.py decides; this sends and closes) -------------------------------------------
    def _authenticate(self, sasl: SaslServerAuthenticator, header: RequestHeader, route: Route, request: Any,
                      started: float) -> bool:
        """A request while SASL authentication runs; False: route it as usual (ApiVersions)."""
        reauth = sasl.reauthenticating or (header.api_key == SASL_HANDSHAKE and sasl.state is State.COMPLETE)
        try:
            if header.api_key == SASL_HANDSHAKE:
                result = sasl.handshake(request.mechanism, header.api_version)
                self._respond(header, route, SaslHandshakeResponse(error_code=0, mechanisms=result.mechanisms),
                              started)
            elif header.api_key == SASL_AUTHENTICATE:
                token = sasl.authenticate(bytes(request.auth_bytes), header.api_version)
                self._respond(header, route, SaslAuthenticateResponse(
                    error_code=0, error_message=None, auth_bytes=token.auth_bytes,
                    session_lifetime_ms=token.session_lifetime_ms), started)
                if token.complete:
                    self._authenticated(sasl, reauth)
            else:
                sasl.check_request(header.api_key, route.name)
                return False
        except AuthFailure as e:
            response: Any = None
            if e.error_code is not None and header.api_key == SASL_HANDSHAKE:
                response = SaslHandshakeResponse(error_code=e.error_code, mechanisms=e.mechanisms)
            elif e.error_code is not None and header.api_key == SASL_AUTHENTICATE:
                response = SaslAuthenticateResponse(error_code=e.error_code, error_message=e.client_message)
            self._fail_authentication(e.reason, reauth, header, route, response, started)
        return True

    def _bare_token(self, sasl: SaslServerAuthenticator, frame: Any) -> None:
        """A token after a SaslHandshake v0: bare, and answered bare (size-prefixed)."""
        try:
            token = sasl.authenticate(bytes(frame), 0)
        except AuthFailure as e:
            self._fail_authentication(e.reason, False)
            return
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(len(token.auth_bytes).to_bytes(4, "big") + token.auth_bytes)
        if token.complete:
            self._authenticated(sasl, False)

    def _authenticated(self, sasl: SaslServerAuthenticator, reauth: bool) -> None:
        assert sasl.principal is not None and self.broker.auth is not None
        self.principal = sasl.principal
        self.decoder.max_frame_bytes = self.broker.config.socket_request_max_bytes
        self.broker.auth.metrics.success(self.listener, reauth)

    def _host(self) -> str:
        host, sep, _ = self.peer.rpartition(":")
        return host.strip("[]") if sep else self.peer

    def _respond(self, header: RequestHeader, route: Route, response: Any, started: float) -> None:
        slot = _Slot(header, route, started)
        slot.response, slot.ready = response, True
        if self._slots:
            self._slots.append(slot)
        else:
            self._send(slot)

    def _fail_authentication(self, reason: str, reauth: bool, header: RequestHeader | None = None,
                             route: Route | None = None, response: Any = None, started: float = 0.0) -> None:
        """Stop reading; after connection.failed.authentication.delay.ms answer (if Kafka does) and close."""
        auth = self.broker.auth
        assert auth is not None
        auth.metrics.failure(self.listener, reauth)
        log.info("failed %s of connection %d from %s on listener %s: %s", "re-authentication" if reauth else
                 "authentication", self.id, self.peer, self.listener, reason)
        sasl = self.sasl
        user = sasl.attempted_user if sasl is not None else ""
        audit_failed_login(self.broker.metrics, f"User:{user}" if user else "unknown", self._host(), self.listener,
                           (sasl.mechanism if sasl is not None else None) or "SASL", reason)
        self._auth_failed = True
        if self.transport is not None and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True

        def finish() -> None:
            if response is not None and header is not None and route is not None and not self._closed:
                self._respond(header, route, response, started)
            self.close(None)

        asyncio.get_running_loop().call_later(auth.failed_authentication_delay_s, finish)

    def _complete(self, slot: _Slot, task: "asyncio.Task[Any]") -> None:
        self._tasks.discard(task)
        if task.cancelled() or self._closed:
            return
        exc = task.exception()
        if exc is not None:
            log.error("handler %s v%d failed for client %r; closing its connection", slot.route.name,
                      slot.header.api_version, slot.header.client_id, exc_info=exc)
            self.close(None)
            return
        slot.response = task.result()
        slot.ready = True
        while self._slots and self._slots[0].ready:
            self._send(self._slots.popleft())
        self._update_reading()

    def _send(self, slot: _Slot) -> None:
        if self._closed or self.transport is None:
            return
        h = slot.header
        throttle_ms = 0
        if slot.charge is not None and self._quotas is not None:
            throttle_ms = self._quotas.on_response(slot.charge, slot.response)
        try:
            buffers = kapi.encode_response(h.api_key, h.api_version, h.correlation_id, slot.response)
        except Exception:
            log.exception("cannot encode %s v%d response for client %r; closing its connection",
                          slot.route.name, h.api_version, h.client_id)
            self.close(None)
            return
        if self.transport.is_closing():
            # the client reset the socket and connection_lost is on its way: nobody reads this answer any more
            # (and uvloop's writelines would raise RuntimeError in a callback)
            return
        self.transport.writelines(buffers)
        self.broker.metrics.observe_request(slot.route.name, time.perf_counter() - slot.started, slot.response)
        if throttle_ms:
            self.mute_for(throttle_ms)

    def _answer_unsupported_api_versions(self, header: RequestHeader) -> None:
        """A client asking ApiVersions at a version we don't know gets a v0 answer with our versions (KIP-511)."""
        from oncelog.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse

        response = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersion(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
                      for r in self.router.routes.values()],
        )
        if self.transport is not None and not self._slots:
            self.transport.writelines(kapi.encode_response(header.api_key, 0, header.correlation_id, response))
        elif self.transport is not None:
            slot = _Slot(RequestHeader(header.api_key, 0, header.correlation_id, header.client_id),
                         self.router.routes[API_VERSIONS_KEY], time.perf_counter())
            slot.response, slot.ready = response, True
            self._slots.append(slot)

    # -- flow control -----------------------------------------------------------------------------------------
    def _update_reading(self) -> None:
        if self.transport is None or self._closed or self._auth_failed:
            return
        should_pause = self._writing_paused or len(self._slots) >= MAX_PENDING or self._muted is not None
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    def mute_for(self, ms: int) -> None:
        """Read nothing more from this client for ``ms``: it is throttled for a quota (KIP-219: the response saying
        so has been sent; Kafka mutes the channel for the throttle time)."""
        if ms <= 0 or self._closed or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + ms / 1000
        if self._muted is not None:
            if self._muted.when() >= when:
                return
            self._muted.cancel()
        self._muted = loop.call_at(when, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._muted = None
        while self._held and self._muted is None and not self._closed:
            self._handle_frame(self._held.popleft())
        self._update_reading()

    def close(self, reason: str | None) -> None:
        if self._closed:
            return
        if reason:
            log.warning("closing connection %d from %s: %s", self.id, self.peer, reason)
        self._closed = True
        if self.transport is not None:
            self.transport.close()
