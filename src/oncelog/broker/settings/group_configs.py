"""Dynamic group configs (Kafka 4.0's GroupConfig, KIP-848): ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms`` of one consumer group, set with IncrementalAlterConfigs on a GROUP resource
(ConfigResource type 32) and shown by DescribeConfigs; a group without its own value takes the broker's
``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``.

A group's configs are one record of the broker's record store (:class:`~oncelog.security.store.SecurityStore`, kind
``group_configs``, key the group id, value a JSON object): a file of the data folder on a single node, etcd in a
cluster, so every broker sees the same configs and any of them answers DescribeConfigs, as Kafka keeps them in
its metadata log. A value must lie within the broker's ``group.consumer.min/max.*`` bounds and the heartbeat
interval below the session timeout (Kafka's GroupConfig.validate: INVALID_CONFIG otherwise); a group that does not
exist may have configs (they apply once it does). The coordinator reads them through :class:`GroupOverrides`,
which keeps the parsed configs until the records change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oncelog.protocol.errors import ErrorCode
from oncelog.security.store import GROUP_CONFIGS, SecurityStore, SecurityStoreError

from .config import BrokerConfig
from .dynamic import BrokerEntry, DynamicConfigError

__all__ = ["GROUP", "GROUP_CONFIG_SOURCE", "KEYS", "GroupOverrides", "alter_group_configs", "group_entries"]

GROUP = 32  # ConfigResource type
GROUP_CONFIG_SOURCE = 8  # DescribeConfigs' ConfigSource GROUP_CONFIG
_STATIC, _DEFAULT = 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True)
class _Key:
    setting: str  # the broker setting giving the default
    low: str  # the broker settings bounding it
    high: str
    doc: str


KEYS: dict[str, _Key] = {
    "consumer.session.timeout.ms": _Key(
        "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms", "A member of this consumer group that does not heartbeat for this "
        "long is removed."),
    "consumer.heartbeat.interval.ms": _Key(
        "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms", "How often the members of this consumer group heartbeat."),
}


def _broker_value(cfg: BrokerConfig, setting: str) -> int:
    return int(getattr(cfg, setting.replace(".", "_")))


def _stored(store: SecurityStore | None, group: str) -> dict[str, str]:
    if store is None:
        return {}
    raw = store.records(GROUP_CONFIGS).get(group)
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        return {str(k): str(v) for k, v in doc.items() if k in KEYS}
    except (ValueError, AttributeError):
        return {}


def group_entries(store: SecurityStore | None, cfg: BrokerConfig, group: str) -> list[BrokerEntry]:
    """DescribeConfigs of a GROUP resource: every group config, the group's own value or the broker's."""
    own = _stored(store, group)
    out = []
    for name, key in KEYS.items():
        if name in own:
            value, source = own[name], GROUP_CONFIG_SOURCE
        else:
            value = str(_broker_value(cfg, key.setting))
            source = _STATIC if key.setting in cfg.given else _DEFAULT
        out.append(BrokerEntry(name, value, source, "INT", key.doc, False, ()))
    return out


def _validate(cfg: BrokerConfig, configs: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, int] = {}
    for name, raw in configs.items():
        key = KEYS.get(name)
        if key is None:
            raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        try:
            value = int(raw)
        except ValueError:
            raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: "
                                     "Not a number of type INT") from None
        low, high = _broker_value(cfg, key.low), _broker_value(cfg, key.high)
        if not low <= value <= high:
            raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"{name} must be between {low} ({key.low}) and "
                                     f"{high} ({key.high}), not {value}")
        values[name] = value
    session = values.get("consumer.session.timeout.ms", cfg.group_consumer_session_timeout_ms)
    heartbeat = values.get("consumer.heartbeat.interval.ms", cfg.group_consumer_heartbeat_interval_ms)
    if heartbeat >= session:
        raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"consumer.heartbeat.interval.ms ({heartbeat}) must be "
                                 f"less than consumer.session.timeout.ms ({session})")
    return {name: str(v) for name, v in values.items()}


async def alter_group_configs(store: SecurityStore | None, cfg: BrokerConfig, group: str,
                              ops: Sequence[tuple[str, int, str | None]],
                              validate_only: bool) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs on a GROUP resource: ``ops`` are (name, SET/DELETE, value); the group's whole new
    set is validated and (unless ``validate_only``) stored."""
    if store is None:
        return ErrorCode.INVALID_REQUEST, "this broker has no record store for group configs"
    if not group:
        return ErrorCode.INVALID_REQUEST, "a group config resource needs a group id"
    current = _stored(store, group)
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
    try:
        for name, op, value in ops:
            if op == SET:
                if value is None:
                    return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}"
                current[name] = value
            elif op == DELETE:
                if name not in KEYS:
                    raise DynamicConfigError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
                current.pop(name, None)
            elif op in (APPEND, SUBTRACT):
                what = "append" if op == APPEND else "subtract"
                raise DynamicConfigError(ErrorCode.INVALID_CONFIG,
                                         f"Config value {what} is not allowed for config key: {name}")
            else:
                return ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}"
        new = _validate(cfg, current)
    except DynamicConfigError as e:
        return e.code, str(e)
    if validate_only:
        return ErrorCode.NONE, None
    try:
        if new:
            await store.write(GROUP_CONFIGS, {group: json.dumps(new, sort_keys=True).encode()})
        else:
            await store.write(GROUP_CONFIGS, {}, [group])
    except SecurityStoreError as e:
        return ErrorCode.REQUEST_TIMED_OUT, f"the group configs were not stored: {e}; retry"
    return ErrorCode.NONE, None


class GroupOverrides:
    """What the group coordinator reads: a group's own configs (parsed once per change of the records)."""

    def __init__(self, store: SecurityStore | None) -> None:
        self._store = store
        self._cache: dict[str, dict[str, str]] = {}
        if store is not None:
            store.add_listener(self._changed)

    def _changed(self, kind: str) -> None:
        if kind == GROUP_CONFIGS:
            self._cache.clear()

    def __call__(self, group: str) -> dict[str, str]:
        found = self._cache.get(group)
        if found is None:
            found = self._cache[group] = _stored(self._store, group)
        return found
