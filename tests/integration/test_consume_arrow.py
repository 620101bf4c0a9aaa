"""``Consumer.consume_arrow()``: the records of a fetch round as Arrow record batches, decoded column-wise. They
equal what ``consume()`` returns record by record (keys, values, nulls, headers, timestamps, offsets), the
isolation level is honoured (read_committed drops aborted transactions and markers), a fetch position inside a
compressed batch cuts the records before it, and the offsets are stored for commit()."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from oncelog.client import OFFSET_BEGINNING, Admin, Consumer, Producer

pytestmark = pytest.mark.timeout(120)
T = 30.0


def _field(m: Any, name: str) -> Any:
    """A Message field, whether Message has attributes or confluent-kafka's accessor methods."""
    v = getattr(m, name)
    return v() if callable(v) else v


def _arrow_rows(conf: dict[str, Any], topic: str, partitions: int, want: int, start: int = OFFSET_BEGINNING
                ) -> list[dict[str, Any]]:
    with Consumer(conf) as c:
        c.assign([(topic, p, start) for p in range(partitions)])
        rows: list[dict[str, Any]] = []
        deadline = time.monotonic() + T
        while len(rows) < want and time.monotonic() < deadline:
            for rb in c.consume_arrow(1.0):
                assert isinstance(rb, pa.RecordBatch) and rb.num_rows > 0
                assert len(set(rb.column("partition").to_pylist())) == 1  # one partition per batch
                rows += rb.to_pylist()
        assert c.consume_arrow(0.3) == []  # nothing more
    return rows


def _message_rows(conf: dict[str, Any], topic: str, partitions: int, want: int) -> list[dict[str, Any]]:
    with Consumer(conf) as c:
        c.assign([(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        msgs: list[Any] = []
        deadline = time.monotonic() + T
        while len(msgs) < want and time.monotonic() < deadline:
            msgs += c.consume(5000, 1.0)
    rows = []
    for m in msgs:
        ts = _field(m, "timestamp")
        ts_type, ts_ms = ts if isinstance(ts, tuple) else (1, ts)
        hs = _field(m, "headers")
        rows.append({"topic": _field(m, "topic"), "partition": _field(m, "partition"), "offset": _field(m, "offset"),
                     "timestamp": ts_ms, "timestamp_type": ts_type, "key": _field(m, "key"),
                     "value": _field(m, "value"),
                     "headers": [{"key": k, "value": v} for k, v in hs] if hs else None})
    return rows


def _key(r: dict[str, Any]) -> tuple[int, int]:
    return r["partition"], r["offset"]


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_consume_arrow_equals_consume(bootstrap: str, topic_name: str, compression: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as a:
        a.create_topics(topic_name, 2)
    n = 4000
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression}) as p:
        for i in range(n):
            p.produce(topic_name, None if i % 97 == 0 else f"value-{i}".encode() * (1 + i % 5),
                      None if i % 3 else f"k{i}".encode(), partition=i % 2, timestamp=1_700_000_000_000 + i,
                      headers=[("h", f"{i}".encode()), ("n", None)] if i % 11 == 0 else None)
        assert p.flush(T) == 0
    conf = {"bootstrap.servers": bootstrap}
    arrow = _arrow_rows(conf, topic_name, 2, n)
    assert len(arrow) == n
    assert sorted(arrow, key=_key) == sorted(_message_rows(conf, topic_name, 2, n), key=_key)
    for part in range(2):  # offset order within a partition
        offsets = [r["offset"] for r in arrow if r["partition"] == part]
        assert offsets == list(range(n // 2))


def test_consume_arrow_read_committed_drops_aborted_transactions(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as a:
        a.create_topics(topic_name, 1)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"arrow-{uuid.uuid4().hex}"}) as p:
        p.init_transactions(T)
        for txn in range(6):
            p.begin_transaction()
            for i in range(50):
                p.produce(topic_name, f"t{txn}-{i}".encode(), partition=0)
            plain.produce(topic_name, f"plain-{txn}".encode(), partition=0)
            plain.flush(T)
            assert p.flush(T) == 0  # in the log before the abort marker
            if txn % 2:
                p.abort_transaction(T)
            else:
                p.commit_transaction(T)
    plain.close()
    committed = {f"t{txn}-{i}".encode() for txn in (0, 2, 4) for i in range(50)}
    plains = {f"plain-{txn}".encode() for txn in range(6)}
    every = committed | plains | {f"t{txn}-{i}".encode() for txn in (1, 3, 5) for i in range(50)}
    rc = _arrow_rows({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}, topic_name, 1,
                     len(committed | plains))
    assert sorted(r["value"] for r in rc) == sorted(committed | plains)
    ru = _arrow_rows({"bootstrap.servers": bootstrap, "isolation.level": "read_uncommitted"}, topic_name, 1,
                     len(every))
    assert sorted(r["value"] for r in ru) == sorted(every)  # every data record, no transaction marker
    assert [r["offset"] for r in ru] == sorted(r["offset"] for r in ru)


def test_consume_arrow_from_inside_a_compressed_batch_and_commit(bootstrap: str, topic_name: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as a:
        a.create_topics(topic_name, 1)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"}) as p:
        p.produce_batch(topic_name, [f"r{i}".encode() for i in range(500)], partition=0)  # one compressed batch
        assert p.flush(T) == 0
    group = f"g-{uuid.uuid4().hex}"
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    rows = _arrow_rows(conf, topic_name, 1, 300, start=200)
    assert [r["offset"] for r in rows] == list(range(200, 500))
    assert [r["value"] for r in rows] == [f"r{i}".encode() for i in range(200, 500)]
    with Consumer(conf) as c:
        c.assign([(topic_name, 0, 490)])
        got: list[pa.RecordBatch] = []
        deadline = time.monotonic() + T
        while not got and time.monotonic() < deadline:
            got = c.consume_arrow(1.0)
        assert got[0].column("offset").to_pylist() == list(range(490, 500))
        c.commit(asynchronous=False)
        committed = c.committed([(topic_name, 0)])
    offsets = [_field(tp, "offset") if not isinstance(tp, tuple) else tp[2] for tp in committed]
    assert offsets == [500]
