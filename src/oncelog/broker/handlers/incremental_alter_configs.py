"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT single config keys of a topic, or (in a
cluster) of a broker's dynamic configs (name: this broker's node id) or of the cluster-wide default (name "").

On a single node (no etcd) broker settings stay static: a BROKER resource is refused with INVALID_REQUEST, as
before dynamic configs existed (set them in the TOML file and restart)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from oncelog.broker.config import SETTINGS, BrokerConfig
from oncelog.broker.dynamic_config import DynamicConfigError
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from oncelog.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)
from oncelog.storage import TOPIC_CONFIG_KEYS, InvalidConfigError

from ._common import error_for
from ._configs import (
    BROKER,
    TOPIC,
    alter_broker_configs,
    alter_topic_configs,
    apply_topic_overrides,
    check_resource,
    topic_overrides,
)

if TYPE_CHECKING:
    from oncelog.broker.cluster_node import ClusterNode
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

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


def _apply_broker(current: dict[str, str], ops: Sequence[Any]) -> dict[str, str]:
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


def handle(broker: "BrokerContext", ctx: "RequestContext", request: IncrementalAlterConfigsRequest
           ) -> IncrementalAlterConfigsResponse | Awaitable[IncrementalAlterConfigsResponse]:
    if broker.cluster is not None and any(r.resource_type in (BROKER, TOPIC) for r in request.resources):
        return _with_brokers(broker, broker.cluster, request)
    return _respond(broker, request, {})


async def _with_brokers(broker: "BrokerContext", node: "ClusterNode",
                        request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    done: dict[int, tuple[ErrorCode, str | None]] = {}
    for i, res in enumerate(request.resources):
        if res.resource_type not in (BROKER, TOPIC) or check_resource(broker, res.resource_type,
                                                                      res.resource_name)[0]:
            continue
        if res.resource_type == TOPIC:  # in a cluster: written to etcd, applied by every replica from the view
            overrides = topic_overrides(broker, res.resource_name)
            try:
                for c in res.configs:
                    _apply(overrides, c.name, c.config_operation, c.value)
            except Exception as e:  # noqa: BLE001 - answered with its error code
                done[i] = error_for(e)
                continue
            done[i] = await alter_topic_configs(broker, node, res.resource_name, overrides, request.validate_only)
            continue
        ops = list(res.configs)

        def change(current: dict[str, str], ops: list[Any] = ops) -> dict[str, str]:
            return _apply_broker(current, ops)

        done[i] = await alter_broker_configs(node, res.resource_name, change, request.validate_only)
    return _respond(broker, request, done)


def _respond(broker: "BrokerContext", request: IncrementalAlterConfigsRequest,
             done: dict[int, tuple[ErrorCode, str | None]]) -> IncrementalAlterConfigsResponse:
    responses = []
    for i, res in enumerate(request.resources):
        code, message = check_resource(broker, res.resource_type, res.resource_name)
        if not code and i in done:
            code, message = done[i]
        elif not code and res.resource_type != TOPIC:
            code, message = ErrorCode.INVALID_REQUEST, "broker settings are static on a single node: set them in " \
                                                       "the TOML file"
        elif not code:
            view = broker.topics.get(res.resource_name)
            assert view is not None
            overrides = dict(view.configs)
            try:
                for c in res.configs:
                    _apply(overrides, c.name, c.config_operation, c.value)
                apply_topic_overrides(broker, res.resource_name, overrides, request.validate_only)
            except Exception as e:
                code, message = error_for(e)
        responses.append(AlterConfigsResourceResponse(error_code=code, error_message=message,
                                                      resource_type=res.resource_type,
                                                      resource_name=res.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)
