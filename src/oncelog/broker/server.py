"""The broker process: the one module that wires every part (storage, topics, group commit, coordinators, the
cluster's parts, the listener and background jobs). Every other module takes the few things it uses.

One node by default; with ``metadata`` set (``--metadata etcd://...``) one broker of a cluster: the same broker
wired to a :class:`~oncelog.broker.cluster.node.ClusterNode` (etcd, registration, the controller role) and a
replica manager that keeps the local replicas in line with the cluster's view. In a cluster the coordinators load
and unload their partitions as this broker gains and loses the leadership of the internal partitions
(``coordinators/cluster.py``).
"""

from __future__ import annotations

import asyncio
import functools
import contextlib
import errno
import io
import logging
import os
import signal
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.clock import SYSTEM_CLOCK, Clock
from oncelog.security.authorizer import StandardAuthorizer, parse_super_users
from oncelog.security.store import FileSecurityStore, SecurityStoreError
from oncelog.security.tls import TlsError
from oncelog.storage import KafkaStorageError, LogConfig, LogManager

from .network.acceptor import Acceptor
from .security.authentication import BrokerAuth
from .settings.config import BrokerConfig
from .network.connection import Connection
from .network.connection_quotas import ConnectionQuotas
from .context import BrokerContext
from .coordinators.local import SingleNodeCoordinators
from .coordinators.markers import LocalMarkerWriter
from .durability import GroupCommitFlusher
from .faults import CONTROL_ENV, FaultInjector, serve_control
from .metrics.counts import BrokerMetrics
from .partition import Partition
from .security.quotas import ClientQuotaManager
from .router import Router
from .topics import TopicRegistry

if TYPE_CHECKING:  # a cluster's parts (etcd's client among them) are imported only by a broker of a cluster
    from .cluster.node import ClusterNode, ReplicaManagerLike
    from .cluster.security_store import ClusterSecurityStore
    from .coordinators.cluster import ClusterCoordinators

__all__ = ["Broker", "StartupError", "run_broker"]

log = logging.getLogger("oncelog.broker")
#: Kafka's replica.high.watermark.checkpoint.interval.ms default
HW_CHECKPOINT_INTERVAL_S = 5.0
#: a single node's ACLs, SCRAM credentials and client quotas, in its data folder (in a cluster: etcd)
SECURITY_RECORDS_FILE = "security.json"


def log_defaults(config: BrokerConfig) -> LogConfig:
    """Topic defaults derived from the broker's settings (``config.TOPIC_DEFAULTS``)."""
    return LogConfig.from_kafka(config.topic_defaults())


class StartupError(Exception):
    """The broker cannot start; the message says what, where and what to do (one line, no traceback)."""


def bind_listener(host: str, port: int) -> socket.socket:
    """Bind (not yet listen on) the client port, before anything is created on disk: a busy port must leave no
    trace. Clients are refused until :meth:`Broker.start` listens, once the logs are loaded."""
    where = f"{host or '0.0.0.0'}:{port}"
    try:
        infos = socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise StartupError(f"cannot listen on {where}: the host {host!r} does not resolve ({e.strerror}); set "
                           f"--listen (listeners) to an address of this machine") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise StartupError(f"cannot listen on {where}: the port is in use (another broker? `ss -ltnp` shows "
                               f"which process); stop it or choose another port with --listen HOST:PORT") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise StartupError(f"cannot listen on {where}: permission denied (ports below 1024 need privileges); "
                               f"choose a port above 1023 with --listen HOST:PORT") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise StartupError(f"cannot listen on {where}: {host} is not an address of this machine; set --listen "
                               f"to one of its addresses (or 0.0.0.0 with advertised.listeners)") from None
        raise StartupError(f"cannot listen on {where}: {e.strerror or e}") from None
    sock.setblocking(False)
    return sock


