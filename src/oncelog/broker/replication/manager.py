"""The local replicas of a broker in a cluster, kept in line with the view (Kafka's ReplicaManager).

For every partition a view change names, this broker is its leader, a follower of another broker, or not a
replica (docs/design/cluster.md, "A partition's roles on a broker"):

- a topic with a replica here gets a local log (with the cluster's topic id; created on the first view that shows
  it), and loses it when the view drops the topic, marks it deleting, or gives it another id (a new topic of the
  same name); at start-up, local topics the view does not have are strays and deleted;
- leader at epoch E: :meth:`Partition.make_leader` (the fetcher stops), the same epoch again: a new ISR;
- follower of L at epoch E: :meth:`Partition.make_follower`, and the fetcher of L truncates, then fetches;
- the leader's ISR changes (shrink every ``replica.lag.time.max.ms / 2``, expand on a caught-up fetch) are written
  as a compare-and-swap of the partition key (:func:`oncelog.cluster.partition_change.apply_isr_change`), one in
  flight per partition; the partition takes the new ISR when the view shows it.

A lost session (etcd unreachable or stalled) changes nothing here: the replicas keep leading and following the last
view until a newer one says otherwise (docs/design/cluster.md, "Riding out etcd"); a leader or follower whose
registration is gone from the view (its lease expired while it kept running) is still reached at its last address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from oncelog.cluster.changes import ViewChange
from oncelog.cluster.model import NO_LEADER, BrokerInfo, ClusterView, TopicPartition
from oncelog.cluster.partition_change import apply_isr_change
from oncelog.cluster.replica import IsrChange
from oncelog.cluster.store import MetadataStore, MetadataUnavailableError, PartitionChange
from oncelog.storage import InvalidConfigError, LogConfig

from ..settings.config import BrokerConfig
from ..metrics.counts import BrokerMetrics
from ..partition import Partition, Role
from ..network.peer_connections import peer_link
from .fetcher import FetcherConfig, ReplicaFetcherManager
from ..topics import TopicRegistry

__all__ = ["ReplicaManager"]

log = logging.getLogger("oncelog.broker.replication")


class ReplicaManager:
    """Leader and follower replicas of one broker, following the cluster's view."""

    def __init__(self, config: BrokerConfig, topics: TopicRegistry, store: MetadataStore,
                 now_ms: Callable[[], int], durable: bool) -> None:
        self.config = config
        self.node_id = config.node_id
        self.topics = topics
        self.store = store
        self._now_ms = now_ms
        self.view = ClusterView()
        self._live: dict[int, int] = {}
        self._live_of: ClusterView | None = None  # the view ``_live`` was computed from
        self.fetchers = ReplicaFetcherManager(
            FetcherConfig(config.node_id, durable, max_wait_ms=config.replica_fetch_wait_max_ms,
                          min_bytes=config.replica_fetch_min_bytes, max_bytes=config.replica_fetch_max_bytes,
                          backoff_ms=config.replica_fetch_backoff_ms,
                          socket_timeout_ms=config.replica_socket_timeout_ms, link=peer_link(config)),
            self._broker)
        self._listeners: list[Callable[[str, int, int | None], None]] = []
        #: ISR changes waiting for the writer, and those it is writing (Kafka's AlterPartitionManager: one write
        #: in flight carries every pending change)
        self._isr_pending: dict[TopicPartition, tuple[Partition, IsrChange]] = {}
        self._isr_writing: set[TopicPartition] = set()
        self._isr_writer: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.isr_shrinks = 0  # ISR changes this broker wrote as leader
        self.isr_expands = 0

    # ------------------------------------------------------------------------------------------- ReplicaHost
    def now_ms(self) -> int:
        return self._now_ms()

    def live_broker_epochs(self) -> dict[int, int]:
        """Registered brokers not shutting down, and their epochs (asked by every leader at every follower fetch:
        computed once per view; callers do not change it)."""
        view = self.view
        if self._live_of is not view:
            self._live = {n: b.epoch for n, b in view.brokers.items() if not b.shutting_down}
            self._live_of = view
        return self._live

    def _broker(self, node_id: int) -> BrokerInfo | None:
        return self.view.address(node_id)

    def write_isr_change(self, partition: Partition, change: IsrChange) -> None:
        tp = (partition.topic, partition.index)
        if tp in self._isr_pending or tp in self._isr_writing:
            if partition.leader_replicas is not None:
                partition.leader_replicas.change_failed()
            return
        self._isr_pending[tp] = (partition, change)
        if self._isr_writer is None or self._isr_writer.done():
            self._isr_writer = asyncio.get_running_loop().create_task(self._write_isr(), name="isr-writer")

    async def _write_isr(self) -> None:
        """Write every pending ISR change, in as few etcd transactions as they fit (``apply_partition_changes``:
        each change applied or lost on its own), until none is pending. A broker returning to a cluster of
        thousands of partitions makes its leaders expand thousands of ISRs at once: one transaction and one view
        wait each kept every broker's event loop busy past its etcd session timeout."""
        while self._isr_pending:
            batch, self._isr_pending = self._isr_pending, {}
            self._isr_writing = set(batch)
            todo: dict[TopicPartition, tuple[Partition, IsrChange, PartitionChange, int]] = {}
            for tp, (partition, change) in batch.items():
                vp = self.store.view.partitions.get(tp)
                new = None if vp is None else apply_isr_change(vp.state, self.node_id, partition.leader_epoch,
                                                               change.partition_epoch, change.isr)
                if vp is not None and new is not None and new is not vp.state:
                    todo[tp] = (partition, change, PartitionChange(tp, vp.mod_revision, new), len(vp.state.isr))
                elif partition.leader_replicas is not None and partition.leader_replicas.pending == change:
                    partition.leader_replicas.change_failed()
            applied: frozenset[TopicPartition] = frozenset()
            try:
                if todo:
                    result = await self.store.apply_partition_changes([t[2] for t in todo.values()])
                    applied = result.applied
            except MetadataUnavailableError as e:
                log.warning("%d ISR change(s) not written: %s", len(todo), e)
            except Exception:
                log.exception("%d ISR change(s) failed", len(todo))
            for tp, (partition, change, pc, old_size) in todo.items():
                ok = tp in applied
                if ok and len(pc.state.isr) < old_size:
                    self.isr_shrinks += 1
                elif ok:
                    self.isr_expands += 1
                log.debug("%s-%d: ISR -> %s at leader epoch %d: %s", tp[0], tp[1], list(pc.state.isr),
                          partition.leader_epoch, "written" if ok else "lost a race")
                if not ok and partition.leader_replicas is not None and partition.leader_replicas.pending == change:
                    partition.leader_replicas.change_failed()
            if todo:
                log.info("ISR changes: %d written, %d lost a race (%s)", len(applied), len(todo) - len(applied),
                         ", ".join(f"{tp[0]}-{tp[1]} -> {list(t[2].state.isr)}" for tp, t in list(todo.items())[:3])
                         + (", ..." if len(todo) > 3 else ""))
            self._isr_writing = set()

    # ------------------------------------------------------------------------------------------- ReplicaManagerLike
    def on_view(self, change: ViewChange) -> None:
        view = self.view = change.view
        names = set(change.topics)
        if change.since == 0:  # the whole view: local topics it does not have are strays
            names |= {v.name for v in self.topics}
        touched: set[TopicPartition] = set(change.partitions)
        # a topic only some of whose partitions changed is reconciled as a whole (every partition) only when its
        # local log may have to be created, grown or dropped: after a broker loss thousands of elections and ISR
        # shrinks arrive one etcd transaction at a time, and each reconciled whole topics (250 partitions each in
        # bench/cluster_scale.py) for a few changed partitions
        by_topic: dict[str, list[int]] = {}
        for t, i in change.partitions:
            if t not in names:
                by_topic.setdefault(t, []).append(i)
        names |= {name for name, indexes in by_topic.items() if self._topic_may_change(view, name, indexes)}
        if change.broker_configs and self._refresh_topic_defaults():  # min.insync.replicas reaches the leaders
            touched |= {(p.topic, p.index) for p in self.topics.all_partitions()}
        for name in sorted(names):  # one topic's failure (a disk error, a name colliding) spares the others
            try:
                touched |= self._reconcile_topic(view, name)
            except Exception:
                log.exception("topic %s: the local replicas could not follow the view at revision %d", name,
                              view.revision)
        for tp in sorted(touched):
            try:
                self._reconcile_partition(view, tp)
            except Exception:
                log.exception("%s-%d: the local replica could not follow the view at revision %d", tp[0], tp[1],
                              view.revision)
        if change.brokers:  # a leader re-registered elsewhere, or a follower's epoch changed
            for p in self.topics.all_partitions():
                if p.role is Role.LEADER:
                    p.maybe_advance_high_watermark()

    def _topic_may_change(self, view: ClusterView, name: str, changed: list[int]) -> bool:
        """Whether partition changes of ``name`` (its topic key unchanged) may create, grow or drop its local
        log: it has none yet, it differs from the view's topic, or a changed partition has no replica here."""
        local = self.topics.get(name)
        meta = view.topics.get(name)
        if local is None or meta is None or meta.deleting or local.topic_id != meta.topic_id \
                or len(local.partitions) < meta.num_partitions:
            return True
        for i in changed:
            state = view.partition(name, i)
            if state is None or self.node_id not in state.replicas:
                return True
        return False

    def _refresh_topic_defaults(self) -> bool:
        """The topic defaults from the broker's settings, which the dynamic broker configs may have changed
        (``DynamicBrokerConfig.update``, before this view was delivered); True when they changed."""
        defaults = LogConfig.from_kafka(self.config.topic_defaults())
        if defaults == self.topics.logs.defaults:
            return False
        self.topics.logs.set_defaults(defaults)
        log.info("topic defaults changed by the dynamic broker configs: every log without its own override takes "
                 "them")
        return True

    def _reconcile_topic(self, view: ClusterView, name: str) -> set[TopicPartition]:
        """Create, grow, re-configure or delete the local topic; the partitions to reconcile."""
        meta = view.topics.get(name)
        mine = meta is not None and not meta.deleting and any(
            self.node_id in s.replicas for _, s in view.topic_partitions(name))
        local = self.topics.get(name)
        if local is not None and (not mine or meta is None or local.topic_id != meta.topic_id):
            for p in local.partitions:
                self.fetchers.unfollow((name, p.index))
                self._stop(p)
            log.info("deleting the local log of topic %s (%s)", name,
                     "not in the view" if meta is None or meta.deleting else
                     "another topic id" if local.topic_id != meta.topic_id else "no replica here")
            self.topics.delete(name)
            local = None
        if not mine or meta is None:
            return set()
        if local is None:
            local = self.topics.create(name, meta.num_partitions, dict(meta.configs), topic_id=meta.topic_id)
        elif len(local.partitions) < meta.num_partitions:
            local = self.topics.add_partitions(name, meta.num_partitions)
        if dict(local.configs) != dict(meta.configs):
            try:
                self.topics.set_configs(name, dict(meta.configs))
            except InvalidConfigError as e:
                log.warning("topic %s: configs from the view not applied: %s", name, e)
        return {(name, i) for i in range(meta.num_partitions)}

    def _reconcile_partition(self, view: ClusterView, tp: TopicPartition) -> None:
        p = self.topics.partition(*tp)
        if p is None:
            self.fetchers.unfollow(tp)
            return
        vp = view.partitions.get(tp)
        state = None if vp is None else vp.state
        if state is None or self.node_id not in state.replicas:
            self.fetchers.unfollow(tp)
            if p.role is not Role.NONE:
                self._stop(p)
            return
        if state.leader == self.node_id:
            self.fetchers.unfollow(tp)
            assert vp is not None
            became = p.make_leader(self, state.leader_epoch, state.replicas, state.isr, state.partition_epoch,
                                   vp.mod_revision, self.config.replica_lag_time_max_ms)
            if became:
                log.info("%s-%d: leader at epoch %d from offset %d (ISR %s)", tp[0], tp[1], state.leader_epoch,
                         p.log.log_end_offset, list(state.isr))
                for cb in self._listeners:
                    cb(tp[0], tp[1], state.leader_epoch)
            return
        was_leader = p.role is Role.LEADER
        p.make_follower(state.leader, state.leader_epoch)
        if was_leader:
            for cb in self._listeners:
                cb(tp[0], tp[1], None)
        if state.leader == NO_LEADER or view.address(state.leader) is None:
            self.fetchers.unfollow(tp)
        else:
            self.fetchers.follow(p, state.leader, state.leader_epoch)

    def _stop(self, p: Partition) -> None:
        """Stop serving ``p`` (listeners hear that this broker no longer leads it, if it did)."""
        was_leader = p.role is Role.LEADER
        p.stop_replica()
        if was_leader:
            for cb in self._listeners:
                cb(p.topic, p.index, None)

    def leader_of(self, topic: str, index: int) -> tuple[int, int] | None:
        state = self.view.partition(topic, index)
        return None if state is None else (state.leader, state.leader_epoch)

    def add_leadership_listener(self, cb: Callable[[str, int, int | None], None]) -> None:
        self._listeners.append(cb)

    def watch(self, metrics: BrokerMetrics) -> None:
        """Export the replicas' state in the broker's metrics (Kafka's ReplicaManager metrics)."""
        metrics.registry.register(_ReplicaCollector(self))

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._shrink_loop(), name="isr-shrink")

    async def _shrink_loop(self) -> None:
        interval = max(self.config.replica_lag_time_max_ms / 2, 50) / 1000
        while True:
            await asyncio.sleep(interval)
            for p in self.topics.all_partitions():
                if p.role is Role.LEADER:
                    try:
                        p.maybe_shrink_isr()
                    except Exception:
                        log.exception("%s-%d: ISR shrink check failed", p.topic, p.index)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._isr_writer is not None:
            self._isr_writer.cancel()
        await self.fetchers.close()


