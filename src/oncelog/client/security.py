"""The client side of TLS and SASL, with confluent-kafka's (librdkafka's) configuration keys, and the Java client's
for the same things (so a Kafka tools' ``--command-config`` properties file works too).

- ``security.protocol``: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``.
- TLS: ``ssl.ca.location`` / ``ssl.ca.pem`` (the CAs; default: the system's), ``ssl.certificate.location`` /
  ``ssl.certificate.pem`` and ``ssl.key.location`` / ``ssl.key.pem`` (a client certificate), ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``https``, the default: the host name is checked; ``none``),
  ``enable.ssl.certificate.verification``, ``ssl.cipher.suites``; Java's ``ssl.truststore.location`` /
  ``ssl.truststore.certificates``, ``ssl.keystore.location`` / ``ssl.keystore.certificate.chain`` +
  ``ssl.keystore.key`` with ``*.type=PEM``.
- SASL: ``sasl.mechanism`` (or ``sasl.mechanisms``): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER;
  ``sasl.username`` / ``sasl.password`` (or Java's ``sasl.jaas.config``); OAUTHBEARER tokens from ``oauth_cb``
  (confluent-kafka's: ``oauth_cb(sasl.oauthbearer.config) -> (token, expiry in epoch seconds)``) or, for tests,
  unsigned ones (``enable.sasl.oauthbearer.unsecure.jwt=true``, ``sasl.oauthbearer.config=principal=NAME``).

:class:`SaslClient` is the exchange without I/O (the connection sends its tokens in SaslAuthenticate requests).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncelog.protocol.jaas import parse_jaas

from .errors import ConfigError

__all__ = ["PLAINTEXT", "SECURITY_KEYS", "ClientSecurity", "SaslClient", "parse_security"]

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: every configuration key this module reads (the client's config parser hands them here)
SECURITY_KEYS = frozenset({
    "security.protocol", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem",
    "ssl.key.location", "ssl.key.pem", "ssl.key.password", "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification", "ssl.cipher.suites", "ssl.truststore.location", "ssl.truststore.type",
    "ssl.truststore.certificates", "ssl.truststore.password", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key", "sasl.mechanism",
    "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config", "oauth_cb", "sasl.oauthbearer.config",
    "enable.sasl.oauthbearer.unsecure.jwt",
})


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    oauth_cb: Callable[[str], Any] | None = None
    oauthbearer_config: str = ""
    unsecure_jwt: bool = False

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def sasl_client(self) -> SaslClient:
        return SaslClient(self)


PLAINTEXT = ClientSecurity()


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "false", "0", "no"):
        return s in ("true", "1", "yes")
    raise ConfigError(f"{key} must be true or false, got {v!r}")


def _pem_file(pem: str, name: str, tmp: str) -> str:
    path = os.path.join(tmp, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(pem.strip() + "\n")
    return path


def _check_type(conf: Mapping[str, Any], key: str) -> None:
    kind = str(conf.get(key, "PEM")).upper()
    if kind != "PEM":
        raise ConfigError(f"{key}={kind}: this client reads PEM only; convert the store to PEM and set {key}=PEM")


def _ssl_context(conf: Mapping[str, Any]) -> tuple[ssl.SSLContext, bool]:
    verify = _bool("enable.ssl.certificate.verification", conf.get("enable.ssl.certificate.verification", True))
    algorithm = str(conf.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
    if algorithm not in ("https", "none", ""):
        raise ConfigError(f"ssl.endpoint.identification.algorithm must be https or none, got {algorithm!r}")
    check_hostname = verify and algorithm == "https"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    ca_file = conf.get("ssl.ca.location") or conf.get("ssl.truststore.location")
    ca_pem = conf.get("ssl.ca.pem") or conf.get("ssl.truststore.certificates")
    if conf.get("ssl.truststore.location") or conf.get("ssl.truststore.certificates"):
        _check_type(conf, "ssl.truststore.type")
    try:
        if ca_file:
            ctx.load_verify_locations(cafile=str(ca_file))
        if ca_pem:
            ctx.load_verify_locations(cadata=str(ca_pem))
        if not ca_file and not ca_pem and verify:
            ctx.load_default_certs()
    except (OSError, ssl.SSLError, ValueError) as e:
        raise ConfigError(f"ssl.ca.location / ssl.ca.pem: no usable CA certificate ({e})") from None
    cert = conf.get("ssl.certificate.location")
    key = conf.get("ssl.key.location")
    cert_pem = conf.get("ssl.certificate.pem") or conf.get("ssl.keystore.certificate.chain")
    key_pem = conf.get("ssl.key.pem") or conf.get("ssl.keystore.key")
    keystore = conf.get("ssl.keystore.location")
    if keystore or conf.get("ssl.keystore.certificate.chain"):
        _check_type(conf, "ssl.keystore.type")
    password = conf.get("ssl.key.password") or None
    try:
        if keystore:  # Java's PEM keystore: key and chain in one file
            ctx.load_cert_chain(str(keystore), password=password)
        elif cert or cert_pem:
            with tempfile.TemporaryDirectory(prefix="oncelog-client-tls-") as tmp:
                cert_file = str(cert) if cert else _pem_file(str(cert_pem), "cert.pem", tmp)
                key_file = str(key) if key else (_pem_file(str(key_pem), "key.pem", tmp) if key_pem else None)
                ctx.load_cert_chain(cert_file, key_file, password=password)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"the client certificate (ssl.certificate.* / ssl.key.*) cannot be used: {e}") from None
    suites = str(conf.get("ssl.cipher.suites") or "")
    if suites:
        try:
            ctx.set_ciphers(suites.replace(",", ":"))
        except ssl.SSLError:
            raise ConfigError(f"ssl.cipher.suites: OpenSSL knows none of {suites!r}") from None
    return ctx, check_hostname


def parse_security(conf: Mapping[str, Any]) -> ClientSecurity:
    """The security settings of a client configuration (only :data:`SECURITY_KEYS` are read). Raises
    :class:`ConfigError`."""
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).strip().upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError(f"security.protocol must be one of {', '.join(_PROTOCOLS)}; got {protocol!r}")
    ctx, check_hostname = _ssl_context(conf) if protocol in ("SSL", "SASL_SSL") else (None, True)
    if protocol in ("PLAINTEXT", "SSL"):
        return ClientSecurity(protocol, ctx, check_hostname)
    mechanism = str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI").strip().upper()
    if mechanism not in _MECHANISMS:
        raise ConfigError(f"sasl.mechanism {mechanism} is not supported: use one of {', '.join(_MECHANISMS)}")
    username, password = conf.get("sasl.username"), conf.get("sasl.password")
    unsecured_sub = ""
    if conf.get("sasl.jaas.config"):
        try:
            jaas = parse_jaas(str(conf["sasl.jaas.config"]))
        except ValueError as e:
            raise ConfigError(f"sasl.jaas.config: {e}") from None
        username = username or jaas.username
        password = password if password is not None else jaas.password
        unsecured_sub = jaas.options.get("unsecuredLoginStringClaim_sub", "")
    oauth_cb = conf.get("oauth_cb")
    if oauth_cb is not None and not callable(oauth_cb):
        raise ConfigError(f"oauth_cb must be a callable, got {oauth_cb!r}")
    unsecure = _bool("enable.sasl.oauthbearer.unsecure.jwt", conf.get("enable.sasl.oauthbearer.unsecure.jwt",
                                                                       False)) or bool(unsecured_sub)
    oauth_config = str(conf.get("sasl.oauthbearer.config") or (f"principal={unsecured_sub}" if unsecured_sub else ""))
    if mechanism == "OAUTHBEARER":
        if oauth_cb is None and not unsecure:
            raise ConfigError("sasl.mechanism=OAUTHBEARER needs oauth_cb (a callable returning (token, expiry)) or, "
                              "for tests, enable.sasl.oauthbearer.unsecure.jwt=true")
    elif not username or password is None:
        raise ConfigError(f"sasl.mechanism={mechanism} needs sasl.username and sasl.password")
    return ClientSecurity(protocol, ctx, check_hostname, mechanism, str(username or ""), str(password or ""),
                          oauth_cb, oauth_config, unsecure)


def _unsecured_jwt(config: str) -> tuple[str, float]:
    """librdkafka's unsecured token: an unsigned JWT for ``principal=NAME [lifeSeconds=N] [scope=...]``."""
    opts = dict(item.split("=", 1) for item in config.split() if "=" in item)
    principal = opts.get("principal")
    if not principal:
        raise ConfigError("sasl.oauthbearer.config needs principal=NAME for an unsecured token")
    now = time.time()
    life = float(opts.get("lifeSeconds", 3600))
    claims: dict[str, Any] = {"sub": principal, "iat": int(now), "exp": int(now + life)}
    if "scope" in opts:
        claims["scope"] = opts["scope"]

    def b64(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}.", now + life


