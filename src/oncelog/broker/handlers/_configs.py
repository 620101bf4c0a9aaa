"""Topic and broker config resources shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

In a cluster, BROKER resources are the dynamic broker configs in etcd (:mod:`oncelog.broker.settings.dynamic`): a
change is validated here and written through the metadata store; every broker applies it when its view shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from oncelog.broker.settings.config import TOPIC_DEFAULTS
from oncelog.broker.settings.dynamic import DynamicConfigError, Synonym, synonyms, validate
from oncelog.cluster.store import MetadataUnavailableError
from oncelog.protocol.errors import ErrorCode
from oncelog.storage import TOPIC_CONFIG_KEYS, LogConfig, UnknownTopicError
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import CLUSTER_NAME, allowed
from ..settings.group_configs import GROUP, alter_group_configs
from ._common import error_for

if TYPE_CHECKING:
    from oncelog.broker.request import RequestContext
    from oncelog.broker.cluster.node import ClusterNode
    from oncelog.broker.context import BrokerContext

__all__ = ["TOPIC", "BROKER", "BROKER_LOGGER", "GROUP", "CONFIG_TYPE", "Source", "topic_entries", "apply_topic_overrides",
           "alter_broker_configs", "check_resource",
           "alter_resources"]

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
CONFIG_TYPE = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}


class Source:
    DYNAMIC_TOPIC = 1
    DYNAMIC_BROKER = 2
    DYNAMIC_DEFAULT_BROKER = 3
    STATIC_BROKER = 4
    DEFAULT = 5


def topic_entries(broker: "BrokerContext", name: str
                  ) -> list[tuple[str, str, int, str, str, tuple[Synonym, ...]]]:
    """(key, value, source, kafka type, doc, synonyms) for every topic config key. A key without an override takes
    its broker setting's value and source (in a cluster: with the dynamic broker configs of the view); its synonyms
    are the override, then the broker setting's (Kafka's ``ConfigHelper.createTopicConfigEntry``)."""
    overrides = topic_overrides(broker, name)
    given = broker.config.given
    if broker.cluster is not None:
        dynamic = broker.cluster.dynamic
        defaults, sources, layers = dynamic.topic_defaults(broker.cluster.view.broker_configs)
        base = LogConfig.from_kafka(defaults)
    else:
        base, sources = broker.log_defaults, {}
    effective = LogConfig.from_kafka(overrides, base).to_kafka()
    out = []
    for key, spec in TOPIC_CONFIG_KEYS.items():
        setting = TOPIC_DEFAULTS.get(key)
        syns: tuple[Synonym, ...] = ()
        if setting is not None and broker.cluster is not None:
            syns = synonyms(setting, broker.cluster.dynamic.static, layers)
        if key in overrides:
            source = Source.DYNAMIC_TOPIC
            syns = (Synonym(key, effective[key], source), *syns)
        elif setting is not None and setting in sources:
            source = sources[setting]
        elif setting in given:
            source = Source.STATIC_BROKER
        else:
            source = Source.DEFAULT
        out.append((key, effective[key], source, spec.type, spec.doc, syns))
    return out


def topic_overrides(broker: "BrokerContext", name: str) -> dict[str, str]:
    """The config overrides of a topic :func:`check_resource` found (in a cluster: the view's)."""
    overrides = broker.topic_overrides(name)
    if overrides is None:
        raise UnknownTopicError(f"topic {name} no longer exists")
    return overrides


async def alter_topic_configs(broker: "BrokerContext", node: "ClusterNode", name: str, overrides: dict[str, str],
                              validate_only: bool) -> tuple[ErrorCode, str | None]:
    """In a cluster: validate a topic's whole new set of overrides and (unless ``validate_only``) write it to etcd
    (compare-and-swap on the topic key); every replica applies it from the view, as KRaft brokers do."""
    try:
        normalised = LogConfig.validate_overrides(overrides)
        LogConfig.from_kafka(normalised, broker.log_defaults)
    except Exception as e:  # noqa: BLE001 - answered with its error code
        code, message = error_for(e)
        return code, message
    if validate_only:
        return ErrorCode.NONE, None
    try:
        if not await node.store.set_topic_configs(name, normalised):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} no longer exists"
    except MetadataUnavailableError as e:
        return ErrorCode.REQUEST_TIMED_OUT, f"the cluster metadata (etcd) did not take the configs: {e}; retry"
    return ErrorCode.NONE, None


def apply_topic_overrides(broker: "BrokerContext", name: str, overrides: dict[str, str],
                          validate_only: bool) -> None:
    """Validate and (unless validate_only) store the full set of overrides of a topic."""
    normalised = LogConfig.validate_overrides(overrides)
    config = LogConfig.from_kafka(normalised, broker.log_defaults)
    if validate_only:
        return
    broker.topics.set_configs(name, normalised)
    view = broker.topics.get(name)
    assert view is not None
    for p in view.partitions:
        p.log.update_config(config)


