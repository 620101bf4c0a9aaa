"""Bootstrap and the metadata cache: brokers, topics, partitions, leaders; connections by node id."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

from .connection import BrokerConnection
from .errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError, raise_for_code
from .security import ClientSecurity

if TYPE_CHECKING:
    from .config import AdminConfig

__all__ = ["BrokerInfo", "Cluster", "PartitionInfo", "TopicInfo", "parse_bootstrap"]

log = logging.getLogger(__name__)
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    is_internal: bool = False
    error: int = 0


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list) -> [(host, port)]; a missing port means 9092."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ConfigError("bootstrap.servers is empty; give at least one HOST:PORT")
    return out


#: FindCoordinator key types
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
COORDINATOR_KIND = {COORDINATOR_GROUP: "group", COORDINATOR_TRANSACTION: "transactional id"}
#: a connection of its own to a coordinator is kept under this number minus the node id (Kafka's consumer does the
#: same, ``Integer.MAX_VALUE - coordinator.id()`` in AbstractCoordinator): a fetch long-polling that broker on the
#: node's connection then never holds up a heartbeat or a commit behind it
_OWN_COORDINATOR_CONN = 2**31 - 1
#: errors after which the coordinator should be looked up again (it is loading, moved, or not yet elected)
COORDINATOR_RETRIABLE = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   ErrorCode.NOT_COORDINATOR, ErrorCode.BROKER_NOT_AVAILABLE})


def _node_of(conn_id: int) -> int:
    """The broker a connection id (a node id, or a coordinator's own connection) leads to."""
    return _OWN_COORDINATOR_CONN - conn_id if conn_id > _OWN_COORDINATOR_CONN // 2 else conn_id


class Cluster:
    """Owns the connections of one client and its view of the cluster. All methods run on one event loop."""

    @classmethod
    def from_config(cls, c: AdminConfig, *, allow_auto_topic_creation: bool = False) -> Cluster:
        """A cluster view with the connection settings of a client's configuration (milliseconds -> seconds)."""
        return cls(c.bootstrap_servers, client_id=c.client_id, request_timeout=c.request_timeout_ms / 1000,
                   connect_timeout=c.connect_timeout_ms / 1000, metadata_max_age=c.metadata_max_age_ms / 1000,
                   allow_auto_topic_creation=allow_auto_topic_creation, security=c.security)

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        client_id: str = "oncelog",
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        metadata_max_age: float = 300.0,
        allow_auto_topic_creation: bool = False,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap_servers = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.metadata_max_age = metadata_max_age
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.last_refresh: float = 0.0
        self._by_id: dict[uuid.UUID, str] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self._connecting: dict[int, asyncio.Task[BrokerConnection]] = {}
        self._refresh_lock: asyncio.Lock | None = None

    # ---------------------------------------------------------------- connections

    def _new_conn(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.client_id, node_id=node_id,
                                request_timeout=self.request_timeout, connect_timeout=self.connect_timeout,
                                security=self.security)

    async def bootstrap(self) -> None:
        """Connect to the first reachable bootstrap server and load metadata for every topic."""
        errors: list[str] = []
        refused: KafkaError | None = None  # reached, but it refused this client (authentication, TLS)
        for host, port in self.bootstrap_servers:
            conn = self._new_conn(host, port, -1)
            try:
                await conn.connect()
            except KafkaError as e:
                errors.append(e.message)
                refused = refused or (None if e.retriable() else e)
                continue
            self._bootstrap_conn = conn
            await self.refresh()
            return
        if refused is not None:
            raise refused
        raise KafkaConnectionError(
            "no bootstrap server reachable (" + "; ".join(errors) + "); is the broker running and is "
            "--bootstrap-server / bootstrap.servers right?"
        )

    async def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to ``node_id``, connecting (once, shared by concurrent callers) if needed."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        task = self._connecting.get(node_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect_node(node_id))
            # its callers may all be cancelled (shielded from it) before it fails: its error is then nobody's
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._connecting[node_id] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._connecting.pop(node_id, None)

    async def _connect_node(self, conn_id: int) -> BrokerConnection:
        node_id = _node_of(conn_id)
        info = self.brokers.get(node_id)
        if info is None:
            await self.refresh()
            info = self.brokers.get(node_id)
            if info is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"node {node_id} is not in the cluster metadata")
        conn = self._new_conn(info.host, info.port, node_id)
        await conn.connect()
        self._conns[conn_id] = conn
        return conn

    async def any_connection(self) -> BrokerConnection:
        """Any open connection (the least loaded), else a fresh one to some known broker or bootstrap server."""
        live = [c for c in self._conns.values() if c.connected]
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            live.append(self._bootstrap_conn)
        if live:
            return min(live, key=lambda c: c.in_flight)
        for node_id in list(self.brokers):
            try:
                return await self.connection(node_id)
            except KafkaError:
                continue
        errors = []
        for host, port in self.bootstrap_servers:
            conn = self._new_conn(host, port, -1)
            try:
                await conn.connect()
            except KafkaError as e:
                errors.append(e.message)
                continue
            self._bootstrap_conn = conn
            return conn
        raise KafkaConnectionError("no broker reachable: " + "; ".join(errors))

    async def controller_connection(self) -> BrokerConnection:
        if self.controller_id >= 0 and self.controller_id in self.brokers:
            try:
                return await self.connection(self.controller_id)
            except KafkaError:
                pass
        return await self.any_connection()

    async def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        return await self.connection(self.leader_for(topic, partition))

    # ---------------------------------------------------------------- coordinators

    async def find_coordinators(self, key_type: int, keys: Sequence[str]) -> dict[str, int]:
        """Node id of the coordinator of each key (FindCoordinator; key type 0 = group, 1 = transaction).

        One batched request from v4, one request per key before. Raises :class:`KafkaError` with the broker's
        code (e.g. COORDINATOR_NOT_AVAILABLE while ``__consumer_offsets`` loads): callers retry those.
        """
        what = COORDINATOR_KIND.get(key_type, f"key type {key_type}")
        conn = await self.any_connection()
        version = conn.version_for(10)  # FindCoordinator
        out: dict[str, int] = {}
        if version >= 4:
            resp = await conn.send(FindCoordinatorRequest(key_type=key_type, coordinator_keys=list(keys)))
            for c in resp.coordinators:
                raise_for_code(c.error_code, c.error_message, f"find the coordinator of {what} {c.key!r}")
                out[c.key] = c.node_id
        else:
            for key in keys:
                resp = await conn.send(FindCoordinatorRequest(key=key, key_type=key_type))
                raise_for_code(resp.error_code, resp.error_message, f"find the coordinator of {what} {key!r}")
                out[key] = resp.node_id
        missing = [k for k in keys if k not in out]
        if missing:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator returned for {missing!r}")
        return out

    async def coordinator_connection(self, key_type: int, key: str, timeout: float | None = None, *,
                                     own: bool = False) -> BrokerConnection:
        """A connection to the coordinator of one group (key type 0) or transactional id (1); ``own``: one kept
        for the coordinator alone, not the one that fetches from that broker (a consumer's group coordinator).

        Retries while the coordinator is loading or not yet available, with backoff, for up to ``timeout``
        seconds (default: the request timeout).
        """
        deadline = time.monotonic() + (self.request_timeout if timeout is None else timeout)
        delay = 0.02
        while True:
            try:
                node = (await self.find_coordinators(key_type, [key]))[key]
                return await self.connection(_OWN_COORDINATOR_CONN - node if own else node)
            except KafkaError as e:
                if e.code() not in COORDINATOR_RETRIABLE or time.monotonic() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # ---------------------------------------------------------------- metadata

    async def refresh(self, topics: Iterable[str] | None = None) -> Any:
        """Fetch metadata (every topic when ``topics`` is None) and update the cache; returns the response."""
        if self._refresh_lock is None:
            self._refresh_lock = asyncio.Lock()
        async with self._refresh_lock:
            conn = await self.any_connection()
            names = None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
            req = MetadataRequest(topics=names, allow_auto_topic_creation=self.allow_auto_topic_creation)
            try:
                resp = await conn.send(req)
            except KafkaConnectionError:
                conn = await self.any_connection()
                resp = await conn.send(req)
            self._apply(resp, full=topics is None)
            return resp

    def _apply(self, resp: Any, *, full: bool) -> None:
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        topics = {} if full else dict(self.topics)  # swapped in whole: sync facades read it from other threads
        for t in resp.topics:
            if t.name is None:
                continue
            if t.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION):
                topics.pop(t.name, None)
                continue
            parts = {
                p.partition_index: PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch,
                                                 tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
                for p in t.partitions
            }
            topics[t.name] = TopicInfo(t.name, t.topic_id, parts, t.is_internal, t.error_code)
        self.topics = topics
        self._by_id = {t.topic_id: t.name for t in self.topics.values() if t.topic_id != _ZERO_UUID}
        self.last_refresh = time.monotonic()
        for conn_id in [n for n in self._conns if _node_of(n) not in self.brokers]:
            conn = self._conns.pop(conn_id)
            asyncio.get_running_loop().create_task(conn.close())

    @property
    def stale(self) -> bool:
        return time.monotonic() - self.last_refresh > self.metadata_max_age

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def topic_id(self, name: str) -> uuid.UUID:
        t = self.topics.get(name)
        return t.topic_id if t is not None else _ZERO_UUID

    def partitions_for(self, name: str) -> list[int]:
        t = self.topics.get(name)
        return sorted(t.partitions) if t is not None else []

    def available_partitions_for(self, name: str) -> list[int]:
        t = self.topics.get(name)
        if t is None:
            return []
        return sorted(p.partition for p in t.partitions.values() if p.leader >= 0)

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's node id; KafkaError UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE otherwise."""
        t = self.topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}[{partition}]")
        if p.leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}[{partition}] has no leader")
        return p.leader

    async def wait_for_topic(self, name: str, timeout: float) -> TopicInfo:
        """Refresh until ``name`` is known with leaders for all partitions (auto-creation may be asked for)."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            t = self.topics.get(name)
            if t is not None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
                return t
            resp = await self.refresh([name])
            for rt in resp.topics:
                if rt.name == name and rt.error_code not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                             ErrorCode.LEADER_NOT_AVAILABLE):
                    raise KafkaError(rt.error_code, f"topic {name!r}: metadata error")
            if time.monotonic() >= deadline:
                if name not in self.topics:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
                raise KafkaTimeoutError(f"topic {name!r} has partitions without a leader after {timeout:g} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def close(self) -> None:
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        for task in self._connecting.values():
            task.cancel()
        self._connecting.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
