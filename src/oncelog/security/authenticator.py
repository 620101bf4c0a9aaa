"""The server side of SASL on one connection, without I/O: Kafka's ``SaslServerAuthenticator`` (KIP-43 handshake,
KIP-152 SaslAuthenticate, KIP-368 re-authentication).

The connection hands it each request before routing while authentication is under way; it answers what Kafka
answers:

- before authentication, only ApiVersions (once) and SaslHandshake; any other request closes the connection (Kafka's
  ``IllegalSaslStateException``, no answer);
- SaslHandshake names a mechanism: an enabled one moves to AUTHENTICATE (answer: NONE and the enabled mechanisms),
  another fails with UNSUPPORTED_SASL_MECHANISM; v0 (no SaslAuthenticate) sends the mechanism's tokens bare, as
  size-prefixed frames;
- in AUTHENTICATE, only SaslAuthenticate; its bytes go to the mechanism; a failure answers
  SASL_AUTHENTICATION_FAILED (with the mechanism's message, or Kafka's generic one) and the connection closes after
  ``connection.failed.authentication.delay.ms``;
- once complete, the principal is ``User:<authorization id>`` and the session lasts until the credential expires
  or ``connections.max.reauth.ms`` (the smaller; 0: forever), which the client is told (``session_lifetime_ms``). A
  client that sent SaslAuthenticate v1+ may re-authenticate with a new SaslHandshake on the same connection: same
  mechanism, same principal, else it fails. A request after the session expired closes the connection.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oncelog.protocol.errors import ErrorCode

from .mechanisms import AuthenticationFailed, MechanismServer
from .principal import USER_TYPE, KafkaPrincipal

__all__ = ["AuthFailure", "HandshakeResult", "SaslServerAuthenticator", "State", "TokenResult"]

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class AuthFailure(Exception):
    """Authentication failed: ``error_code`` / ``client_message`` are answered (code None: close without an answer);
    ``reason`` is for the broker's log."""

    def __init__(self, reason: str, error_code: int | None = None, client_message: str | None = None,
                 mechanisms: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_code = error_code
        self.client_message = client_message
        self.mechanisms = list(mechanisms)


@dataclass(frozen=True)
class HandshakeResult:
    mechanisms: list[str]


@dataclass(frozen=True)
class TokenResult:
    auth_bytes: bytes
    session_lifetime_ms: int  # 0 until complete, or when the session does not expire
    complete: bool


class SaslServerAuthenticator:
    """``mechanisms``: those the listener enables; ``server_for(mechanism)`` makes a mechanism's server;
    ``max_reauth_ms(mechanism)``: ``connections.max.reauth.ms`` for it; ``now_ms``: the wall clock."""

    def __init__(self, mechanisms: Sequence[str], server_for: Callable[[str], MechanismServer],
                 max_reauth_ms: Callable[[str], int], now_ms: Callable[[], int]) -> None:
        self.mechanisms = list(mechanisms)
        self._server_for = server_for
        self._max_reauth_ms = max_reauth_ms
        self._now_ms = now_ms
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.session_expiry_ms: int | None = None
        self.supports_reauth = False  # the client sent SaslAuthenticate v1+ (KIP-368)
        self.reauthenticating = False
        self.bare_tokens = False  # SaslHandshake v0: tokens without a Kafka header
        self._server: MechanismServer | None = None
        self._bad_reauth_mechanism: str | None = None

    @property
    def authenticating(self) -> bool:
        """Requests go to this authenticator (not to the handlers) while true."""
        return self.state is not State.COMPLETE or self.reauthenticating

    @property
    def attempted_user(self) -> str:
        """The user name the client gave in the exchange under way (empty when unknown), for the audit log."""
        return str(getattr(self._server, "attempted", "") or "") if self._server is not None else ""

    @property
    def what(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    def _fail(self, reason: str, code: int | None = None, message: str | None = None,
              mechanisms: Sequence[str] = ()) -> AuthFailure:
        self.state = State.FAILED
        self.reauthenticating = False
        return AuthFailure(reason, code, message, mechanisms)

    # ------------------------------------------------------------------------------------------- requests
    def accepts(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` is taken by this authenticator now (else the connection routes it). A
        SaslHandshake on an authenticated connection starts re-authentication (if the client can)."""
        if self.state is State.COMPLETE and not self.reauthenticating:
            return api_key == SASL_HANDSHAKE and self.supports_reauth
        return True

    def check_request(self, api_key: int, api_name: str) -> None:
        """Before authentication: ApiVersions (once, first) is routed as usual; anything else but the SASL requests
        fails (raises :class:`AuthFailure` with no answer, as Kafka closes the connection)."""
        if api_key == API_VERSIONS and self.state is State.HANDSHAKE_OR_VERSIONS:
            self.state = State.HANDSHAKE
            return
        if self.state is State.AUTHENTICATE and api_key != SASL_AUTHENTICATE:
            raise self._fail(f"unexpected {api_name} request during SASL {self.what}", ErrorCode.ILLEGAL_SASL_STATE)
        if self.state in (State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE) and api_key != SASL_HANDSHAKE:
            raise self._fail(f"unexpected {api_name} request during SASL handshake")
        if self.state is State.FAILED:
            raise self._fail("a request after a failed authentication")

    def handshake(self, mechanism: str, version: int) -> HandshakeResult:
        if self.state is State.COMPLETE:  # KIP-368: the same connection authenticates again
            self.reauthenticating = True
            self.state = State.HANDSHAKE
        if self.state not in (State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE):
            raise self._fail(f"unexpected SaslHandshake request during SASL {self.what}",
                             ErrorCode.ILLEGAL_SASL_STATE)
        if mechanism not in self.mechanisms:
            raise self._fail(f"the client asked for SASL mechanism {mechanism!r}, which this listener does not "
                             f"enable ({', '.join(self.mechanisms)})", ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                             None, self.mechanisms)
        self.bare_tokens = version == 0
        if self.reauthenticating and mechanism != self.mechanism:
            self._bad_reauth_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                          f"re-authentication of mechanism '{self.mechanism}'")
        else:
            self._bad_reauth_mechanism = None
            self._server = self._server_for(mechanism)
            self.mechanism = mechanism
        self.state = State.AUTHENTICATE
        return HandshakeResult(self.mechanisms)

    def authenticate(self, token: bytes, version: int) -> TokenResult:
        """One SaslAuthenticate (or, after a v0 handshake, one bare token)."""
        if self.state is not State.AUTHENTICATE:
            raise self._fail(f"SaslAuthenticate in state {self.state.value}", ErrorCode.ILLEGAL_SASL_STATE)
        if self._bad_reauth_mechanism is not None:
            raise self._fail(self._bad_reauth_mechanism)
        if version > 0:
            self.supports_reauth = True
        server = self._server
        assert server is not None and self.mechanism is not None
        generic = (f"Authentication failed during {self.what} due to invalid credentials with SASL mechanism "
                   f"{self.mechanism}")
        try:
            challenge = server.evaluate(token)
        except AuthenticationFailed as e:
            raise self._fail(f"{self.what} with {self.mechanism} failed: {e}", ErrorCode.SASL_AUTHENTICATION_FAILED,
                             e.client_message or generic) from None
        if not server.complete:
            return TokenResult(challenge, 0, False)
        principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
        if self.reauthenticating and principal != self.principal:
            assert self.principal is not None
            message = (f"Cannot change principals during re-authentication from {self.principal.principal_type}."
                       f"{self.principal.name}: {principal.principal_type}.{principal.name}")
            raise self._fail(message, ErrorCode.SASL_AUTHENTICATION_FAILED, message)
        lifetime = self._session_lifetime_ms(server)
        now = self._now_ms()
        self.session_expiry_ms = now + lifetime if lifetime is not None else None
        self.principal = principal
        self.state = State.COMPLETE
        self.reauthenticating = False
        return TokenResult(challenge, lifetime or 0, True)

    def _session_lifetime_ms(self, server: MechanismServer) -> int | None:
        """Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``: the smaller of the credential's remaining
        life and ``connections.max.reauth.ms``; None when neither limits it."""
        assert self.mechanism is not None
        max_reauth = self._max_reauth_ms(self.mechanism)
        expiry = server.credential_expiry_ms
        if expiry is None and max_reauth <= 0:
            return None
        remaining = max(0, expiry - self._now_ms()) if expiry is not None else None
        if remaining is None:
            return max(0, max_reauth)
        return remaining if max_reauth <= 0 else min(remaining, max_reauth)

    def session_expired(self) -> bool:
        """A request on a connection whose session expired closes it (Kafka's ``serverAuthenticationSessionExpired``)."""
        return (self.state is State.COMPLETE and self.session_expiry_ms is not None
                and self._now_ms() > self.session_expiry_ms)
