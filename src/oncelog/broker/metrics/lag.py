"""Metrics a Kafka operator looks for first: consumer-group lag, open transactions holding back the last stable
offset (requests by error code, Kafka's ``RequestMetrics ErrorsPerSec``, are counted in :mod:`.counts`).

Collected when Prometheus scrapes (on the HTTP server's thread), from the broker's live state: the request path
pays only for counting error codes. The coordinator's and the topics' dicts change on the event loop meanwhile, so
every walk copies first and a scrape that still races a change skips that family rather than failing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from oncelog.protocol.record_batch import parse_batch_header

if TYPE_CHECKING:
    from oncelog.coordinator.group.coordinator import GroupCoordinator

    from ..partition import Partition
    from ..topics import TopicRegistry

__all__ = ["GroupLagCollector", "OpenTxnCollector", "register"]

log = logging.getLogger("oncelog.broker.metrics")


class GroupLagCollector(Collector):
    """Per group and partition: the committed offset, and the lag a consumer of the group has left to read, against
    the last stable offset (what a read_committed consumer can reach: an open transaction holds it back) and
    against the high watermark (read_uncommitted)."""

    def __init__(self, topics: TopicRegistry, groups: Callable[[], GroupCoordinator | None]) -> None:
        self.topics = topics
        self.groups = groups

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily("oncelog_consumer_group_committed_offset", "Offset committed by the group",
                                      labels=labels)
        lag = GaugeMetricFamily("oncelog_consumer_group_lag", "Records the group has left to read: last stable "
                                "offset (read_committed) or high watermark (read_uncommitted) minus the committed "
                                "offset", labels=[*labels, "isolation"])
        coordinator = self.groups()
        if coordinator is not None:
            try:
                for _, shard in list(coordinator.runtime.shards().items()):
                    for group, offsets in list(shard.offsets.committed.items()):
                        for (topic, index), entry in list(offsets.items()):
                            p = self.topics.partition(topic, index)
                            lv = [group, topic, str(index)]
                            committed.add_metric(lv, entry.offset)
                            if p is not None:
                                lag.add_metric([*lv, "read_committed"], max(p.last_stable_offset - entry.offset, 0))
                                lag.add_metric([*lv, "read_uncommitted"], max(p.high_watermark - entry.offset, 0))
            except RuntimeError:  # a dict changed size under the walk: the next scrape has it
                log.debug("consumer group metrics skipped: the groups changed during the scrape")
        yield committed
        yield lag


class OpenTxnCollector(Collector):
    """Per partition with open transactions: how many, and the age of the oldest (the one holding back the last
    stable offset, so read_committed consumers). The age is taken from the timestamp of that transaction's first
    batch (read once per transaction)."""

    def __init__(self, topics: TopicRegistry) -> None:
        self.topics = topics
        self._started: dict[tuple[str, int, int], int] = {}  # (topic, partition, first offset) -> timestamp ms

    def _start_ms(self, p: Partition, first_offset: int) -> int | None:
        key = (p.topic, p.index, first_offset)
        ts = self._started.get(key)
        if ts is None:
            try:
                res = p.log.read(first_offset, 1, p.log_end_offset)
                ts = parse_batch_header(res.records[0], 0).base_timestamp if res.size else None
            except Exception:  # noqa: BLE001 - retention removed it, or the log is closing: no age this time
                return None
            if ts is not None:
                self._started[key] = ts
        return ts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        count = GaugeMetricFamily("oncelog_partition_open_transactions", "Transactions open on the partition "
                                  "(their markers not written yet)", labels=labels)
        age = GaugeMetricFamily("oncelog_partition_oldest_open_transaction_age_seconds", "Age of the oldest open "
                                "transaction, which holds back the last stable offset", labels=labels)
        now_ms = int(time.time() * 1000)
        seen: set[tuple[str, int, int]] = set()
        try:
            for p in self.topics.all_partitions():
                ongoing = p.log.ongoing_transactions()
                if not ongoing:
                    continue
                lv = [p.topic, str(p.index)]
                count.add_metric(lv, len(ongoing))
                oldest = min(t.first_offset for t in ongoing)
                seen.add((p.topic, p.index, oldest))
                start = self._start_ms(p, oldest)
                if start is not None:
                    age.add_metric(lv, max(now_ms - start, 0) / 1000)
        except RuntimeError:
            log.debug("open transaction metrics skipped: the partitions changed during the scrape")
        for key in [k for k in self._started if k not in seen]:
            del self._started[key]
        yield count
        yield age


def register(topics: TopicRegistry, groups: Callable[[], GroupCoordinator | None], registry: Any) -> None:
    """Add the group lag and open transaction collectors over ``topics`` and the group coordinator ``groups``
    gives (None while not loaded) to ``registry``."""
    registry.register(GroupLagCollector(topics, groups))
    registry.register(OpenTxnCollector(topics))
