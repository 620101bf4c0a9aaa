"""Check a History (see history.py) for the anomalies exactly-once semantics rule out.

Anomaly classes (keys of ``Report.anomalies``):

* ``lost_write``: a write that must be visible was not read by a reader that read the whole log (``ReadToEnd``):
  under read_committed every acked non-transactional write and every write of a committed transaction; under
  read_uncommitted every acked write, whatever its transaction's fate.
* ``duplicate``: the same value read at two different offsets (values are unique per send): under read_committed
  always; under read_uncommitted for values sent exactly once (idempotence).
* ``aborted_read``: a read_committed reader returned a value whose every send belongs to an aborted transaction.
* ``non_atomic_txn``: a transaction of unknown fate of which a complete read_committed reader saw some acked
  writes but not all (committed and aborted transactions are covered by ``lost_write`` / ``aborted_read``).
* ``non_monotonic``: within one consumer session and partition an offset not above the previous one, with no
  ``Seek`` in between.
* ``inconsistent_offset``: one offset of a partition holding different values for different observers (readers,
  and the producer that was acked that offset).
* ``phantom_read``: (only if ``sends_complete``) a read_committed value that no one sent.
* ``copy_lost`` / ``copy_duplicate`` / ``copy_unexpected`` / ``copy_order``: for ``check_copy``, an input missing
  from the complete read_committed output, present more than once, an output that maps to no input, and (when
  order is required) outputs of one input partition in an output partition not in input order.

The checker only reports; the tests assert ``report.ok``. ``report.summary()`` is the human-readable form.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .history import (
    ABORT,
    COMMIT,
    FAIL,
    OK,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNKNOWN,
    History,
    Poll,
    ReadToEnd,
    Seek,
    Send,
    TxnEnd,
)

__all__ = ["ANOMALIES", "Report", "check", "check_copy"]

ANOMALIES = ("lost_write", "duplicate", "aborted_read", "non_atomic_txn", "non_monotonic", "inconsistent_offset",
             "phantom_read", "copy_lost", "copy_duplicate", "copy_unexpected", "copy_order")


@dataclass
class Report:
    anomalies: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in ANOMALIES})
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.anomalies.items()}

    def found(self) -> set[str]:
        return {k for k, v in self.anomalies.items() if v}

    def add(self, kind: str, **detail: Any) -> None:
        self.anomalies[kind].append(detail)

    def merge(self, other: Report) -> Report:
        for k, v in other.anomalies.items():
            self.anomalies.setdefault(k, []).extend(v)
        self.stats.update(other.stats)
        return self

    def to_dict(self, examples: int | None = None) -> dict[str, Any]:
        return {"ok": self.ok, "counts": self.counts(), "stats": self.stats,
                "anomalies": {k: (v if examples is None else v[:examples]) for k, v in self.anomalies.items() if v}}

    def to_json(self, examples: int | None = None) -> str:
        return json.dumps(self.to_dict(examples), indent=1, default=str)

    def summary(self, examples: int = 5) -> str:
        return self.to_json(examples)


def txn_outcomes(history: History) -> dict[str, str]:
    """txn -> commit / abort / unknown. A definite outcome wins over an unknown one (a later attempt to learn it)."""
    out: dict[str, str] = {}
    for e in history.of(Send):
        if e.txn is not None:
            out.setdefault(e.txn, UNKNOWN)
    for e in history.of(TxnEnd):
        if e.outcome in (COMMIT, ABORT) or e.txn not in out:
            out[e.txn] = e.outcome
    return out


def check(history: History, sends_complete: bool = False) -> Report:
    rep = Report()
    sends: list[Send] = history.of(Send)
    polls: list[Poll] = history.of(Poll)
    fate = txn_outcomes(history)
    sends_by_value: dict[tuple[str, str], list[Send]] = defaultdict(list)
    for s in sends:
        sends_by_value[(s.topic, s.value)].append(s)
    rep.stats.update(sends=len(sends), acked=sum(s.outcome == OK for s in sends), polls=len(polls),
                     txns={o: sum(1 for v in fate.values() if v == o) for o in (COMMIT, ABORT, UNKNOWN)})

    # -- inconsistent offsets: readers and acks must agree on what each offset holds
    at: dict[tuple[str, int, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for s in sends:
        if s.outcome == OK and s.offset is not None and s.partition is not None:
            at[(s.topic, s.partition, s.offset)][s.value].append(f"ack:{s.producer}")
    for p in polls:
        at[(p.topic, p.partition, p.offset)][p.value].append(f"read:{p.session}")
    for (t, part, off), vals in sorted(at.items()):
        if len(vals) > 1:
            rep.add("inconsistent_offset", topic=t, partition=part, offset=off,
                    values={v: sorted(set(who))[:4] for v, who in vals.items()})

    # -- duplicates: one value at two offsets
    where: dict[tuple[str, str, str], set[tuple[int, int]]] = defaultdict(set)
    for p in polls:
        where[(p.isolation, p.topic, p.value)].add((p.partition, p.offset))
    for (iso, t, v), places in sorted(where.items()):
        if len(places) < 2:
            continue
        if iso == READ_UNCOMMITTED and len(sends_by_value.get((t, v), [])) != 1:
            continue  # re-sent on purpose (e.g. by a retried transaction): not a duplicate of one send
        rep.add("duplicate", isolation=iso, topic=t, value=v, at=sorted(places))

    # -- aborted reads and phantoms (read_committed)
    seen_aborted: set[tuple[str, str]] = set()
    for p in polls:
        if p.isolation != READ_COMMITTED:
            continue
        ss = sends_by_value.get((p.topic, p.value))
        if not ss:
            if sends_complete:
                rep.add("phantom_read", session=p.session, topic=p.topic, partition=p.partition, offset=p.offset,
                        value=p.value)
            continue
        if all(s.txn is not None and fate.get(s.txn) == ABORT for s in ss) and (p.topic, p.value) not in seen_aborted:
            seen_aborted.add((p.topic, p.value))
            rep.add("aborted_read", session=p.session, topic=p.topic, partition=p.partition, offset=p.offset,
                    value=p.value, txns=sorted({s.txn for s in ss}))  # type: ignore[misc]

    # -- monotonic offsets within a consumer session and partition, reset by a Seek
    last: dict[tuple[str, str, int], int] = {}
    for e in history:
        if isinstance(e, Seek):
            for key in [k for k in last if k[0] == e.session and k[1] == e.topic
                        and (e.partition is None or k[2] == e.partition)]:
                del last[key]
        elif isinstance(e, Poll):
            key = (e.session, e.topic, e.partition)
            prev = last.get(key)
            if prev is not None and e.offset <= prev:
                rep.add("non_monotonic", session=e.session, topic=e.topic, partition=e.partition, previous=prev,
                        offset=e.offset)
            last[key] = e.offset

    # -- lost writes, and atomicity of transactions of unknown fate, against complete readers
    reads_of: dict[tuple[str, str], dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for p in polls:
        reads_of[(p.session, p.topic)][p.partition].add(p.value)
    complete = history.of(ReadToEnd)
    rep.stats["complete_readers"] = [(r.session, r.topic, r.isolation) for r in complete]
    for r in complete:
        by_part = reads_of[(r.session, r.topic)]
        everything = set().union(*by_part.values()) if by_part else set()
        parts = set(r.end_offsets)

        def seen(s: Send, by_part: dict[int, set[str]] = by_part, everything: set[str] = everything) -> bool:
            return s.value in (by_part.get(s.partition, set()) if s.partition is not None else everything)

        per_txn: dict[str, list[bool]] = defaultdict(list)
        for s in sends:
            if s.topic != r.topic or (s.partition is not None and s.partition not in parts):
                continue
            if r.isolation == READ_COMMITTED:
                must = (s.outcome == OK) if s.txn is None else (fate[s.txn] == COMMIT and s.outcome != FAIL)
                if s.txn is not None and fate[s.txn] == UNKNOWN and s.outcome == OK:
                    per_txn[s.txn].append(seen(s))
            else:
                must = s.outcome == OK
            if must and not seen(s):
                rep.add("lost_write", reader=r.session, isolation=r.isolation, topic=s.topic, partition=s.partition,
                        offset=s.offset, value=s.value, producer=s.producer, txn=s.txn,
                        txn_outcome=fate.get(s.txn) if s.txn else None)
        for txn, flags in sorted(per_txn.items()):
            if any(flags) and not all(flags):
                rep.add("non_atomic_txn", reader=r.session, topic=r.topic, txn=txn, seen=sum(flags),
                        not_seen=len(flags) - sum(flags))
    return rep


def check_copy(history: History, inputs: dict[int, list[str]], output_topic: str,
               extract: Callable[[str], str], ordered: bool = True) -> Report:
    """Every input exactly once in the output, by every complete read_committed reader of ``output_topic``.

    ``inputs``: input partition -> its values in offset order; ``extract`` maps an output value to the input value
    it was made from. With ``ordered``, in each output partition the outputs of one input partition must follow
    that input partition's order.
    """
    rep = Report()
    position = {v: (p, i) for p, vs in inputs.items() for i, v in enumerate(vs)}
    readers = [r for r in history.of(ReadToEnd) if r.topic == output_topic and r.isolation == READ_COMMITTED]
    rep.stats["copy_readers"] = [r.session for r in readers]
    if not readers:
        rep.add("copy_lost", reason=f"no complete read_committed reader of {output_topic}", missing=len(position))
    for r in readers:
        out = sorted((p.partition, p.offset, p.value) for p in history.of(Poll)
                     if p.session == r.session and p.topic == output_topic)
        count: dict[str, list[tuple[int, int]]] = defaultdict(list)
        last_pos: dict[tuple[int, int], tuple[int, str]] = {}  # (output partition, input partition) -> last index
        for part, off, value in out:
            src = extract(value)
            if src not in position:
                rep.add("copy_unexpected", reader=r.session, partition=part, offset=off, value=value)
                continue
            count[src].append((part, off))
            ip, idx = position[src]
            prev = last_pos.get((part, ip))
            if ordered and prev is not None and idx <= prev[0]:
                rep.add("copy_order", reader=r.session, output_partition=part, offset=off, input_partition=ip,
                        input=src, after=prev[1])
            last_pos[(part, ip)] = (idx, src)
        for src in position:
            n = len(count.get(src, ()))
            if n == 0:
                rep.add("copy_lost", reader=r.session, input=src, input_partition=position[src][0])
            elif n > 1:
                rep.add("copy_duplicate", reader=r.session, input=src, at=count[src])
        rep.stats.setdefault("copy_outputs_read", {})[r.session] = len(out)
    rep.stats["copy_inputs"] = len(position)
    return rep
