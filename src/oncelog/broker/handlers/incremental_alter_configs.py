"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT single config keys of a topic, of a group
(``oncelog.broker.settings.group_configs``), or (in a cluster) of a broker's dynamic configs (name: this broker's
node id) or of the cluster-wide default (name "").

On a single node (no etcd) broker settings stay static: a BROKER resource is refused with INVALID_REQUEST, as
before dynamic configs existed (set them in the TOML file and restart)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from oncelog.broker.settings.config import SETTINGS, BrokerConfig
from oncelog.broker.settings.dynamic import DynamicConfigError
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from oncelog.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)
from oncelog.storage import TOPIC_CONFIG_KEYS, InvalidConfigError

from ._configs import BrokerChange, alter_resources

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _apply(current: dict[str, str], name: str, op: int, value: str | None) -> None:
    spec = TOPIC_CONFIG_KEYS.get(name)
    if spec is None:
        raise InvalidConfigError(f"unknown topic config {name!r}", name)
    if op == SET:
        if value is None:
            raise InvalidConfigError(f"SET of {name!r} needs a value", name)
        current[name] = value
    elif op == DELETE:
        current.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        if spec.type != "LIST":
            raise InvalidConfigError(f"{name!r} is not a list config; APPEND/SUBTRACT need one", name)
        items = [s for s in current.get(name, spec.format(spec.default)).split(",") if s]
        for v in (value or "").split(","):
            if op == APPEND and v and v not in items:
                items.append(v)
            elif op == SUBTRACT and v in items:
                items.remove(v)
        current[name] = ",".join(items)
    else:
        raise InvalidConfigError(f"unknown config operation {op} for {name!r}", name)


def _apply_broker(current: dict[str, str], ops: Sequence[AlterableConfig]) -> dict[str, str]:
    """The operations on a broker resource's stored configs (Kafka's ``ConfigAdminManager
    .prepareIncrementalConfigs``: APPEND / SUBTRACT start from the setting's default when it is not set)."""
    names = [c.name for c in ops]
    if len(set(names)) != len(names):
        raise DynamicConfigError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    for c in ops:
        if c.config_operation == SET:
            if c.value is None:
                raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}")
            current[c.name] = c.value
        elif c.config_operation == DELETE:
            current.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            spec = SETTINGS.get(c.name)
            if spec is None:
                raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {c.name}")
            if spec.type != "LIST":
                raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Config value "
                                         f"{'append' if c.config_operation == APPEND else 'subtract'} is not allowed "
                                         f"for config key: {c.name}")
            default = str(getattr(BrokerConfig(), spec.attr))
            items = [s for s in current.get(c.name, default).split(",") if s]
            for v in (c.value or "").split(","):
                if c.config_operation == APPEND and v and v not in items:
                    items.append(v)
                elif c.config_operation == SUBTRACT and v in items:
                    items.remove(v)
            current[c.name] = ",".join(items)
        else:
            raise DynamicConfigError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
    return current


async def handle(broker: "BrokerContext", ctx: "RequestContext",
                 request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    outcomes = await alter_resources(broker, request.resources, request.validate_only, _topic_ops, _broker_ops,
                                     ctx, _group_ops)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=message, resource_type=res.resource_type,
                                     resource_name=res.resource_name)
        for res, (code, message) in zip(request.resources, outcomes)])


def _topic_ops(res: AlterConfigsResource, current: dict[str, str]) -> dict[str, str]:
    for c in res.configs:
        _apply(current, c.name, c.config_operation, c.value)
    return current


def _group_ops(res: AlterConfigsResource) -> list[tuple[str, int, str | None]]:
    return [(c.name, c.config_operation, c.value) for c in res.configs]


def _broker_ops(res: AlterConfigsResource) -> BrokerChange:
    ops = list(res.configs)
    return lambda current: _apply_broker(current, ops)
