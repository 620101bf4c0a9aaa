"""A Jepsen-style operation history: every send and every poll, with its outcome, in the order observed.

Events are plain dataclasses appended to a thread-safe ``History``; each gets a global sequence number (``seq``)
so per-consumer order is kept when several threads record at once. A history can be written to / read from
JSON lines so that separate processes (the copiers) can record their part and the test can merge it.

Vocabulary
* ``Send``: one record handed to a producer. ``outcome`` is "ok" (acked, ``offset`` known), "fail" (definitely
  not written) or "unknown" (timed out, connection lost, process killed...). ``txn`` is the transaction the send
  belongs to (None for non-transactional writes); the fate of that transaction is a separate ``TxnEnd`` event
  ("commit", "abort" or "unknown"); a transaction with no ``TxnEnd`` is "unknown".
* ``Poll``: one record returned to a consumer: consumer name, ``session`` (one consumer instance), topic,
  partition, offset, value and isolation ("read_committed" / "read_uncommitted").
* ``Seek``: the consumer session moved its position on purpose (seek, rebalance, new assignment): offsets of
  that partition may go backwards after it.
* ``ReadToEnd``: the consumer session read these partitions of a topic from offset 0 up to their end, after
  every writer stopped and every transaction was settled: its reads are a complete picture of the log.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "ABORT",
    "COMMIT",
    "FAIL",
    "OK",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "UNKNOWN",
    "Event",
    "History",
    "Poll",
    "ReadToEnd",
    "Seek",
    "Send",
    "TxnEnd",
]

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"
COMMIT, ABORT = "commit", "abort"
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"


@dataclass
class Send:
    producer: str
    topic: str
    partition: int | None
    value: str
    outcome: str = UNKNOWN
    offset: int | None = None
    txn: str | None = None
    seq: int = -1


@dataclass
class TxnEnd:
    txn: str
    outcome: str  # commit / abort / unknown
    seq: int = -1


@dataclass
class Poll:
    consumer: str
    session: str
    topic: str
    partition: int
    offset: int
    value: str
    isolation: str
    seq: int = -1


@dataclass
class Seek:
    session: str
    topic: str
    partition: int | None  # None: every partition of the topic (a rebalance)
    seq: int = -1


@dataclass
class ReadToEnd:
    session: str
    topic: str
    isolation: str
    end_offsets: dict[int, int] = field(default_factory=dict)  # partition -> end offset reached
    seq: int = -1


Event = Send | TxnEnd | Poll | Seek | ReadToEnd
_KINDS: dict[str, type] = {c.__name__: c for c in (Send, TxnEnd, Poll, Seek, ReadToEnd)}


class History:
    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []
        for e in events:
            self.add(e)

    def add(self, event: Event) -> Event:
        with self._lock:
            event.seq = len(self.events)
            self.events.append(event)
        return event

    def extend(self, events: Iterable[Event]) -> None:
        for e in events:
            self.add(e)

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self.events))

    def __len__(self) -> int:
        return len(self.events)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    # ------------------------------------------------------------------ JSON lines
    @staticmethod
    def to_line(event: Event) -> str:
        d = asdict(event)
        d["kind"] = type(event).__name__
        if isinstance(event, ReadToEnd):
            d["end_offsets"] = {str(k): v for k, v in event.end_offsets.items()}
        return json.dumps(d, separators=(",", ":"))

    @staticmethod
    def from_line(line: str) -> Event:
        d = json.loads(line)
        cls = _KINDS[d.pop("kind")]
        if cls is ReadToEnd:
            d["end_offsets"] = {int(k): v for k, v in d["end_offsets"].items()}
        return cls(**d)

    def dump(self, path: Path) -> None:
        with open(path, "w") as f:
            f.writelines(self.to_line(e) + "\n" for e in self.events)

    @classmethod
    def load_lines(cls, path: Path) -> list[Event]:
        """Events of a JSON-lines file; a torn last line (the writer was SIGKILLed mid-write) is ignored."""
        out: list[Event] = []
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            try:
                out.append(cls.from_line(line))
            except (ValueError, KeyError, TypeError):
                continue
        return out
