"""Options of the ``oncelog`` data source, with spark-sql-kafka's names, parsed once and validated up front.

Spark hands a data source its options as a case-insensitive mapping (keys lower-cased), so every lookup here
goes through :func:`_get`. ``kafka.*`` options are passed to the native client with the prefix removed
(``kafka.bootstrap.servers`` -> ``bootstrap.servers``); :func:`client_conf` gives all of them and
:func:`role_conf` the ones a consumer, producer or admin client accepts.

Offsets in options, in Spark's streaming offsets and in input partitions are the same JSON shape as
spark-sql-kafka: ``{"topic": {"0": 23, "1": -2}}`` with -2 = earliest and -1 = latest.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from oncelog.client import ConfigError
from oncelog.client.config import parse_admin_config, parse_consumer_config, parse_producer_config
from oncelog.client.security import SECURITY_KEYS

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "OncelogOptionError",
    "SourceOptions",
    "client_conf",
    "get_option",
    "parse_offsets_json",
    "parse_source_options",
    "role_conf",
]

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
#: "earliest", "latest" or explicit offsets per partition (values >= 0, EARLIEST or LATEST)
OffsetSpec = Literal["earliest", "latest"] | dict[TopicPartition, int]
Role = Literal["consumer", "producer", "admin"]

#: spark-sql-kafka refuses these because the source manages them itself; so do we
_FORBIDDEN_KAFKA = {
    "group.id": "the source assigns partitions itself and keeps its offsets in Spark's checkpoint",
    "auto.offset.reset": "use the startingOffsets option",
    "enable.auto.commit": "offsets live in Spark's checkpoint, never in a consumer group",
    "key.deserializer": "key and value are always binary columns; cast or parse them in Spark",
    "value.deserializer": "key and value are always binary columns; cast or parse them in Spark",
    "key.serializer": "the sink writes the binary (or string) key column as is",
    "value.serializer": "the sink writes the binary (or string) value column as is",
}

class OncelogOptionError(ValueError):
    """An option of the oncelog data source is missing or invalid (raised before touching the broker)."""


def get_option(options: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup (Spark lower-cases option keys; plain dicts in tests may not)."""
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return None if v is None else str(v)
    return None


def client_conf(options: Mapping[str, str]) -> dict[str, str]:
    """Every ``kafka.*`` option with the prefix removed, e.g. ``{"bootstrap.servers": "127.0.0.1:9092"}``.

    Raises :class:`OncelogOptionError` for keys the source manages itself (group.id, auto.offset.reset, ...).
    """
    out: dict[str, str] = {}
    for k, v in options.items():
        low = k.lower()
        if not low.startswith("kafka."):
            continue
        key = low[len("kafka."):]
        if key in _FORBIDDEN_KAFKA:
            raise OncelogOptionError(f"option {k!r} is not supported: {_FORBIDDEN_KAFKA[key]}")
        out[key] = str(v)
    if "bootstrap.servers" not in out:
        raise OncelogOptionError(
            "option 'kafka.bootstrap.servers' is required, e.g. .option('kafka.bootstrap.servers', "
            "'127.0.0.1:9092')")
    return out


_PARSERS = {"consumer": parse_consumer_config, "producer": parse_producer_config, "admin": parse_admin_config}


def _accepted_by(role: str, key: str, value: str) -> bool:
    """Whether the native client of ``role`` knows ``key``; a known key with a bad value raises."""
    if key in SECURITY_KEYS:  # TLS and SASL (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*): checked together
        return True  # when the client is made, since one alone may be incomplete
    try:
        _PARSERS[role]({"bootstrap.servers": "127.0.0.1:9092", key: value})
    except ConfigError as e:
        text = str(e)  # "unknown ... key" (a ConfigError's text may carry its error name first: "_INVALID_ARG: ")
        if text.startswith("unknown ") or ": unknown " in text:
            return False
        raise OncelogOptionError(f"option 'kafka.{key}': {e}") from None
    return True


def role_conf(options: Mapping[str, str], role: Role, defaults: Mapping[str, Any] | None = None
              ) -> dict[str, Any]:
    """Client configuration for one role: ``defaults``, then every ``kafka.*`` option that role accepts.

    A ``kafka.*`` option that no client role knows raises :class:`OncelogOptionError` with the nearest name.
    """
    conf: dict[str, Any] = dict(defaults or {})
    for key, value in client_conf(options).items():
        if _accepted_by(role, key, value):
            conf[key] = value
        elif not any(_accepted_by(r, key, value) for r in _PARSERS if r != role):
            known = ["bootstrap.servers", "client.id", "isolation.level", "request.timeout.ms",
                     "fetch.max.bytes", "max.partition.fetch.bytes", "linger.ms", "batch.size",
                     "compression.type", "acks", "transaction.timeout.ms"]
            near = difflib.get_close_matches(key, known, 1)
            hint = f"; did you mean 'kafka.{near[0]}'?" if near else ""
            raise OncelogOptionError(f"option 'kafka.{key}' is not a configuration key of the oncelog "
                                     f"client{hint}")
    return conf


