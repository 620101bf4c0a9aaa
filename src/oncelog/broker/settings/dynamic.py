"""Dynamic broker configuration (Kafka's KIP-226): broker settings changed at run time, in a cluster.

AlterConfigs / IncrementalAlterConfigs on a BROKER resource store a set of settings in etcd, for one broker (the
resource name is its node id) or as the cluster-wide default (the empty name); every broker applies them when its
view shows them, without a restart. A setting's effective value on broker N is, as in Kafka's
``DynamicBrokerConfig``: N's own dynamic value, else the cluster-wide dynamic default, else the static value (the
TOML file / ``--set``), else the built-in default; DescribeConfigs names which of the four it is
(``DYNAMIC_BROKER_CONFIG``, ``DYNAMIC_DEFAULT_BROKER_CONFIG``, ``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG``).

Which settings: those Kafka changes at run time (``DynamicLogConfig``: the highest-priority broker synonym of each
topic config, ``log.retention.ms`` but not ``log.retention.hours``; ``DynamicProducerStateManagerConfig``) *and*
that oncelog applies at run time (:data:`DYNAMIC`). Every other name is refused with Kafka's INVALID_REQUEST
"Cannot update these configs dynamically: Set(...)"; the few Kafka changes at run time but oncelog reads only at
start (:data:`START_ONLY`: the listeners, the flush settings that choose the durability mode, the cleaner's
backoff) say so in the same message. A value is checked with the same
:data:`~oncelog.broker.settings.config.SETTINGS` table as at start (a bad one: INVALID_REQUEST, as Kafka's
KAFKA-13609 behaviour); an unknown name is INVALID_CONFIG (Kafka's "Unknown config name").

The pure part (validation, resolution, DescribeConfigs entries) is here; :class:`DynamicBrokerConfig` applies the
resolved values to the broker's live :class:`~oncelog.broker.settings.config.BrokerConfig` (read where they are
used: ``topic_defaults()`` for the topic defaults, ``producer_id_expiration_ms`` by the retention loop), and the
replica manager hands the new topic defaults to every log.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.protocol.errors import ErrorCode

from .config import ALIASES, DEFAULT_CONFIG, SETTINGS, STATIC_BROKER_CONFIG, BrokerConfig, ConfigError
from .security import listener_key

__all__ = ["DYNAMIC", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "START_ONLY", "BrokerEntry",
           "DynamicBrokerConfig", "DynamicConfigError", "Layers", "Synonym", "broker_entries", "default_entries",
           "effective", "synonyms", "validate"]

log = logging.getLogger("oncelog.broker.config")

#: DescribeConfigs config sources of dynamic settings (Kafka's ``DescribeConfigsResponse.ConfigSource``)
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3

#: settings changed at run time: Kafka changes them dynamically and oncelog applies them without a restart
DYNAMIC: frozenset[str] = frozenset({
    # topic defaults (Kafka's DynamicLogConfig): every log without its own override takes them at once
    "log.segment.bytes", "log.roll.ms", "log.index.interval.bytes", "log.retention.ms", "log.retention.bytes",
    "log.cleanup.policy", "message.max.bytes", "log.message.timestamp.type", "min.insync.replicas",
    # the controller's election (its own node's value, else the cluster-wide default)
    "unclean.leader.election.enable",
    # DynamicProducerStateManagerConfig: read by every retention pass
    "producer.id.expiration.ms",
    # DynamicConnectionQuota: read by the acceptor for each new connection
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate",
    # Kafka's DynamicListenerConfig SASL settings: read when a connection starts (the Kerberos and login-refresh
    # ones are known names oncelog does not use, so changing them changes nothing)
    "sasl.enabled.mechanisms", "sasl.jaas.config", "principal.builder.class", "sasl.kerberos.service.name",
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
    # TLS: a listener's context is built again when they change, for new connections
    # (broker/security/authentication.py)
    "ssl.protocol", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.client.auth",
    "ssl.endpoint.identification.algorithm", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.provider",
} | set(LISTENER_ONLY := {
    # Kafka's DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): dynamic only with a listener prefix
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates",
}))

#: settings Kafka changes at run time that oncelog reads only at start (refused, with a word saying why)
START_ONLY: frozenset[str] = frozenset({
    "listeners", "advertised.listeners",  # the socket is bound once; the registration holds the address
    "log.flush.interval.messages", "log.flush.interval.ms",  # choose the durability mode and the flush loop
    "log.cleaner.backoff.ms",  # the cleaner's loop takes it once
    "listener.security.protocol.map",  # the listeners are bound once
    "sasl.mechanism.inter.broker.protocol",  # the inter-broker connections are made with it
})

assert DYNAMIC <= set(SETTINGS) and START_ONLY <= set(SETTINGS) and not DYNAMIC & START_ONLY


class DynamicConfigError(Exception):
    """A BROKER resource's configs cannot be stored; ``code`` is the Kafka error for it."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """The whole set of dynamic configs of one BROKER resource (per broker or cluster-wide: oncelog has no
    per-broker-only setting) as it will be stored, in Kafka's string form; raises :class:`DynamicConfigError`."""
    unknown = sorted(k for k in configs if k not in SETTINGS and k not in ALIASES and listener_key(k) is None)
    if unknown:
        raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {', '.join(unknown)}")
    fixed = sorted(k for k in configs if _base(k) not in DYNAMIC)
    if fixed:
        why = [k for k in fixed if k in START_ONLY]
        raise DynamicConfigError(
            ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({', '.join(fixed)})"
            + (f" (oncelog reads {', '.join(why)} only at start: set them in the broker's TOML file)" if why else ""))
    unprefixed = sorted(k for k in configs if k in LISTENER_ONLY)
    if unprefixed:
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, "These security configs can be dynamically updated only "
                                 f"per-listener using the listener prefix: Set({', '.join(unprefixed)})")
    out = {}
    probe = BrokerConfig()
    for key, value in configs.items():
        if value is None:
            raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
        try:
            probe.set(key, value)
        except ConfigError as e:
            raise DynamicConfigError(ErrorCode.INVALID_REQUEST, str(e)) from None
        out[key] = probe.listener_settings[key] if key not in SETTINGS else _kafka_str(getattr(probe,
                                                                                             SETTINGS[key].attr))
    return out


