"""The record as the client hands it out: consumed messages and delivery reports share this type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import KafkaError

__all__ = ["Header", "Message"]

Header = tuple[str, bytes | None]


@dataclass(slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: () when a consumed record has no headers (one shared immutable tuple: no list per message)
    headers: Sequence[Header] = field(default_factory=list)
    timestamp: int = -1
    #: set on a failed delivery report
    error: KafkaError | None = None