class SaslClient:
    """One SASL exchange: ``first()``, then ``respond(challenge)`` while ``complete`` is false. Raises
    ValueError when the server's answer is wrong (a SCRAM server that cannot prove it knows the credential)."""

    def __init__(self, security: ClientSecurity) -> None:
        self.security = security
        self.mechanism = security.mechanism
        self.complete = False
        self._scram: Any = None
        self._step = 0
        self.token_expiry: float | None = None  # OAUTHBEARER: when the token expires (epoch seconds)

    def first(self) -> bytes:
        s = self.security
        if self.mechanism == "PLAIN":
            return f"\0{s.username}\0{s.password}".encode()
        if self.mechanism.startswith("SCRAM-"):
            import scramp

            self._scram = scramp.ScramClient([self.mechanism], s.username, s.password)
            first: str = self._scram.get_client_first()
            return first.encode()
        token, expiry = self._token()
        self.token_expiry = expiry
        return f"n,,\x01auth=Bearer {token}\x01\x01".encode()

    def _token(self) -> tuple[str, float]:
        s = self.security
        if s.oauth_cb is None:
            return _unsecured_jwt(s.oauthbearer_config)
        result = s.oauth_cb(s.oauthbearer_config)
        if not isinstance(result, tuple) or len(result) < 2:
            raise ConfigError("oauth_cb must return (token, expiry in epoch seconds)")
        return str(result[0]), float(result[1])

    def respond(self, challenge: bytes) -> bytes | None:
        """The next token for ``challenge``; None when the exchange is over on this side."""
        if self.mechanism.startswith("SCRAM-"):
            import scramp

            try:
                if self._step == 0:
                    self._scram.set_server_first(challenge.decode())
                    self._step = 1
                    final: str = self._scram.get_client_final()
                    return final.encode()
                self._scram.set_server_final(challenge.decode())
            except (scramp.ScramException, UnicodeDecodeError) as e:
                raise ValueError(f"the broker's SCRAM answer is wrong: {e}") from None
            self.complete = True
            return None
        if self.mechanism == "OAUTHBEARER" and challenge:
            return b"\x01"  # RFC 7628: the server sent an error; the client ends the exchange
        self.complete = True
        return None
