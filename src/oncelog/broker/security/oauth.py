"""Where the OAUTHBEARER keys come from: the JWKS of ``sasl.oauthbearer.jwks.endpoint.url`` (Kafka's
``VerificationKeyResolverFactory``), kept in memory for the validator (``security/oauthbearer.py``).

- ``file:`` URL: read at the first token, and again whenever the file changes (a rotated key is taken at once).
- ``https:`` (or ``http:``) URL: fetched in a background thread when the listener first needs it, every
  ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, and (at most every few seconds) when a token names a key the set
  does not have; tokens are checked against the keys in memory, so a slow identity provider never blocks the
  broker (a token that comes before the first fetch is refused).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from oncelog.security.oauthbearer import JwtValidator, OAuthBearerServer

if TYPE_CHECKING:
    from ..settings.config import BrokerConfig

__all__ = ["JwksSource", "oauth_server"]

log = logging.getLogger("oncelog.broker.oauth")
MIN_REFETCH_S = 5.0  # an unknown kid fetches the JWKS again, at most this often


class JwksSource:
    def __init__(self, url: str, refresh_ms: int) -> None:
        self.url = url
        self.refresh_s = max(1.0, refresh_ms / 1000)
        parsed = urllib.parse.urlparse(url)
        self.path = urllib.request.url2pathname(parsed.path) if parsed.scheme == "file" else None
        self._keys: Any = None
        self._stamp: tuple[int, int] | None = None
        self._fetched = 0.0
        self._lock = threading.Lock()
        if self.path is None:
            self._fetch_soon()  # before the first token arrives

    def keys(self) -> Any:
        if self.path is not None:
            self._read_file()
        elif self._keys is None or time.monotonic() - self._fetched > self.refresh_s:
            self._fetch_soon()
        return self._keys

    def missing_key(self) -> None:
        """A token named a key the set lacks: the provider may have rotated its keys."""
        if self.path is None and time.monotonic() - self._fetched > MIN_REFETCH_S:
            self._fetch_soon()

    def _read_file(self) -> None:
        from jwt import PyJWKSet, PyJWTError

        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError as e:
            if self._stamp is not None or self._keys is None:
                log.warning("cannot read the JWKS %s (%s); tokens are refused until it can be read", self.path, e)
            self._keys, self._stamp = None, None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            with open(self.path, encoding="utf-8") as f:
                self._keys = PyJWKSet.from_json(f.read())
            log.info("read the JWKS %s (%d key(s))", self.path, len(list(self._keys)))
        except (OSError, ValueError, PyJWTError) as e:
            log.warning("the JWKS %s cannot be used (%s); tokens are refused until it is fixed", self.path, e)
            self._keys = None

    def _fetch_soon(self) -> None:
        if not self._lock.acquire(blocking=False):
            return
        self._fetched = time.monotonic()
        threading.Thread(target=self._fetch, name="jwks-fetch", daemon=True).start()

    def _fetch(self) -> None:
        from jwt import PyJWKSet, PyJWTError

        try:
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                self._keys = PyJWKSet.from_json(resp.read().decode("utf-8"))
        except (OSError, ValueError, PyJWTError) as e:
            log.warning("cannot fetch the JWKS %s (%s); the keys held stay in use", self.url, e)
        finally:
            self._fetched = time.monotonic()
            self._lock.release()


def oauth_server(cfg: BrokerConfig, jwks: dict[str, JwksSource], listener: str) -> OAuthBearerServer:
    """An OAUTHBEARER server for one exchange on ``listener``, with that listener's validator settings (``jwks``:
    the broker's JWKS sources by URL, shared by its listeners)."""

    def get(key: str) -> Any:
        return cfg.for_listener(listener, key, "OAUTHBEARER")

    url = str(get("sasl.oauthbearer.jwks.endpoint.url"))
    source = jwks.get(url) if url else None
    if url and source is None:
        source = jwks[url] = JwksSource(url, int(get("sasl.oauthbearer.jwks.endpoint.refresh.ms")))
    validator = JwtValidator(
        (lambda: source.keys()) if source is not None else (lambda: None),
        audience=[a for a in str(get("sasl.oauthbearer.expected.audience")).split(",") if a],
        issuer=str(get("sasl.oauthbearer.expected.issuer")), sub_claim=str(get("sasl.oauthbearer.sub.claim.name")),
        scope_claim=str(get("sasl.oauthbearer.scope.claim.name")),
        clock_skew_s=int(get("sasl.oauthbearer.clock.skew.seconds")),
        allow_unsecured=source is None and bool(cfg.sasl_oauthbearer_unsecured_enable),
        on_missing_key=source.missing_key if source is not None else None)
    return OAuthBearerServer(validator)
