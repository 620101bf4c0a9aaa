"""Authentication as the broker runs it: each listener's security (TLS context, SASL mechanisms, principal mapping)
from the settings, the credentials the mechanisms check (PLAIN users of the JAAS config, SCRAM credentials of the
security store, OAUTHBEARER keys), the metrics, and a renewed certificate taken without a restart.

The connection (``broker/network/connection.py``) asks its listener for a TLS context (for each new connection: the
current one) and, on a SASL listener, for a :class:`~oncelog.security.authenticator.SaslServerAuthenticator`.
Settings are read when a connection starts, so a dynamic change (in a cluster: AlterConfigs of
``sasl.enabled.mechanisms``, ``listener.name.<l>.ssl.keystore.location``, ...) applies to the next connection.

A certificate is renewed by replacing its files: every :data:`RELOAD_CHECK_S` the keystore and truststore files (and
the settings naming them) are compared with those the context was built from, and changed ones are read into the
listener's context, which new connections use (Kafka re-reads them on an AlterConfigs of the same path; oncelog
watches the files). Files that cannot be used leave the context as it was, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.protocol.jaas import parse_jaas
from oncelog.security.authenticator import SaslServerAuthenticator
from oncelog.security.mechanisms import MechanismServer, PlainServer, ScramServer
from oncelog.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from oncelog.security.principal_mapping import PrincipalMapper
from oncelog.security.scram import ScramCredential, ScramStoreError, key_of
from oncelog.security.store import SCRAM, SecurityStore
from oncelog.security.tls import TlsError, TlsOptions, server_context, subject_of

from .oauth import JwksSource, oauth_server
from ..settings.security_checks import enabled_mechanisms

if TYPE_CHECKING:
    from ..settings.config import BrokerConfig

__all__ = ["AuthMetrics", "BrokerAuth", "ListenerSecurity", "RELOAD_CHECK_S"]

log = logging.getLogger("oncelog.broker.auth")

RELOAD_CHECK_S = 5.0  # how often the certificate files are checked for a renewal
#: makes a labelled counter exported with the broker's metrics (``BrokerMetrics.counter``: name, help, label names)
Counter = Callable[[str, str, Sequence[str]], Any]


class AuthMetrics:
    """Kafka's ``successful-authentication-total`` / ``failed-authentication-total`` (and re-authentication's),
    ``expired-connections-killed-count``, per listener."""

    def __init__(self, counter: Counter) -> None:
        self.authentications = counter("oncelog_authentication", "Authentications by listener and result (SASL "
                                       "exchanges, and client certificates mapped to a principal on SSL "
                                       "listeners; reauth: KIP-368 re-authentications)",
                                       ("listener", "result", "reauth"))
        self.expired = counter("oncelog_expired_connections_killed", "Connections closed because their SASL session "
                               "expired without re-authentication", ("listener",))

    def success(self, listener: str, reauth: bool = False) -> None:
        self.authentications.labels(listener, "success", "true" if reauth else "false").inc()

    def failure(self, listener: str, reauth: bool = False) -> None:
        self.authentications.labels(listener, "failure", "true" if reauth else "false").inc()


def tls_options(cfg: BrokerConfig, listener: str) -> TlsOptions:
    def get(key: str) -> str:
        return str(cfg.for_listener(listener, key))

    return TlsOptions(get("ssl.keystore.location"), get("ssl.key.password"), get("ssl.keystore.certificate.chain"),
                      get("ssl.keystore.key"), get("ssl.truststore.location"), get("ssl.truststore.certificates"),
                      get("ssl.client.auth"), get("ssl.enabled.protocols"), get("ssl.cipher.suites"))


def _stamp(opts: TlsOptions) -> tuple[Any, ...]:
    """What a context was built from: its options and its files' identity (a renewal replaces or rewrites them)."""
    out: list[Any] = [opts]
    for path in opts.files():
        try:
            st = os.stat(path)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class ListenerSecurity:
    """One listener: its name and protocol, its current TLS context (TLS listeners), its SASL side."""

    def __init__(self, auth: BrokerAuth, name: str, protocol: str) -> None:
        self.auth = auth
        self.name = name
        self.protocol = protocol
        self.tls = protocol in ("SSL", "SASL_SSL")
        self.sasl = protocol.startswith("SASL_")
        self.ssl_context: ssl.SSLContext | None = None
        self._stamp: tuple[Any, ...] = ()
        if self.tls:
            self.reload_tls(initial=True)

    def reload_tls(self, initial: bool = False) -> bool:
        """Build the TLS context again when its settings or files changed; True when it did. At start a bad file
        raises :class:`TlsError`; later the old context stays (with a warning)."""
        opts = tls_options(self.auth.config, self.name)
        stamp = _stamp(opts)
        if stamp == self._stamp:
            return False
        try:
            ctx = server_context(opts, self.ssl_context)
        except TlsError as e:
            if initial:
                raise TlsError(f"listener {self.name}: {e}") from None
            log.warning("listener %s keeps its TLS certificate: the new one cannot be used: %s", self.name, e)
            self._stamp = stamp  # not again until it changes once more
            return False
        self.ssl_context, self._stamp = ctx, stamp
        if not initial:
            log.info("listener %s: TLS certificate reloaded (%s); new connections use it", self.name,
                     ", ".join(str(p) for p in opts.files()) or "inline PEM")
        return True

    def ssl_principal(self, der: bytes | None) -> KafkaPrincipal:
        """The principal of a TLS client: ``User:`` + its certificate's subject mapped by
        ``ssl.principal.mapping.rules``; no certificate: ANONYMOUS (Kafka's DefaultKafkaPrincipalBuilder). Raises
        :class:`NoMatchingRule`."""
        if not der:
            return ANONYMOUS
        rules = str(self.auth.config.for_listener(self.name, "ssl.principal.mapping.rules"))
        return KafkaPrincipal(USER_TYPE, self.auth.mapper(rules).name(subject_of(der)))

    def authenticator(self) -> SaslServerAuthenticator:
        cfg = self.auth.config
        return SaslServerAuthenticator(
            enabled_mechanisms(cfg, self.name), lambda mech: self.auth.mechanism_server(self.name, mech),
            lambda mech: int(cfg.for_listener(self.name, "connections.max.reauth.ms", mech)), self.auth.now_ms)


