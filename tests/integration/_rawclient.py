"""A tiny blocking Kafka protocol client for hand-made requests in integration and crash tests."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from oncelog.protocol import api as kapi
from oncelog.protocol.api import RequestHeader
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from oncelog.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from oncelog.protocol.records import RecordBatchBuilder, Record, decode_records, parse_batch_header

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS = 0, 1, 2, 3, 18, 19
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


class ConnectionClosed(Exception):
    pass


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionClosed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def wait_closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True if the peer closes (EOF or reset) within ``timeout``; any bytes it sends first are discarded."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def build_batch(records: list[tuple[bytes | None, bytes | None]], *, compression: int = 0,
                timestamp_ms: int | None = None,
                headers: list[tuple[str, bytes | None]] | None = None) -> bytes:
    b = RecordBatchBuilder(compression=compression)
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    for k, v in records:
        b.append(ts, k, v, headers or ())
    return b.build()


def decode_all(records: Any) -> list[Record]:
    """Every record of a fetch response's record set (batches back to back; a trailing partial batch ignored)."""
    out: list[Record] = []
    if not records:
        return out
    data = bytes(records)
    pos = 0
    while pos + 61 <= len(data):
        h = parse_batch_header(data, pos)
        if pos + h.size > len(data):
            break
        out.extend(decode_records(data, pos))
        pos += h.size
    return out


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 15.0, client_id: str = "raw-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, msg: Any) -> int:
        self._corr += 1
        bufs = kapi.encode_request(RequestHeader(api_key, version, self._corr, self.client_id), msg)
        self.sock.sendall(b"".join(bytes(b) for b in bufs))
        return self._corr

    def recv(self, api_key: int, version: int, corr: int) -> Any:
        frame = read_frame(self.sock)
        got_corr, msg = kapi.decode_response(api_key, version, frame)
        assert got_corr == corr, f"correlation id {got_corr} != {corr}"
        return msg

    def request(self, api_key: int, version: int, msg: Any) -> Any:
        return self.recv(api_key, version, self.send(api_key, version, msg))

    # -- conveniences ----------------------------------------------------------------------------------------
    def find_group_coordinator(self, group: str) -> Any:
        """FindCoordinator for ``group``, as every client sends before its first group request (on a single node it
        also creates ``__consumer_offsets`` on first use, as Kafka's FindCoordinator does)."""
        from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest

        return self.request(10, 3, FindCoordinatorRequest(key=group, key_type=0))

    def api_versions(self, version: int = 3) -> Any:
        return self.request(API_VERSIONS, version, ApiVersionsRequest(client_software_name="raw",
                                                                      client_software_version="1"))

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> int:
        from oncelog.protocol.messages.create_topics_request import CreatableTopicConfig

        topic = CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=[],
                               configs=[CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])
        resp = self.request(CREATE_TOPICS, 5, CreateTopicsRequest(topics=[topic], timeout_ms=10000))
        return int(resp.topics[0].error_code)

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, version: int = 9) -> Any:
        req = ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[
            TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=partition, records=batch)])])
        if acks == 0:
            self.send(PRODUCE, version, req)
            return None
        resp = self.request(PRODUCE, version, req)
        return resp.responses[0].partition_responses[0]

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
              max_bytes: int = 50 * 1024 * 1024, version: int = 12) -> Any:
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[
                               FetchTopic(topic=topic, partitions=[FetchPartition(
                                   partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])
        resp = self.request(FETCH, version, req)
        return resp.responses[0].partitions[0]

    def fetch_all(self, topic: str, partition: int, start: int = 0) -> list[Record]:
        """Every record from ``start`` to the high watermark."""
        out: list[Record] = []
        offset = start
        while True:
            p = self.fetch(topic, partition, offset)
            assert p.error_code == 0, f"fetch {topic}-{partition}@{offset}: error {p.error_code}"
            recs = [r for r in decode_all(p.records) if r.offset >= offset]
            out.extend(recs)
            if recs:
                offset = recs[-1].offset + 1
            if offset >= p.high_watermark or not recs:
                return out

    def list_offset(self, topic: str, partition: int, timestamp: int, version: int = 7) -> tuple[int, int, int]:
        """(error_code, offset, timestamp) for a ListOffsets query."""
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsTopic(name=topic, partitions=[ListOffsetsPartition(partition_index=partition,
                                                                         timestamp=timestamp)])])
        resp = self.request(LIST_OFFSETS, version, req)
        p = resp.topics[0].partitions[0]
        return int(p.error_code), int(p.offset), int(p.timestamp)
