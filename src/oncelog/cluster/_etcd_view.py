"""From etcd key-values to immutable :class:`ClusterView` snapshots (pure; private to ``cluster.metadata``).

Each watch response (whole revisions) becomes one new view, copy-on-write: the partition map is split into buckets
of 256 partitions of one topic, and a change copies only the buckets it touches (plus the small index of buckets),
so a leader election of one partition among 10,000 copies ~300 references, not 10,000.

A partition key is *visible* only while its topic key exists and its index is below the topic's partition count.
Topics written in several transactions (``create_topic`` / ``add_partitions`` with more partitions than one txn
takes) write their partition keys first and the topic key (or its new count) last, so a reader never sees a topic
without all of its partitions; keys written by a creation that died half-way stay invisible until the name is
created again (which deletes them first).
"""

from __future__ import annotations

from urllib.parse import unquote

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TypeVar

from ._etcd import KV, WatchEvent
from .changes import ViewChange, diff
from .model import (
    BrokerInfo,
    ClusterView,
    ControllerInfo,
    Keys,
    MetadataFormatError,
    PartitionState,
    TopicMeta,
    TopicPartition,
    VersionedPartition,
    decode_configs,
)
from .partition_map import PartitionMap

__all__ = ["PartitionMap", "ViewState"]

log = logging.getLogger("oncelog.cluster.metadata")

K = TypeVar("K")
V = TypeVar("V")


def _frozen(d: Mapping[K, V]) -> Mapping[K, V]:
    return MappingProxyType(dict(d))


