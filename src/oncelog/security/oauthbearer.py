"""SASL/OAUTHBEARER on the broker (KIP-255, RFC 7628): the client sends a JWT; the broker checks it as Kafka's
``BrokerJwtValidator`` does, with PyJWT.

A token is accepted when its signature verifies with a key of the JWKS (``sasl.oauthbearer.jwks.endpoint.url``, by
the token's ``kid``; asymmetric algorithms only), it has ``exp``, ``iat`` and the subject claim
(``sasl.oauthbearer.sub.claim.name``), it has not expired (``sasl.oauthbearer.clock.skew.seconds`` of slack), its
``aud`` names one of ``sasl.oauthbearer.expected.audience`` and its ``iss`` is ``sasl.oauthbearer.expected.issuer``
(each when set), and its scope claim (``sasl.oauthbearer.scope.claim.name``) is a string or a list of strings. The
principal is ``User:<subject>``; the session ends when the token expires (the client re-authenticates with a new one,
KIP-368, or its connection is closed).

Unsigned tokens (``alg: none``, Kafka's unsecured validator) are accepted only with
``sasl.oauthbearer.unsecured.enable=true`` and no JWKS (for tests).

A refused token is answered as Kafka's ``OAuthBearerSaslServer`` does: a challenge ``{"status":"invalid_token"}``,
to which the client answers ``%x01``; then the exchange fails with that text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .mechanisms import AuthenticationFailed

__all__ = ["JwtValidator", "OAuthBearerServer", "TokenRejected", "ValidatedToken"]

_ASYMMETRIC = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
_CLIENT_FIRST = re.compile(rb"([ny]),(?:a=([^,]*))?,\x01(.*)\x01", re.S)
_AUTH = re.compile(r"[Bb]earer +([A-Za-z0-9._~+/=-]+)")


class TokenRejected(Exception):
    """The token is not acceptable; the message says why (for the broker's log)."""


@dataclass(frozen=True)
class ValidatedToken:
    principal: str
    expiry_ms: int
    scopes: frozenset[str]


class JwtValidator:
    """``keys()``: the current JWKS (a ``jwt.PyJWKSet``), or None when none could be read yet."""

    def __init__(self, keys: Callable[[], Any], *, audience: Sequence[str] = (), issuer: str = "",
                 sub_claim: str = "sub", scope_claim: str = "scope", clock_skew_s: int = 30,
                 allow_unsecured: bool = False, on_missing_key: Callable[[], None] | None = None) -> None:
        self._keys = keys
        self._on_missing_key = on_missing_key
        self.audience = list(audience)
        self.issuer = issuer
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s
        self.allow_unsecured = allow_unsecured

    def validate(self, token: str) -> ValidatedToken:
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenRejected(f"not a JWT: {e}") from None
        alg = header.get("alg")
        required = ["exp", "iat", self.sub_claim]
        options: Any = {"require": required, "verify_aud": bool(self.audience), "verify_iss": bool(self.issuer)}
        # Kafka's unsecured validator checks the subject and the expiry only (no issuer, no audience)
        unsigned: Any = {"require": ["exp", self.sub_claim], "verify_signature": False, "verify_exp": True,
                         "verify_iat": True, "verify_aud": False, "verify_iss": False}
        try:
            if alg == "none":
                if not self.allow_unsecured:
                    raise TokenRejected("an unsigned token (alg none), which only sasl.oauthbearer.unsecured.enable "
                                        "allows")
                claims = jwt.decode(token, options=unsigned, leeway=self.clock_skew_s)
            else:
                key = self._key(header)
                claims = jwt.decode(token, key.key, algorithms=[a for a in _ASYMMETRIC if a == alg] or ["none"],
                                    options=options, leeway=self.clock_skew_s, audience=self.audience or None,
                                    issuer=self.issuer or None)
        except jwt.PyJWTError as e:
            raise TokenRejected(f"{type(e).__name__}: {e}") from None
        subject = claims.get(self.sub_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise TokenRejected(f"the {self.sub_claim} claim is not a non-empty string")
        scope = claims.get(self.scope_claim, [])
        if isinstance(scope, str):
            scopes = frozenset(scope.split())
        elif isinstance(scope, list) and all(isinstance(s, str) for s in scope):
            scopes = frozenset(scope)
        else:
            raise TokenRejected(f"the {self.scope_claim} claim is neither a string nor a list of strings")
        exp = claims["exp"]
        if not isinstance(exp, (int, float)):
            raise TokenRejected("the exp claim is not a number")
        return ValidatedToken(subject.strip(), int(exp * 1000), scopes)

    def _key(self, header: dict[str, Any]) -> Any:
        keys = self._keys()
        if keys is None:
            raise TokenRejected("no JWKS to check signatures with (sasl.oauthbearer.jwks.endpoint.url could not be "
                                "read)")
        kid = header.get("kid")
        if kid is None:
            usable = list(keys)
            if len(usable) != 1:
                raise TokenRejected("the token names no key (kid) and the JWKS holds several")
            return usable[0]
        try:
            return keys[kid]
        except KeyError:
            if self._on_missing_key is not None:
                self._on_missing_key()
            raise TokenRejected(f"no key {kid!r} in the JWKS") from None


class OAuthBearerServer:
    mechanism = "OAUTHBEARER"

    def __init__(self, validator: JwtValidator) -> None:
        self._validator = validator
        self.complete = False
        self.authorization_id = ""
        self.credential_expiry_ms: int | None = None
        self._error: str | None = None
        self._reason = ""

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:  # the client's answer to our error challenge
            raise AuthenticationFailed(f"token refused: {self._reason}", self._error)
        self._error = None
        m = _CLIENT_FIRST.fullmatch(token)
        if m is None:
            raise AuthenticationFailed("malformed OAUTHBEARER client first message")
        authzid = (m.group(2) or b"").decode("utf-8", "replace")
        pairs = {}
        for item in m.group(3).split(b"\x01"):
            if not item:
                continue
            key, sep, value = item.partition(b"=")
            if not sep:
                raise AuthenticationFailed("malformed OAUTHBEARER key-value pair")
            pairs[key.decode("ascii", "replace")] = value.decode("utf-8", "replace")
        bearer = _AUTH.fullmatch(pairs.get("auth", ""))
        if bearer is None:
            raise AuthenticationFailed("no 'auth=Bearer <token>' in the OAUTHBEARER message")
        try:
            valid = self._validator.validate(bearer.group(1))
        except TokenRejected as e:
            self._reason = str(e)
            self._error = json.dumps({"status": "invalid_token"}, separators=(",", ":"))
            return self._error.encode()
        if authzid and authzid != valid.principal:
            message = (f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                       f"from the token's principal name ({valid.principal})")
            raise AuthenticationFailed(message, message)
        self.authorization_id = valid.principal
        self.credential_expiry_ms = valid.expiry_ms
        self.complete = True
        return b""
