"""Connection limits as Kafka's ``ConnectionQuotas`` (SocketServer.scala) counts them: which accepted connection is
served, delayed or closed. No I/O and time injected; ``acceptor.py`` applies the decisions to sockets.

- ``max.connection.creation.rate`` (KIP-612): every accepted connection is recorded on the broker's connection
  rate; past the rate the acceptor waits the throttle time before it goes on (``QuotaUtils.boundedThrottleTime``,
  at most ``quota.window.size.seconds``), so connections are accepted no faster than the rate.
- ``max.connections``: when the broker has that many connections the acceptor waits for one to close; the new ones
  wait in the listen backlog meanwhile (Kafka's ``waitForConnectionSlot``).
- ``connection_creation_rate`` quotas of ip entities (KIP-612): a connection from an address past its rate is not
  served and is closed after the throttle time (Kafka's ``ConnectionThrottledException``); it is taken back off the
  broker's rate.
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection from an address that already has
  its maximum is closed at once (Kafka's ``TooManyConnectionsException``).

The limits are read from the broker's live settings on each connection, so a dynamic change applies to the next one.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from oncelog.clock import Clock
from oncelog.security.quotas import RateSensor, normalize_ip

from ..settings.values import parse_overrides

__all__ = ["Admission", "ConnectionLimits", "ConnectionQuotas", "UNLIMITED"]

log = logging.getLogger("oncelog.broker.connection_quotas")

#: Kafka's default of every connection limit (Int.MaxValue): no limit
UNLIMITED = 2**31 - 1


class ConnectionLimits(Protocol):
    """The settings read here (the broker's live :class:`~oncelog.broker.settings.config.BrokerConfig`)."""

    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: str
    max_connection_creation_rate: int
    quota_window_num: int
    quota_window_size_seconds: int


@dataclass(frozen=True, slots=True)
class Admission:
    """What to do with an accepted connection: serve it, close it now, or close it after ``delay_ms``."""

    serve: bool
    delay_ms: int = 0
    reason: str = ""


SERVE = Admission(True)


class ConnectionQuotas:
    def __init__(self, config: ConnectionLimits, clock: Clock,
                 ip_rate: Callable[[str], int | None] = lambda ip: None) -> None:
        self.config = config
        self.clock = clock
        self.ip_rate = ip_rate  # the connection_creation_rate quota of an address (client quotas of ip entities)
        self.total = 0
        self._counts: dict[str, int] = {}
        self._window_ms = config.quota_window_size_seconds * 1000
        self._broker_rate = RateSensor(self._window_ms, config.quota_window_num)
        self._ip_rates: dict[str, RateSensor] = {}
        self._overrides_text: str | None = None
        self._overrides: dict[str, int] = {}

    def count(self, ip: str) -> int:
        return self._counts.get(ip, 0)

    def _max_per_ip(self, ip: str) -> int:
        text = self.config.max_connections_per_ip_overrides
        if text != self._overrides_text:
            self._overrides_text = text
            self._overrides = {}
            for host, count in parse_overrides(text).items():
                for addr in _addresses(host):
                    self._overrides[addr] = count
        return self._overrides.get(ip, self.config.max_connections_per_ip)

    def creation_delay_ms(self) -> int:
        """Record one new connection on the broker's connection rate; how long to wait before accepting more."""
        limit = self.config.max_connection_creation_rate
        if limit >= UNLIMITED:
            return 0
        return self._broker_rate.record_and_throttle(1.0, limit, self.clock.monotonic_ms(), self._window_ms)

    def slot_available(self) -> bool:
        """Whether the broker is below ``max.connections``."""
        return self.total < self.config.max_connections

    def admit(self, ip: str) -> Admission:
        """Decide on a connection from ``ip`` (a normalized address); a served one is counted until
        :meth:`release`."""
        rate = self.ip_rate(ip)
        if rate is not None and rate < UNLIMITED:
            now = self.clock.monotonic_ms()
            sensor = self._ip_rates.get(ip)
            if sensor is None or sensor.window_ms != self._window_ms:
                sensor = self._ip_rates[ip] = RateSensor(self._window_ms, self.config.quota_window_num)
            delay = sensor.record_and_throttle(1.0, rate, now, self._window_ms)
            if delay:
                sensor.record(-1.0, now)  # not accepted: taken back off the rates (Kafka's updateListenerMetrics)
                if self.config.max_connection_creation_rate < UNLIMITED:
                    self._broker_rate.record(-1.0, now)
                return Admission(False, delay, f"{ip} is past its connection_creation_rate quota of {rate}/s")
        count = self._counts.get(ip, 0)
        limit = self._max_per_ip(ip)
        if count >= limit:
            return Admission(False, 0, f"{ip} already has the configured maximum of {limit} connections "
                                       f"(max.connections.per.ip)")
        self._counts[ip] = count + 1
        self.total += 1
        return SERVE

    def release(self, ip: str) -> None:
        count = self._counts.get(ip, 0)
        if count <= 1:
            self._counts.pop(ip, None)
        else:
            self._counts[ip] = count - 1
        self.total = max(self.total - 1, 0)

    def expire(self, older_than_ms: int = 3_600_000) -> None:
        """Drop the rate of addresses with no new connection for an hour (Kafka's sensor expiry)."""
        now = self.clock.monotonic_ms()
        for ip in [ip for ip, s in self._ip_rates.items() if now - s.last_record_ms >= older_than_ms]:
            del self._ip_rates[ip]


def _addresses(host: str) -> list[str]:
    """The addresses of an override's host (Kafka's InetAddress.getByName): itself when it is an address."""
    ip = normalize_ip(host)
    if ip is not None:
        return [ip]
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as e:
        log.warning("max.connections.per.ip.overrides names %s, which does not resolve (%s): ignored", host, e)
        return []
    return sorted({ip for info in infos if (ip := normalize_ip(str(info[4][0]))) is not None})