class ViewState:
    """The newest view plus what the view does not show (partition keys of topics not complete yet)."""

    def __init__(self, keys: Keys) -> None:
        self._root = keys.root
        self.view = ClusterView(partitions=PartitionMap())
        # partition keys not visible now (topic key absent, or index >= its partition count)
        self._hidden: dict[str, dict[int, VersionedPartition]] = {}

    # ------------------------------------------------------------------ loading everything
    def load(self, kvs: Iterable[KV], revision: int) -> ViewChange:
        """Replace everything with the key-values read at ``revision``; the change from the previous view."""
        fresh = ViewState.__new__(ViewState)
        fresh._root = self._root
        fresh.view = ClusterView(revision=0, partitions=PartitionMap())
        fresh._hidden = {}
        fresh.apply([WatchEvent(True, kv) for kv in kvs], revision)
        old = self.view
        new = fresh.view
        departed = {n: info for n, info in {**old.departed, **old.brokers}.items() if n not in new.brokers}
        new = replace(new, revision=max(revision, old.revision), departed=_frozen(departed))
        self.view, self._hidden = new, fresh._hidden
        return diff(old, new)

    # ------------------------------------------------------------------ applying watch events
    def apply(self, events: Iterable[WatchEvent], revision: int) -> ViewChange | None:
        """Apply the events of whole revisions; the new view is at ``revision`` (the last event's revision).
        Returns the change, or None when no visible value changed (the view keeps its revision then)."""
        v = self.view
        brokers: dict[int, BrokerInfo] | None = None
        departed: dict[int, BrokerInfo] | None = None
        topics: dict[str, TopicMeta] | None = None
        configs: dict[int | None, Mapping[str, str]] | None = None
        security: dict[str, dict[str, bytes]] = {}  # kind -> its records, copied when first touched
        controller, cluster_id = v.controller, v.cluster_id
        puts: dict[TopicPartition, VersionedPartition] = {}
        dels: set[TopicPartition] = set()
        touched_topics: dict[str, TopicMeta | None] = {}  # topic -> its meta before this batch
        ch_brokers: set[int] = set()
        ch_configs: set[int | None] = set()
        ch_parts: set[TopicPartition] = set()
        gone: set[TopicPartition] = set()  # partition keys deleted by these events

        def visible(tp: TopicPartition) -> VersionedPartition | None:
            if tp in dels:
                return None
            return puts.get(tp) or v.partitions.get(tp)

        def topic_now(name: str) -> TopicMeta | None:
            return (topics if topics is not None else v.topics).get(name)

        for ev in events:
            what = self._parse(ev.kv.key)
            if what is None:
                continue
            kind, a, b = what
            try:
                if kind == "partition":
                    assert isinstance(a, str) and isinstance(b, int)
                    tp = (a, b)
                    vp = VersionedPartition(PartitionState.decode(ev.kv.value, f"partition {a}-{b}"),
                                            ev.kv.mod_revision) if ev.put else None
                    meta = topic_now(a)
                    if vp is None:
                        gone.add(tp)
                        self._hidden.get(a, {}).pop(b, None)
                        if visible(tp) is not None:
                            dels.add(tp)
                            puts.pop(tp, None)
                            ch_parts.add(tp)
                    elif meta is not None and b < meta.num_partitions:
                        gone.discard(tp)
                        puts[tp] = vp
                        dels.discard(tp)
                        ch_parts.add(tp)
                    else:
                        gone.discard(tp)
                        self._hidden.setdefault(a, {})[b] = vp
                elif kind == "topic":
                    assert isinstance(a, str)
                    if topics is None:
                        topics = dict(v.topics)
                    touched_topics.setdefault(a, topics.get(a))
                    if ev.put:
                        topics[a] = TopicMeta.decode(a, ev.kv.value)
                    else:
                        topics.pop(a, None)
                elif kind == "broker":
                    assert isinstance(a, int)
                    if brokers is None:
                        brokers, departed = dict(v.brokers), dict(v.departed)
                    assert departed is not None
                    if ev.put:
                        brokers[a] = BrokerInfo.decode(ev.kv.value, epoch=ev.kv.create_revision)
                        departed.pop(a, None)
                    else:
                        last = brokers.pop(a, None)
                        if last is not None:
                            departed[a] = last
                    ch_brokers.add(a)
                elif kind == "config":
                    assert a is None or isinstance(a, int)
                    if configs is None:
                        configs = dict(v.broker_configs)
                    if ev.put:
                        configs[a] = decode_configs(ev.kv.value, f"dynamic configs of broker {a or 'default'}")
                    else:
                        configs.pop(a, None)
                    ch_configs.add(a)
                elif kind == "security":
                    assert isinstance(a, str) and isinstance(b, str)
                    records = security.get(a)
                    if records is None:
                        records = security[a] = dict(v.security.get(a, {}))
                    if ev.put:
                        records[b] = ev.kv.value
                    else:
                        records.pop(b, None)
                elif kind == "controller":
                    controller = ControllerInfo.decode(ev.kv.value, ev.kv.create_revision) if ev.put else None
                elif kind == "cluster_id":
                    cluster_id = ev.kv.value.decode("utf-8", "replace") if ev.put else ""
            except MetadataFormatError as e:
                log.warning("ignoring the etcd key %s: %s (written by another program or version?)",
                            ev.kv.key.decode("utf-8", "replace"), e)

        # topics whose key changed: show or hide their partitions as the count says
        for name, before in touched_topics.items():
            after = topic_now(name)
            old_n = before.num_partitions if before is not None else 0
            new_n = after.num_partitions if after is not None else 0
            if new_n < old_n:  # removed (or shrunk: not a Kafka operation, but stay consistent)
                hidden = self._hidden.setdefault(name, {})
                for i in range(new_n, old_n):
                    tp = (name, i)
                    cur = visible(tp)
                    if cur is not None:
                        dels.add(tp)
                        puts.pop(tp, None)
                        ch_parts.add(tp)
                        if tp not in gone and i not in hidden:  # the key stays in etcd, invisible
                            hidden[i] = cur
                if not hidden:
                    del self._hidden[name]
            elif new_n > old_n:
                hidden = self._hidden.get(name, {})
                for i in range(old_n, new_n):
                    vp = hidden.pop(i, None)
                    if vp is not None:
                        puts[(name, i)] = vp
                        dels.discard((name, i))
                        ch_parts.add((name, i))
                if not hidden:
                    self._hidden.pop(name, None)
        ch_topics = frozenset(n for n, before in touched_topics.items() if topic_now(n) != before)
        ch_parts_f = frozenset(ch_parts)
        ch_security = frozenset(k for k, records in security.items() if records != v.security.get(k, {}))
        changed = (ch_parts_f or ch_topics or ch_brokers or ch_configs or controller != v.controller
                   or cluster_id != v.cluster_id or ch_security)
        if not changed:
            return None
        partitions = v.partitions
        if puts or dels:
            assert isinstance(partitions, PartitionMap)
            partitions = partitions.updated(puts, dels)
        new = ClusterView(
            cluster_id=cluster_id, revision=max(revision, v.revision),
            brokers=_frozen(brokers) if brokers is not None else v.brokers,
            departed=_frozen(departed) if departed is not None else v.departed,
            controller=controller,
            topics=_frozen(topics) if topics is not None else v.topics,
            partitions=partitions,
            broker_configs=_frozen(configs) if configs is not None else v.broker_configs,
            security=_frozen({**v.security, **{k: _frozen(r) for k, r in security.items()}}) if ch_security
            else v.security)
        self.view = new
        return ViewChange(new, v.revision, frozenset(ch_brokers), ch_topics, ch_parts_f, frozenset(ch_configs),
                          controller != v.controller, cluster_id != v.cluster_id, ch_security)

    @property
    def hidden_count(self) -> int:
        return sum(len(h) for h in self._hidden.values())

    def _parse(self, key: bytes) -> tuple[str, str | int | None, int | str | None] | None:
        try:
            k = key.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if not k.startswith(self._root):
            return None
        rel = k[len(self._root):]
        try:
            if rel == "cluster_id":
                return "cluster_id", None, None
            if rel == "controller":
                return "controller", None, None
            head, _, rest = rel.partition("/")
            if head == "brokers":
                return "broker", int(rest), None
            if head == "topics" and rest:
                return "topic", rest, None
            if head == "partitions":
                topic, _, index = rest.rpartition("/")
                if topic:
                    return "partition", topic, int(index)
            if head == "configs" and rest.startswith("broker/"):
                node = rest[len("broker/"):]
                return "config", None if node == "default" else int(node), None
            if head == "security":
                kind, sep, record = rest.partition("/")
                if sep and kind and record:
                    return "security", kind, unquote(record)
        except ValueError:
            pass
        return None  # producer-id block, topic claims, keys of another version: not part of the view

