"""Malformed input over raw sockets: the offending connection may be closed, the broker must stay up and serving.

Runs against a dedicated broker (module scope) so that garbage never lands in the shared one and a crash here is
attributed to this file. After every case the broker still answers a normal produce + fetch.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from pathlib import Path
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.protocol import api as kapi
from oncelog.protocol.api import RequestHeader
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from oncelog.protocol.records import CRC_OFFSET, MAGIC_OFFSET
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.rawclient import EARLIEST, LATEST, RawClient, build_batch, read_frame, recv_exact, wait_closed

UNSUPPORTED_VERSION = 35
CORRUPT_MESSAGE = 2
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_RECORD = 87
REQUEST_MAX = 1024 * 1024  # socket.request.max.bytes of the dedicated broker


@pytest.fixture(scope="module")
def mbroker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process: malformed input must not take it down, and the teardown sees whether it did (its exit code)
    proc = kafka_module_broker_factory({"num.partitions": 1, "socket.request.max.bytes": REQUEST_MAX},
                                       in_process=False)
    yield proc
    assert proc.alive(), f"broker died during malformed-input tests; log:\n{proc.log_tail()}"
    rc = proc.stop()
    assert rc == 0, f"broker did not shut down cleanly after malformed input (exit {rc}):\n{proc.log_tail()}"


@pytest.fixture(scope="module")
def health_topic(mbroker: KafkaBroker) -> str:
    name = "health"
    with RawClient(mbroker.bootstrap) as c:
        assert c.create_topic(name, 1) == 0
    return name


def assert_serving(broker: KafkaBroker, topic: str) -> None:
    """The broker is alive and a fresh connection can produce a record and fetch it back."""
    assert broker.alive(), f"broker process died; log:\n{broker.log_tail()}"
    marker = uuid.uuid4().hex.encode()
    with RawClient(broker.bootstrap, timeout=10) as c:
        resp = c.produce(topic, 0, build_batch([(b"k", marker)]), acks=-1)
        assert resp.error_code == 0, f"health produce failed with {resp.error_code}"
        p = c.fetch(topic, 0, resp.base_offset)
        assert p.error_code == 0
        from helpers.rawclient import decode_all

        recs = [r for r in decode_all(p.records) if r.offset == resp.base_offset]
        assert recs and recs[0].value == marker, "health record not read back"


def connect(broker: KafkaBroker, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request_bytes(api_key: int, version: int, msg: object, corr: int = 1, client_id: str = "mal") -> bytes:
    return b"".join(bytes(b) for b in kapi.encode_request(RequestHeader(api_key, version, corr, client_id), msg))


# -- framing -------------------------------------------------------------------------------------------------------

def test_random_bytes(mbroker: KafkaBroker, health_topic: str) -> None:
    rnd = os.urandom
    for n in (1, 3, 4, 7, 64, 4096, 100_000):
        with connect(mbroker) as s:
            s.sendall(rnd(n))
            s.shutdown(socket.SHUT_WR)
            assert wait_closed(s, 10), f"after {n} random bytes and EOF the broker kept the connection open"
    assert_serving(mbroker, health_topic)


def test_negative_size_prefix_closes(mbroker: KafkaBroker, health_topic: str) -> None:
    for size in (-1, -2, -(2**31)):
        with connect(mbroker) as s:
            s.sendall(struct.pack(">i", size) + b"\x00" * 16)
            assert wait_closed(s, 5), f"a frame size of {size} did not close the connection"
    assert_serving(mbroker, health_topic)


def test_huge_size_prefix_closes_without_body(mbroker: KafkaBroker, health_topic: str) -> None:
    for size in (REQUEST_MAX + 1, 2**31 - 1):
        with connect(mbroker) as s:
            s.sendall(struct.pack(">i", size) + b"\x00\x12\x00\x00")
            t0 = time.monotonic()
            assert wait_closed(s, 5), f"a frame size of {size} > socket.request.max.bytes did not close"
            assert time.monotonic() - t0 < 5
    assert_serving(mbroker, health_topic)


def test_frame_at_limit_is_read(mbroker: KafkaBroker, health_topic: str) -> None:
    """A frame just under socket.request.max.bytes is accepted (answered), not cut off."""
    big = build_batch([(b"k", os.urandom(REQUEST_MAX // 2))])
    with RawClient(mbroker.bootstrap) as c:
        resp = c.produce(health_topic, 0, big, acks=1)
        assert resp.error_code == 0
    assert_serving(mbroker, health_topic)


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 6, 10, 20])
def test_truncated_frame_then_close(mbroker: KafkaBroker, health_topic: str, cut: int) -> None:
    full = request_bytes(18, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1"))
    assert cut < len(full)
    with connect(mbroker) as s:
        s.sendall(full[:cut])
        time.sleep(0.05)
    # and a truncated produce, closed abruptly (RST)
    batch = build_batch([(b"k", b"v" * 1000)])
    with RawClient(mbroker.bootstrap) as c:
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        from oncelog.protocol.messages.produce_request import (
            PartitionProduceData,
            ProduceRequest,
            TopicProduceData,
        )

        req = request_bytes(0, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[TopicProduceData(
            name=health_topic, partition_data=[PartitionProduceData(index=0, records=batch)])]))
        c.sock.sendall(req[: len(req) * cut // 21])
    assert_serving(mbroker, health_topic)


# -- request level -------------------------------------------------------------------------------------------------

def test_unknown_api_key_closes(mbroker: KafkaBroker, health_topic: str) -> None:
    for api_key in (999, 32767, -1, 92):
        hdr = struct.pack(">hhi", api_key, 0, 7) + struct.pack(">h", 3) + b"mal"
        with connect(mbroker) as s:
            s.sendall(frame(hdr + b"\x00" * 8))
            assert wait_closed(s, 5), f"unknown api key {api_key}: connection not closed"
    assert_serving(mbroker, health_topic)


def test_api_versions_unsupported_version_gets_v0_answer(mbroker: KafkaBroker, health_topic: str) -> None:
    # header v2 (flexible): api_key, version, corr id, client id, empty tagged fields; then an unknown body
    payload = struct.pack(">hhi", 18, 99, 4242) + struct.pack(">h", 3) + b"mal" + b"\x00" + b"\x02x\x021\x00"
    with connect(mbroker) as s:
        s.sendall(frame(payload))
        corr, resp = kapi.decode_response(18, 0, read_frame(s))
        assert corr == 4242
        assert resp.error_code == UNSUPPORTED_VERSION
        keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert keys.get(18, (None, None))[0] == 0 and keys[18][1] >= 3, f"ApiVersions missing from {keys}"
        assert 0 in keys and 1 in keys, f"produce/fetch missing from {keys}"
        # the connection stays usable: a supported ApiVersions next on the same socket is answered normally
        s.sendall(request_bytes(18, 3, ApiVersionsRequest(client_software_name="x", client_software_version="1"),
                                corr=4243))
        corr, resp = kapi.decode_response(18, 3, read_frame(s))
        assert corr == 4243 and resp.error_code == 0
    assert_serving(mbroker, health_topic)


def test_unsupported_version_of_other_api(mbroker: KafkaBroker, health_topic: str) -> None:
    """Produce v0 (below the served minimum) is refused: no answer in a v0 format, the connection is closed."""
    payload = struct.pack(">hhi", 0, 0, 5) + struct.pack(">h", 3) + b"mal" + b"\x00\x01" + b"\x00\x00\x03\xe8" + \
        b"\x00\x00\x00\x00"
    with connect(mbroker) as s:
        s.sendall(frame(payload))
        assert wait_closed(s, 5)
    assert_serving(mbroker, health_topic)


def test_garbage_body_of_known_request(mbroker: KafkaBroker, health_topic: str) -> None:
    """A valid header followed by a body that does not decode (Metadata v12 with absurd array length)."""
    payload = struct.pack(">hhi", 3, 12, 9) + struct.pack(">h", 3) + b"mal" + b"\x00" + b"\xff\xff\xff\xff\x0f"
    with connect(mbroker) as s:
        s.sendall(frame(payload))
        assert wait_closed(s, 5)
    assert_serving(mbroker, health_topic)


def _latest(c: RawClient, topic: str) -> int:
    err, off, _ = c.list_offset(topic, 0, LATEST)
    assert err == 0
    return off


def test_bad_crc_is_corrupt_message_and_log_unchanged(mbroker: KafkaBroker, health_topic: str) -> None:
    topic = f"crc-{uuid.uuid4().hex[:6]}"
    with RawClient(mbroker.bootstrap) as c:
        assert c.create_topic(topic, 1) == 0
        assert c.produce(topic, 0, build_batch([(b"a", b"1")]), acks=-1).error_code == 0
        before = _latest(c, topic)
        good = bytearray(build_batch([(b"k", b"v" * 100)] * 10))
        for where in ("crc", "body"):
            bad = bytearray(good)
            if where == "crc":
                bad[CRC_OFFSET] ^= 0xFF
            else:
                bad[-5] ^= 0x01
            resp = c.produce(topic, 0, bytes(bad), acks=-1)
            assert resp.error_code == CORRUPT_MESSAGE, f"{where} corruption answered {resp.error_code}"
            # a good batch followed by a corrupt one in the same request: all or nothing
            resp = c.produce(topic, 0, bytes(good) + bytes(bad), acks=-1)
            assert resp.error_code == CORRUPT_MESSAGE
        assert _latest(c, topic) == before, "a rejected produce changed the log end"
        assert [r.value for r in c.fetch_all(topic, 0)] == [b"1"]
    assert_serving(mbroker, health_topic)


def magic_v1_message_set(key: bytes, value: bytes) -> bytes:
    import zlib

    body = struct.pack(">bbq", 1, 0, int(time.time() * 1000)) + struct.pack(">i", len(key)) + key + \
        struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(msg)) + msg


def test_magic_v1_batch_rejected(mbroker: KafkaBroker, health_topic: str) -> None:
    topic = f"magic-{uuid.uuid4().hex[:6]}"
    with RawClient(mbroker.bootstrap) as c:
        assert c.create_topic(topic, 1) == 0
        # long enough that a v2 header parser doesn't just fail on length
        ms = magic_v1_message_set(b"key", b"value" * 40)
        assert ms[MAGIC_OFFSET] == 1
        resp = c.produce(topic, 0, ms, acks=1)
        assert resp.error_code in (UNSUPPORTED_FOR_MESSAGE_FORMAT, CORRUPT_MESSAGE), resp
        # magic 0 too
        ms0 = bytearray(ms)
        ms0[MAGIC_OFFSET] = 0
        resp = c.produce(topic, 0, bytes(ms0), acks=1)
        assert resp.error_code in (UNSUPPORTED_FOR_MESSAGE_FORMAT, CORRUPT_MESSAGE), resp
        assert _latest(c, topic) == 0
        err, earliest, _ = c.list_offset(topic, 0, EARLIEST)
        assert (err, earliest) == (0, 0)
    assert_serving(mbroker, health_topic)


def test_invalid_batch_fields_rejected(mbroker: KafkaBroker, health_topic: str) -> None:
    """Batch-level rule violations with a correct CRC (record count mismatch, length past the buffer)."""
    import crc32c

    topic = f"inv-{uuid.uuid4().hex[:6]}"
    with RawClient(mbroker.bootstrap) as c:
        assert c.create_topic(topic, 1) == 0
        good = bytearray(build_batch([(b"k", b"v")] * 3))
        bad = bytearray(good)
        struct.pack_into(">i", bad, 57, 7)  # recordsCount 7 != lastOffsetDelta + 1
        struct.pack_into(">I", bad, CRC_OFFSET, crc32c.crc32c(bytes(bad[21:])))
        resp = c.produce(topic, 0, bytes(bad), acks=1)
        assert resp.error_code in (INVALID_RECORD, CORRUPT_MESSAGE), resp
        cut = bytearray(good)
        struct.pack_into(">i", cut, 8, len(good))  # batchLength runs past the end of the record set
        resp = c.produce(topic, 0, bytes(cut), acks=1)
        assert resp.error_code == CORRUPT_MESSAGE, resp
        assert _latest(c, topic) == 0
    assert_serving(mbroker, health_topic)


# -- stalls --------------------------------------------------------------------------------------------------------

def test_stalled_connection_does_not_block_others(mbroker: KafkaBroker, health_topic: str) -> None:
    full = request_bytes(3, 12, MetadataRequest(topics=None))
    stalled = []
    try:
        for cut in (2, 6, len(full) // 2):
            s = connect(mbroker)
            s.sendall(full[:cut])
            stalled.append(s)
        big = connect(mbroker)  # announces a 900 KB frame and sends 10 bytes of it
        big.sendall(struct.pack(">i", 900_000) + b"\x00" * 10)
        stalled.append(big)
        t0 = time.monotonic()
        for _ in range(5):
            assert_serving(mbroker, health_topic)
        assert time.monotonic() - t0 < 5, "other clients were slowed down by stalled connections"
        # the stalled one completes later and is answered
        s = stalled[2]
        s.sendall(full[len(full) // 2:])
        corr, resp = kapi.decode_response(3, 12, read_frame(s))
        assert corr == 1 and resp.brokers
    finally:
        for s in stalled:
            s.close()
    assert_serving(mbroker, health_topic)


def test_pipelined_requests_answered_in_order(mbroker: KafkaBroker, health_topic: str) -> None:
    with connect(mbroker) as s:
        reqs = b"".join(request_bytes(18, 3, ApiVersionsRequest(client_software_name="x",
                                                                client_software_version="1"), corr=i)
                        for i in range(1, 51))
        s.sendall(reqs)
        corrs = [kapi.decode_response(18, 3, read_frame(s))[0] for _ in range(50)]
        assert corrs == list(range(1, 51))


# -- fuzz ----------------------------------------------------------------------------------------------------------

def _seed_requests() -> list[bytes]:
    """Valid request frames (without size prefix) to mutate."""
    from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
    from oncelog.protocol.messages.list_offsets_request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData

    batch = build_batch([(b"key", b"value" * 20)] * 3, compression=1)
    msgs = [
        (18, 3, ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")),
        (18, 0, ApiVersionsRequest()),
        (3, 12, MetadataRequest(topics=[MetadataRequestTopic(name="fuzz")])),
        (3, 1, MetadataRequest(topics=[MetadataRequestTopic(name="fuzz")])),
        (0, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[TopicProduceData(
            name="fuzz", partition_data=[PartitionProduceData(index=0, records=batch)])])),
        (0, 3, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[TopicProduceData(
            name="fuzz", partition_data=[PartitionProduceData(index=0, records=batch)])])),
        (1, 12, FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic="fuzz", partitions=[
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536)])])),
        (2, 7, ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name="fuzz", partitions=[
            ListOffsetsPartition(partition_index=0, timestamp=-1)])])),
    ]
    return [request_bytes(k, v, m, corr=77)[4:] for k, v, m in msgs]


SEEDS = _seed_requests()


@st.composite
def fuzz_payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "mutate", "mutate", "mutate", "truncate", "header"]))
    if kind == "random":
        body = draw(st.binary(min_size=0, max_size=300))
        return frame(body) if draw(st.booleans()) else body
    seed = bytearray(draw(st.sampled_from(SEEDS)))
    if kind == "truncate":
        return frame(bytes(seed[: draw(st.integers(0, len(seed) - 1))]))
    if kind == "header":
        # a real api key / version pair the broker may or may not serve, followed by random bytes
        api = draw(st.sampled_from([0, 1, 2, 3, 18, 19, 20, 32, 33, 37, 44, 48, 60, 75]))
        ver = draw(st.integers(-2, 20))
        return frame(struct.pack(">hhi", api, ver, 1) + draw(st.binary(max_size=200)))
    n = draw(st.integers(1, 8))
    for _ in range(n):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(seed) - 1, 0)))
        if op == "flip" and seed:
            seed[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and seed:
            seed[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "insert":
            seed[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and seed:
            del seed[pos: pos + draw(st.integers(1, 8))]
    return frame(bytes(seed))


def test_fuzz_frames_keep_broker_up(mbroker: KafkaBroker, health_topic: str) -> None:
    with RawClient(mbroker.bootstrap) as c:
        assert c.create_topic("fuzz", 1) == 0
    count: list[int] = []

    @settings(max_examples=200, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(payload=fuzz_payloads())
    def check(payload: bytes) -> None:
        count.append(len(payload))
        with connect(mbroker, timeout=5) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the broker may already have closed on us
            # whatever it answers, it must end the connection once we've hung up (no leak, no hang)
            assert wait_closed(s, 5), f"connection not closed after EOF; payload {payload[:64]!r}"
        assert mbroker.alive(), f"broker died on payload {payload[:200]!r}; log:\n{mbroker.log_tail()}"

    check()
    assert len(count) >= 150, f"only {len(count)} fuzz examples ran"
    assert_serving(mbroker, health_topic)
    # a normal client still works after the storm
    with RawClient(mbroker.bootstrap) as c:
        resp = c.api_versions()
        assert resp.error_code == 0


def test_broker_logged_no_crash(mbroker: KafkaBroker) -> None:
    """No handler blew up with an unexpected exception on any of the inputs above (malformed input must be
    answered with an error code or a closed connection, never an internal error)."""
    text = Path(mbroker.log_path).read_text(errors="replace")
    bad = [line for line in text.splitlines() if "Traceback" in line or " failed for client" in line
           or "cannot encode" in line]
    assert not bad, "broker log shows internal errors:\n" + "\n".join(bad[:20]) + "\n" + mbroker.log_tail(80)


_ = recv_exact  # re-exported helper used by other test modules
