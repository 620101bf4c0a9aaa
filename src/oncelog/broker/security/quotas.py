"""Client quotas as the broker enforces them: Kafka's ``ClientQuotaManager`` (produce and fetch byte rates) and
``ClientRequestQuotaManager`` (request percentage), behind one object the connection and the fetch handler consult.

The quotas are the ``quotas`` records of the broker's security store (a file on a single node, etcd in a cluster:
every broker enforces the same quotas, each on its own traffic, as in Kafka). With no user or client-id quota stored,
:attr:`ClientQuotaManager.enabled` is False and a request costs one attribute test.

How a request is charged (Kafka's ``KafkaApis`` and ``RequestHandlerHelper``):

- Produce: the request's size goes to the client's ``producer_byte_rate`` rate, and (unless acks=0) the time its
  handler took to its ``request_percentage`` rate; the response carries the larger of the two throttle times.
- Fetch from a consumer: the handler reads at most what the quota allows in its window (Kafka's
  ``getMaxValueInQuotaWindow``); the records' size goes to the ``consumer_byte_rate`` rate when the response is
  ready; a throttled fetch is answered with no records (and the size taken back off the rate), so the consumer asks
  again once its throttle time has passed. A follower's fetch is exempt.
- Any other request: its handler time goes to the ``request_percentage`` rate (WriteTxnMarkers, a broker's request,
  is exempt).

A throttled response is sent at once with ``throttle_time_ms``; the connection then stops reading from the client
for that long (KIP-219: the client backs off, the broker mutes the channel). The byte-rate throttle time is Kafka's
``QuotaUtils.throttleTime`` (not bounded, as in Kafka); the request-percentage one is bounded by
``quota.window.size.seconds`` (``boundedThrottleTime``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncelog.clock import Clock
from oncelog.security.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaIndex,
    RateSensor,
    Resolved,
    is_ip_literal,
    normalize_ip,
)
from oncelog.security.store import QUOTAS

if TYPE_CHECKING:
    from oncelog.security.store import SecurityStore

    from ..request import RequestContext

__all__ = ["ClientQuotaManager", "Charge"]

log = logging.getLogger("oncelog.broker.quotas")

PRODUCE, FETCH, WRITE_TXN_MARKERS = 0, 1, 27
#: requests exempt from the request quota: a broker's own (Kafka's sendResponseExemptThrottle)
EXEMPT = frozenset({WRITE_TXN_MARKERS})
#: a sensor without a record for this long is dropped (Kafka's InactiveSensorExpirationTimeSeconds)
SENSOR_EXPIRY_MS = 3_600_000
_MAX_CACHED_CLIENTS = 10_000


class _Client:
    """The quotas that apply to one (user, client id); None where it has none."""

    __slots__ = ("produce", "fetch", "request")

    def __init__(self, produce: Resolved | None, fetch: Resolved | None, request: Resolved | None) -> None:
        self.produce = produce
        self.fetch = fetch
        self.request = request


class Charge:
    """What a request owes once its response is ready: the throttle time so far and, for a consumer's fetch, the
    quota its response's bytes go to."""

    __slots__ = ("throttle_ms", "fetch")

    def __init__(self, throttle_ms: int, fetch: Resolved | None) -> None:
        self.throttle_ms = throttle_ms
        self.fetch = fetch


