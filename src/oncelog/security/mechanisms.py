"""Server sides of the SASL mechanisms, without I/O: each takes the client's token and answers a challenge until it
is complete (its ``authorization_id`` names the principal) or raises :class:`AuthenticationFailed`.

- PLAIN (RFC 4616, Kafka's ``PlainSaslServer``): ``authzid NUL authcid NUL password`` checked against the users of the
  listener's JAAS config (``user_NAME="password"``).
- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, Kafka's ``ScramSaslServer``): the exchange is scramp's; the credentials
  are the salted ones of ``security/scram.py``.

A failure's message goes to the client when the mechanism says something useful to it (PLAIN's, as Kafka's); for
SCRAM it is Kafka's generic "invalid credentials" (which user exists is not told).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Protocol

from .scram import MIN_ITERATIONS, ScramCredential

__all__ = ["AuthenticationFailed", "MechanismServer", "PlainServer", "ScramServer"]


class AuthenticationFailed(Exception):
    """The client failed to authenticate. ``client_message``: what the client is told (None: Kafka's generic
    "Authentication failed ... due to invalid credentials with SASL mechanism X")."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.client_message = client_message


class MechanismServer(Protocol):
    mechanism: str

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential expires (an OAUTHBEARER token's ``exp``), or None."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """The challenge for the client's ``token``; raises :class:`AuthenticationFailed`."""
        ...


class PlainServer:
    mechanism = "PLAIN"
    credential_expiry_ms = None

    def __init__(self, users: Callable[[], Mapping[str, str]]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id = ""
        self.attempted = ""  # the user name the client gave (for the audit log of a failure)

    def evaluate(self, token: bytes) -> bytes:
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token is not UTF-8",
                                       "Invalid SASL/PLAIN response: not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationFailed(f"PLAIN token has {len(parts)} parts",
                                       f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        self.attempted = user
        if not user:
            raise AuthenticationFailed("no user name", "Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed(f"no password for {user}", "Authentication failed: password not specified")
        expected = self._users().get(user)
        # compared whatever the user, so a wrong name and a wrong password take the same time
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode()) and expected is not None
        if not ok:
            raise AuthenticationFailed(f"wrong user name or password for {user!r}",
                                       "Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(f"{user} asked to act as {authzid}", "Authentication failed: Client requested "
                                       "an authorization id that is different from username")
        self.authorization_id = user
        self.complete = True
        return b""


class ScramServer:
    credential_expiry_ms = None

    def __init__(self, mechanism: str, credential: Callable[[str], ScramCredential | None]) -> None:
        import scramp

        self.mechanism = mechanism
        self._credential = credential
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._step = 0
        self.complete = False
        self.authorization_id = ""
        self.attempted = ""  # the user name the client gave (for the audit log of a failure)
        self._user = ""

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        self.attempted = user
        cred = self._credential(user)
        if cred is None or cred.iterations < MIN_ITERATIONS:
            return None
        self._user = user
        return cred.auth_info()

    def evaluate(self, token: bytes) -> bytes:
        import scramp

        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"{self.mechanism} message is not UTF-8") from None
        try:
            if self._step == 0:
                if ",tokenauth=true" in message.split(",r=", 1)[-1].lower():
                    raise AuthenticationFailed("delegation tokens (tokenauth) are not supported")
                self._server.set_client_first(message)
                self._step = 1
                first: str = self._server.get_server_first()
                return first.encode()
            if self._step == 1:
                self._server.set_client_final(message)
                self._step = 2
                final: str = self._server.get_server_final()
                self.authorization_id = self._user
                self.complete = True
                return final.encode()
        except scramp.ScramException as e:
            raise AuthenticationFailed(f"{self.mechanism} exchange failed for {self._user or 'an unknown user'!r}: "
                                       f"{e}") from None
        raise AuthenticationFailed(f"{self.mechanism} exchange is already complete")