@dataclass
class _Cache:
    text: str = ""
    value: Any = None


class BrokerAuth:
    """Everything the connections need to authenticate clients (``BrokerContext.auth``)."""

    def __init__(self, config: BrokerConfig, store: Callable[[], SecurityStore | None], now_ms: Callable[[], int],
                 counter: Counter) -> None:
        self.config = config
        self._store = store
        self.now_ms = now_ms
        self.metrics = AuthMetrics(counter)
        self.listeners = {ep.name: ListenerSecurity(self, ep.name, config.protocol_of(ep.name))
                          for ep in config.listeners}
        self._users: dict[tuple[str, str], _Cache] = {}
        self._mappers: dict[str, PrincipalMapper] = {}
        self.jwks: dict[str, JwksSource] = {}  # OAUTHBEARER keys by sasl.oauthbearer.jwks.endpoint.url

    def listener(self, name: str) -> ListenerSecurity:
        return self.listeners[name]

    def mapper(self, rules: str) -> PrincipalMapper:
        m = self._mappers.get(rules)
        if m is None:
            m = self._mappers[rules] = PrincipalMapper(rules)
        return m

    @property
    def failed_authentication_delay_s(self) -> float:
        return max(0, self.config.connection_failed_authentication_delay_ms) / 1000

    def plain_users(self, listener: str) -> Mapping[str, str]:
        """PLAIN users of ``listener``: the ``user_NAME`` options of its PLAIN JAAS config (parsed once per text)."""
        text = str(self.config.for_listener(listener, "sasl.jaas.config", "PLAIN"))
        cache = self._users.setdefault((listener, "PLAIN"), _Cache())
        if cache.text != text or cache.value is None:
            try:
                cache.value = parse_jaas(text).users() if text else {}
            except ValueError as e:
                log.warning("the PLAIN JAAS config of listener %s cannot be read (%s): no PLAIN user", listener, e)
                cache.value = {}
            cache.text = text
        users: Mapping[str, str] = cache.value
        return users

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        store = self._store()
        raw = store.records(SCRAM).get(key_of(mechanism, user)) if store is not None else None
        if raw is None:
            return None
        try:
            return ScramCredential.decode(raw)
        except ScramStoreError as e:
            log.warning("the %s credential of %r cannot be read: %s", mechanism, user, e)
            return None

    def mechanism_server(self, listener: str, mechanism: str) -> MechanismServer:
        if mechanism == "PLAIN":
            return PlainServer(lambda: self.plain_users(listener))
        if mechanism.startswith("SCRAM-"):
            return ScramServer(mechanism, lambda user: self.scram_credential(mechanism, user))
        if mechanism == "OAUTHBEARER":
            return oauth_server(self.config, self.jwks, listener)
        raise ValueError(f"no server for SASL mechanism {mechanism}")

    async def reload_loop(self) -> None:
        """Take renewed certificates (see the module's doc) until cancelled."""
        while True:
            await asyncio.sleep(RELOAD_CHECK_S)
            for sec in self.listeners.values():
                if sec.tls:
                    try:  # on the event loop: the live context must not change under a handshake
                        sec.reload_tls()
                    except Exception:
                        log.exception("checking listener %s's certificate failed; will retry", sec.name)
