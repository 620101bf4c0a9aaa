"""The record as the client hands it out: consumed messages and delivery reports share this type.

confluent-kafka's accessors: ``value()``, ``key()``, ``topic()``, ``partition()``, ``offset()``, ``headers()``
(None without headers, else a list of ``(name, value)``), ``timestamp()`` (``(type, ms)``), ``error()``,
``len()``, ``latency()``, ``leader_epoch()`` and the ``set_*`` mutators.

It is built once per consumed record, so construction is one plain ``__init__`` over slots; the client's own
code reads the slots (``_topic`` ...) directly on its hot paths.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import KafkaError

__all__ = ["TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE", "Header", "Message",
           "ReportMessage"]

Header = tuple[str, bytes | None]

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2


class Message:
    __slots__ = ("_error", "_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(self, topic: str = "", partition: int = -1, offset: int = -1,
                 key: bytes | None = None, value: bytes | None = None, headers: Sequence[Header] = (),
                 timestamp: int = -1, error: KafkaError | None = None) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        #: () when there are none (one shared immutable tuple: no list per message)
        self._headers = headers
        self._timestamp = timestamp
        self._error = error

    #: class-level defaults; a record with a log append time or a latency is a :class:`ReportMessage`
    _tstype = TIMESTAMP_CREATE_TIME
    _latency: float | None = None

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def topic(self) -> str | None:
        return self._topic or None

    def partition(self) -> int | None:
        """The partition (None when not known, as for a delivery report of a record that never got one)."""
        return self._partition if self._partition >= 0 else None

    def offset(self) -> int | None:
        """The offset (None when not known: a failed delivery, or no offset from the broker)."""
        return self._offset if self._offset >= 0 else None

    def headers(self) -> list[Header] | None:
        """``[(name, value), ...]`` or None when the record has no headers."""
        h = self._headers
        if not h:
            return None
        return h if isinstance(h, list) else list(h)

    def timestamp(self) -> tuple[int, int]:
        """``(TIMESTAMP_CREATE_TIME or TIMESTAMP_LOG_APPEND_TIME, ms)``, or ``(TIMESTAMP_NOT_AVAILABLE, 0)``."""
        if self._timestamp < 0:
            return (TIMESTAMP_NOT_AVAILABLE, 0)
        return (self._tstype, self._timestamp)

    def error(self) -> KafkaError | None:
        return self._error

    def latency(self) -> float | None:
        """Seconds from ``produce()`` to the delivery report (None on consumed messages)."""
        return self._latency

    def leader_epoch(self) -> int | None:
        return None

    def set_value(self, value: bytes | None) -> None:
        self._value = value

    def set_key(self, key: bytes | None) -> None:
        self._key = key

    def set_headers(self, headers: Sequence[Header] | None) -> None:
        self._headers = list(headers) if headers else ()

    def set_topic(self, topic: str) -> None:
        self._topic = topic

    def set_error(self, error: KafkaError | None) -> None:
        self._error = error

    def __len__(self) -> int:
        """Length of the value in bytes (0 without a value), as in confluent-kafka."""
        return len(self._value) if self._value is not None else 0

    def __repr__(self) -> str:
        return (f"Message(topic={self._topic!r}, partition={self._partition}, offset={self._offset}, "
                f"key={self._key!r}, value={self._value!r}, headers={list(self._headers)!r}, "
                f"timestamp={self._timestamp}, error={self._error!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self._topic, self._partition, self._offset, self._key, self._value, list(self._headers),
                self._timestamp, self._error) == (other._topic, other._partition, other._offset, other._key,
                                                  other._value, list(other._headers), other._timestamp,
                                                  other._error)

    __hash__ = None  # type: ignore[assignment]


class ReportMessage(Message):
    """A Message whose timestamp type or latency differs from the defaults (delivery reports): consumed records
    stay at eight slots, the cheapest object to build."""

    __slots__ = ("_latency", "_tstype")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: Sequence[Header], timestamp: int, error: KafkaError | None, tstype: int,
                 latency: float | None = None) -> None:
        Message.__init__(self, topic, partition, offset, key, value, headers, timestamp, error)
        self._tstype = tstype
        self._latency = latency
