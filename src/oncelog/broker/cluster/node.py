"""The broker's life in a cluster: connect to etcd, register, follow the view, take the controller role, leave.

Kafka splits this between ``BrokerLifecycleManager`` (registration, heartbeats, controlled shutdown),
``BrokerMetadataPublisher`` (each new metadata image to the ``ReplicaManager``) and the KRaft controller quorum. Here
the metadata lives in etcd (``oncelog.cluster.metadata``) and a :class:`ClusterNode` does the broker's part:

- **connect** (:meth:`ClusterNode.connect`): etcd reachable or one line naming the endpoint; the data folder
  belongs to this cluster (a fresh one takes the cluster id; one holding another cluster's or a single node's topics
  is refused: its logs would be deleted as strays, Kafka's ``InconsistentClusterIdException``).
- **join** (:meth:`ClusterNode.join`): register under a lease once the listener's port is held (a live broker with
  the same node id: :class:`~oncelog.cluster.store.DuplicateBrokerError`, the first one keeps serving); every new
  view goes to the replica manager (``on_view``, all keys on the first call); the view's dynamic broker configs are
  applied to the settings first (:mod:`oncelog.broker.settings.dynamic`).
- **riding out etcd**: a lost session (lease not refreshed in time: etcd unreachable or stalled, this broker cut
  off from it, or this process paused) stops the controller role only. The replicas keep leading and following the
  last view, as Kafka's brokers keep their leaderships while the KRaft quorum is unavailable: only the controller
  moves a leadership, the leader's ISR changes need etcd, and the epochs fence whatever a stale leader still does
  (docs/design/cluster.md). The session comes back only with a view at least as new as etcd's current revision
  (``EtcdMetadata`` reads it again first), so nothing older than what etcd holds is acted on after it.
- **the controller**: campaign; while elected, run :class:`~oncelog.cluster.controller_driver.ControllerDriver`;
  step down when the session is lost, campaign again when it is back.
- **fast dead-broker detection** (:mod:`oncelog.broker.cluster.liveness`): connections to the controller (from every
  broker) and to every broker (from the controller); a closed connection whose listener then refuses a new one
  is a dead process, whose lease is revoked at once instead of expiring.
- **leave** (:meth:`ClusterNode.leave`): controlled shutdown (Kafka's ``BrokerLifecycleManager
  .beginControlledShutdown``): re-put the registration with ``shutting_down``, wait (bounded) until the view shows
  this broker leads nothing, then deregister (revoke the lease) and disconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from oncelog.cluster.changes import ViewChange, ViewSubscription, diff
from oncelog.cluster.controller import leads_nothing
from oncelog.cluster.controller_driver import ELECTION_BUCKETS, ControllerDriver, ControllerStats
from oncelog.cluster.metadata import EtcdMetadata, EtcdUnreachableError, Session
from oncelog.cluster.model import NO_LEADER, BrokerInfo, ClusterView
from oncelog.cluster.store import DuplicateBrokerError, MetadataUnavailableError

from ..settings.config import BrokerConfig
from ..settings.dynamic import DynamicBrokerConfig
from .controller_config import controller_config
from .liveness import Liveness
from ..metrics.counts import BrokerMetrics

__all__ = ["ClusterNode", "ClusterStartError", "ReplicaManagerLike", "ViewOnlyReplicaManager"]

log = logging.getLogger("oncelog.broker.cluster")

#: seconds a controlled shutdown waits, per second of ``broker.session.timeout.ms``, for the view to show that this
#: broker leads nothing: long enough for a paused controller's lease to expire and a new one to act
CONTROLLED_SHUTDOWN_SESSIONS = 2.0
#: seconds to wait for etcd at start-up
CONNECT_TIMEOUT_S = 5.0


class ClusterStartError(Exception):
    """The broker cannot join its cluster; the message is one line saying what, where and what to do."""


class ReplicaManagerLike(Protocol):
    """What the cluster life needs of the replica manager (``broker/replication/manager.py``: Kafka's
    ``ReplicaManager``): the local replicas brought in line with each view, and leadership as the view says."""

    def on_view(self, change: ViewChange) -> None:
        """Bring the local replicas in line with ``change.view`` for what ``change`` names (everything on the first
        call): create, lead, follow, stop and delete replicas."""
        ...

    def leader_of(self, topic: str, index: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of a partition, from the view; None when unknown."""
        ...

    def add_leadership_listener(self, cb: Callable[[str, int, int | None], None]) -> None:
        """``cb(topic, index, leader_epoch or None)`` when this broker becomes leader at that epoch / stops."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ViewOnlyReplicaManager:
    """A replica manager that only records the view (no local replicas): the cluster life runs, and the requests
    answered from the view (Metadata, CreateTopics, DescribeCluster) work, before replication is wired."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.view = ClusterView()
        self.changes = 0
        self._listeners: list[Callable[[str, int, int | None], None]] = []

    def on_view(self, change: ViewChange) -> None:
        self.view = change.view
        self.changes += 1

    def leader_of(self, topic: str, index: int) -> tuple[int, int] | None:
        state = self.view.partition(topic, index)
        return None if state is None else (state.leader, state.leader_epoch)

    def add_leadership_listener(self, cb: Callable[[str, int, int | None], None]) -> None:
        self._listeners.append(cb)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


