"""The sink-commit topic: where the exactly-once sink durably records which staged transactions make up a batch.

One record per decided batch, key ``"<sink id>/<batch id>"``, value JSON::

    {"sink": "<sink id>", "batch": 7, "decided_at_ms": 1700000000000,
     "txns": [{"id": "<transactional id>", "state": "<pid>:<epoch>", "topics": ["out"], "rows": 1000}, ...]}

The topic is compacted (a batch's record is only ever written once by the driver that decided it, so compaction
keeps exactly that record); once batch B is completed, the decision of B-1 is no longer needed (Spark never
re-runs a batch older than the last one it started) and is tombstoned, so reading a sink's decisions stays cheap. A batch is *decided* once its record is in the log (written with acks=all and read
back up to the high watermark); that record, not anything a later attempt of the batch reports, says which
transactions are committed. See :mod:`oncelog.spark.sink` for why this gives exactly-once output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.client import OFFSET_BEGINNING, Admin, Consumer, KafkaError, Producer

__all__ = ["DEFAULT_COMMIT_TOPIC", "Decision", "SinkCommitLog", "SinkCommitLogError", "StagedTxn"]

DEFAULT_COMMIT_TOPIC = "__oncelog_spark_sink_commits"
_TOPIC_ALREADY_EXISTS = 36
#: compacted, with segments small enough to be cleaned: a sink tombstones each batch's decision once the next batch
#: is completed, so the topic stays about one record per running query
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(4 << 20), "segment.ms": str(3600_000),
                 "delete.retention.ms": str(3600_000)}


class SinkCommitLogError(RuntimeError):
    """The sink-commit topic could not be read or written; the batch is not decided (Spark retries it)."""


@dataclass(frozen=True, slots=True)
class StagedTxn:
    """One task's prepared (flushed, uncommitted) transaction, as the task reported it."""

    transactional_id: str
    #: the PreparedTxnState as ``"producer_id:epoch"``
    state: str
    topics: tuple[str, ...] = ()
    rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.transactional_id, "state": self.state, "topics": list(self.topics), "rows": self.rows}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> StagedTxn:
        return StagedTxn(str(obj["id"]), str(obj["state"]), tuple(str(t) for t in obj.get("topics", ())),
                         int(obj.get("rows", 0)))


@dataclass(frozen=True, slots=True)
class Decision:
    """The recorded outcome of one batch: exactly these transactions are committed, every other one is aborted."""

    sink_id: str
    batch_id: int
    txns: tuple[StagedTxn, ...]
    decided_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def key(self) -> str:
        return decision_key(self.sink_id, self.batch_id)

    @property
    def txn_ids(self) -> frozenset[str]:
        return frozenset(t.transactional_id for t in self.txns)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.txns)

    def encode(self) -> bytes:
        return json.dumps({"sink": self.sink_id, "batch": self.batch_id, "decided_at_ms": self.decided_at_ms,
                           "txns": [t.to_json() for t in self.txns]}, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> Decision:
        obj = json.loads(data)
        return Decision(str(obj["sink"]), int(obj["batch"]), tuple(StagedTxn.from_json(t) for t in obj["txns"]),
                        int(obj.get("decided_at_ms", 0)))


def decision_key(sink_id: str, batch_id: int) -> str:
    return f"{sink_id}/{batch_id}"


class SinkCommitLog:
    """Read and append decisions in the sink-commit topic (created compacted on first use)."""

    def __init__(self, bootstrap_conf: Mapping[str, Any], topic: str = DEFAULT_COMMIT_TOPIC,
                 timeout: float = 30.0) -> None:
        #: client settings every role accepts (bootstrap.servers, client.id, timeouts)
        self.conf = dict(bootstrap_conf)
        self.topic = topic
        self.timeout = timeout

    def ensure_topic(self, admin: Admin) -> list[int]:
        """Create the topic (1 partition, compacted) unless it exists; returns its partitions."""
        try:
            admin.create_topics(self.topic, 1, TOPIC_CONFIGS)
        except KafkaError as e:
            if int(e.code()) != _TOPIC_ALREADY_EXISTS:
                raise SinkCommitLogError(
                    f"cannot create the sink-commit topic {self.topic!r} at {self.conf.get('bootstrap.servers')}: "
                    f"{e}; create it yourself (compacted) or set the option 'sinkCommitTopic'") from e
        return sorted(p.partition for p in admin.describe_topic(self.topic).partitions)

    def decisions(self, sink_id: str, admin: Admin) -> dict[int, Decision]:
        """Every recorded decision of ``sink_id`` by batch id (the latest record of a key wins, as compaction)."""
        parts = self.ensure_topic(admin)
        ends = admin.list_offsets({(self.topic, p): "latest" for p in parts})
        todo = {p: ends[(self.topic, p)].offset for p in parts if ends[(self.topic, p)].offset > 0}
        out: dict[int, Decision] = {}
        if not todo:
            return out
        prefix = f"{sink_id}/".encode()
        consumer = Consumer({**self.conf, "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        try:
            consumer.assign([(self.topic, p, OFFSET_BEGINNING) for p in todo])
            deadline = time.monotonic() + self.timeout
            while todo:
                if time.monotonic() > deadline:
                    raise SinkCommitLogError(
                        f"reading the sink-commit topic {self.topic!r} did not reach its end offsets {todo} within "
                        f"{self.timeout:g} s; is the broker at {self.conf.get('bootstrap.servers')} healthy?")
                for m in consumer.consume(10_000, 0.5):
                    key, value, partition = m.key(), m.value(), m._partition
                    if key is not None and key.startswith(prefix):
                        if value is None:  # a tombstone
                            out.pop(int(key[len(prefix):]), None)
                        else:
                            d = Decision.decode(value)
                            out[d.batch_id] = d
                    if m._offset + 1 >= todo.get(partition, 0):
                        todo.pop(partition, None)
                for p in list(todo):
                    pos = consumer.position(self.topic, p)
                    if pos is not None and pos >= todo[p]:
                        todo.pop(p)
        finally:
            consumer.close()
        return out

    def record(self, decision: Decision) -> None:
        """Append ``decision`` durably (acks=all, flushed); raises :class:`SinkCommitLogError` if not acknowledged."""
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                errors.append(err)

        producer = Producer({**self.conf, "acks": "all"})
        try:
            producer.produce(self.topic, decision.encode(), key=decision.key, on_delivery=delivered)
            left = producer.flush(self.timeout)
        finally:
            producer.close(5)
        if left or errors:
            raise SinkCommitLogError(
                f"the decision for batch {decision.batch_id} of sink {decision.sink_id!r} was not acknowledged by "
                f"{self.topic!r}: {errors[0] if errors else 'timed out'}; the batch stays undecided and is retried")

    def forget(self, sink_id: str, batch_ids: Sequence[int]) -> None:
        """Tombstone the decisions of finished batches so compaction drops them (best effort: a tombstone that is
        lost only leaves an old decision in the log)."""
        if not batch_ids:
            return
        producer = Producer({**self.conf, "acks": "all"})
        try:
            for b in batch_ids:
                producer.produce(self.topic, None, key=decision_key(sink_id, b))
            producer.flush(self.timeout)
        finally:
            producer.close(5)