def _data_dir_error(path: Path, e: OSError) -> StartupError:
    """One line for an OSError met while opening the data folder."""
    where = f"the data folder {path.resolve()}"
    if e.errno in (errno.EACCES, errno.EPERM):
        what = f"permission denied on {e.filename}" if e.filename else "permission denied"
        todo = "give this user write access, or choose another folder with --data-dir (log.dirs)"
    elif e.errno == errno.EROFS:
        what, todo = "the file system is read-only", "choose a writable folder with --data-dir (log.dirs)"
    elif e.errno in (errno.ENOTDIR, errno.EEXIST):
        what, todo = f"{e.filename or path} is a file, not a folder", "choose a folder with --data-dir (log.dirs)"
    elif e.errno == errno.ENOSPC:
        what, todo = "no space left on the device", "free some space or choose another folder with --data-dir"
    else:
        what, todo = e.strerror or str(e), "check the folder, or choose another with --data-dir (log.dirs)"
    return StartupError(f"cannot use {where}: {what}; {todo}")


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.metrics = BrokerMetrics()
        self.router = Router.with_all_handlers()
        self.connections: set[Connection] = set()
        self.faults = FaultInjector(self.router, self._close_connections)  # tests' faults on demand (faults.py)
        self._control: asyncio.AbstractServer | None = None  # the faults' control channel, when a test asks
        self.durable_per_append = config.log_flush_interval_messages <= 1
        self.flusher = GroupCommitFlusher(self._on_durable)
        self.logs: LogManager | None = None
        self._topics: TopicRegistry | None = None
        self._acceptors: list[Acceptor] = []
        self._background: list[asyncio.Task[Any]] = []
        self._stopped = asyncio.Event()
        self.cluster_id = ""
        self._context: BrokerContext | None = None
        self.cluster: ClusterNode | None = None  # in a cluster (config.metadata set)
        self.cluster_coordinators: ClusterCoordinators | None = None  # in a cluster: they follow leadership
        self._single_node_coordinators: SingleNodeCoordinators | None = None
        self._cluster_security: ClusterSecurityStore | None = None
        self.replicas: ReplicaManagerLike | None = None
        self._socks: dict[str, socket.socket] = {}  # each listener's bound port until its server takes it
        self.auth: BrokerAuth | None = None

    @property
    def topics(self) -> TopicRegistry:
        assert self._topics is not None, "broker not started"
        return self._topics

    @property
    def context(self) -> BrokerContext:
        """What request handlers see of this broker (once started)."""
        assert self._context is not None, "broker not started"
        return self._context

    def _on_durable(self, partition: Partition, durable: int) -> None:
        partition.on_durable(durable)

    async def start(self) -> None:
        """Bind the port, join the cluster's etcd (in a cluster), load the logs, then the coordinators (one node) or
        the registration (a cluster), then listen. Raises :class:`StartupError` for a port, data folder or etcd that
        cannot be used; a failed start leaves nothing open (see :func:`_main`)."""
        cfg = self.config
        for ep in cfg.listeners:
            sock = self._socks[ep.name] = bind_listener(ep.host, ep.port)
            if ep.port == 0:
                cfg.bound(ep.name, sock.getsockname()[1])
        try:  # the certificates are read before anything is created on disk
            self.auth = BrokerAuth(cfg, lambda: self._context.security_store if self._context else None,
                                   self.clock.wall_ms, self.metrics.counter)
        except TlsError as e:
            raise StartupError(str(e)) from None
        loop = asyncio.get_running_loop()
        if cfg.cluster_mode:
            from .cluster.node import ClusterNode, ClusterStartError

            try:
                self.cluster = await ClusterNode.connect(cfg)
            except ClusterStartError as e:
                raise StartupError(str(e)) from None
            from .network.peer_connections import peer_link, refused_by_peers

            peers = [b for n, b in sorted(self.cluster.view.brokers.items()) if n != cfg.node_id]
            refused = await refused_by_peers(peer_link(cfg), peers, 5.0)
            if refused is not None:
                raise StartupError(f"cannot join cluster {cfg.cluster_name}: {refused}; give this broker the "
                                   f"credentials the cluster knows (sasl.jaas.config of "
                                   f"{cfg.sasl_mechanism_inter_broker_protocol} on listener "
                                   f"{cfg.inter_broker_listener}, and its certificates)")
        try:
            self.logs = await loop.run_in_executor(None, LogManager.open, cfg.data_dir, log_defaults(cfg),
                                                   self.clock, self.cluster.cluster_id if self.cluster else None,
                                                   cfg.num_recovery_threads_per_data_dir)
        except KafkaStorageError as e:
            raise StartupError(str(e)) from None
        except OSError as e:
            raise _data_dir_error(cfg.data_dir, e) from None
        self.cluster_id = self.logs.cluster_id
        if self.cluster is not None:
            self._join_data_dir(self.cluster)
        self._topics = TopicRegistry(self.logs, durable_per_append=self.durable_per_append,
                                     mark_dirty=self.flusher.mark_dirty, replicated=self.cluster is not None)
        writer = LocalMarkerWriter(self._topics, self.clock)
        self._context = context = BrokerContext(cfg, self.clock, self.metrics, self.router.api_versions(),
                                                self._topics, self.cluster_id, writer)
        writer.offsets_sink = lambda: context.group_coordinator
        context.auth = self.auth
        if self.cluster is None:
            try:
                context.security_store = FileSecurityStore(cfg.data_dir / SECURITY_RECORDS_FILE)
            except SecurityStoreError as e:
                raise StartupError(str(e)) from None
        else:
            from .cluster.security_store import ClusterSecurityStore

            self._cluster_security = ClusterSecurityStore(self.cluster.store)
            context.security_store = self._cluster_security
            self._cluster_security.start()
        quotas = context.quotas = ClientQuotaManager(self.clock, cfg.quota_window_size_seconds, cfg.quota_window_num,
                                                     context.security_store)
        if cfg.authorizer_class_name and context.security_store is not None:
            context.authorizer = StandardAuthorizer(context.security_store, parse_super_users(cfg.super_users),
                                                    cfg.allow_everyone_if_no_acl_found)
        self.metrics.watch_partitions(self._topics)
        self.metrics.watch_flusher(self.flusher)
        self.metrics.watch_fetch_sessions(context.fetch_sessions)
        self.flusher.start()
        if self.cluster is None:  # loaded now if the folder holds their topics, else built on first use
            self._single_node_coordinators = SingleNodeCoordinators(cfg, self.clock, self._topics, writer, context,
                                                                    self.spawn)
            await self._single_node_coordinators.start()
        else:
            from .cluster.topic_admin import AutoCreator
            from .coordinators.cluster import ClusterCoordinators
            from .coordinators.txn_verifier import RemoteTxnVerifier
            from .network.peer_connections import peer_link
            from .replication.manager import ReplicaManager

            context.cluster = self.cluster
            context.auto_creator = AutoCreator(self.cluster)
            node = self.cluster
            context.txn_verifier = RemoteTxnVerifier(cfg.node_id, lambda: node.view, cfg.request_timeout_ms,
                                                     peer_link(cfg))
            self.cluster.watch(self.metrics)
            replicas = ReplicaManager(cfg, self._topics, self.cluster.store, self.clock.monotonic_ms,
                                      self.durable_per_append)
            replicas.watch(self.metrics)
            self.replicas = replicas
            coordinators = self.cluster_coordinators = ClusterCoordinators(context, self.cluster, self.spawn)
            coordinators.watch(self.metrics)
            replicas.add_leadership_listener(coordinators.on_leadership)
            coordinators.start()
            await replicas.start()
            host, port = cfg.advertised_for(cfg.inter_broker_listener)
            endpoints = tuple((ep.name, *cfg.advertised_for(ep.name)) for ep in cfg.listeners)
            try:
                await self.cluster.join(self.replicas, host, port, endpoints)
            except ClusterStartError as e:
                raise StartupError(str(e)) from None
        self.metrics.watch_operator_view(self._topics, lambda: context.group_coordinator)
        auth = self.auth
        connection_quotas = ConnectionQuotas(cfg, self.clock, quotas.ip_connection_rate)
        for name, sock in list(self._socks.items()):  # one accept loop per listener
            security = auth.listener(name)
            acceptor = Acceptor(sock, name, connection_quotas,
                                lambda security=security: Connection(context, self.router,  # type: ignore[misc]
                                                                     self.connections, security),
                                ssl=security.ssl_context)
            acceptor.start(backlog=1024)
            self._acceptors.append(acceptor)
            del self._socks[name]
        if any(sec.tls for sec in auth.listeners.values()):
            self._background.append(loop.create_task(auth.reload_loop(), name="tls-reload"))
        if self.cluster is not None:
            self.cluster.start_controller()
        self._background.append(loop.create_task(self._retention_loop(), name="retention"))
        if self.cluster is not None and self.logs is not None:
            self.logs.checkpoint_high_watermarks = True
            self._background.append(loop.create_task(self._hw_checkpoint_loop(), name="hw-checkpoint"))
        if not self.durable_per_append:
            self._background.append(loop.create_task(self._periodic_flush_loop(), name="periodic-flush"))
        if cfg.log_cleaner_enable:
            self._background.append(loop.create_task(self._cleaner_loop(), name="log-cleaner"))
        if cfg.metrics_listen:
            self.metrics.serve(cfg.metrics_listen)
        log.info("oncelog broker %d listening on %s (data in %s, %d topic(s), cluster id %s, %s)",
                 cfg.node_id, ", ".join(f"{e.host}:{e.port}" if e.name == "PLAINTEXT" else str(e)
                                        for e in cfg.listeners), cfg.data_dir.resolve(), len(self._topics),
                 self.cluster_id,
                 "acks=all waits for fsync" if self.durable_per_append else "background flush")
        if os.environ.get(CONTROL_ENV):  # started by a test harness (oncelog.testing): its faults' control channel,
            # opened last: the harness waits for it, so the whole start (metrics endpoint included) is done by then
            self._control = await serve_control(Path(os.environ[CONTROL_ENV]), self.faults)

    def _join_data_dir(self, cluster: ClusterNode) -> None:
        """The data folder belongs to this cluster: a fresh (topic-less) one takes its id; one holding topics of
        another cluster or of a single node is refused, as Kafka refuses a meta.properties with another cluster
        id (its logs would otherwise be deleted as strays)."""
        assert self.logs is not None
        if self.logs.cluster_id != cluster.cluster_id:
            try:
                self.logs.catalog.adopt_cluster_id(cluster.cluster_id)
            except ValueError as e:
                raise StartupError(
                    f"the data folder {self.config.data_dir.resolve()} belongs to another cluster (id "
                    f"{self.logs.cluster_id}; {e}), not to cluster {self.config.cluster_name} in etcd (id "
                    f"{cluster.cluster_id}): point --data-dir at an empty folder, or --metadata at that "
                    f"cluster's etcd") from None
            log.info("the data folder %s joins cluster %s (id %s)", self.config.data_dir.resolve(),
                     self.config.cluster_name, cluster.cluster_id)
        self.cluster_id = cluster.cluster_id

    async def _hw_checkpoint_loop(self) -> None:
        """A replica's high watermarks, checkpointed every HW_CHECKPOINT_INTERVAL_S (Kafka's
        ``replica.high.watermark.checkpoint.interval.ms`` default) and at a clean shutdown: a restarted replica
        starts from them, not from its log end, so it never shows what was not on every in-sync replica."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HW_CHECKPOINT_INTERVAL_S)
            logs = self.logs
            if logs is None or logs.closed:
                return
            try:
                await loop.run_in_executor(None, logs.write_hw_checkpoint)
            except Exception:
                log.exception("checkpointing the high watermarks failed; will retry in %.0f s",
                              HW_CHECKPOINT_INTERVAL_S)

    async def _retention_loop(self) -> None:
        interval = max(self.config.log_retention_check_interval_ms, 100) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.apply_retention()
            except Exception:
                log.exception("retention check failed; will retry in %.0f s", interval)

    def apply_retention(self) -> int:
        deleted = 0
        now = self.clock.wall_ms()
        for p in self.topics.all_partitions():
            p.log.expire_producers(now, self.config.producer_id_expiration_ms)
            n = p.log.apply_retention(now)
            if n:
                deleted += n
                p.reset_after_truncation()
                log.info("retention deleted %d segment(s) of %s-%d; log start offset now %d", n, p.topic, p.index,
                         p.log_start_offset)
        return deleted

    async def _cleaner_loop(self) -> None:
        """Compact partitions of compacted topics, one log at a time, in a worker thread."""
        interval = max(self.config.log_cleaner_backoff_ms, 100) / 1000
        cleaner = None
        while True:
            await asyncio.sleep(interval)
            if cleaner is None:  # imported after the first wait: not in the way of the first requests
                from oncelog.storage.cleaner import LogCleaner

                cleaner = LogCleaner()
            for p in self.topics.all_partitions():
                now = self.clock.wall_ms()
                plog = None if p.deleted or self.logs is None else self.logs.get_log(p.topic, p.index)
                if plog is None or not plog.needs_cleaning(now):  # compaction is the log manager's, as in Kafka
                    continue
                try:
                    stats = await asyncio.to_thread(cleaner.clean, plog, now)
                except Exception:
                    log.exception("log cleaner failed on %s-%d; will retry in %.0f s", p.topic, p.index, interval)
                    continue
                if stats.segments_cleaned:
                    log.info("compacted %s-%d: %d segment(s), %d -> %d bytes, %d record(s) removed", p.topic,
                             p.index, stats.segments_cleaned, stats.bytes_before, stats.bytes_after,
                             stats.records_removed)

    async def _periodic_flush_loop(self) -> None:
        interval = max(self.config.log_flush_interval_ms, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            for p in self.topics.all_partitions():
                if p.log.durable_offset < p.log_end_offset:
                    self.flusher.mark_dirty(p)

    def _close_connections(self) -> int:
        """Close every client connection (a fault a test asks for); how many were open."""
        open_ = list(self.connections)
        for conn in open_:
            conn.close(None)
        return len(open_)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> "asyncio.Task[Any]":
        """Run a background job for the broker's lifetime (cancelled at stop)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.append(task)
        return task

    async def serve_forever(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopped.set()

    async def stop(self, clean: bool = True) -> None:
        """Clean shutdown: stop accepting, finish flushing, close segments, write the clean-shutdown marker. In a
        cluster, first a controlled shutdown (leadership moves away while this broker still serves), then leave.
        ``clean=False`` (a test harness's crash of a broker in its own process): the files are closed as a SIGKILL
        leaves them, without a flush, checkpoint or marker (``LogManager.abandon``)."""
        if self.cluster is not None:
            registered = self.cluster.registration is not None
            await self.cluster.leave(controlled=registered and self.config.controlled_shutdown_enable)
            self.cluster = None
        if self.replicas is not None:
            await self.replicas.stop()
            self.replicas = None
        if self._control is not None:
            self._control.close()
            self._control = None
        self.faults.clear()
        for acceptor in self._acceptors:
            acceptor.close()
        self._acceptors.clear()
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()
        for conn in list(self.connections):
            conn.close(None)
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._context is not None:
            self._context.group_coordinator = self._context.txn_coordinator = None
        if self._single_node_coordinators is not None:
            await self._single_node_coordinators.close()
            self._single_node_coordinators = None
        if self.cluster_coordinators is not None:
            await self.cluster_coordinators.close()
            self.cluster_coordinators = None
        if self._cluster_security is not None:
            await self._cluster_security.close()
            self._cluster_security = None
        if self._context is not None and self._context.txn_verifier is not None:
            await self._context.txn_verifier.close()
            self._context.txn_verifier = None
        await self.flusher.close()
        if self.logs is not None:
            threads = self.config.num_recovery_threads_per_data_dir
            await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(self.logs.close, threads) if clean else self.logs.abandon)
            log.info("oncelog broker stopped %s", "cleanly" if clean else "as if killed (no clean-shutdown marker)")


