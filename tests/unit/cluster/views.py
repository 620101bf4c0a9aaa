"""Building ClusterViews for the controller's tests, and the invariants every partition change must keep."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from oncelog.cluster.model import (
    NO_LEADER,
    BrokerInfo,
    ClusterView,
    PartitionState,
    TopicMeta,
    TopicPartition,
    VersionedPartition,
)
from oncelog.cluster.store import PartitionChange


def make_view(brokers: Iterable[int] | Mapping[int, str | None], partitions: Mapping[TopicPartition, PartitionState],
              *, shutting_down: Iterable[int] = (), topic_configs: Mapping[str, Mapping[str, str]] | None = None,
              cluster_configs: Mapping[str, str] | None = None, revision: int = 1000) -> ClusterView:
    """Brokers (ids, or id -> rack) registered at revisions 1..n, each partition last written at revision 100+."""
    racks = dict(brokers) if isinstance(brokers, Mapping) else {b: None for b in brokers}
    leaving = set(shutting_down)
    infos = {b: BrokerInfo(b, "127.0.0.1", 9000 + b, rack, epoch=i + 1, shutting_down=b in leaving)
             for i, (b, rack) in enumerate(sorted(racks.items()))}
    counts: dict[str, int] = {}
    for name, index in partitions:
        counts[name] = max(counts.get(name, 0), index + 1)
    configs = topic_configs or {}
    topics = {name: TopicMeta(name, uuid.UUID(int=i + 1), n, dict(configs.get(name, {})))
              for i, (name, n) in enumerate(sorted(counts.items()))}
    versioned = {tp: VersionedPartition(s, 100 + i) for i, (tp, s) in enumerate(sorted(partitions.items()))}
    broker_configs: dict[int | None, Mapping[str, str]] = {}
    if cluster_configs:
        broker_configs[None] = dict(cluster_configs)
    return ClusterView("test", revision, infos, None, topics, versioned, broker_configs)


def ps(replicas: Iterable[int], isr: Iterable[int] | None = None, leader: int | None = None, *,
       le: int = 0, pe: int = 0, adding: Iterable[int] = (), removing: Iterable[int] = ()) -> PartitionState:
    r = tuple(replicas)
    i = r if isr is None else tuple(isr)
    lead = (i[0] if i else NO_LEADER) if leader is None else leader
    return PartitionState(r, i, lead, le, pe, tuple(adding), tuple(removing))


def apply(view: ClusterView, changes: Iterable[PartitionChange]) -> ClusterView:
    """The view after the changes are written (as one write at the next revision)."""
    rev = view.revision + 1
    parts = dict(view.partitions)
    for c in changes:
        assert parts[c.tp].mod_revision == c.expected_mod_revision, c
        parts[c.tp] = VersionedPartition(c.state, rev)
    return ClusterView(view.cluster_id, rev, view.brokers, view.controller, view.topics, parts, view.broker_configs)


def check_state(s: PartitionState) -> None:
    """leader in ISR, ISR a non-empty subset of replicas, no duplicates; reassignment lists within replicas."""
    assert s.isr, s
    assert len(set(s.isr)) == len(s.isr) and len(set(s.replicas)) == len(s.replicas), s
    assert set(s.isr) <= set(s.replicas), s
    assert s.leader == NO_LEADER or s.leader in s.isr, s
    assert set(s.adding) <= set(s.replicas) and set(s.removing) <= set(s.replicas), s
    assert not set(s.adding) & set(s.removing), s


def check_change(old: PartitionState, new: PartitionState, *, unclean_allowed: bool = False) -> None:
    """The epoch rules of a change and where a new leader may come from."""
    check_state(new)
    assert new.partition_epoch == old.partition_epoch + 1, (old, new)
    replicas_shrank = not set(old.replicas) <= set(new.replicas)
    if new.leader != old.leader or replicas_shrank:
        assert new.leader_epoch == old.leader_epoch + 1, (old, new)
    else:
        assert new.leader_epoch == old.leader_epoch, (old, new)
    if new.leader != old.leader and new.leader != NO_LEADER and not unclean_allowed:
        assert new.leader in old.isr, f"unclean election without permission: {old} -> {new}"
