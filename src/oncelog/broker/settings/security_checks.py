"""Checks across the security settings, when the broker starts (``BrokerConfig.validate``): each returns one line
saying what is wrong and what to set, or None.

Kafka refuses the same configurations at start (``KafkaConfig.validateValues``, the channel builders): a listener
without a security protocol, an SSL listener without a certificate, a SASL listener without a mechanism it can
serve, a cluster whose inter-broker listener does not exist or has no credentials.
"""

from __future__ import annotations

from typing import Protocol

from oncelog.protocol.jaas import JaasEntry, parse_jaas

from .security import PROTOCOLS, SASL_MECHANISMS, SecuritySettings, parse_protocol_map

__all__ = ["check_inter_broker", "check_listeners", "enabled_mechanisms", "jaas_for"]


class _Endpoint(Protocol):
    @property
    def name(self) -> str: ...


class _Config(Protocol):
    """What the checks read of ``BrokerConfig``."""

    @property
    def listeners(self) -> tuple[_Endpoint, ...]: ...

    @property
    def advertised_listeners(self) -> tuple[_Endpoint, ...] | None: ...

    @property
    def given(self) -> set[str]: ...

    @property
    def inter_broker_listener(self) -> str: ...

    def protocol_of(self, name: str) -> str: ...


def enabled_mechanisms(cfg: SecuritySettings, listener: str) -> list[str]:
    """The SASL mechanisms listener ``listener`` accepts (``[listener.name.<l>.]sasl.enabled.mechanisms``)."""
    return [m for m in str(cfg.for_listener(listener, "sasl.enabled.mechanisms")).split(",") if m]


def jaas_for(cfg: SecuritySettings, listener: str, mechanism: str) -> JaasEntry | None:
    """The JAAS login module of ``mechanism`` on ``listener`` (``listener.name.<l>.<mech>.sasl.jaas.config``, else
    ``listener.name.<l>.sasl.jaas.config``, else ``sasl.jaas.config``); None when none is set. Raises ValueError."""
    text = cfg.for_listener(listener, "sasl.jaas.config", mechanism)
    return parse_jaas(text) if text else None


def _setting(listener: str, key: str, mechanism: str | None = None) -> str:
    mech = f"{mechanism.lower()}." if mechanism else ""
    return f"listener.name.{listener.lower()}.{mech}{key}"


def check_listeners(cfg: _Config) -> str | None:
    assert isinstance(cfg, SecuritySettings)
    try:
        mapping = parse_protocol_map(cfg.listener_security_protocol_map)
    except ValueError as e:
        return f"listener.security.protocol.map: {e}"
    for ep in cfg.listeners:
        if ep.name not in mapping and ep.name not in PROTOCOLS:
            return (f"listener {ep.name} has no security protocol: name it as one ({', '.join(PROTOCOLS)}) or add "
                    f"{ep.name}:PROTOCOL to listener.security.protocol.map")
    names = {ep.name for ep in cfg.listeners}
    for ep in cfg.advertised_listeners or ():
        if ep.name not in names:
            return (f"advertised.listeners names {ep.name}, which is not one of listeners ({', '.join(sorted(names))})"
                    f": advertise only listeners the broker has")
    for ep in cfg.listeners:
        protocol = cfg.protocol_of(ep.name)
        err = (_check_tls(cfg, ep.name) if protocol in ("SSL", "SASL_SSL") else None) \
            or (_check_sasl(cfg, ep.name) if protocol.startswith("SASL_") else None)
        if err:
            return err
    return None