class _ReplicaCollector(Collector):
    """Kafka's ``kafka.server:type=ReplicaManager`` gauges and ISR change rates, as counts."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        leaders = followers = under = under_min = 0
        for p in self.rm.topics.all_partitions():
            if p.role is Role.FOLLOWER:
                followers += 1
            lr = p.leader_replicas
            if p.role is not Role.LEADER or lr is None:
                continue
            leaders += 1
            if len(lr.isr) < len(lr.replicas):
                under += 1
            if len(lr.isr) < lr.min_isr:
                under_min += 1
        yield GaugeMetricFamily("oncelog_replica_leader_partitions", "Partitions this broker leads", value=leaders)
        yield GaugeMetricFamily("oncelog_replica_follower_partitions", "Partitions this broker follows (fetching "
                                "from their leader)", value=followers)
        yield GaugeMetricFamily("oncelog_replica_under_replicated_partitions", "Partitions led here whose ISR is "
                                "smaller than their replicas", value=under)
        yield GaugeMetricFamily("oncelog_replica_under_min_isr_partitions", "Partitions led here whose ISR is "
                                "smaller than min.insync.replicas (acks=all is refused)", value=under_min)
        yield CounterMetricFamily("oncelog_replica_isr_shrinks", "ISR shrinks this broker wrote as leader",
                                  value=self.rm.isr_shrinks)
        yield CounterMetricFamily("oncelog_replica_isr_expands", "ISR expansions this broker wrote as leader",
                                  value=self.rm.isr_expands)
