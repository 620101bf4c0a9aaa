"""Durable topic metadata: ``<data_dir>/__cluster_metadata.json``.

Every change rewrites the whole (small) file atomically: tmp file, fsync, rename, fsync directory.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import KafkaStorageError, TopicExistsError, UnknownTopicError
from .files import write_atomic

__all__ = ["CATALOG_FILE", "TopicCatalog", "TopicInfo", "new_cluster_id"]

log = logging.getLogger("oncelog.storage")

CATALOG_FILE = "__cluster_metadata.json"


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID as 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only; defaults come from the broker

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "topic_id": str(self.topic_id), "num_partitions": self.num_partitions,
                "configs": dict(self.configs)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicInfo:
        return cls(str(d["name"]), uuid.UUID(d["topic_id"]), int(d["num_partitions"]),
                   {str(k): str(v) for k, v in d.get("configs", {}).items()})


class TopicCatalog:
    def __init__(self, path: Path, cluster_id: str, topics: dict[str, TopicInfo]) -> None:
        self.path = path
        self.cluster_id = cluster_id
        self._topics = topics
        self._lock = threading.Lock()

    @classmethod
    def open(cls, data_dir: Path, cluster_id: str | None = None) -> TopicCatalog:
        """The catalog of ``data_dir``; a new one takes ``cluster_id`` (a cluster's, known before the folder is
        opened), or a new random id (a single node)."""
        path = Path(data_dir) / CATALOG_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            cat = cls(path, cluster_id or new_cluster_id(), {})
            cat._save()
            log.info("new data directory %s: cluster id %s", data_dir, cat.cluster_id)
            return cat
        except (ValueError, OSError) as e:
            raise KafkaStorageError(
                f"cannot read topic metadata {path}: {e}; restore it from a backup or move it away to start "
                f"with no topics (partition folders would then be deleted as orphans)"
            ) from e
        topics = {t["name"]: TopicInfo.from_json(t) for t in raw.get("topics", [])}
        return cls(path, str(raw["cluster_id"]), topics)

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """Take the id of the cluster this data folder joins; only while it holds no topic (a folder with topics
        belongs to the cluster whose id it has, as Kafka's meta.properties)."""
        with self._lock:
            if self._topics:
                raise ValueError(f"the data folder holds {len(self._topics)} topic(s) of cluster {self.cluster_id}")
            self.cluster_id = cluster_id
            self._save()

    def _save(self) -> None:
        body = {"version": 1, "cluster_id": self.cluster_id,
                "topics": [t.to_json() for t in sorted(self._topics.values(), key=lambda t: t.name)]}
        try:
            write_atomic(self.path, json.dumps(body, indent=1).encode())
        except OSError as e:
            raise KafkaStorageError(f"cannot write topic metadata {self.path}: {e}; check the disk") from e

    # ---------------------------------------------------------------- queries
    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self._topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    # ---------------------------------------------------------------- changes
    def create(self, name: str, num_partitions: int, configs: dict[str, str] | None = None,
               topic_id: uuid.UUID | None = None) -> TopicInfo:
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(name)
            info = TopicInfo(name, topic_id or uuid.uuid4(), num_partitions, dict(configs or {}))
            self._topics[name] = info
            try:
                self._save()
            except Exception:
                del self._topics[name]
                raise
            return info

    def _replace(self, name: str, **changes: Any) -> TopicInfo:
        with self._lock:
            old = self._topics.get(name)
            if old is None:
                raise UnknownTopicError(name)
            info = dataclasses.replace(old, **changes)
            self._topics[name] = info
            try:
                self._save()
            except Exception:
                self._topics[name] = old
                raise
            return info

    def delete(self, name: str) -> TopicInfo:
        with self._lock:
            old = self._topics.pop(name, None)
            if old is None:
                raise UnknownTopicError(name)
            try:
                self._save()
            except Exception:
                self._topics[name] = old
                raise
            return old

    def add_partitions(self, name: str, new_total: int) -> TopicInfo:
        return self._replace(name, num_partitions=new_total)

    def set_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        """Replace the topic's overrides with ``configs``."""
        return self._replace(name, configs=dict(configs))
