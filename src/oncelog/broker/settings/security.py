"""The broker's security settings: listeners with their security protocols, TLS (``ssl.*``), SASL (``sasl.*``) and
the authentication timers, with Kafka's names and defaults (``BrokerSecurityConfigs``, ``SslConfigs``,
``SaslConfigs``, ``SocketServerConfigs``).

The rows here join :data:`oncelog.broker.settings.config.SETTINGS` (one table for every broker setting: the settings
reference, DescribeConfigs and the dynamic configs read it); :class:`SecuritySettings` holds their values and is a
base of :class:`~oncelog.broker.settings.config.BrokerConfig`.

Several settings can be given per listener, as in Kafka, with the prefix ``listener.name.<listener>.`` (the name in
lower case): ``listener.name.sasl_ssl.ssl.keystore.location``; the SASL settings of one mechanism with
``listener.name.<listener>.<mechanism>.``: ``listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config``. A prefixed
value wins over the plain one for that listener (:meth:`SecuritySettings.for_listener`).

Kafka settings that only the JVM uses (Kerberos, key manager algorithms, login classes) are known names with
Kafka's defaults, so a Kafka ``server.properties`` and admin tools that set them (librdkafka's admin test alters
``sasl.kerberos.min.time.before.relogin``) work unchanged; oncelog does not use their values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LISTENER_MECHANISM_KEYS", "PROTOCOLS", "SASL_MECHANISMS", "SECURITY_ROWS", "SecuritySettings",
           "listener_key", "parse_protocol_map"]

#: Kafka's SecurityProtocol names
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the SASL mechanisms oncelog serves (Kafka's GSSAPI, Kerberos, is not one of them)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: Kafka's ``DynamicBrokerConfig.ListenerMechanismConfigs``: given per listener *and* mechanism
LISTENER_MECHANISM_KEYS = ("sasl.jaas.config", "sasl.server.callback.handler.class", "sasl.login.class",
                           "sasl.login.callback.handler.class", "connections.max.reauth.ms")
_DEFAULT_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
_LISTENER_KEY = re.compile(r"listener\.name\.([^.]+)\.(.+)")


def _str(v: Any) -> str:
    if isinstance(v, (dict, list, bool)):
        raise ValueError("expected a string")
    return str(v).strip()


def _password(v: Any) -> str:
    if isinstance(v, (dict, list, bool)):
        raise ValueError("expected a string")
    return str(v)


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def _double(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number")
    try:
        return float(str(v).strip())
    except ValueError:
        raise ValueError("expected a number") from None


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _list(v: Any) -> str:
    """A Kafka LIST setting kept in its string form: items separated by commas, spaces trimmed."""
    if isinstance(v, (list, tuple)):
        v = ",".join(str(x) for x in v)
    return ",".join(x.strip() for x in _str(v).split(",") if x.strip())


def _upper_list(v: Any) -> str:
    return _list(v).upper()


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL} (names upper-cased, as
    Kafka's ``ListenerName.normalised``). Raises ValueError."""
    out: dict[str, str] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, sep, proto = item.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or not proto:
            raise ValueError(f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if proto not in PROTOCOLS:
            raise ValueError(f"{proto} is not a security protocol (one of {', '.join(PROTOCOLS)})")
        if name in out:
            raise ValueError(f"listener {name} is mapped twice")
        out[name] = proto
    return out


def _protocol_map(v: Any) -> str:
    text = _str(v)
    parse_protocol_map(text)
    return text


def _protocol(v: Any) -> str:
    s = _str(v).upper()
    if s not in PROTOCOLS:
        raise ValueError(f"expected one of {', '.join(PROTOCOLS)}")
    return s


def _client_auth(v: Any) -> str:
    s = _str(v).lower()
    if s not in ("none", "requested", "required"):
        raise ValueError("expected none, requested or required")
    return s


def _store_type(v: Any) -> str:
    s = _str(v).upper()
    if s not in ("JKS", "PKCS12", "PEM"):
        raise ValueError("expected JKS, PKCS12 or PEM (oncelog reads PEM)")
    return s


def _enabled_protocols(v: Any) -> str:
    s = _list(v)
    bad = [p for p in s.split(",") if p and p not in ("TLSv1.2", "TLSv1.3")]
    if bad or not s:
        raise ValueError(f"expected TLSv1.2 and/or TLSv1.3 (not {', '.join(bad) or 'nothing'})")
    return s


def _tls_protocol(v: Any) -> str:
    s = _str(v)
    if s not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise ValueError("expected TLSv1.3, TLSv1.2 or TLS")
    return s


def _principal_builder(v: Any) -> str:
    s = _str(v)
    if s and s != _PRINCIPAL_BUILDER:
        raise ValueError(f"oncelog builds principals as Kafka's default does; leave it at {_PRINCIPAL_BUILDER}")
    return s or _PRINCIPAL_BUILDER


def _no_class(v: Any) -> str:
    s = _str(v)
    if s:
        raise ValueError("oncelog loads no Java classes: leave it unset (docs/security.md lists what is built in)")
    return s


def _mapping_rules(v: Any) -> str:
    from oncelog.security.principal_mapping import parse_rules

    s = _str(v)
    parse_rules(s)  # ValueError names the bad rule
    return s


_MS, _B = "ms", "bytes"


@dataclass
class SecuritySettings:
    """The values of the security settings (a base of ``BrokerConfig``)."""

    listener_security_protocol_map: str = _DEFAULT_MAP
    inter_broker_listener_name: str = ""
    security_inter_broker_protocol: str = "PLAINTEXT"
    sasl_enabled_mechanisms: str = "GSSAPI"
    sasl_mechanism_inter_broker_protocol: str = "GSSAPI"
    sasl_jaas_config: str = ""
    sasl_server_max_receive_size: int = 524288
    connections_max_reauth_ms: int = 0
    connection_failed_authentication_delay_ms: int = 100
    principal_builder_class: str = _PRINCIPAL_BUILDER
    sasl_server_callback_handler_class: str = ""
    sasl_login_class: str = ""
    sasl_login_callback_handler_class: str = ""
    sasl_client_callback_handler_class: str = ""
    sasl_oauthbearer_jwks_endpoint_url: str = ""
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = 3_600_000
    sasl_oauthbearer_expected_audience: str = ""
    sasl_oauthbearer_expected_issuer: str = ""
    sasl_oauthbearer_scope_claim_name: str = "scope"
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_clock_skew_seconds: int = 30
    sasl_oauthbearer_unsecured_enable: bool = False
    sasl_kerberos_service_name: str = ""
    sasl_kerberos_kinit_cmd: str = "/usr/bin/kinit"
    sasl_kerberos_ticket_renew_window_factor: float = 0.8
    sasl_kerberos_ticket_renew_jitter: float = 0.05
    sasl_kerberos_min_time_before_relogin: int = 60_000
    sasl_kerberos_principal_to_local_rules: str = "DEFAULT"
    sasl_login_refresh_window_factor: float = 0.8
    sasl_login_refresh_window_jitter: float = 0.05
    sasl_login_refresh_min_period_seconds: int = 60
    sasl_login_refresh_buffer_seconds: int = 300
    ssl_protocol: str = "TLSv1.3"
    ssl_enabled_protocols: str = "TLSv1.2,TLSv1.3"
    ssl_cipher_suites: str = ""
    ssl_keystore_type: str = "JKS"
    ssl_keystore_location: str = ""
    ssl_keystore_password: str = ""
    ssl_key_password: str = ""
    ssl_keystore_certificate_chain: str = ""
    ssl_keystore_key: str = ""
    ssl_truststore_type: str = "JKS"
    ssl_truststore_location: str = ""
    ssl_truststore_password: str = ""
    ssl_truststore_certificates: str = ""
    ssl_client_auth: str = "none"
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_principal_mapping_rules: str = "DEFAULT"
    ssl_keymanager_algorithm: str = "SunX509"
    ssl_trustmanager_algorithm: str = "PKIX"
    ssl_secure_random_implementation: str = ""
    ssl_provider: str = ""
    ssl_engine_factory_class: str = ""
    #: ``listener.name.<listener>.[<mechanism>.]<setting>`` -> value (Kafka's string form), as given
    listener_settings: dict[str, str] = field(default_factory=dict)

    def for_listener(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """``key``'s value for ``listener`` (and ``mechanism``): the most specific of
        ``listener.name.<l>.<mech>.<key>``, ``listener.name.<l>.<key>``, ``<key>`` (Kafka's
        ``valuesWithPrefixOverride``), parsed as the setting is."""
        row = _ROWS_BY_KEY[key]
        prefix = f"listener.name.{listener.lower()}."
        names = ([f"{prefix}{mechanism.lower()}.{key}"] if mechanism and key in LISTENER_MECHANISM_KEYS else []) \
            + [prefix + key]
        for name in names:
            if name in self.listener_settings:
                return row[3](self.listener_settings[name])
        return getattr(self, row[1])


def listener_key(key: str) -> tuple[str, str, str | None] | None:
    """``listener.name.<l>.[<mech>.]<setting>`` -> (LISTENER, setting, MECHANISM or None); None when ``key`` is not
    a listener-prefixed security setting."""
    m = _LISTENER_KEY.fullmatch(key)
    if m is None:
        return None
    listener, rest = m.group(1).upper(), m.group(2)
    for base in LISTENER_MECHANISM_KEYS:
        if rest.endswith("." + base):
            mech = rest[: -len(base) - 1].upper()
            if mech in SASL_MECHANISMS or mech == "GSSAPI":
                return listener, base, mech
    if rest in _ROWS_BY_KEY and rest not in _NOT_PER_LISTENER:
        return listener, rest, None
    return None


#: (Kafka name, attribute, Kafka type, parse, description, check, unit): rows of ``config.SETTINGS``
Row = tuple[str, str, str, Any, str, Any, str]
SECURITY_ROWS: list[Row] = [
    # -- listeners
    ("listener.security.protocol.map", "listener_security_protocol_map", "STRING", _protocol_map,
     "The security protocol of each listener name: `NAME:PROTOCOL,...` (PLAINTEXT, SSL, SASL_PLAINTEXT, "
     "SASL_SSL); a listener named as a protocol needs no entry.", None, ""),
    ("inter.broker.listener.name", "inter_broker_listener_name", "STRING", lambda v: _str(v).upper(),
     "The listener other brokers of the cluster connect to (replication, transaction markers, forwarding); "
     "default: the listener named as `security.inter.broker.protocol`.", None, ""),
    ("security.inter.broker.protocol", "security_inter_broker_protocol", "STRING", _protocol,
     "The security protocol between brokers when `inter.broker.listener.name` is not set (names the listener).",
     None, ""),
    # -- SASL
    ("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", "LIST", _upper_list, "SASL mechanisms a SASL listener "
     "accepts: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Kafka's default GSSAPI is Kerberos, which oncelog "
     "does not serve: set this on a SASL listener).", None, ""),
    ("sasl.mechanism.inter.broker.protocol", "sasl_mechanism_inter_broker_protocol", "STRING",
     lambda v: _str(v).upper(), "The SASL mechanism a broker uses on a SASL inter-broker listener; its "
     "credentials are the `username`/`password` of that mechanism's `sasl.jaas.config`.", None, ""),
    ("sasl.jaas.config", "sasl_jaas_config", "PASSWORD", _password, "JAAS login context of a mechanism, given per "
     "listener and mechanism (`listener.name.sasl_ssl.plain.sasl.jaas.config`): PLAIN users as "
     "`user_NAME=\"password\"`, and this broker's own `username`/`password` for other brokers.", None, ""),
    ("sasl.server.max.receive.size", "sasl_server_max_receive_size", "INT", _int, "Largest request a client may "
     "send before it has authenticated; a larger one closes the connection.", None, _B),
    ("connections.max.reauth.ms", "connections_max_reauth_ms", "LONG", _int, "Longest a SASL session lasts: a "
     "client re-authenticates within it (KIP-368) or its connection is closed at its next request; 0: no limit "
     "(a token's expiry still ends an OAUTHBEARER session).", None, _MS),
    ("connection.failed.authentication.delay.ms", "connection_failed_authentication_delay_ms", "INT", _int,
     "A failed authentication is answered and the connection closed after this delay (slows password "
     "guessing; costs no CPU).", None, _MS),
    ("principal.builder.class", "principal_builder_class", "CLASS", _principal_builder, "How a principal is "
     "built; only Kafka's default: `User:` + the SASL name or the mapped certificate subject.", None, ""),
    ("sasl.server.callback.handler.class", "sasl_server_callback_handler_class", "CLASS", _no_class,
     "Not used: users come from the JAAS config (PLAIN), the SCRAM credentials and the JWKS (OAUTHBEARER).",
     None, ""),
    ("sasl.login.class", "sasl_login_class", "CLASS", _no_class, "Not used (a JVM login class).", None, ""),
    ("sasl.login.callback.handler.class", "sasl_login_callback_handler_class", "CLASS", _no_class,
     "Not used (a JVM login callback).", None, ""),
    ("sasl.client.callback.handler.class", "sasl_client_callback_handler_class", "CLASS", _no_class,
     "Not used (a JVM client callback).", None, ""),
    ("sasl.oauthbearer.jwks.endpoint.url", "sasl_oauthbearer_jwks_endpoint_url", "STRING", _str, "Where the "
     "keys that sign OAUTHBEARER tokens are: a `file:` URL of a JWKS file (re-read when it changes) or an "
     "`https:` URL.", None, ""),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl_oauthbearer_jwks_endpoint_refresh_ms", "LONG", _int,
     "How often the JWKS is fetched again (a token with an unknown key id fetches it at once).", None, _MS),
    ("sasl.oauthbearer.expected.audience", "sasl_oauthbearer_expected_audience", "LIST", _list, "A token's `aud` "
     "must name one of these; empty: not checked.", None, ""),
    ("sasl.oauthbearer.expected.issuer", "sasl_oauthbearer_expected_issuer", "STRING", _str, "A token's `iss` "
     "must be this; empty: not checked.", None, ""),
    ("sasl.oauthbearer.scope.claim.name", "sasl_oauthbearer_scope_claim_name", "STRING", _str, "The claim that "
     "holds a token's scopes.", None, ""),
    ("sasl.oauthbearer.sub.claim.name", "sasl_oauthbearer_sub_claim_name", "STRING", _str, "The claim that names "
     "the principal (`User:<sub>`).", None, ""),
    ("sasl.oauthbearer.clock.skew.seconds", "sasl_oauthbearer_clock_skew_seconds", "INT", _int, "Clock skew "
     "allowed when checking a token's `exp`, `nbf` and `iat`.", None, "s"),
    ("sasl.oauthbearer.unsecured.enable", "sasl_oauthbearer_unsecured_enable", "BOOLEAN", _bool, "oncelog's: "
     "accept unsigned (`alg: none`) OAUTHBEARER tokens when no JWKS is set, as Kafka's unsecured validator; "
     "for tests only.", None, ""),
    ("sasl.kerberos.service.name", "sasl_kerberos_service_name", "STRING", _str, "Not used (Kerberos).", None, ""),
    ("sasl.kerberos.kinit.cmd", "sasl_kerberos_kinit_cmd", "STRING", _str, "Not used (Kerberos).", None, ""),
    ("sasl.kerberos.ticket.renew.window.factor", "sasl_kerberos_ticket_renew_window_factor", "DOUBLE", _double,
     "Not used (Kerberos).", None, ""),
    ("sasl.kerberos.ticket.renew.jitter", "sasl_kerberos_ticket_renew_jitter", "DOUBLE", _double,
     "Not used (Kerberos).", None, ""),
    ("sasl.kerberos.min.time.before.relogin", "sasl_kerberos_min_time_before_relogin", "LONG", _int,
     "Not used (Kerberos).", None, _MS),
    ("sasl.kerberos.principal.to.local.rules", "sasl_kerberos_principal_to_local_rules", "LIST", _list,
     "Not used (Kerberos).", None, ""),
    ("sasl.login.refresh.window.factor", "sasl_login_refresh_window_factor", "DOUBLE", _double,
     "Not used (a JVM login refresh).", None, ""),
    ("sasl.login.refresh.window.jitter", "sasl_login_refresh_window_jitter", "DOUBLE", _double,
     "Not used (a JVM login refresh).", None, ""),
    ("sasl.login.refresh.min.period.seconds", "sasl_login_refresh_min_period_seconds", "SHORT", _int,
     "Not used (a JVM login refresh).", None, "s"),
    ("sasl.login.refresh.buffer.seconds", "sasl_login_refresh_buffer_seconds", "SHORT", _int,
     "Not used (a JVM login refresh).", None, "s"),
    # -- TLS
    ("ssl.protocol", "ssl_protocol", "STRING", _tls_protocol, "The newest TLS version offered.", None, ""),
    ("ssl.enabled.protocols", "ssl_enabled_protocols", "LIST", _enabled_protocols, "TLS versions accepted.",
     None, ""),
    ("ssl.cipher.suites", "ssl_cipher_suites", "LIST", _list, "TLS 1.2 cipher suites accepted (OpenSSL or IANA "
     "names); empty: OpenSSL's defaults.", None, ""),
    ("ssl.keystore.type", "ssl_keystore_type", "STRING", _store_type, "Format of the keystore: oncelog reads PEM "
     "(set `PEM`; Kafka's default JKS is a Java format).", None, ""),
    ("ssl.keystore.location", "ssl_keystore_location", "STRING", _str, "PEM file with this broker's private key "
     "and certificate chain; re-read when it changes.", None, ""),
    ("ssl.keystore.password", "ssl_keystore_password", "PASSWORD", _password, "Not needed for PEM (the key's "
     "password is `ssl.key.password`).", None, ""),
    ("ssl.key.password", "ssl_key_password", "PASSWORD", _password, "Password of an encrypted private key.",
     None, ""),
    ("ssl.keystore.certificate.chain", "ssl_keystore_certificate_chain", "PASSWORD", _password, "The certificate "
     "chain in PEM, inline (instead of `ssl.keystore.location`).", None, ""),
    ("ssl.keystore.key", "ssl_keystore_key", "PASSWORD", _password, "The private key in PEM, inline.", None, ""),
    ("ssl.truststore.type", "ssl_truststore_type", "STRING", _store_type, "Format of the truststore: oncelog "
     "reads PEM.", None, ""),
    ("ssl.truststore.location", "ssl_truststore_location", "STRING", _str, "PEM file of the CA certificates that "
     "sign client certificates (and other brokers').", None, ""),
    ("ssl.truststore.password", "ssl_truststore_password", "PASSWORD", _password, "Not needed for PEM.", None, ""),
    ("ssl.truststore.certificates", "ssl_truststore_certificates", "PASSWORD", _password, "The CA certificates "
     "in PEM, inline.", None, ""),
    ("ssl.client.auth", "ssl_client_auth", "STRING", _client_auth, "Client certificates: `none`, `requested` "
     "(checked when sent) or `required`.", None, ""),
    ("ssl.endpoint.identification.algorithm", "ssl_endpoint_identification_algorithm", "STRING", _str,
     "`https`: a broker connecting to another checks the host name against its certificate; empty: not "
     "checked.", None, ""),
    ("ssl.principal.mapping.rules", "ssl_principal_mapping_rules", "STRING", _mapping_rules, "How a client "
     "certificate's subject becomes a principal name: `RULE:pattern/replacement/[LU]`, ..., `DEFAULT` (the "
     "whole subject), as Kafka's SslPrincipalMapper.", None, ""),
    ("ssl.keymanager.algorithm", "ssl_keymanager_algorithm", "STRING", _str, "Not used (a JVM algorithm).",
     None, ""),
    ("ssl.trustmanager.algorithm", "ssl_trustmanager_algorithm", "STRING", _str, "Not used (a JVM algorithm).",
     None, ""),
    ("ssl.secure.random.implementation", "ssl_secure_random_implementation", "STRING", _str,
     "Not used (a JVM algorithm).", None, ""),
    ("ssl.provider", "ssl_provider", "STRING", _str, "Not used (a JVM provider).", None, ""),
    ("ssl.engine.factory.class", "ssl_engine_factory_class", "CLASS", _no_class, "Not used (a JVM class).",
     None, ""),
]
_ROWS_BY_KEY: dict[str, Row] = {r[0]: r for r in SECURITY_ROWS}
#: settings that are not per listener (Kafka reads them once for the broker)
_NOT_PER_LISTENER = frozenset({"listener.security.protocol.map", "inter.broker.listener.name",
                               "security.inter.broker.protocol", "sasl.mechanism.inter.broker.protocol",
                               "principal.builder.class", "connection.failed.authentication.delay.ms"})