class ClientQuotaManager:
    def __init__(self, clock: Clock, window_seconds: int = 1, num_windows: int = 11,
                 store: SecurityStore | None = None) -> None:
        self.clock = clock
        self.window_ms = window_seconds * 1000
        self.num_windows = num_windows
        self.enabled = False  # whether any user / client-id quota is stored (False: requests are not charged)
        self.index = QuotaIndex({})
        self._clients: dict[tuple[str, str], _Client | None] = {}
        self._sensors: dict[tuple[str, str, str], RateSensor] = {}
        self._last_expiry = 0
        self._host_rates: dict[str, int] = {}  # ip quotas named by host name, resolved
        self._resolving: asyncio.Task[None] | None = None
        self._store = store
        if store is not None:
            self.reload(store.records(QUOTAS))
            store.add_listener(self._on_change)

    # -- the quotas ----------------------------------------------------------------------------------------------
    def _on_change(self, kind: str) -> None:
        if kind == QUOTAS and self._store is not None:
            self.reload(self._store.records(QUOTAS))

    def reload(self, records: Mapping[str, bytes]) -> None:
        """Take the stored quotas: they apply to the next request (the rates measured so far are kept)."""
        self.index = index = QuotaIndex.from_records(records)
        self._clients.clear()
        self.enabled = any(index.has(key) for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE))
        if index.has(CONTROLLER_MUTATION_RATE):
            log.warning("controller_mutation_rate quotas are stored (as Kafka accepts them) but oncelog does not "
                        "enforce them: CreateTopics, CreatePartitions and DeleteTopics are not throttled")
        hosts = sorted(n for n in index.ip_rates if n is not None and not is_ip_literal(n))
        self._host_rates = {}
        if self._resolving is not None:
            self._resolving.cancel()
            self._resolving = None
        if hosts:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._resolving = loop.create_task(self._resolve_hosts(index, hosts), name="quota-hosts")

    async def _resolve_hosts(self, index: QuotaIndex, hosts: list[str]) -> None:
        """An ip quota named by a host name applies to the host's addresses (Kafka's InetAddress.getByName)."""
        loop = asyncio.get_running_loop()
        rates: dict[str, int] = {}
        for host in hosts:
            try:
                infos = await loop.getaddrinfo(host, None)
            except OSError as e:
                log.warning("the connection rate quota of ip %s does not apply: the host does not resolve (%s)",
                            host, e)
                continue
            for info in infos:
                ip = normalize_ip(str(info[4][0]))
                if ip is not None:
                    rates.setdefault(ip, index.ip_rates[host])
        if self.index is index:
            self._host_rates = rates

    def ip_connection_rate(self, ip: str) -> int | None:
        """The ``connection_creation_rate`` quota of ``ip`` (a normalized address), or None (KIP-612)."""
        rates = self.index.ip_rates
        if not rates:
            return None
        rate = rates.get(ip)
        if rate is None:
            rate = self._host_rates.get(ip)
        return rates.get(None) if rate is None else rate

    def _client(self, user: str, client_id: str) -> _Client | None:
        key = (user, client_id)
        try:
            return self._clients[key]
        except KeyError:
            pass
        index = self.index
        produce = index.resolve(PRODUCER_BYTE_RATE, user, client_id)
        fetch = index.resolve(CONSUMER_BYTE_RATE, user, client_id)
        request = index.resolve(REQUEST_PERCENTAGE, user, client_id)
        client = None if produce is None and fetch is None and request is None else _Client(produce, fetch, request)
        if len(self._clients) >= _MAX_CACHED_CLIENTS:
            self._clients.clear()
        self._clients[key] = client
        return client

    def _sensor(self, kind: str, quota: Resolved, now: int) -> RateSensor:
        key = (kind, quota.user_tag, quota.client_tag)
        sensor = self._sensors.get(key)
        if sensor is None:
            if now - self._last_expiry >= 60_000:
                self._last_expiry = now
                for k in [k for k, s in self._sensors.items() if now - s.last_record_ms >= SENSOR_EXPIRY_MS]:
                    del self._sensors[k]
            sensor = self._sensors[key] = RateSensor(self.window_ms, self.num_windows)
        return sensor

    def rate(self, kind: str, user: str, client_id: str) -> float:
        """The measured rate of a client for quota ``kind`` now (0 without a quota): for tests and metrics."""
        client = self._client(user, client_id)
        quota = None if client is None else {PRODUCER_BYTE_RATE: client.produce, CONSUMER_BYTE_RATE: client.fetch,
                                             REQUEST_PERCENTAGE: client.request}.get(kind)
        if quota is None:
            return 0.0
        sensor = self._sensors.get((kind, quota.user_tag, quota.client_tag))
        return 0.0 if sensor is None else sensor.measure(self.clock.monotonic_ms())

    # -- charging requests ---------------------------------------------------------------------------------------
    def fetch_max_bytes(self, user: str, client_id: str | None) -> int | None:
        """The most a consumer's fetch may read without being sure to be throttled (Kafka's
        ``getMaxValueInQuotaWindow``: the quota times ``quota.window.num - 1`` windows), or None without a quota."""
        client = self._client(user, client_id or "")
        if client is None or client.fetch is None:
            return None
        return int(client.fetch.limit * (self.num_windows - 1) * self.window_ms / 1000)

    def on_request(self, ctx: RequestContext, request: Any, size: int, busy_seconds: float) -> Charge | None:
        """Charge a request whose handler has run (``busy_seconds`` in it, ``size`` bytes on the wire); what it
        still owes once its response is ready, or None when it owes nothing."""
        api = ctx.api_key
        if api in EXEMPT:
            return None
        client = self._client(ctx.principal.name, ctx.client_id or "")
        if client is None:
            return None
        now = self.clock.monotonic_ms()
        throttle = 0
        fetch = None
        if api == PRODUCE:
            if client.produce is not None:
                throttle = self._sensor(PRODUCER_BYTE_RATE, client.produce, now).record_and_throttle(
                    size, client.produce.limit, now)
            if request.acks == 0:  # no response: the request quota is not enforced (as Kafka)
                return Charge(throttle, None) if throttle else None
        elif api == FETCH:
            replica = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
            if replica >= 0:  # a follower's fetch
                return None
            fetch = client.fetch
        if client.request is not None:
            # Kafka's ClientRequestQuotaManager: thread time as a percentage of one thread per second
            throttle = max(throttle, self._sensor(REQUEST_PERCENTAGE, client.request, now).record_and_throttle(
                busy_seconds * 100.0, client.request.limit, now, self.window_ms))
        if not throttle and fetch is None:
            return None
        return Charge(throttle, fetch)

    def on_response(self, charge: Charge, response: Any) -> int:
        """Settle a request once its response is ready: a consumer's fetch pays for its records (and is emptied when
        throttled); the response gets ``throttle_time_ms``. Returns how long to mute the client (ms)."""
        throttle = charge.throttle_ms
        quota = charge.fetch
        if quota is not None:
            size = _records_size(response)
            now = self.clock.monotonic_ms()
            sensor = self._sensor(CONSUMER_BYTE_RATE, quota, now)
            throttle = max(throttle, sensor.record_and_throttle(size, quota.limit, now))
            if throttle:
                # Kafka answers a throttled fetch with no records and takes them back off the rate
                sensor.record(-size, now)
                response.responses = []
        if throttle and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = throttle
        return throttle


def _records_size(response: Any) -> int:
    """Bytes of records in a FetchResponse (what a consumer's byte rate counts; Kafka counts the whole response, a
    few dozen bytes more per partition). A partition's records are bytes or the log's chunks (a list)."""
    total = 0
    for topic in response.responses:
        for p in topic.partitions:
            records = p.records
            if not records:
                continue
            if isinstance(records, list):
                total += sum(c.nbytes if isinstance(c, memoryview) else len(c) for c in records)
            else:
                total += records.nbytes if isinstance(records, memoryview) else len(records)
    return total