def _base(key: str) -> str:
    """The setting a key names: itself, or the one a ``listener.name.<l>.`` key is of."""
    found = listener_key(key)
    return found[1] if found is not None else key


# ---------------------------------------------------------------------------------------------- resolution
@dataclass(frozen=True)
class Layers:
    """The dynamic configs that apply to one broker: its own, and the cluster-wide default."""

    own: Mapping[str, str]
    cluster: Mapping[str, str]

    @staticmethod
    def of(broker_configs: Mapping[int | None, Mapping[str, str]], node_id: int) -> Layers:
        return Layers(broker_configs.get(node_id, {}), broker_configs.get(None, {}))


def _parse(key: str, value: str) -> Any:
    probe = BrokerConfig()
    probe.set(key, value)
    return getattr(probe, SETTINGS[key].attr)


def effective(static: BrokerConfig, layers: Layers) -> tuple[BrokerConfig, dict[str, int]]:
    """A copy of ``static`` with the dynamic values applied, and the source of every setting. A stored value that
    does not parse (written by hand, or by a newer version) is skipped with a warning."""
    out = dataclasses.replace(static, given=set(static.given))
    sources = {key: STATIC_BROKER_CONFIG if key in static.given else DEFAULT_CONFIG for key in SETTINGS}
    for key in sorted(DYNAMIC):
        for layer, source in ((layers.own, DYNAMIC_BROKER_CONFIG), (layers.cluster, DYNAMIC_DEFAULT_BROKER_CONFIG)):
            if key not in layer:
                continue
            try:
                value = _parse(key, layer[key])
            except ConfigError as e:
                log.warning("dynamic broker config %s=%r ignored: %s", key, layer[key], e)
                continue
            setattr(out, SETTINGS[key].attr, value)
            sources[key] = source
            break
    listener_settings = dict(static.listener_settings)  # listener.name.<l>.<setting>: the cluster's, then own
    for layer, source in ((layers.cluster, DYNAMIC_DEFAULT_BROKER_CONFIG), (layers.own, DYNAMIC_BROKER_CONFIG)):
        for key, value in layer.items():
            if listener_key(key) is not None and _base(key) in DYNAMIC:
                listener_settings[key] = value
                sources[key] = source
    out.listener_settings = listener_settings
    return out, sources


# ---------------------------------------------------------------------------------------------- DescribeConfigs
@dataclass(frozen=True)
class Synonym:
    name: str
    value: str
    source: int


@dataclass(frozen=True)
class BrokerEntry:
    """One DescribeConfigs entry of a BROKER resource."""

    key: str
    value: str
    source: int
    type: str
    doc: str
    read_only: bool
    synonyms: tuple[Synonym, ...]


def synonyms(key: str, static: BrokerConfig, layers: Layers) -> tuple[Synonym, ...]:
    """Where ``key``'s value may come from, highest precedence first (Kafka's ``ConfigHelper.configSynonyms``):
    this broker's dynamic value, the cluster-wide one, the static one, the default."""
    out = []
    if key in layers.own:
        out.append(Synonym(key, layers.own[key], DYNAMIC_BROKER_CONFIG))
    if key in layers.cluster:
        out.append(Synonym(key, layers.cluster[key], DYNAMIC_DEFAULT_BROKER_CONFIG))
    attr = SETTINGS[key].attr
    if key in static.given:
        out.append(Synonym(key, _kafka_str(getattr(static, attr)), STATIC_BROKER_CONFIG))
    out.append(Synonym(key, _kafka_str(getattr(BrokerConfig(), attr)), DEFAULT_CONFIG))
    return tuple(out)