async def _main(config: BrokerConfig) -> None:
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    # The handlers go in before the start: a SIGTERM during the start (loading logs, joining etcd: seconds), or
    # right after the port starts listening but before start() returned (when a supervisor that waits for the
    # port sends it), found the default disposition and killed the broker (exit -15, no clean-shutdown marker).
    # A signal during the start now ends it, then the broker stops cleanly.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    loop.add_signal_handler(signal.SIGUSR1, _log_tasks)
    starting = loop.create_task(broker.start(), name="start")
    stop_requested = loop.create_task(broker.serve_forever(), name="stop-requested")
    try:
        await asyncio.wait({starting, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            log.info("asked to stop while starting: stopping")
            starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await stop_requested
    except BaseException:
        stop_requested.cancel()
        starting.cancel()
        await broker.stop()  # closes what the failed start opened (the data folder's lock, the etcd lease)
        raise
    await broker.stop()


def _log_tasks() -> None:
    """SIGUSR1: log where every asyncio task of the broker is waiting (for a broker that does not stop or answer)."""
    for task in asyncio.all_tasks():
        buf = io.StringIO()
        task.print_stack(limit=12, file=buf)
        log.warning("task %s:\n%s", task.get_name(), buf.getvalue())


def run_broker(config: BrokerConfig) -> None:
    """Run a broker until SIGTERM/SIGINT. Raises :class:`StartupError` if it cannot start."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(_main(config))
    else:
        uvloop.run(_main(config))
