"""The cluster's metadata as plain values: brokers, controller, topics, partition states, and the view of them.

Everything here is immutable and free of I/O. ``oncelog.cluster.metadata`` is the only module that reads and writes
these values in etcd (as JSON, under the keys of :class:`Keys`); everything above it sees a :class:`ClusterView`
snapshot, so handlers, the controller's decisions and their tests never touch etcd.

Epochs (each one is checked where the decision it guards reaches the data):

- **leader epoch** (per partition): bumped by every leader election. Carried on replica fetches
  (``current_leader_epoch``), stamped into every batch the leader appends (``partition_leader_epoch``), recorded
  in each replica's leader-epoch cache (KIP-101), and the coordinator epoch of an internal partition's coordinator.
- **partition epoch** (per partition): bumped by every change of the partition state (leader, ISR, replicas);
  an ISR change by the leader is a compare-and-swap on it (Kafka's ``AlterPartition`` partition epoch, KIP-497).
- **controller epoch**: the etcd ``create_revision`` of the controller key; every controller write compares it,
  so a deposed controller's writes fail (Kafka's controller epoch / ZK ``controllerEpochZkVersion``).
- **broker epoch**: the etcd ``create_revision`` of the broker's registration key, new at every registration
  (Kafka's broker epoch, KIP-380): tells a restarted broker from the one it replaces.
"""

from __future__ import annotations

from urllib.parse import quote

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

__all__ = [
    "NO_LEADER",
    "BrokerInfo",
    "ClusterView",
    "ControllerInfo",
    "Keys",
    "MetadataFormatError",
    "PartitionState",
    "TopicMeta",
    "TopicPartition",
    "VersionedPartition",
    "decode_configs",
    "encode_configs",
]

NO_LEADER = -1

TopicPartition = tuple[str, int]


class MetadataFormatError(ValueError):
    """A value stored in the metadata service cannot be read (written by another program or version?)."""