def parse_offsets_json(text: str, what: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23, "1": -2}}`` -> ``{("topic", 0): 23, ("topic", 1): -2}``."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise OncelogOptionError(f"option {what!r} is neither 'earliest', 'latest' nor JSON like "
                                 f"{{\"topic\": {{\"0\": 23}}}}: {e}") from None
    if not isinstance(raw, dict):
        raise OncelogOptionError(f"option {what!r} must be a JSON object like {{\"topic\": {{\"0\": 23}}}}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OncelogOptionError(f"option {what!r}: topic {topic!r} needs an object of partition -> offset")
        for p, off in parts.items():
            try:
                part, offset = int(p), int(off)
            except (TypeError, ValueError):
                raise OncelogOptionError(f"option {what!r}: {topic!r} partition {p!r} offset {off!r} "
                                         "must be integers") from None
            if offset < EARLIEST or part < 0:
                raise OncelogOptionError(f"option {what!r}: {topic}[{part}] offset {offset} is invalid "
                                         "(use >= 0, -2 for earliest or -1 for latest)")
            out[(str(topic), part)] = offset
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The spark-sql-kafka offset JSON shape as a dict (what Spark checkpoints for a streaming source)."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def offsets_from_json(obj: Mapping[str, Mapping[str, Any]]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def _parse_spec(options: Mapping[str, str], name: str, default: str) -> OffsetSpec:
    text = (get_option(options, name) or default).strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    return parse_offsets_json(text, name)


def _bool_opt(options: Mapping[str, str], name: str, default: bool) -> bool:
    v = get_option(options, name)
    if v is None:
        return default
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise OncelogOptionError(f"option {name!r} must be true or false, got {v!r}")
    return s == "true"


def _int_opt(options: Mapping[str, str], name: str, lo: int = 1) -> int | None:
    v = get_option(options, name)
    if v is None:
        return None
    try:
        n = int(v)
    except ValueError:
        raise OncelogOptionError(f"option {name!r} must be an integer, got {v!r}") from None
    if n < lo:
        raise OncelogOptionError(f"option {name!r} must be at least {lo}, got {n}")
    return n


@dataclass(frozen=True)
class SourceOptions:
    """The reading side's options, validated. Exactly one of subscribe / subscribe_pattern / assign is set."""

    consumer_conf: dict[str, Any]
    admin_conf: dict[str, Any]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    include_headers: bool
    fail_on_data_loss: bool
    max_records_per_partition: int
    min_partitions: int | None

    @property
    def read_committed(self) -> bool:
        return str(self.consumer_conf.get("isolation.level", "read_committed")) == "read_committed"

    def matches(self, topic: str) -> bool:
        """Whether a topic is read under subscribe / subscribePattern (assign lists partitions instead)."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return self.assign is not None and any(t == topic for t, _ in self.assign)


#: default split size of one input partition (records); spark-sql-kafka's maxRecordsPerPartition
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validate the options of a batch (``streaming=False``) or streaming read."""
    consumer_conf = role_conf(options, "consumer", {"isolation.level": "read_committed"})
    consumer_conf.setdefault("check.crcs", "true")
    admin_conf = role_conf(options, "admin")
    ways = [n for n in ("subscribe", "subscribePattern", "assign") if get_option(options, n)]
    if len(ways) != 1:
        raise OncelogOptionError(
            "set exactly one of the options 'subscribe' (comma-separated topics), 'subscribePattern' (a regex) "
            f"or 'assign' (JSON like {{\"topic\": [0, 1]}}); got {', '.join(ways) if ways else 'none'}")
    subscribe = pattern = None
    assign: tuple[TopicPartition, ...] | None = None
    if ways[0] == "subscribe":
        subscribe = tuple(t.strip() for t in (get_option(options, "subscribe") or "").split(",") if t.strip())
        if not subscribe:
            raise OncelogOptionError("option 'subscribe' lists no topic")
    elif ways[0] == "subscribePattern":
        pattern = get_option(options, "subscribePattern") or ""
        try:
            re.compile(pattern)
        except re.error as e:
            raise OncelogOptionError(f"option 'subscribePattern' {pattern!r} is not a valid regex: {e}") from None
    else:
        text = get_option(options, "assign") or ""
        try:
            raw = json.loads(text)
            assign = tuple(sorted({(str(t), int(p)) for t, ps in raw.items() for p in ps}))
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
            raise OncelogOptionError(f"option 'assign' must be JSON like {{\"topicA\": [0, 1]}}, got {text!r}"
                                     ) from None
        if not assign:
            raise OncelogOptionError("option 'assign' lists no partition")
    starting = _parse_spec(options, "startingOffsets", "latest" if streaming else "earliest")
    ending = _parse_spec(options, "endingOffsets", "latest")
    if streaming and get_option(options, "endingOffsets") is not None:
        raise OncelogOptionError("option 'endingOffsets' is for batch reads only; a stream has no end")
    if not streaming:
        if starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values()):
            raise OncelogOptionError("option 'startingOffsets' cannot be 'latest' (-1) in a batch read: the "
                                     "read would be empty; use 'earliest' or explicit offsets")
        if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
            raise OncelogOptionError("option 'endingOffsets' cannot be 'earliest' (-2) in a batch read; use "
                                     "'latest' or explicit offsets")
    return SourceOptions(
        consumer_conf=consumer_conf,
        admin_conf=admin_conf,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_int_opt(options, "maxOffsetsPerTrigger"),
        include_headers=_bool_opt(options, "includeHeaders", False),
        fail_on_data_loss=_bool_opt(options, "failOnDataLoss", True),
        max_records_per_partition=_int_opt(options, "maxRecordsPerPartition") or DEFAULT_MAX_RECORDS_PER_PARTITION,
        min_partitions=_int_opt(options, "minPartitions"),
    )
