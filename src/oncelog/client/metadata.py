"""``list_topics()`` results shaped as confluent-kafka's: :class:`ClusterMetadata` with ``brokers`` and ``topics``
dicts of :class:`BrokerMetadata` / :class:`TopicMetadata` (``partitions``: dict of :class:`PartitionMetadata`)."""

from __future__ import annotations

from typing import Any

from oncelog.protocol.errors import ErrorCode

from .cluster import Cluster
from .errors import KafkaError

__all__ = ["BrokerMetadata", "ClusterMetadata", "PartitionMetadata", "TopicMetadata", "list_topics"]


class BrokerMetadata:
    __slots__ = ("host", "id", "port")

    def __init__(self, id: int, host: str, port: int) -> None:
        self.id, self.host, self.port = id, host, port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"


class PartitionMetadata:
    __slots__ = ("error", "id", "isrs", "leader", "replicas")

    def __init__(self, id: int, leader: int, replicas: list[int], isrs: list[int],
                 error: KafkaError | None = None) -> None:
        self.id, self.leader, self.replicas, self.isrs, self.error = id, leader, replicas, isrs, error

    def __repr__(self) -> str:
        return f"PartitionMetadata({self.id})"


class TopicMetadata:
    __slots__ = ("error", "partitions", "topic")

    def __init__(self, topic: str, partitions: dict[int, PartitionMetadata], error: KafkaError | None = None) -> None:
        self.topic, self.partitions, self.error = topic, partitions, error

    def __repr__(self) -> str:
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"


class ClusterMetadata:
    __slots__ = ("brokers", "cluster_id", "controller_id", "orig_broker_id", "orig_broker_name", "topics")

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"


def _err(code: int) -> KafkaError | None:
    return KafkaError(code) if code else None


async def list_topics(cluster: Cluster, topic: str | None = None) -> ClusterMetadata:
    """Fresh metadata of every topic (or of ``topic`` only; a missing one has ``error`` UNKNOWN_TOPIC_OR_PART)."""
    resp: Any = await cluster.refresh(None if topic is None else [topic])
    md = ClusterMetadata()
    md.cluster_id = resp.cluster_id
    md.controller_id = resp.controller_id
    md.brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port) for b in resp.brokers}
    for t in resp.topics:
        if t.name is None:
            continue
        parts = {p.partition_index: PartitionMetadata(p.partition_index, p.leader_id, list(p.replica_nodes),
                                                      list(p.isr_nodes), _err(p.error_code))
                 for p in t.partitions}
        md.topics[t.name] = TopicMetadata(t.name, parts, _err(t.error_code))
    if topic is not None and topic not in md.topics:
        md.topics[topic] = TopicMetadata(topic, {}, KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    return md
