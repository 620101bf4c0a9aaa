"""Topic and broker config resources shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.broker.config import TOPIC_DEFAULTS
from oncelog.protocol.errors import ErrorCode
from oncelog.storage import TOPIC_CONFIG_KEYS, LogConfig

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext

__all__ = ["TOPIC", "BROKER", "BROKER_LOGGER", "CONFIG_TYPE", "Source", "topic_entries", "apply_topic_overrides",
           "check_resource"]

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
CONFIG_TYPE = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}


class Source:
    DYNAMIC_TOPIC = 1
    STATIC_BROKER = 4
    DEFAULT = 5


def topic_entries(broker: "BrokerContext", name: str) -> list[tuple[str, str, int, str, str]]:
    """(key, value, source, kafka type, doc) for every topic config key."""
    view = broker.topics.get(name)
    assert view is not None, f"topic {name} vanished"
    overrides = view.configs
    effective = LogConfig.from_kafka(overrides, broker.log_defaults).to_kafka()
    out = []
    given = broker.config.given
    for key, spec in TOPIC_CONFIG_KEYS.items():
        if key in overrides:
            source = Source.DYNAMIC_TOPIC
        elif TOPIC_DEFAULTS.get(key) in given:
            source = Source.STATIC_BROKER
        else:
            source = Source.DEFAULT
        out.append((key, effective[key], source, spec.type, spec.doc))
    return out


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
        if broker.topics.get(name) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name} on this broker"
        return ErrorCode.NONE, None
    if resource_type == BROKER:
        if name not in ("", str(broker.config.node_id)):
            return ErrorCode.INVALID_REQUEST, f"this is broker {broker.config.node_id}, not {name}"
        return ErrorCode.NONE, None
    return ErrorCode.INVALID_REQUEST, f"config resource type {resource_type} is not supported"


