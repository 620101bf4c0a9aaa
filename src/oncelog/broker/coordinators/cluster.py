"""The coordinators of a broker in a cluster: they follow the leadership of the internal partitions.

Kafka's ``TransactionCoordinator.onElection`` / ``onResignation`` and ``GroupCoordinator.onElection`` /
``onResignation``, driven by the replica manager's leadership listener:

- this broker becomes leader of ``__transaction_state-p`` / ``__consumer_offsets-p`` at leader epoch E: the
  coordinator loads p at coordinator epoch E (its requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile) by replaying
  the partition's log, and the transaction coordinator then finishes every PrepareCommit/PrepareAbort it found;
- it stops leading p (another broker leads it, the partition went offline, the etcd session was lost): the
  coordinator unloads p at once, and every request for p gets NOT_COORDINATOR.

Every write a coordinator makes is a leader append at epoch E (``InternalTopicLog``), refused once the partition is
led with another epoch; every marker it sends carries E and is fenced at the data partition. A coordinator paused
past its leadership therefore cannot make anything visible: its writes are refused where they land.

Both coordinators exist on every broker from start-up (with nothing loaded). Producer ids come in blocks from the
cluster-wide counter in etcd. Markers reach each data partition's current leader through
:class:`~oncelog.broker.coordinators.remote_markers.ClusterMarkerChannel`. The internal topics are created through the cluster
on first use (FindCoordinator), with their replication settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from oncelog.coordinator.transaction import ProducerIdManager

from ..network.peer_connections import peer_link
from .groups import OFFSETS_TOPIC, ClusterTopicImage, build_group_coordinator
from .internal_log import InternalTopicLog
from .remote_markers import ClusterMarkerChannel
from .transactions import TRANSACTION_STATE_TOPIC, Spawn, build_transaction_coordinator

if TYPE_CHECKING:
    from ..cluster.node import ClusterNode
    from ..context import BrokerContext
    from ..metrics.counts import BrokerMetrics

__all__ = ["ClusterCoordinators"]

log = logging.getLogger("oncelog.broker.coordinator")


class ClusterCoordinators:
    """Loads and unloads the partitions of both coordinators as this broker's leaderships change."""

    def __init__(self, ctx: BrokerContext, node: ClusterNode, spawn: Spawn) -> None:
        self.ctx = ctx  # the coordinators are published there (start) for the handlers
        self.node = node
        self.spawn = spawn
        cfg, clock, topics = ctx.config, ctx.clock, ctx.topics
        view = node.view
        txn_meta, offsets_meta = view.topics.get(TRANSACTION_STATE_TOPIC), view.topics.get(OFFSETS_TOPIC)
        self.txn_log = InternalTopicLog(
            topics, clock, TRANSACTION_STATE_TOPIC,
            txn_meta.num_partitions if txn_meta is not None else cfg.transaction_state_log_num_partitions, {})
        self.offsets_log = InternalTopicLog(
            topics, clock, OFFSETS_TOPIC,
            offsets_meta.num_partitions if offsets_meta is not None else cfg.offsets_topic_num_partitions, {})
        self.channel = ClusterMarkerChannel(ctx.marker_writer, cfg.node_id, lambda: node.view,
                                            cfg.request_timeout_ms, peer_link(cfg))
        self._txn = build_transaction_coordinator(
            cfg, clock, self.txn_log, self.channel, ProducerIdManager.from_allocator(node.store.allocate_producer_ids))
        self._groups = build_group_coordinator(cfg, clock, self.offsets_log, self._partition_exists,
                                               lambda: self._txn.coordinator, clustered=True,
                                               topics=ClusterTopicImage(lambda: node.view.topics),
                                               store=ctx.security_store)
        self.txn = self._txn.coordinator
        self.groups = self._groups.coordinator
        self.loads = 0  # partitions loaded (both coordinators), for metrics and tests
        self.unloads = 0
        self.last_load_ms = 0  # how long the last load took (replaying the partition's log)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        meta = self.node.view.topics.get(topic)
        return meta is not None and not meta.deleting and 0 <= partition < meta.num_partitions

    def start(self) -> None:
        """Serve (nothing loaded until a leadership arrives) and arm the timers."""
        self.ctx.txn_coordinator = self.txn
        self.ctx.group_coordinator = self.groups
        self._txn.start()
        self._groups.start()

    def on_leadership(self, topic: str, index: int, leader_epoch: int | None) -> None:
        """The replica manager's listener: this broker leads ``topic-index`` at ``leader_epoch`` now (None: no
        longer). Called synchronously, before the next request for the partition is served."""
        if topic == TRANSACTION_STATE_TOPIC:
            log_, unload = self.txn_log, self.txn.unload_partition
        elif topic == OFFSETS_TOPIC:
            log_, unload = self.offsets_log, self.groups.unload
        else:
            return
        if leader_epoch is None:
            log_.resign(index)
            unload(index)
            self.unloads += 1
            log.info("%s-%d: no longer led here; its coordinator partition is unloaded", topic, index)
            return
        log_.become_leader(index, leader_epoch)
        self.spawn(self._load(topic, index, leader_epoch), f"load-{topic}-{index}")

    def _still_leader(self, topic: str, index: int, epoch: int) -> bool:
        p = self.ctx.topics.partition(topic, index)
        return p is not None and p.is_leader and p.leader_epoch == epoch

    async def _load(self, topic: str, index: int, epoch: int) -> None:
        if not self._still_leader(topic, index, epoch):
            return  # the leadership moved on before the load could start: a later notice says what to do
        start = self.ctx.clock.monotonic_ms()
        try:
            if topic == TRANSACTION_STATE_TOPIC:
                await self.txn.load_partition(index, epoch, self.txn_log.read(index))
                held = self.txn.owns(index)
            else:
                await self.groups.load(index, epoch, self.offsets_log.read(index))
                held = self.groups.runtime.owns(index, epoch)
        except Exception:
            log.exception("%s-%d: loading the coordinator at epoch %d failed; its requests get NOT_COORDINATOR "
                          "until the partition is led here again", topic, index, epoch)
            return
        if held:
            self.loads += 1
            self.last_load_ms = self.ctx.clock.monotonic_ms() - start
            log.info("%s-%d: coordinator loaded at epoch %d in %d ms", topic, index, epoch, self.last_load_ms)

    def watch(self, metrics: BrokerMetrics) -> None:
        """Export the coordinators' partitions and loads in the broker's metrics."""
        metrics.registry.register(_CoordinatorCollector(self))

    async def close(self) -> None:
        """Stop serving: the handlers see no coordinator, the timers and coordinators stop, the channel closes."""
        self.ctx.txn_coordinator = None
        self.ctx.group_coordinator = None
        await self._groups.close()
        await self._txn.close()
        await self.channel.close()