def check_resource(broker: "BrokerContext", resource_type: int, name: str) -> tuple[int, str | None]:
    """Error for a resource a client names, or (NONE, None)."""
    if resource_type == TOPIC:
        if broker.topic_overrides(name) is None:
            where = "in the cluster" if broker.cluster is not None else "on this broker"
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name} {where}"
        return ErrorCode.NONE, None
    if resource_type == BROKER:
        if name not in ("", str(broker.config.node_id)):
            return ErrorCode.INVALID_REQUEST, f"this is broker {broker.config.node_id}, not {name}"
        return ErrorCode.NONE, None
    if resource_type == GROUP:  # any group id, existing or not (Kafka 4.0's group configs)
        return (ErrorCode.NONE, None) if name else (ErrorCode.INVALID_REQUEST, "a group config needs a group id")
    return ErrorCode.INVALID_REQUEST, f"config resource type {resource_type} is not supported"


async def alter_broker_configs(node: "ClusterNode", name: str, change: Callable[[dict[str, str]], dict[str, str]],
                               validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Change the dynamic configs of broker ``name`` ("": the cluster-wide default): ``change`` turns the stored set
    into the new whole set, which is validated and (unless ``validate_only``) written to etcd. The set is read from
    this broker's view, which holds its own writes; two brokers changing the same resource at once: the last write
    wins (Kafka's controller serialises them)."""
    node_id = None if name == "" else int(name)
    try:
        new = validate(change(dict(node.view.broker_configs.get(node_id, {}))))
    except DynamicConfigError as e:
        return e.code, str(e)
    if validate_only:
        return ErrorCode.NONE, None
    try:
        await node.store.set_broker_configs(node_id, new)
    except MetadataUnavailableError as e:
        return ErrorCode.REQUEST_TIMED_OUT, f"the cluster metadata (etcd) did not take the configs: {e}; retry"
    return ErrorCode.NONE, None


class ConfigResource(Protocol):
    """A resource of AlterConfigs or IncrementalAlterConfigs."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


R = TypeVar("R", bound=ConfigResource)
BrokerChange = Callable[[dict[str, str]], dict[str, str]]


#: a config resource type -> the ACL resource it is authorized on (Kafka's ``ConfigHelper``)
_ACL_RESOURCE = {TOPIC: ResourceType.TOPIC, BROKER: ResourceType.CLUSTER, BROKER_LOGGER: ResourceType.CLUSTER,
                 16: ResourceType.CLUSTER, GROUP: ResourceType.GROUP}  # 16: CLIENT_METRICS
_REFUSED = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED}


def config_refusal(broker: "BrokerContext", ctx: "RequestContext", op: AclOperation, resource_type: int,
                   name: str) -> tuple[int, str | None] | None:
    """The error when the principal may not ``op`` (DESCRIBE_CONFIGS, ALTER_CONFIGS) the config resource."""
    acl_type = _ACL_RESOURCE.get(resource_type)
    if acl_type is None or allowed(broker, ctx, op, acl_type, name if acl_type != ResourceType.CLUSTER
                                   else CLUSTER_NAME):
        return None
    return _REFUSED[acl_type], f"{ctx.principal} may not {op.name} {acl_type.name} {name}"


async def alter_resources(broker: "BrokerContext", resources: Sequence[R], validate_only: bool,
                          new_topic_set: Callable[[R, dict[str, str]], dict[str, str]],
                          broker_change: Callable[[R], BrokerChange],
                          ctx: "RequestContext | None" = None,
                          group_ops: Callable[[R], list[tuple[str, int, str | None]]] | None = None,
                          ) -> list[tuple[int, str | None]]:
    """Both AlterConfigs APIs: (error code, message) per resource, in order. A TOPIC's new whole set of overrides is
    ``new_topic_set(resource, current overrides)``: in a cluster written to etcd (every replica applies it from the
    view), on a single node applied here. A BROKER resource in a cluster: ``broker_change(resource)`` turns its
    stored dynamic configs into the new set; on a single node broker settings are static and it is refused. Either
    callable raises to refuse the resource (the exception's Kafka error code answers)."""
    node = broker.cluster
    out: list[tuple[int, str | None]] = []
    for res in resources:
        name = res.resource_name
        if res.resource_type == GROUP and group_ops is None:  # AlterConfigs (33): Kafka's group configs are
            out.append((ErrorCode.INVALID_REQUEST, "group configs are changed with IncrementalAlterConfigs"))
            continue
        refused = config_refusal(broker, ctx, AclOperation.ALTER_CONFIGS, res.resource_type, name) \
            if ctx is not None else None
        code, message = refused or check_resource(broker, res.resource_type, name)
        try:
            if code:
                pass
            elif res.resource_type == GROUP:
                assert group_ops is not None
                code, message = await alter_group_configs(broker.security_store, broker.config, name,
                                                          group_ops(res), validate_only)
            elif res.resource_type == TOPIC:
                new = new_topic_set(res, topic_overrides(broker, name))
                if node is not None:
                    code, message = await alter_topic_configs(broker, node, name, new, validate_only)
                else:
                    apply_topic_overrides(broker, name, new, validate_only)
            elif node is None:
                code, message = ErrorCode.INVALID_REQUEST, ("broker settings are static on a single node: set them "
                                                            "in the TOML file")
            else:
                code, message = await alter_broker_configs(node, name, broker_change(res), validate_only)
        except DynamicConfigError as e:
            code, message = e.code, str(e)
        except Exception as e:  # noqa: BLE001 - answered with its error code
            code, message = error_for(e)
        out.append((code, message))
    return out
