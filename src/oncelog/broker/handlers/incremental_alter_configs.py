"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT single topic config keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest
from oncelog.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)
from oncelog.storage import TOPIC_CONFIG_KEYS, InvalidConfigError

from ._common import error_for
from ._configs import TOPIC, apply_topic_overrides, check_resource

if TYPE_CHECKING:
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


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    responses = []
    for res in request.resources:
        code, message = check_resource(broker, res.resource_type, res.resource_name)
        if not code and res.resource_type != TOPIC:
            code, message = ErrorCode.INVALID_REQUEST, "broker settings are static: set them in the TOML file"
        if not code:
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
