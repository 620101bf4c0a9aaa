"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546, KIP-612): their records, the AlterClientQuotas and
DescribeClientQuotas decisions, which quota applies to a client, and Kafka's rate and throttle arithmetic. Pure:
time is passed in, nothing here does I/O.

- **Entities** are Kafka's: ``user`` and/or ``client-id`` (byte rates, request percentage, controller mutation
  rate), or ``ip`` (connection creation rate). A name of None is the *default* entity of its type (``<default>``
  in ``kafka-configs.sh``). The user is the principal's name (``alice`` of ``User:alice``; ``ANONYMOUS`` on a
  PLAINTEXT listener).
- **Records** (the ``quotas`` kind of the :class:`~oncelog.security.store.SecurityStore`): one per entity and quota
  key, as Kafka's ``ClientQuotaRecord``, so two brokers altering different keys of one entity at once do not
  overwrite each other. The key is JSON ``{"entity": {...}, "key": "producer_byte_rate"}``, the value the number.
- **Which quota applies** (Kafka's ``ClientQuotaManager.DefaultQuotaCallback``): the most specific entity that has
  the quota key, in this order: user+client-id, user+default client-id, user, default user+client-id, default
  user+default client-id, default user, client-id, default client-id. The entity that matched also decides what
  shares one rate: a user quota is shared by all the user's client ids, a default client-id quota is one rate per
  client id.
- **Rates** are Kafka's ``Rate`` over a ``WindowedSum``: ``quota.window.num`` samples of
  ``quota.window.size.seconds``; the rate is the sum of the samples over the time they cover, counted as at least
  ``quota.window.num - 1`` whole windows. A client over its quota is throttled for Kafka's
  ``QuotaUtils.throttleTime``: the delay that brings the rate back to the quota, ``(rate - quota) / quota * window``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from oncelog.protocol.errors import ErrorCode

__all__ = ["CLIENT_ID", "CONNECTION_CREATION_RATE", "CONSUMER_BYTE_RATE", "CONTROLLER_MUTATION_RATE", "IP",
           "PRODUCER_BYTE_RATE", "REQUEST_PERCENTAGE", "USER", "Alteration", "AlterOutcome", "Entity",
           "FilterComponent", "MATCH_DEFAULT", "MATCH_EXACT", "MATCH_SPECIFIED", "QuotaError", "QuotaIndex",
           "RateSensor", "Resolved", "alter", "describe", "entity_of", "entity_text", "is_ip_literal",
           "normalize_ip", "parse_records", "record_key", "throttle_time"]

log = logging.getLogger("oncelog.security.quotas")

#: entity types (Kafka's ``ClientQuotaEntity.USER`` / ``CLIENT_ID`` / ``IP``)
USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: quota keys (Kafka's ``QuotaConfig``)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: the keys of a user / client-id entity and of an ip entity, with Kafka's ConfigDef type of each
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
                    CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
_LONG_MAX, _INT_MAX = 2**63 - 1, 2**31 - 1

#: DescribeClientQuotas match types (Kafka's ``DescribeClientQuotasRequest.MATCH_TYPE_*``)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

#: an entity: (type, name or None for the default) pairs, sorted by type
Entity = tuple[tuple[str, str | None], ...]


class QuotaError(Exception):
    """A quota request Kafka refuses: ``code`` and Kafka's message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def entity_of(pairs: Mapping[str, str | None]) -> Entity:
    return tuple(sorted(pairs.items()))


def entity_text(entity: Entity) -> str:
    """Kafka's ``ClientQuotaEntity.toString``: ``ClientQuotaEntity(entries={user=alice, client-id=null})``."""
    inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in sorted(entity, key=lambda p: p[0] != USER))
    return f"ClientQuotaEntity(entries={{{inner}}})"


def normalize_ip(text: str) -> str | None:
    """``text`` as a canonical IP address (an IPv4-mapped IPv6 address as IPv4), or None when it is not one."""
    try:
        addr = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def is_ip_literal(text: str) -> bool:
    return normalize_ip(text) is not None


# ---------------------------------------------------------------------------------------------- records
def record_key(entity: Entity, key: str) -> str:
    return json.dumps({"entity": dict(entity), "key": key}, sort_keys=True, separators=(",", ":"))


def parse_records(records: Mapping[str, bytes]) -> dict[Entity, dict[str, float]]:
    """The stored quotas: entity -> quota key -> value. A record that does not parse (written by hand, or by a newer
    version) is skipped with a warning."""
    out: dict[Entity, dict[str, float]] = {}
    for raw_key, raw_value in records.items():
        try:
            doc = json.loads(raw_key)
            pairs = doc["entity"]
            if not isinstance(pairs, dict) or not pairs or not all(
                    isinstance(t, str) and (n is None or isinstance(n, str)) for t, n in pairs.items()):
                raise ValueError("bad entity")
            key = doc["key"]
            value = float(json.loads(raw_value))
            if not isinstance(key, str) or not math.isfinite(value):
                raise ValueError("bad key or value")
        except (ValueError, KeyError, TypeError):
            log.warning("quota record %r = %r ignored: it does not parse", raw_key, raw_value)
            continue
        out.setdefault(entity_of(pairs), {})[key] = value
    return out


# ---------------------------------------------------------------------------------------------- AlterClientQuotas
@dataclass(frozen=True, slots=True)
class Alteration:
    """One entry of AlterClientQuotas: the entity (type -> name; None: the default) and its operations (key,
    value; a value of None removes the key)."""

    entity: Mapping[str, str | None]
    ops: Sequence[tuple[str, float | None]]


@dataclass(slots=True)
class AlterOutcome:
    """What to write (record puts and deletes, together), and each entity's result (code, message), in the order the
    entities first appear in the request."""

    puts: dict[str, bytes] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    results: dict[Entity, tuple[ErrorCode, str | None]] = field(default_factory=dict)


def alter(current: Mapping[Entity, Mapping[str, float]], alterations: Iterable[Alteration],
          resolvable: Callable[[str], bool] = is_ip_literal) -> AlterOutcome:
    """Kafka's ``ClientQuotaControlManager.alterClientQuotas``: each entity is checked on its own; the records of
    the entities that pass are written together, those of an entity with an error not at all. ``resolvable`` says
    whether an ip entity's name is an address or a host name that resolves."""
    out = AlterOutcome()
    for alt in alterations:
        entity = entity_of(alt.entity)
        values: dict[str, float | None] = {}
        error: tuple[ErrorCode, str] | None = None
        for key, value in alt.ops:
            if key in values:
                error = (ErrorCode.INVALID_REQUEST, f"Duplicate quota key {key} not updating quota for this entity "
                         f"{entity_text(entity)}")
            else:
                values[key] = value
        if entity in out.results or error is not None:
            # as Kafka: an entity given twice, or with a key given twice, is answered "Ignoring duplicate entity"
            out.results[entity] = (ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity_text(entity)}")
            continue
        problem = _entity_error(entity, resolvable)
        if problem is None:
            problem = _apply(entity, values, current.get(entity, {}), out)
        out.results[entity] = (ErrorCode.NONE, None) if problem is None else (ErrorCode.INVALID_REQUEST, problem)
    return out


def _entity_error(entity: Entity, resolvable: Callable[[str], bool]) -> str | None:
    if not entity:
        return "Invalid empty client quota entity"
    types = dict(entity)
    for t, name in entity:
        if t not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {t}"
        if name is not None and not name:
            return f"Empty {t} not supported"
    if IP in types:
        if USER in types or CLIENT_ID in types:
            # Kafka's message, its missing space included
            return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        ip = types[IP]
        if ip is not None and not resolvable(ip):
            return f"{ip} is not a valid IP or resolvable host."
    return None


def _apply(entity: Entity, values: Mapping[str, float | None], current: Mapping[str, float],
           out: AlterOutcome) -> str | None:
    """Check the entity's operations and add its record changes to ``out``; the error message, or None."""
    keys = IP_KEYS if any(t == IP for t, _ in entity) else USER_CLIENT_KEYS
    puts: dict[str, bytes] = {}
    deletes: list[str] = []
    for key, value in values.items():
        if value is None:
            if key in current:
                deletes.append(record_key(entity, key))
            continue
        problem = _value_error(keys, key, value)
        if problem is not None:
            return problem
        if current.get(key) != value:
            puts[record_key(entity, key)] = json.dumps(float(value)).encode()
    out.puts.update(puts)
    out.deletes.extend(deletes)
    return None


def _value_error(keys: Mapping[str, str], key: str, value: float) -> str | None:
    """Kafka's ``ClientQuotaControlManager.validateQuotaKeyValue``."""
    kind = keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == "DOUBLE":
        return None
    if kind == "INT" and value > _INT_MAX:
        return f"Proposed value for {key} is too large for an INT."
    if kind == "LONG" and value > _LONG_MAX:
        return f"Proposed value for {key} is too large for a LONG."
    if abs(math.fmod(value, 1.0)) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


# ---------------------------------------------------------------------------------------------- DescribeClientQuotas
@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def describe(current: Mapping[Entity, Mapping[str, float]], components: Iterable[FilterComponent],
             strict: bool) -> list[tuple[Entity, dict[str, float]]]:
    """The entities matching the filter with their quotas (Kafka's ``ClientQuotasImage.describe``, KIP-546): an
    EXACT component matches that name, DEFAULT the default entity, SPECIFIED any entity of the type; a type the
    filter does not name matches anything unless ``strict``. Raises :class:`QuotaError` for a bad filter."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in specified:
            raise QuotaError(ErrorCode.INVALID_REQUEST,
                             f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in (IP, USER, CLIENT_ID):
            raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(c.entity_type)
        else:
            raise QuotaError(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
    if (IP in exact or IP in specified) and (USER in exact or USER in specified or CLIENT_ID in exact
                                             or CLIENT_ID in specified):
        raise QuotaError(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                         "component should not be used with user or clientId filter component.")
    out = []
    for entity, quotas in sorted(current.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]]):
        names = dict(entity)
        if strict and len(names) != len(exact) + len(specified):
            continue
        if all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in specified):
            out.append((entity, dict(quotas)))
    return out


# ---------------------------------------------------------------------------------------------- which quota applies
@dataclass(frozen=True, slots=True)
class Resolved:
    """The quota that applies to a client for one key: its limit, and the rate it is measured on (Kafka's metric
    tags: the user and client id, or "" for the part the matching entity does not name)."""

    limit: float
    user_tag: str
    client_tag: str


class QuotaIndex:
    """The stored quotas, indexed for the broker: which quota applies to a (user, client id), and to an IP."""

    def __init__(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        self._by_key: dict[str, dict[Entity, float]] = {}
        for entity, values in quotas.items():
            for key, value in values.items():
                self._by_key.setdefault(key, {})[entity] = value
        self.ip_rates: dict[str | None, int] = {}  # ip entity name (None: the default) -> connection rate
        for entity, value in self._by_key.get(CONNECTION_CREATION_RATE, {}).items():
            if len(entity) == 1 and entity[0][0] == IP:
                self.ip_rates[entity[0][1]] = int(value)

    @staticmethod
    def from_records(records: Mapping[str, bytes]) -> QuotaIndex:
        return QuotaIndex(parse_records(records))

    def has(self, key: str) -> bool:
        """Whether any user / client-id entity has quota ``key``."""
        return any(t != IP for entity in self._by_key.get(key, {}) for t, _ in entity)

    def resolve(self, key: str, user: str, client_id: str) -> Resolved | None:
        """The quota ``key`` of the client ``user`` (a principal's name) / ``client_id``, or None when it has none."""
        quotas = self._by_key.get(key)
        if not quotas:
            return None
        u, c = (USER, user), (CLIENT_ID, client_id)
        du, dc = (USER, None), (CLIENT_ID, None)
        for entity, user_tag, client_tag in (
                ((c, u), user, client_id), ((dc, u), user, client_id), ((u,), user, ""),
                ((c, du), user, client_id), ((dc, du), user, client_id), ((du,), user, ""),
                ((c,), "", client_id), ((dc,), "", client_id)):
            limit = quotas.get(entity)
            if limit is not None:
                return Resolved(limit, user_tag, client_tag)
        return None

    def ip_rate(self, ip: str) -> int | None:
        """The connection creation rate allowed to ``ip`` (its own quota, else the default ip quota), or None."""
        rate = self.ip_rates.get(ip)
        return self.ip_rates.get(None) if rate is None else rate


# ---------------------------------------------------------------------------------------------- rates and throttling
class _Sample:
    __slots__ = ("start", "last", "value")

    def __init__(self, now: int) -> None:
        self.start = self.last = now
        self.value = 0.0

    def reset(self, now: int) -> None:
        self.start = self.last = now
        self.value = 0.0


class RateSensor:
    """Kafka's ``Rate`` over a ``WindowedSum``: ``num`` samples of ``window_ms`` each (plus the one being filled
    while the oldest still overlaps the window), in units per second."""

    __slots__ = ("window_ms", "num", "_samples", "_current", "last_record_ms")

    def __init__(self, window_ms: int, num: int) -> None:
        self.window_ms = window_ms
        self.num = num
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now: int) -> None:
        if not self._samples:
            self._samples.append(_Sample(now))
        sample = self._samples[self._current]
        if now - sample.start >= self.window_ms:
            self._current = (self._current + 1) % (self.num + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now)
        sample.value += value
        sample.last = now
        self.last_record_ms = now

    def _purge(self, now: int) -> None:
        expire = self.num * self.window_ms
        for sample in self._samples:
            if now - sample.last >= expire:
                sample.reset(now)

    def window_size(self, now: int) -> int:
        """The time the rate is measured over (ms): since the oldest sample, at least ``num - 1`` whole windows."""
        self._purge(now)
        if not self._samples:
            self._samples.append(_Sample(now))
        elapsed = now - min(s.start for s in self._samples)
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now: int) -> float:
        """The rate now, per second."""
        self._purge(now)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size(now) / 1000.0)

    def record_and_throttle(self, value: float, bound: float, now: int, max_ms: int | None = None) -> int:
        """Record ``value`` and return how long (ms) the client must wait for its rate to come back to ``bound``
        (0 when within it): Kafka's ``Sensor.record`` with its quota check, then ``QuotaUtils.throttleTime``
        (``boundedThrottleTime`` with ``max_ms``)."""
        self.record(value, now)
        rate = self.measure(now)
        if rate <= bound:
            return 0
        ms = throttle_time(rate, bound, self.window_size(now))
        return ms if max_ms is None else min(ms, max_ms)


def throttle_time(rate: float, bound: float, window_ms: int) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: with the observed rate O and the quota T over a window W, the delay X
    such that O * W / (W + X) = T, i.e. X = (O - T) / T * W (rounded as Java's ``Math.round``)."""
    return max(0, math.floor((rate - bound) / bound * window_ms + 0.5))
