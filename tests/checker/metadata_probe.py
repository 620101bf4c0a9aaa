"""What each broker tells clients, sampled while faults happen: a thread that sends Metadata for one topic to every
broker in turn (its own connection to each, so one slow broker does not hold up the others) and records, per
answer, the brokers listed and each partition's leader and leader epoch. ``errors`` holds the requests that failed
(connection refused, timed out): a broker that does not answer is no answer, not an empty list."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from oncelog.client.connection import BrokerConnection
from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

__all__ = ["MetadataProbe", "MetadataSample"]


@dataclass(frozen=True)
class MetadataSample:
    at: float  # time.monotonic() of the answer
    node: int  # the broker asked
    brokers: tuple[int, ...]  # node ids listed
    leaders: dict[int, tuple[int, int]]  # partition -> (leader id, leader epoch)


class MetadataProbe(threading.Thread):
    def __init__(self, brokers: dict[int, tuple[str, int]], topic: str, period: float = 0.2,
                 timeout: float = 2.0) -> None:
        super().__init__(daemon=True, name="metadata-probe")
        self.brokers, self.topic, self.period, self.timeout = brokers, topic, period, timeout
        self.samples: list[MetadataSample] = []
        self.errors: list[tuple[float, int, str]] = []
        self._stop_flag = threading.Event()

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(10)

    def run(self) -> None:
        asyncio.run(self._run())

    async def _ask(self, node: int, conns: dict[int, BrokerConnection]) -> None:
        conn = conns.get(node)
        try:
            if conn is None or not conn.connected:
                host, port = self.brokers[node]
                conn = conns[node] = BrokerConnection(host, port, client_id="metadata-probe",
                                                      request_timeout=self.timeout, connect_timeout=self.timeout)
                await conn.connect()
            r = await conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=self.topic)],
                                                allow_auto_topic_creation=False))
        except Exception as e:  # noqa: BLE001 - recorded: a broker that cannot be asked now
            self.errors.append((time.monotonic(), node, f"{type(e).__name__}: {e}"))
            if conn is not None:
                await conn.close()
            conns.pop(node, None)
            return
        leaders = {p.partition_index: (p.leader_id, p.leader_epoch) for t in r.topics if t.name == self.topic
                   for p in t.partitions}
        self.samples.append(MetadataSample(time.monotonic(), node, tuple(sorted(b.node_id for b in r.brokers)),
                                           leaders))

    async def _run(self) -> None:
        conns: dict[int, BrokerConnection] = {}
        try:
            while not self._stop_flag.is_set():
                await asyncio.gather(*(self._ask(n, conns) for n in self.brokers))
                await asyncio.sleep(self.period)
        finally:
            for c in conns.values():
                await c.close()

    def between(self, start: float, end: float) -> list[MetadataSample]:
        return [s for s in self.samples if start <= s.at <= end]