class _CoordinatorCollector(Collector):
    """Kafka's coordinator partition gauges (``kafka.coordinator.*``): partitions served, loads, marker requests."""

    def __init__(self, c: ClusterCoordinators) -> None:
        self.c = c

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        served = GaugeMetricFamily("oncelog_coordinator_partitions", "Internal partitions whose coordinator runs on "
                                   "this broker (loaded: it leads them)", labels=["coordinator"])
        served.add_metric(["transaction"], len(self.c.txn.runtime.shards()))
        served.add_metric(["group"], len(self.c.groups.runtime.shards()))
        yield served
        yield CounterMetricFamily("oncelog_coordinator_loads", "Coordinator partitions loaded here (this broker "
                                  "became their leader)", value=self.c.loads)
        yield CounterMetricFamily("oncelog_coordinator_unloads", "Coordinator partitions unloaded here (their "
                                  "leadership moved away)", value=self.c.unloads)
        yield GaugeMetricFamily("oncelog_coordinator_last_load_seconds", "How long the last load of a coordinator "
                                "partition took", value=self.c.last_load_ms / 1000)
        yield CounterMetricFamily("oncelog_txn_marker_requests", "WriteTxnMarkers requests sent to other brokers",
                                  value=self.c.channel.requests_sent)
        verifier = self.c.ctx.txn_verifier
        yield CounterMetricFamily("oncelog_txn_verify_requests", "AddPartitionsToTxn verify_only requests sent to "
                                  "transaction coordinators on other brokers (KIP-890: a transaction's first write "
                                  "to a partition led here)", value=verifier.requests_sent if verifier else 0)