def _check_tls(cfg: SecuritySettings, listener: str) -> str | None:
    location = cfg.for_listener(listener, "ssl.keystore.location")
    chain, key = (cfg.for_listener(listener, k) for k in ("ssl.keystore.certificate.chain", "ssl.keystore.key"))
    if not location and not (chain and key):
        return (f"listener {listener} ({cfg_protocol(cfg, listener)}) needs this broker's certificate: set "
                f"ssl.keystore.location to a PEM file with the key and the chain (or ssl.keystore.certificate.chain "
                f"and ssl.keystore.key; per listener as {_setting(listener, 'ssl.keystore.location')}) and "
                f"ssl.keystore.type=PEM")
    for kind, given in (("keystore", True), ("truststore", bool(cfg.for_listener(listener, "ssl.truststore.location")
                                                                or cfg.for_listener(listener,
                                                                                    "ssl.truststore.certificates")))):
        if given and cfg.for_listener(listener, f"ssl.{kind}.type") != "PEM":
            return (f"ssl.{kind}.type of listener {listener} is {cfg.for_listener(listener, f'ssl.{kind}.type')}: "
                    f"oncelog reads PEM only; convert the {kind} to PEM (keytool -exportcert / openssl pkcs12) and set "
                    f"ssl.{kind}.type=PEM")
    return None


def cfg_protocol(cfg: SecuritySettings, listener: str) -> str:
    return parse_protocol_map(cfg.listener_security_protocol_map).get(listener, listener)


def _check_sasl(cfg: SecuritySettings, listener: str) -> str | None:
    mechanisms = enabled_mechanisms(cfg, listener)
    bad = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if bad or not mechanisms:
        what = f"enables {', '.join(bad)}" if bad else "enables no mechanism"
        return (f"SASL listener {listener} {what}: set sasl.enabled.mechanisms (or "
                f"{_setting(listener, 'sasl.enabled.mechanisms')}) to some of {', '.join(SASL_MECHANISMS)}"
                f"{' (GSSAPI, Kerberos, is not served)' if 'GSSAPI' in bad else ''}")
    for mech in mechanisms:
        try:
            jaas = jaas_for(cfg, listener, mech)
        except ValueError as e:
            return f"{_setting(listener, 'sasl.jaas.config', mech)}: {e}"
        if mech == "PLAIN" and (jaas is None or not jaas.users()):
            return (f"listener {listener} enables PLAIN but names no user: set "
                    f"{_setting(listener, 'sasl.jaas.config', mech)} with user_NAME=\"password\" options")
        if mech == "OAUTHBEARER" and not cfg.for_listener(listener, "sasl.oauthbearer.jwks.endpoint.url") \
                and not cfg.sasl_oauthbearer_unsecured_enable:
            return (f"listener {listener} enables OAUTHBEARER but has no keys to check tokens with: set "
                    f"sasl.oauthbearer.jwks.endpoint.url (a file: or https: URL of the JWKS)")
    return None


def check_inter_broker(cfg: _Config) -> str | None:
    """A broker of a cluster: the inter-broker listener exists, and this broker has credentials for it."""
    assert isinstance(cfg, SecuritySettings)
    if "inter.broker.listener.name" in cfg.given and "security.inter.broker.protocol" in cfg.given:
        return "set only one of inter.broker.listener.name and security.inter.broker.protocol (as Kafka requires)"
    name = cfg.inter_broker_listener
    if name not in {ep.name for ep in cfg.listeners}:
        return (f"the inter-broker listener {name} is not one of listeners "
                f"({', '.join(ep.name for ep in cfg.listeners)}): set inter.broker.listener.name to the listener "
                f"other brokers connect to")
    if not cfg.protocol_of(name).startswith("SASL_"):
        return None
    mech = cfg.sasl_mechanism_inter_broker_protocol
    if mech not in enabled_mechanisms(cfg, name):
        return (f"sasl.mechanism.inter.broker.protocol is {mech}, which the inter-broker listener {name} does not "
                f"enable: set it to one of its sasl.enabled.mechanisms")
    if mech == "OAUTHBEARER":
        return ("OAUTHBEARER between brokers is not supported: set sasl.mechanism.inter.broker.protocol to PLAIN or "
                "SCRAM-SHA-512")
    jaas = jaas_for(cfg, name, mech)
    if jaas is None or not jaas.username or jaas.password is None:
        return (f"this broker has no credentials for the inter-broker listener {name}: set username and password in "
                f"{_setting(name, 'sasl.jaas.config', mech)}")
    return None
