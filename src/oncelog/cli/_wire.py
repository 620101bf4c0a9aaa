"""Raw requests for the cluster commands: one ``BrokerConnection`` to the first broker of ``--bootstrap-server`` that
answers, the generated request classes, and the cluster's shape from one Metadata request.

The cluster commands (``oncelog cluster ...``, ``oncelog topic reassign``) need APIs the admin client does not wrap
(ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments) and fields it does not return (leader
epochs, the controller), so they speak the protocol directly; any broker answers them (a broker that is not the
controller forwards the two that change the cluster to it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from ._common import Conn, config_hint, fail, unreachable_hint

if TYPE_CHECKING:
    import asyncio

    from oncelog.client.connection import BrokerConnection

__all__ = ["Broker", "ClusterShape", "PartitionInfo", "Wire", "error_name", "wire"]


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error: int

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def is_offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class ClusterShape:
    cluster_id: str | None
    controller: int
    brokers: tuple[Broker, ...]
    topics: dict[str, tuple[PartitionInfo, ...]] = field(default_factory=dict)
    internal: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()  # topics asked for that do not exist


def error_name(code: int) -> str:
    from oncelog.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class Wire:
    """A connection to one broker of ``conn.bootstrap`` on a loop of its own (the CLI is synchronous); client.id
    and the timeouts of --command-config apply."""

    def __init__(self, conn: Conn, timeout: float = 30.0) -> None:
        self.bootstrap = conn.bootstrap
        self.conn = conn
        self.timeout = timeout
        import asyncio  # here, not at the top: help and usage errors need no event loop (~40 ms of imports)

        self._loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
        self._conn: BrokerConnection | None = None

    def _unreachable(self, detail: str) -> NoReturn:
        fail(f"cannot reach a broker at {self.bootstrap}: {detail}", unreachable_hint(self.bootstrap))

    def connect(self) -> None:
        from oncelog.client.config import parse_admin_config
        from oncelog.client.connection import BrokerConnection
        from oncelog.client.errors import ConfigError

        own = {"client.id": "oncelog-cli", "request.timeout.ms": int(self.timeout * 1000)}
        try:
            cfg = parse_admin_config({**self.conn.client_conf(),
                                      **{k: v for k, v in own.items() if k not in self.conn.properties}})
        except ConfigError as e:
            fail(f"{e.message} (--command-config {self.conn.config_file})",
                 config_hint(self.conn.config_file) if self.conn.config_file else None, code=2)
        last = "no address given"
        for addr in (a.strip() for a in self.bootstrap.split(",")):
            if not addr:
                continue
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit():
                fail(f"--bootstrap-server expects HOST:PORT, got {addr!r}", code=2)
            conn = BrokerConnection(host, int(port), client_id=cfg.client_id,
                                    request_timeout=cfg.request_timeout_ms / 1000,
                                    connect_timeout=cfg.connect_timeout_ms / 1000, security=cfg.security)
            try:
                self._loop.run_until_complete(conn.connect())
            except Exception as e:  # the next address
                last = str(e)
                continue
            self._conn = conn
            return
        self._unreachable(last)

    def send(self, request: Any, timeout: float | None = None) -> Any:
        """The response to ``request``; one ``error:`` line and exit 1 if the broker does not support it or the
        connection fails."""
        if self._conn is None:
            self.connect()
        assert self._conn is not None
        api_key = int(type(request).API_KEY)
        if api_key not in self._conn.versions:
            fail(f"the broker at {self._conn.address} does not support {type(request).__name__[:-7]}",
                 "it needs a newer oncelog broker")
        try:
            return self._loop.run_until_complete(self._conn.send(request, timeout=timeout))
        except Exception as e:
            self._unreachable(str(e))

    def shape(self, topics: list[str] | None = None) -> ClusterShape:
        """Brokers, controller and the partitions of ``topics`` (None: every topic) from one Metadata request."""
        from oncelog.protocol.errors import ErrorCode
        from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

        req = MetadataRequest(topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
                              allow_auto_topic_creation=False)
        resp = self.send(req)
        parts: dict[str, tuple[PartitionInfo, ...]] = {}
        internal: set[str] = set()
        missing: set[str] = set()
        for t in resp.topics:
            name = t.name or ""
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                missing.add(name)
                continue
            if t.is_internal:
                internal.add(name)
            parts[name] = tuple(sorted(
                (PartitionInfo(name, p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
                               tuple(p.isr_nodes), tuple(p.offline_replicas), p.error_code) for p in t.partitions),
                key=lambda p: p.partition))
        brokers = tuple(sorted((Broker(b.node_id, b.host, b.port, b.rack) for b in resp.brokers),
                               key=lambda b: b.node_id))
        return ClusterShape(resp.cluster_id, resp.controller_id, brokers, dict(sorted(parts.items())),
                            frozenset(internal), frozenset(missing))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._conn.close())
            self._conn = None
        self._loop.close()


@contextlib.contextmanager
def wire(conn: Conn, timeout: float = 30.0) -> Iterator[Wire]:
    w = Wire(conn, timeout)
    try:
        yield w
    finally:
        w.close()
