"""Topics and partitions as the broker serves them, on top of the storage LogManager."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Callable

from oncelog.storage import LogManager

from .partition import Partition

__all__ = ["TopicRegistry", "TopicView", "INTERNAL_TOPICS"]

log = logging.getLogger("oncelog.broker.topics")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(slots=True)
class TopicView:
    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]
    configs: dict[str, str]

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    def __init__(self, logs: LogManager, *, durable_per_append: bool,
                 mark_dirty: Callable[[Partition, int, bool], None], replicated: bool = False) -> None:
        self.logs = logs
        self.durable_per_append = durable_per_append
        self.replicated = replicated  # a broker of a cluster: partitions take their roles from the view
        self._mark_dirty = mark_dirty
        self._by_name: dict[str, TopicView] = {}
        self._by_id: dict[uuid.UUID, TopicView] = {}
        for info in logs.topics():
            self._load(info.name)

    def _load(self, name: str) -> TopicView:
        info = self.logs.topic(name)
        parts = []
        for i in range(info.num_partitions):
            plog = self.logs.get_log(name, i)
            assert plog is not None, f"log of {name}-{i} missing after open"
            parts.append(Partition(name, i, info.topic_id, plog, durable_per_append=self.durable_per_append,
                                   mark_dirty=self._mark_dirty, replicated=self.replicated))
        view = TopicView(name, info.topic_id, parts, dict(info.configs))
        self._by_name[name] = view
        self._by_id[info.topic_id] = view
        return view

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> TopicView | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicView | None:
        return self._by_id.get(topic_id)

    def partition(self, name: str, index: int) -> Partition | None:
        view = self._by_name.get(name)
        if view is None or not (0 <= index < len(view.partitions)):
            return None
        return view.partitions[index]

    def all_partitions(self) -> list[Partition]:
        return [p for v in self._by_name.values() for p in v.partitions]

    def create(self, name: str, num_partitions: int, configs: dict[str, str] | None = None, *,
               topic_id: uuid.UUID | None = None) -> TopicView:
        """Create a topic (``topic_id``: the cluster's, for a replica). Raises the storage layer's
        TopicExistsError/InvalidTopicError/InvalidConfigError."""
        self.logs.create_topic(name, num_partitions, configs or {}, topic_id=topic_id)
        view = self._load(name)
        log.info("created topic %s with %d partition(s) (id %s)", name, num_partitions, view.topic_id)
        return view

    def delete(self, name: str) -> None:
        view = self._by_name.pop(name, None)
        if view is None:
            return
        self._by_id.pop(view.topic_id, None)
        for p in view.partitions:
            p.deleted = True
        from oncelog.storage import UnknownTopicError

        try:
            self.logs.delete_topic(name)
        except UnknownTopicError:
            pass
        for p in view.partitions:
            p.fail_waiters(RuntimeError(f"topic {name} was deleted"))
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, new_total: int) -> TopicView:
        self.logs.add_partitions(name, new_total)
        view = self._by_name[name]
        for i in range(len(view.partitions), new_total):
            plog = self.logs.get_log(name, i)
            assert plog is not None
            view.partitions.append(Partition(name, i, view.topic_id, plog,
                                             durable_per_append=self.durable_per_append,
                                             mark_dirty=self._mark_dirty, replicated=self.replicated))
        log.info("topic %s now has %d partitions", name, new_total)
        return view

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.logs.set_topic_configs(name, configs)
        self._by_name[name].configs = dict(configs)