def broker_entries(static: BrokerConfig, layers: Layers) -> list[BrokerEntry]:
    """Every setting of this broker with its effective value and source (a Kafka synonym in other units, such as
    ``log.retention.hours``, follows its setting's value and source, in its own unit)."""
    config, sources = effective(static, layers)
    by_key = {e.key: e for e in config.entries()}
    out = []
    for key in sorted(config.listener_settings):
        s = SETTINGS[_base(key)]
        out.append(BrokerEntry(key, config.listener_settings[key], sources.get(key, STATIC_BROKER_CONFIG), s.type,
                               s.doc, _base(key) not in DYNAMIC, ()))
    for key, s in SETTINGS.items():
        value = by_key[key].value
        syns = synonyms(key, static, layers)
        out.append(BrokerEntry(key, value, sources[key], s.type, s.doc, key not in DYNAMIC, syns))
        for a in ALIASES.values():
            if a.kafka and a.target == key:
                alias = by_key[a.name]
                out.append(BrokerEntry(a.name, alias.value, sources[key], s.type, alias.doc, True,
                                       (Synonym(a.name, alias.value, sources[key]),)))
    return out


def default_entries(cluster: Mapping[str, str]) -> list[BrokerEntry]:
    """DescribeConfigs of the cluster-wide default (the empty broker name): the dynamic defaults set, as Kafka
    answers it (``currentDynamicDefaultConfigs``)."""
    out = []
    for key in sorted(cluster):
        s = SETTINGS.get(key)
        if s is None:
            continue
        syn = Synonym(key, cluster[key], DYNAMIC_DEFAULT_BROKER_CONFIG)
        out.append(BrokerEntry(key, cluster[key], DYNAMIC_DEFAULT_BROKER_CONFIG, s.type, s.doc, key not in DYNAMIC,
                               (syn,)))
    return out


# ---------------------------------------------------------------------------------------------- applying
class DynamicBrokerConfig:
    """The broker's settings as the cluster's dynamic configs change them.

    ``config`` is the broker's live :class:`BrokerConfig`, whose dynamic settings :meth:`update` changes in place;
    ``static`` is a copy of it as it was given at start (the fallback when a dynamic value is removed)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.static = dataclasses.replace(config, given=set(config.given))
        self.layers = Layers({}, {})

    def layers_of(self, broker_configs: Mapping[int | None, Mapping[str, str]]) -> Layers:
        return Layers.of(broker_configs, self.config.node_id)

    def update(self, broker_configs: Mapping[int | None, Mapping[str, str]]) -> list[str]:
        """Apply the view's dynamic configs; the settings whose value changed."""
        self.layers = self.layers_of(broker_configs)
        resolved, sources = effective(self.static, self.layers)
        changed = []
        for key in sorted(DYNAMIC):
            attr = SETTINGS[key].attr
            old, new = getattr(self.config, attr), getattr(resolved, attr)
            if old != new:
                setattr(self.config, attr, new)
                changed.append(key)
                log.info("broker setting %s: %s -> %s (%s)", key, _shown(key, old), _shown(key, new),
                         _SOURCE_NAMES[sources[key]])
        if resolved.listener_settings != self.config.listener_settings:
            old_ls, self.config.listener_settings = self.config.listener_settings, resolved.listener_settings
            for key in sorted(set(old_ls) | set(resolved.listener_settings)):
                if old_ls.get(key) != resolved.listener_settings.get(key):
                    changed.append(key)
                    log.info("broker setting %s: %s -> %s", key, _shown(key, old_ls.get(key)),
                             _shown(key, resolved.listener_settings.get(key)))
        return changed

    def describe(self, broker_configs: Mapping[int | None, Mapping[str, str]]) -> list[BrokerEntry]:
        return broker_entries(self.static, self.layers_of(broker_configs))

    def topic_defaults(self, broker_configs: Mapping[int | None, Mapping[str, str]]
                       ) -> tuple[dict[str, str], dict[str, int], Layers]:
        """The topic config defaults (``retention.ms`` from ``log.retention.ms`` ...) as the view has them, the source
        of every broker setting, and the layers."""
        layers = self.layers_of(broker_configs)
        config, sources = effective(self.static, layers)
        return config.topic_defaults(), sources, layers


_SOURCE_NAMES = {DYNAMIC_BROKER_CONFIG: "this broker's dynamic config",
                 DYNAMIC_DEFAULT_BROKER_CONFIG: "the cluster-wide dynamic default",
                 STATIC_BROKER_CONFIG: "the static setting", DEFAULT_CONFIG: "the default"}


def _shown(key: str, v: Any) -> str:
    """A value for the log: a password's is hidden."""
    return "[hidden]" if SETTINGS[_base(key)].type == "PASSWORD" and v else _kafka_str(v)


def _kafka_str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