class ClusterNode:
    """One broker's membership of a cluster. ``connect`` -> ``join`` -> (serve) -> ``leave``."""

    def __init__(self, config: BrokerConfig, store: EtcdMetadata) -> None:
        self.config = config
        self.store = store
        self.node_id = config.node_id
        self.registration: BrokerInfo | None = None  # the live registration (its epoch is the broker epoch)
        self.driver: ControllerDriver | None = None  # while this broker is the active controller
        self.controller_stats = ControllerStats()  # over every term of this broker as the controller
        self._replicas: ReplicaManagerLike | None = None
        self._session_ok = asyncio.Event()
        self._session_lost = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._liveness = Liveness(config.node_id, store, self.is_controller)
        self._leaving = False
        self.elections = 0  # times this broker became the active controller
        self.sessions_lost = 0
        self.dynamic = DynamicBrokerConfig(config)  # the view's dynamic broker configs, applied to ``config``
        self.dynamic.update(store.view.broker_configs)

    # ------------------------------------------------------------------------------------------- start-up
    @classmethod
    async def connect(cls, config: BrokerConfig, timeout: float = CONNECT_TIMEOUT_S) -> ClusterNode:
        """Reach etcd and read the cluster's view. Raises :class:`ClusterStartError` (one line)."""
        try:
            store = await EtcdMetadata.connect(
                config.metadata, config.cluster_name, timeout,
                session_timeout_ms=config.broker_session_timeout_ms,
                heartbeat_interval_ms=config.broker_heartbeat_interval_ms)
        except EtcdUnreachableError as e:
            raise ClusterStartError(str(e)) from None
        except ValueError as e:
            raise ClusterStartError(f"bad metadata setting {config.metadata!r}: {e}") from None
        log.info("connected to etcd at %s: cluster %s (id %s), %d broker(s) registered, controller %s",
                 store.endpoint, config.cluster_name, store.cluster_id, len(store.view.brokers),
                 store.view.controller.node_id if store.view.controller else "none")
        return cls(config, store)

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    @property
    def view(self) -> ClusterView:
        """The newest view of the cluster this broker has (the last one while etcd is unreachable)."""
        return self.store.view

    def is_controller(self) -> bool:
        return self.driver is not None and self.driver.is_active()

    async def join(self, replicas: ReplicaManagerLike, host: str, port: int,
                   endpoints: tuple[tuple[str, str, int], ...] = ()) -> BrokerInfo:
        """Register (call once the listener's port is held: a registration of this node id with this host:port
        is then a dead predecessor's) and follow the view. ``host``/``port``: the inter-broker listener's
        advertised address; ``endpoints``: every listener's. Raises :class:`ClusterStartError`."""
        self._replicas = replicas
        sub = self.store.subscribe()  # before registering: no change between the first view and the loop is lost
        info = BrokerInfo(self.node_id, host, port, self.config.broker_rack, endpoints=endpoints)
        try:
            self.registration = await self.store.register(info)
        except DuplicateBrokerError as e:
            sub.close()
            raise ClusterStartError(str(e)) from None
        except MetadataUnavailableError as e:
            sub.close()
            raise ClusterStartError(f"cannot register node {self.node_id} in etcd: {e}") from None
        self._session_ok.set()
        self.store.add_session_listener(self._on_session)
        self._deliver(diff(ClusterView(), self.store.view))  # everything, on the first call
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._follow_view(sub), name="cluster-view"))
        log.info("registered as node %d (broker epoch %d) at %s:%d%s in cluster %s", self.node_id,
                 self.registration.epoch, host, port,
                 f", rack {info.rack}" if info.rack else "", self.config.cluster_name)
        return self.registration

    def start_controller(self) -> None:
        """Campaign for the controller role (and run it while elected) from now until :meth:`leave`."""
        self._tasks.append(asyncio.get_running_loop().create_task(self._controller_loop(), name="controller"))
        self._liveness.update(self.view)

    def watch(self, metrics: BrokerMetrics) -> None:
        """Export this broker's view of the cluster in its metrics."""
        metrics.registry.register(_ClusterCollector(self))

    @property
    def revoked(self) -> int:
        """Registrations of dead brokers this broker revoked (fast detection)."""
        return len(self._liveness.revoked)

    # ------------------------------------------------------------------------------------------- the view
    def _deliver(self, change: ViewChange) -> None:
        assert self._replicas is not None
        if change.broker_configs:
            self.dynamic.update(change.view.broker_configs)
        try:
            self._replicas.on_view(change)
        except Exception:
            log.exception("the replica manager failed to apply the view at revision %d; it gets the next one",
                          change.view.revision)
        self._liveness.update(change.view)

    async def _follow_view(self, sub: ViewSubscription) -> None:
        async with sub:
            async for change in sub:
                self._deliver(change)

    def _on_session(self, session: Session) -> None:
        if self._leaving:
            return  # deregistering
        if session.alive:
            if session.broker is not None:
                self.registration = session.broker
            if not self._session_ok.is_set():
                log.warning("node %d: session back (%s, broker epoch %d) with the view at revision %d", self.node_id,
                            session.reason, session.broker.epoch if session.broker else -1, self.view.revision)
                self._session_ok.set()
                self._session_lost.clear()
            return
        if self._session_ok.is_set():
            self._session_ok.clear()
            self._session_lost.set()
            self.sessions_lost += 1
            log.error("node %d: session lost (%s): no controller work until etcd confirms this broker again; the "
                      "replicas keep serving the last view (revision %d)", self.node_id, session.reason,
                      self.view.revision)

    # ------------------------------------------------------------------------------------------- controller
    def _hold_absent(self) -> float | None:
        """Until when the controller waits for brokers that are not registered after an outage of etcd: one
        session timeout after etcd answered this broker again."""
        ended = self.store.outage_ended_at
        return None if ended is None else ended + self.config.broker_session_timeout_ms / 1000

    async def _controller_loop(self) -> None:
        while not self._leaving:
            try:
                elected = await self.store.campaign()
            except MetadataUnavailableError:
                return  # the store was closed
            except Exception:
                log.exception("campaigning for the controller role failed; trying again in 1 s")
                await asyncio.sleep(1.0)
                continue
            if self._leaving:
                return
            driver = ControllerDriver(self.store, elected.epoch, controller_config(self.config),
                                      stats=self.controller_stats, hold_absent=self._hold_absent)
            self.driver = driver
            self.elections += 1
            self._liveness.update(self.view)
            run = asyncio.ensure_future(driver.run())
            lost = asyncio.ensure_future(self._session_lost.wait())
            try:
                await asyncio.wait({run, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in (run, lost):
                    t.cancel()
                await asyncio.gather(run, lost, return_exceptions=True)
                self.driver = None
                self._liveness.update(self.view)
            if run.done() and not run.cancelled() and run.exception() is not None:
                log.error("controller (epoch %d) failed: %r; campaigning again in 1 s", elected.epoch,
                          run.exception())
                await asyncio.sleep(1.0)
            elif lost.done() and not lost.cancelled():
                log.warning("node %d: no longer acting as the controller (epoch %d): the session was lost",
                            self.node_id, elected.epoch)
                await self._session_ok.wait()

    # ------------------------------------------------------------------------------------------- leaving
    async def controlled_shutdown(self, timeout: float | None = None) -> bool:
        """Ask the controller to move every leadership away (Kafka's controlled shutdown) and wait until the view
        shows this broker leads nothing; False when that did not happen within ``timeout`` seconds."""
        if self.registration is None or not self.store.session_valid():
            return False
        if timeout is None:
            timeout = CONTROLLED_SHUTDOWN_SESSIONS * self.config.broker_session_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            if not await self.store.begin_controlled_shutdown():
                return False
        except MetadataUnavailableError as e:
            log.warning("controlled shutdown: cannot tell etcd (%s); stopping without moving leadership first", e)
            return False
        led = sum(1 for _ in self.view.led_by(self.node_id))
        log.info("controlled shutdown: node %d leads %d partition(s); waiting for the controller to move them",
                 self.node_id, led)
        deadline = t0 + timeout
        view = self.view
        while not leads_nothing(view, self.node_id):
            left = deadline - loop.time()
            if left <= 0:
                still = sorted(f"{t}-{i}" for (t, i), _ in view.led_by(self.node_id))
                log.error("controlled shutdown: timed out after %.0f s with %d partition(s) still led here (%s); "
                          "stopping anyway: their leaders change once this broker's registration is gone",
                          timeout, len(still), ", ".join(still[:10]))
                return False
            view = await self.store.wait_for_change(view.revision, timeout=min(left, 1.0))
        log.info("controlled shutdown: node %d leads nothing now (%.2f s)", self.node_id, loop.time() - t0)
        return True

    async def leave(self, controlled: bool) -> None:
        """Stop every cluster task, deregister (the lease goes, and with it a controller key) and disconnect."""
        if controlled:
            try:
                await self.controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown failed; stopping without it")
        self._leaving = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self._liveness.close()
        try:
            await self.store.close()  # deregisters: the lease is revoked
        except Exception as e:
            log.warning("leaving the cluster: %s", e)
        log.info("node %d left the cluster", self.node_id)

    async def abandon(self) -> None:
        """After a failed start: disconnect (deregistering if registered) without a controlled shutdown."""
        await self.leave(controlled=False)


class _ClusterCollector(Collector):
    """Kafka's ``KafkaController`` / ``BrokerLifecycleManager`` metrics, as this broker sees the cluster. The partition
    counts are reported by the active controller only (as Kafka's ``OfflinePartitionsCount``), so a sum over the
    brokers counts each partition once."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        node, view = self.node, self.node.view
        active = node.is_controller()
        yield GaugeMetricFamily("oncelog_cluster_brokers", "Live brokers in this broker's view of the cluster",
                                value=len(view.brokers))
        yield GaugeMetricFamily("oncelog_cluster_active_controller", "1 on the broker that is the active controller",
                                value=1 if active else 0)
        yield GaugeMetricFamily("oncelog_cluster_session_alive", "1 while this broker's registration lease is "
                                "known to be alive", value=1 if node.store.session.alive else 0)
        yield GaugeMetricFamily("oncelog_cluster_view_stale", "1 while the view may be behind etcd (etcd "
                                "unreachable)", value=1 if node.store.stale else 0)
        yield CounterMetricFamily("oncelog_cluster_controller_elections", "Times this broker became the active "
                                  "controller", value=node.elections)
        yield CounterMetricFamily("oncelog_cluster_sessions_lost", "Times this broker's session was lost (lease not "
                                  "refreshed in time)", value=node.sessions_lost)
        yield CounterMetricFamily("oncelog_cluster_dead_brokers_revoked", "Registrations of dead brokers this "
                                  "broker revoked before their lease expired", value=node.revoked)
        stats = node.controller_stats
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, ELECTION_BUCKETS), "+Inf"), stats.election_counts):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        yield HistogramMetricFamily("oncelog_controller_leader_election_seconds", "Leader elections written by this "
                                    "broker as the controller after a leader was lost (broker gone, fenced or "
                                    "shutting down): seconds from the view that needed them to the new leaders in "
                                    "etcd", buckets=buckets, sum_value=stats.election_seconds)
        offline = under = 0
        if active:
            for vp in view.partitions.values():
                state = vp.state
                if state.leader == NO_LEADER or state.leader not in view.brokers:
                    offline += 1
                elif len(state.isr) < len(state.replicas):
                    under += 1
        yield GaugeMetricFamily("oncelog_cluster_offline_partitions", "Partitions without a live leader (reported "
                                "by the active controller)", value=offline)
        yield GaugeMetricFamily("oncelog_cluster_under_replicated_partitions", "Partitions whose ISR is smaller than "
                                "their replicas (reported by the active controller)", value=under)
