"""An in-memory :class:`~oncelog.cluster.store.MetadataStore` for tests of what sits above the metadata service.

It keeps the protocol's rules the way the etcd store does, so a test that passes here means something there:

- one global revision, bumped by every write that changes something; each partition key carries the revision of
  its last write (``mod_revision``), brokers and the controller the revision that created them (their epochs);
- ``update_partitions`` is all-or-nothing: every change's ``expected_mod_revision`` is compared (0: the key must not
  exist), and with ``controller_epoch`` the controller key must still hold that epoch; a lost race returns False;
  two changes to one key in a write are refused (etcd refuses duplicate keys in a transaction);
- views only move forward and a write returns once its view is published (read-your-writes).

Test controls stand in for the other processes and for etcd itself: brokers registering, entering controlled
shutdown and losing their lease, controller elections, the service being unreachable (``unavailable``), a write
of someone else landing just before ours (:meth:`MemoryMetadataStore.interleave`), and, with ``lagging=True``,
a watch that falls behind: changes made through the test controls are visible only after :meth:`publish`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from ..cluster.changes import ViewSubscription, diff
from ..cluster.model import (
    BrokerInfo,
    ClusterView,
    ControllerInfo,
    PartitionState,
    TopicMeta,
    TopicPartition,
    VersionedPartition,
)
from ..cluster.store import (
    DuplicateBrokerError,
    MetadataStore,
    MetadataUnavailableError,
    PartitionChange,
    PartitionWriteResult,
    TopicExistsInClusterError,
)

__all__ = ["MemoryMetadataStore"]


class MemoryMetadataStore:
    def __init__(self, cluster_id: str = "memory-cluster", *, lagging: bool = False) -> None:
        self._server = ClusterView(cluster_id=cluster_id, revision=1)
        self._published = self._server
        self._changed = asyncio.Event()
        self._lagging = lagging
        self._interleaved: list[Callable[[], None]] = []
        self._next_producer_id = 0
        self.unavailable = False  # True: every write raises MetadataUnavailableError (etcd unreachable)
        self.update_calls = 0  # update_partitions calls, won or lost
        self._subs: list[ViewSubscription] = []

    # ------------------------------------------------------------------------------------------------ views
    @property
    def view(self) -> ClusterView:
        return self._published

    @property
    def latest(self) -> ClusterView:
        """What etcd holds now (ahead of :attr:`view` in lagging mode)."""
        return self._server

    async def wait_for_change(self, after_revision: int, timeout: float | None = None) -> ClusterView:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._published.revision <= after_revision:
            event = self._changed
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                break
        return self._published

    def subscribe(self) -> ViewSubscription:
        sub = ViewSubscription(self._published, self._subs.remove)
        self._subs.append(sub)
        return sub

    def publish(self) -> ClusterView:
        """Let the view catch up with everything written so far."""
        if self._published is not self._server:
            old, self._published = self._published, self._server
            if self._subs:
                change = diff(old, self._published)
                for sub in list(self._subs):
                    sub.publish(change)
            self._changed.set()
            self._changed = asyncio.Event()
        return self._published

    def _commit(self, *, own: bool, **fields: object) -> ClusterView:
        self._server = replace(self._server, revision=self._server.revision + 1, **fields)  # type: ignore[arg-type]
        if own or not self._lagging:
            self.publish()
        return self._server

    # ------------------------------------------------------------------------------------------- test controls
    def interleave(self, action: Callable[[], None]) -> None:
        """Run ``action`` (another process's write) inside the next write, just before its compare."""
        self._interleaved.append(action)

    def register_broker(self, node_id: int, host: str = "127.0.0.1", port: int = 9092,
                        rack: str | None = None, incarnation: int = -1) -> BrokerInfo:
        """A broker registers under a new lease; its epoch is the revision that creates the key. ``incarnation``:
        the epoch of the same process's first registration (it registers again after its lease expired)."""
        if node_id in self._server.brokers:
            raise DuplicateBrokerError(f"broker {node_id} is already registered")
        info = BrokerInfo(node_id, host, port, rack, epoch=self._server.revision + 1, incarnation=incarnation)
        departed = {n: i for n, i in self._server.departed.items() if n != node_id}
        self._commit(own=False, brokers=MappingProxyType({**self._server.brokers, node_id: info}),
                     departed=MappingProxyType(departed))
        return info

    def begin_controlled_shutdown(self, node_id: int) -> None:
        """The broker re-puts its registration with the shutting-down flag (same key and lease: same epoch)."""
        info = replace(self._server.brokers[node_id], shutting_down=True)
        self._commit(own=False, brokers=MappingProxyType({**self._server.brokers, node_id: info}))

    def expire_broker(self, node_id: int) -> None:
        """The broker's lease expires (or it deregisters): its key goes."""
        brokers = dict(self._server.brokers)
        last = brokers.pop(node_id)
        self._commit(own=False, brokers=MappingProxyType(brokers),
                     departed=MappingProxyType({**self._server.departed, node_id: last}))

    def elect_controller(self, node_id: int) -> ControllerInfo:
        """``node_id`` wins the election: the controller key is created; its revision is the controller epoch."""
        if self._server.controller is not None:
            raise RuntimeError(f"broker {self._server.controller.node_id} is already the controller")
        info = ControllerInfo(node_id, self._server.revision + 1)
        self._commit(own=False, controller=info)
        return info

    def resign_controller(self) -> None:
        """The controller key goes (its lease expired or it resigned)."""
        self._commit(own=False, controller=None)

    def put_partition(self, tp: TopicPartition, state: PartitionState) -> int:
        """Set a partition state unconditionally (a test's set-up); its new mod_revision."""
        rev = self._server.revision + 1
        self._commit(own=False, partitions=MappingProxyType(
            {**self._server.partitions, tp: VersionedPartition(state, rev)}))
        return rev

    # ------------------------------------------------------------------------------------------------ writes
    async def _begin_write(self) -> None:
        await asyncio.sleep(0)  # a write is a round trip: others run meanwhile
        if self.unavailable:
            raise MetadataUnavailableError("the in-memory metadata service is marked unavailable")
        while self._interleaved:
            self._interleaved.pop(0)()

    async def update_partitions(self, changes: Sequence[PartitionChange], *,
                                controller_epoch: int | None = None) -> bool:
        self.update_calls += 1
        await self._begin_write()
        tps = [c.tp for c in changes]
        if len(set(tps)) != len(tps):
            raise ValueError(f"one write changes a partition twice: {sorted(tps)}")
        server = self._server
        if controller_epoch is not None and (server.controller is None or server.controller.epoch != controller_epoch):
            return False
        for c in changes:
            current = server.partitions.get(c.tp)
            if (0 if current is None else current.mod_revision) != c.expected_mod_revision:
                return False
        if not changes:
            return True
        rev = server.revision + 1
        partitions = dict(server.partitions)
        for c in changes:
            partitions[c.tp] = VersionedPartition(c.state, rev)
        self._commit(own=True, partitions=MappingProxyType(partitions))
        return True

    async def apply_partition_changes(self, changes: Sequence[PartitionChange], *,
                                      controller_epoch: int | None = None) -> PartitionWriteResult:
        """Each change compared and applied on its own (the etcd store splits them into transactions)."""
        await self._begin_write()
        tps = [c.tp for c in changes]
        if len(set(tps)) != len(tps):
            raise ValueError(f"one write changes a partition twice: {sorted(tps)}")
        server = self._server
        if controller_epoch is not None and (server.controller is None or server.controller.epoch != controller_epoch):
            return PartitionWriteResult(frozenset(), frozenset(), fenced=True)

        def mod_revision(tp: TopicPartition) -> int:
            vp = server.partitions.get(tp)
            return 0 if vp is None else vp.mod_revision

        won = [c for c in changes if mod_revision(c.tp) == c.expected_mod_revision]
        if won:
            rev = server.revision + 1
            self._commit(own=True, partitions=MappingProxyType(
                {**server.partitions, **{c.tp: VersionedPartition(c.state, rev) for c in won}}))
        return PartitionWriteResult(frozenset(c.tp for c in won), frozenset(tps) - {c.tp for c in won})

    async def create_topic(self, meta: TopicMeta, states: Sequence[PartitionState]) -> None:
        await self._begin_write()
        if len(states) != meta.num_partitions:
            raise ValueError(f"topic {meta.name} has {meta.num_partitions} partitions but {len(states)} states")
        server = self._server
        if meta.name in server.topics or any(tp[0] == meta.name for tp in server.partitions):
            raise TopicExistsInClusterError(f"topic {meta.name} already exists")
        rev = server.revision + 1
        partitions = dict(server.partitions)
        for i, s in enumerate(states):
            partitions[(meta.name, i)] = VersionedPartition(s, rev)
        self._commit(own=True, topics=MappingProxyType({**server.topics, meta.name: meta}),
                     partitions=MappingProxyType(partitions))

    async def add_partitions(self, name: str, expected_count: int, states: Sequence[PartitionState]) -> bool:
        await self._begin_write()
        server = self._server
        meta = server.topics.get(name)
        if meta is None or meta.num_partitions != expected_count:
            return False
        rev = server.revision + 1
        partitions = dict(server.partitions)
        for i, s in enumerate(states, start=expected_count):
            partitions[(name, i)] = VersionedPartition(s, rev)
        topics = {**server.topics, name: replace(meta, num_partitions=expected_count + len(states))}
        self._commit(own=True, topics=MappingProxyType(topics), partitions=MappingProxyType(partitions))
        return True

    async def mark_topic_deleting(self, name: str) -> bool:
        await self._begin_write()
        meta = self._server.topics.get(name)
        if meta is None:
            return False
        self._commit(own=True, topics=MappingProxyType({**self._server.topics, name: replace(meta, deleting=True)}))
        return True

    async def remove_topic(self, name: str) -> None:
        await self._begin_write()
        server = self._server
        if name not in server.topics and not any(tp[0] == name for tp in server.partitions):
            return
        topics = {n: m for n, m in server.topics.items() if n != name}
        partitions = {tp: vp for tp, vp in server.partitions.items() if tp[0] != name}
        self._commit(own=True, topics=MappingProxyType(topics), partitions=MappingProxyType(partitions))

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> bool:
        await self._begin_write()
        meta = self._server.topics.get(name)
        if meta is None:
            return False
        meta = replace(meta, configs=MappingProxyType(dict(configs)))
        self._commit(own=True, topics=MappingProxyType({**self._server.topics, name: meta}))
        return True

    async def set_broker_configs(self, node_id: int | None, configs: Mapping[str, str]) -> None:
        await self._begin_write()
        all_configs = dict(self._server.broker_configs)
        if configs:
            all_configs[node_id] = MappingProxyType(dict(configs))
        else:
            all_configs.pop(node_id, None)
        self._commit(own=True, broker_configs=MappingProxyType(all_configs))

    async def write_security(self, kind: str, puts: Mapping[str, bytes], deletes: Sequence[str] = ()) -> None:
        await self._begin_write()
        records = dict(self._server.security.get(kind, {}))
        for key in deletes:
            records.pop(key, None)
        records.update(puts)
        self._commit(own=True, security=MappingProxyType({**self._server.security,
                                                          kind: MappingProxyType(records)}))

    async def allocate_producer_ids(self, block_size: int) -> int:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        await self._begin_write()
        first = self._next_producer_id
        self._next_producer_id += block_size
        self._commit(own=True)
        return first


def _conforms(store: MemoryMetadataStore) -> MetadataStore:
    return store  # mypy checks here that the class implements the protocol