def _ints(values: Iterable[Any]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _load(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise MetadataFormatError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise MetadataFormatError(f"{what} is not a JSON object")
    return value


def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: registered under its lease. ``epoch`` is the registration's etcd create_revision.

    ``shutting_down``: the broker asked to leave cleanly (Kafka's controlled shutdown; KRaft's
    ``BrokerRegistration.inControlledShutdown``). It re-puts its registration with the flag set (same key and lease,
    so the same epoch); the controller then moves every leadership off it and drops it from every ISR, and the
    broker stops once it leads nothing. A shutting-down broker is never elected, placed or added to an ISR.
    """

    node_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1
    shutting_down: bool = False
    #: the broker epoch of this process's first registration (Kafka's ``incarnationId``); -1 (not stored) on that
    #: first registration itself. A process whose lease expired while it kept running (etcd unreachable or
    #: stalled) registers again with a new broker epoch but the same incarnation: the same log, not a restart.
    incarnation: int = -1
    #: (listener name, host, port) of every listener, as advertised; ``host``/``port`` are the inter-broker one's.
    #: Empty in a registration written before listeners were registered: then ``host``/``port`` serve every client.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    @property
    def process_epoch(self) -> int:
        """The broker epoch of the process behind this registration: equal for every registration of one process,
        newer for a restarted one."""
        return self.incarnation if self.incarnation >= 0 else self.epoch

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of ``listener`` on this broker; None when it does not have it (an old registration
        without endpoints answers ``host``/``port`` for every listener)."""
        if not self.endpoints:
            return self.host, self.port
        return next(((h, p) for name, h, p in self.endpoints if name == listener), None)

    def encode(self) -> bytes:
        d: dict[str, Any] = {"node_id": self.node_id, "host": self.host, "port": self.port, "rack": self.rack}
        if self.shutting_down:
            d["shutting_down"] = True
        if self.incarnation >= 0:
            d["incarnation"] = self.incarnation
        if self.endpoints:
            d["endpoints"] = [list(e) for e in self.endpoints]
        return _dump(d)

    @classmethod
    def decode(cls, raw: bytes, epoch: int = -1) -> BrokerInfo:
        d = _load(raw, "broker registration")
        try:
            endpoints = tuple((str(n), str(h), int(p)) for n, h, p in d.get("endpoints") or ())
            return cls(int(d["node_id"]), str(d["host"]), int(d["port"]), d.get("rack"), epoch,
                       bool(d.get("shutting_down", False)), incarnation=int(d.get("incarnation", -1)),
                       endpoints=endpoints)
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataFormatError(f"broker registration lacks or has a bad field: {e}") from None


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """The active controller and its epoch (the etcd create_revision of the controller key)."""

    node_id: int
    epoch: int

    def encode(self) -> bytes:
        return _dump({"node_id": self.node_id})

    @classmethod
    def decode(cls, raw: bytes, epoch: int) -> ControllerInfo:
        d = _load(raw, "controller registration")
        try:
            return cls(int(d["node_id"]), epoch)
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataFormatError(f"controller registration lacks or has a bad field: {e}") from None


def encode_configs(configs: Mapping[str, str]) -> bytes:
    """Dynamic configs (of a broker or the cluster default) as stored."""
    return _dump({str(k): str(v) for k, v in configs.items()})


def decode_configs(raw: bytes, what: str) -> Mapping[str, str]:
    d = _load(raw, what)
    if not all(isinstance(v, str) for v in d.values()):
        raise MetadataFormatError(f"{what} has a value that is not a string")
    return MappingProxyType({str(k): v for k, v in d.items()})


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    deleting: bool = False  # DeleteTopics accepted: replicas delete their logs, then the keys go

    def encode(self) -> bytes:
        return _dump({"topic_id": str(self.topic_id), "partitions": self.num_partitions,
                      "configs": dict(self.configs), "deleting": self.deleting})

    @classmethod
    def decode(cls, name: str, raw: bytes) -> TopicMeta:
        d = _load(raw, f"metadata of topic {name}")
        try:
            return cls(name, uuid.UUID(str(d["topic_id"])), int(d["partitions"]),
                       MappingProxyType({str(k): str(v) for k, v in dict(d.get("configs") or {}).items()}),
                       bool(d.get("deleting", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataFormatError(f"metadata of topic {name} lacks or has a bad field: {e}") from None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's PartitionRegistration: who holds a partition and who leads it.

    ``replicas`` is the assignment in preference order (the first is the preferred leader). During a reassignment
    (KIP-455) ``replicas`` is the union of the old and the target set, ``adding`` the replicas being added and
    ``removing`` those to drop once every target replica is in the ISR. ``leader`` is ``NO_LEADER`` when no ISR
    member is alive (the partition is offline; with ``unclean.leader.election.enable=false`` it stays so until an
    ISR member returns, and the ISR keeps that last member).
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    def encode(self) -> bytes:
        return _dump({"replicas": list(self.replicas), "isr": list(self.isr), "leader": self.leader,
                      "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
                      "adding": list(self.adding), "removing": list(self.removing)})

    @classmethod
    def decode(cls, raw: bytes, what: str = "partition state") -> PartitionState:
        d = _load(raw, what)
        try:
            return cls(_ints(d["replicas"]), _ints(d["isr"]), int(d["leader"]), int(d["leader_epoch"]),
                       int(d["partition_epoch"]), _ints(d.get("adding") or ()), _ints(d.get("removing") or ()))
        except (KeyError, TypeError, ValueError) as e:
            raise MetadataFormatError(f"{what} lacks or has a bad field: {e}") from None

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once a reassignment in progress completes (``replicas`` without ``removing``)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    def with_leader(self, leader: int, isr: Iterable[int]) -> PartitionState:
        """A new leader (or NO_LEADER) with this ISR: a new leader epoch and a new partition epoch."""
        return replace(self, leader=leader, isr=tuple(isr), leader_epoch=self.leader_epoch + 1,
                       partition_epoch=self.partition_epoch + 1)

    def with_isr(self, isr: Iterable[int]) -> PartitionState:
        """The same leader with another ISR: a new partition epoch, the same leader epoch."""
        return replace(self, isr=tuple(isr), partition_epoch=self.partition_epoch + 1)


@dataclass(frozen=True, slots=True)
class VersionedPartition:
    """A partition state as read from etcd, with the key's mod_revision to compare-and-swap against."""

    state: PartitionState
    mod_revision: int


class Keys:
    """The etcd key layout of one cluster, under ``/oncelog/<cluster name>/``."""

    def __init__(self, cluster: str) -> None:
        if not cluster or "/" in cluster:
            raise ValueError(f"cluster name {cluster!r} must be non-empty and contain no '/'")
        self.root = f"/oncelog/{cluster}/"

    @property
    def cluster_id(self) -> bytes:
        return f"{self.root}cluster_id".encode()

    @property
    def controller(self) -> bytes:
        return f"{self.root}controller".encode()

    @property
    def producer_id_block(self) -> bytes:
        return f"{self.root}producer_id_block".encode()

    def broker(self, node_id: int) -> bytes:
        return f"{self.root}brokers/{node_id}".encode()

    def topic(self, name: str) -> bytes:
        return f"{self.root}topics/{name}".encode()

    def partition(self, topic: str, index: int) -> bytes:
        return f"{self.root}partitions/{topic}/{index}".encode()

    def partitions_of(self, topic: str) -> bytes:
        """The prefix of every partition key of ``topic`` (and of no other topic)."""
        return f"{self.root}partitions/{topic}/".encode()

    def topic_claim(self, name: str) -> bytes:
        """Held (under a lease) by the one writer creating or growing a topic in more than one transaction."""
        return f"{self.root}claims/{name}".encode()

    def broker_config(self, node_id: int | None) -> bytes:
        """Dynamic broker configs of one broker, or the cluster-wide default (``None``)."""
        return f"{self.root}configs/broker/{'default' if node_id is None else node_id}".encode()

    def security(self, kind: str, key: str) -> bytes:
        """One security record (an ACL binding, a SCRAM credential, a quota) of ``kind``; the key percent-encoded
        (principal and resource names may hold any character)."""
        return f"{self.root}security/{kind}/{quote(key, safe='')}".encode()

    @property
    def prefix(self) -> bytes:
        return self.root.encode()


@dataclass(frozen=True)
class ClusterView:
    """An immutable snapshot of the cluster's metadata at one etcd revision.

    ``brokers`` holds the live brokers only (a registration disappears with its lease); ``departed`` the last
    registration of every node id not registered now (a broker whose lease expired while it kept running, etcd being
    unreachable or stalled, is still at that address: the data plane follows the partition states, and reaches the
    brokers they name through :meth:`address`). ``broker_configs`` maps
    ``None`` (cluster-wide default) or a node id to the dynamic configs set through AlterConfigs. ``security``
    maps a kind (``acls``, ``scram``, ``quotas``) to its records (key -> opaque bytes; ``oncelog.security`` gives
    them meaning).
    """

    cluster_id: str = ""
    revision: int = 0
    brokers: Mapping[int, BrokerInfo] = field(default_factory=lambda: MappingProxyType({}))
    controller: ControllerInfo | None = None
    topics: Mapping[str, TopicMeta] = field(default_factory=lambda: MappingProxyType({}))
    partitions: Mapping[TopicPartition, VersionedPartition] = field(default_factory=lambda: MappingProxyType({}))
    broker_configs: Mapping[int | None, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    security: Mapping[str, Mapping[str, bytes]] = field(default_factory=lambda: MappingProxyType({}))
    departed: Mapping[int, BrokerInfo] = field(default_factory=lambda: MappingProxyType({}))

    def partition(self, topic: str, index: int) -> PartitionState | None:
        vp = self.partitions.get((topic, index))
        return None if vp is None else vp.state

    def topic_partitions(self, topic: str) -> Iterator[tuple[int, PartitionState]]:
        meta = self.topics.get(topic)
        if meta is None:
            return
        for i in range(meta.num_partitions):
            vp = self.partitions.get((topic, i))
            if vp is not None:
                yield i, vp.state

    def replicas_of(self, node_id: int) -> Iterator[tuple[TopicPartition, PartitionState]]:
        """Every partition this broker holds a replica of."""
        for tp, vp in self.partitions.items():
            if node_id in vp.state.replicas:
                yield tp, vp.state

    def led_by(self, node_id: int) -> Iterator[tuple[TopicPartition, PartitionState]]:
        for tp, vp in self.partitions.items():
            if vp.state.leader == node_id:
                yield tp, vp.state

    def is_alive(self, node_id: int) -> bool:
        return node_id in self.brokers

    def address(self, node_id: int) -> BrokerInfo | None:
        """The live registration of a node id, else its last one (the view still names it, e.g. as a leader, until
        the controller moves things off it); None for a node id never seen."""
        info = self.brokers.get(node_id)
        return info if info is not None else self.departed.get(node_id)

    @cached_property
    def counted_on(self) -> Mapping[int, BrokerInfo]:
        """The brokers the partition states count on: the live ones, and the departed ones that still lead a
        partition or are in the ISR of a partition with a leader (their leases expired, but no controller has
        acted on it yet: a stall of etcd expires every lease at once, and the brokers are still running)."""
        out = dict(self.brokers)
        if self.departed:
            named = {r for vp in self.partitions.values() if vp.state.leader != NO_LEADER
                     for r in (vp.state.leader, *vp.state.isr)}
            out.update((n, info) for n, info in self.departed.items() if n in named and n not in out)
        return MappingProxyType(out)

    def broker_config(self, node_id: int, key: str) -> str | None:
        """A dynamic broker setting as Kafka resolves it: this broker's own value, else the cluster default."""
        own = self.broker_configs.get(node_id, {})
        if key in own:
            return own[key]
        return self.broker_configs.get(None, {}).get(key)
