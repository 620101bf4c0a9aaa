"""SIGKILL the broker mid-stream: every acknowledged (acks=all) record must survive at exactly its acked offset.

A dedicated broker per test in a tmp dir, small segments so that rolls happen while producing. Variants:
* real client (confluent-kafka, acks=all, idempotence off), killed at a random moment, 5 rounds;
* raw-protocol producer with exact control, and between kill and restart the tail of the active segment is
  damaged (garbage appended, zeros appended, a half-written batch header, the last batch cut in half): the broker
  must start, drop only the torn tail, keep every acked record, and continue appending after it.
"""

from __future__ import annotations

import os
import random
import struct
import threading
import time
from pathlib import Path
from collections.abc import Callable, Iterator

import pytest

from oncelog.protocol.records import parse_batch_header
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.rawclient import LATEST, ConnectionClosed, RawClient, build_batch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

PARTITIONS = 3
SEGMENT_BYTES = 256 * 1024


@pytest.fixture
def kbroker(kafka_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process on a disk folder: the tests SIGKILL it and recover what it wrote
    proc = kafka_broker_factory({"num.partitions": PARTITIONS, "log.segment.bytes": SEGMENT_BYTES},
                                in_process=False, memory=False)
    yield proc
    proc.kill()


def read_partition(bootstrap: str, topic: str, partition: int) -> dict[int, bytes | None]:
    """offset -> value of every record from offset 0; decoding checks every batch's CRC."""
    with RawClient(bootstrap, timeout=20) as c:
        assert c.list_offset(topic, partition, -2)[:2] == (0, 0), "log start moved"
        recs = c.fetch_all(topic, partition, 0)
        end = c.list_offset(topic, partition, LATEST)[1]
    offsets = [r.offset for r in recs]
    assert offsets == list(range(len(offsets))), f"offsets of {topic}-{partition} are not 0..n-1: gaps/dupes"
    assert len(offsets) == end, f"{topic}-{partition}: read {len(offsets)} records, log end is {end}"
    return {r.offset: r.value for r in recs}


def check_acked(bootstrap: str, topic: str, acked: dict[tuple[int, int], bytes]) -> dict[int, dict[int, bytes | None]]:
    logs = {p: read_partition(bootstrap, topic, p) for p in range(PARTITIONS)}
    missing = [(p, o, v) for (p, o), v in acked.items() if logs[p].get(o) != v]
    assert not missing, (f"{len(missing)} of {len(acked)} acked records are missing or changed after the crash, "
                         f"e.g. {[(p, o, v, logs[p].get(o)) for p, o, v in missing[:5]]}")
    return logs


def consume_all_confluent(bootstrap: str, topic: str, expect: dict[int, int]) -> None:
    """A real consumer reads every partition to its end with no error (no corrupt batch ever reaches it)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": True, "check.crcs": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen = {p: -1 for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(seen[p] + 1 < expect[p] for p in seen) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, f"consumer error: {err}"
                    continue
                assert m.offset() == seen[m.partition()] + 1, "consumer saw a gap"
                seen[m.partition()] = m.offset()
        assert {p: seen[p] + 1 for p in seen} == expect
    finally:
        c.close()


# -- real client, random kill --------------------------------------------------------------------------------------

def test_sigkill_mid_stream_confluent(kbroker: KafkaBroker) -> None:
    from confluent_kafka import Producer

    topic = "crash"
    with RawClient(kbroker.bootstrap) as c:
        assert c.create_topic(topic, PARTITIONS) == 0
    rnd = random.Random(int.from_bytes(os.urandom(4), "big"))
    acked: dict[tuple[int, int], bytes] = {}
    total_acked_before: list[int] = []
    for rnd_no in range(5):
        p = Producer({"bootstrap.servers": kbroker.bootstrap, "enable.idempotence": False, "acks": "all",
                      "linger.ms": rnd.choice([0, 1, 5]), "batch.num.messages": rnd.choice([1, 50, 500]),
                      "message.timeout.ms": 5000, "retries": 0, "reconnect.backoff.ms": 50})
        lock = threading.Lock()

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                with lock:
                    key = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
                    assert key not in acked, f"offset {key} acknowledged twice"
                    acked[key] = msg.value()  # type: ignore[attr-defined]

        stop = threading.Event()

        def run(p: Producer = p) -> None:  # this round's producer (the name is deleted after the round)
            i = 0
            while not stop.is_set():
                try:
                    p.produce(topic, value=f"round{rnd_no}-{i}-".encode() + b"x" * rnd.randrange(0, 400),
                              partition=i % PARTITIONS, on_delivery=on_delivery)
                    i += 1
                except BufferError:
                    p.poll(0.01)
                if i % 100 == 0:
                    p.poll(0)
                    time.sleep(0.001)

        th = threading.Thread(target=run)
        th.start()
        time.sleep(rnd.uniform(0.3, 1.5))
        kbroker.kill()
        stop.set()
        th.join()
        p.purge()  # anything not yet answered stays unacknowledged
        p.poll(0.5)
        p.flush(1)
        del p
        total_acked_before.append(len(acked))
        kbroker.start()
        logs = check_acked(kbroker.bootstrap, topic, acked)
        assert sum(len(v) for v in logs.values()) >= len(acked)
    assert total_acked_before[-1] > 500, f"too few records acked to mean anything: {total_acked_before}"
    # after the last round a real consumer reads everything cleanly
    consume_all_confluent(kbroker.bootstrap, topic,
                          {p: len(read_partition(kbroker.bootstrap, topic, p)) for p in range(PARTITIONS)})


# -- raw producer, exact acks, damaged tail -----------------------------------------------------------------------

class RawProducer(threading.Thread):
    """Sends acks=all produce requests in a loop, 1-20 records a batch, round-robin over partitions, recording the
    offsets the broker acknowledges; stops at the first connection error (the broker was killed)."""

    def __init__(self, bootstrap: str, topic: str, tag: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.tag = bootstrap, topic, tag
        self.rnd = random.Random(seed)
        self.acked: dict[tuple[int, int], bytes] = {}
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            c = RawClient(self.bootstrap, timeout=10)
        except OSError as e:
            self.error = e
            return
        i = 0
        try:
            while not self.stop_flag.is_set():
                part = i % PARTITIONS
                values = [f"{self.tag}-{i}-{j}-".encode() + b"y" * self.rnd.randrange(0, 300)
                          for j in range(self.rnd.randrange(1, 21))]
                resp = c.produce(self.topic, part, build_batch([(None, v) for v in values],
                                                               compression=self.rnd.choice([0, 0, 1, 3])))
                assert resp.error_code == 0, f"produce error {resp.error_code}"
                for j, v in enumerate(values):
                    self.acked[(part, resp.base_offset + j)] = v
                i += 1
        except (ConnectionClosed, OSError):
            pass
        except BaseException as e:  # noqa: BLE001
            self.error = e
        finally:
            c.close()


def active_segment(data_dir: Path, topic: str, partition: int) -> Path:
    logs = sorted((data_dir / f"{topic}-{partition}").glob("*.log"))
    assert logs, f"no segment files for {topic}-{partition} in {data_dir}"
    return logs[-1]


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of every complete batch in a segment file."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos + 61 <= len(data):
        h = parse_batch_header(data, pos)
        if h.size < 61 or pos + h.size > len(data):
            break
        out.append((pos, h.size, h.base_offset))
        pos += h.size
    return out


DAMAGES = ["garbage", "zeros", "half-header", "cut-last-batch"]


def damage(path: Path, how: str, rnd: random.Random) -> int | None:
    """Damage the tail of a segment file; returns the base offset of a batch destroyed on purpose, if any."""
    if how == "garbage":
        with open(path, "ab") as f:
            f.write(os.urandom(rnd.randrange(1, 5000)))
        return None
    if how == "zeros":  # preallocated-but-unwritten space, as a filesystem may leave after a crash
        with open(path, "ab") as f:
            f.write(b"\x00" * rnd.choice([12, 61, 4096]))
        return None
    if how == "half-header":  # a batch whose header made it but not its body
        hdr = bytearray(build_batch([(None, b"v" * 500)] * 3))
        struct.pack_into(">q", hdr, 0, 10**6)
        with open(path, "ab") as f:
            f.write(bytes(hdr[: rnd.randrange(13, 200)]))
        return None
    assert how == "cut-last-batch"
    batches = batch_positions(path)
    assert batches, f"{path} has no complete batch to cut"
    pos, size, base = batches[-1]
    os.truncate(path, pos + rnd.randrange(1, size))
    return base


@pytest.mark.parametrize("how", DAMAGES)
def test_sigkill_then_torn_tail(kbroker: KafkaBroker, how: str) -> None:
    topic = "torn"
    with RawClient(kbroker.bootstrap) as c:
        assert c.create_topic(topic, PARTITIONS) == 0
    seed = int.from_bytes(os.urandom(4), "big")
    rnd = random.Random(seed)
    acked: dict[tuple[int, int], bytes] = {}
    for round_no in range(2):
        prod = RawProducer(kbroker.bootstrap, topic, f"{how}{round_no}", rnd.randrange(1 << 30))
        prod.start()
        time.sleep(rnd.uniform(0.4, 1.2))
        kbroker.kill()
        prod.join(15)
        assert not prod.is_alive() and prod.error is None, f"producer failed: {prod.error!r} (seed {seed})"
        assert len(prod.acked) > 20, f"only {len(prod.acked)} records acked before the kill (seed {seed})"
        acked.update(prod.acked)

        damaged_part = rnd.randrange(PARTITIONS)
        seg = active_segment(kbroker.data_dir, topic, damaged_part)
        size_before = seg.stat().st_size
        cut_base = damage(seg, how, rnd)
        expected_end = None
        if cut_base is not None:
            # records of the batch we destroyed on purpose can't survive; everything before it must
            acked = {k: v for k, v in acked.items() if not (k[0] == damaged_part and k[1] >= cut_base)}
            expected_end = cut_base

        kbroker.start()
        logs = check_acked(kbroker.bootstrap, topic, acked)
        with RawClient(kbroker.bootstrap) as c:
            end = c.list_offset(topic, damaged_part, LATEST)[1]
            if expected_end is not None:
                assert end == expected_end, f"after cutting the batch at {cut_base} the log end is {end}"
            else:
                assert seg.stat().st_size <= size_before, "the damaged tail was not truncated"
            # the log continues right after the kept prefix, and what's written now reads back
            resp = c.produce(topic, damaged_part, build_batch([(None, b"after-recovery")]))
            assert resp.error_code == 0 and resp.base_offset == end
            acked[(damaged_part, end)] = b"after-recovery"
            assert c.fetch_all(topic, damaged_part, end)[0].value == b"after-recovery"
        assert sum(len(v) for v in logs.values()) >= len(acked) - 1
    consume_all_confluent(kbroker.bootstrap, topic,
                          {p: len(read_partition(kbroker.bootstrap, topic, p)) for p in range(PARTITIONS)})


def test_sigkill_during_segment_rolls_and_idle_restart(kbroker: KafkaBroker) -> None:
    """Kill right after many rolls, restart twice without writing in between: nothing changes across idle
    restarts (recovery is idempotent) and a clean stop after recovery keeps everything too."""
    topic = "rolls"
    with RawClient(kbroker.bootstrap) as c:
        assert c.create_topic(topic, PARTITIONS) == 0
    prod = RawProducer(kbroker.bootstrap, topic, "rolls", 7)
    prod.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(list((kbroker.data_dir / f"{topic}-0").glob("*.log"))) < 4:
        time.sleep(0.05)
    kbroker.kill()
    prod.join(15)
    assert prod.error is None
    assert len(list((kbroker.data_dir / f"{topic}-0").glob("*.log"))) >= 3, "segments did not roll"
    kbroker.start()
    first = check_acked(kbroker.bootstrap, topic, prod.acked)
    kbroker.kill()
    kbroker.start()
    assert check_acked(kbroker.bootstrap, topic, prod.acked) == first
    assert "not shut down cleanly" in kbroker.log_path.read_text(), "a SIGKILLed data dir was not recovered"
    assert kbroker.stop() == 0
    mark = len(kbroker.log_path.read_text())
    kbroker.start()
    assert check_acked(kbroker.bootstrap, topic, prod.acked) == first
    after = kbroker.log_path.read_text()[mark:]
    assert "not shut down cleanly" not in after, "a clean stop was not recorded: the next start recovered"
