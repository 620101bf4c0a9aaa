"""The Prometheus side of :mod:`.counts`: the registry that exports a broker's plain numbers, the scrape-time
collectors of its partitions and flusher, and the ``/metrics`` HTTP server. Imported (with prometheus_client) only
when a broker's registry is first used."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from oncelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from ..durability import GroupCommitFlusher
    from ..fetch_session import FetchSessionCache
    from ..topics import TopicRegistry

__all__ = ["FetchSessionCollector", "FlusherCollector", "PartitionCollector", "build_registry", "serve"]

log = logging.getLogger("oncelog.broker.metrics")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class PartitionCollector(Collector):
    def __init__(self, topics: TopicRegistry) -> None:
        self.topics = topics

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        leo = GaugeMetricFamily("oncelog_partition_log_end_offset", "Next offset to be assigned", labels=labels)
        hw = GaugeMetricFamily("oncelog_partition_high_watermark", "High watermark (durable end)", labels=labels)
        lso = GaugeMetricFamily("oncelog_partition_last_stable_offset", "Last stable offset", labels=labels)
        start = GaugeMetricFamily("oncelog_partition_log_start_offset", "Log start offset", labels=labels)
        for p in self.topics.all_partitions():
            lv = [p.topic, str(p.index)]
            leo.add_metric(lv, p.log_end_offset)
            hw.add_metric(lv, p.high_watermark)
            lso.add_metric(lv, p.last_stable_offset)
            start.add_metric(lv, p.log_start_offset)
        yield from (leo, hw, lso, start)


class FlusherCollector(Collector):
    def __init__(self, flusher: GroupCommitFlusher) -> None:
        self.flusher = flusher

    def collect(self) -> Iterable[CounterMetricFamily]:
        rounds = CounterMetricFamily("oncelog_fsync_rounds", "Group-commit fsync rounds, by the thread that ran them",
                                     labels=["thread"])
        f = self.flusher
        rounds.add_metric(["event_loop"], f.inline_rounds)
        rounds.add_metric(["flusher"], f.rounds - f.inline_rounds)
        stalls = CounterMetricFamily("oncelog_fsync_stalls", "fsyncs on the event loop that took longer than "
                                     "durability.INLINE_STALL_S (each sends rounds to the flusher thread for a while)")
        stalls.add_metric([], f.inline_stalls)
        yield rounds
        yield stalls


class FetchSessionCollector(Collector):
    """Kafka's NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictions,
    and the partitions fetch requests listed and answers carried (what sessions save)."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        c = self.cache
        yield GaugeMetricFamily("oncelog_fetch_sessions", "Incremental fetch sessions held (KIP-227)", value=len(c))
        yield GaugeMetricFamily("oncelog_fetch_session_partitions", "Partitions held by the fetch sessions",
                                value=c.partitions_cached)
        yield CounterMetricFamily("oncelog_fetch_session_evictions", "Fetch sessions evicted for a new one",
                                  value=c.evictions)
        for name, what, counts in (("requested", "listed in Fetch requests", c.requested),
                                   ("answered", "carried in Fetch answers", c.answered)):
            fam = CounterMetricFamily(f"oncelog_fetch_partitions_{name}", f"Partitions {what}, by fetcher",
                                      labels=["fetcher"])
            for kind, n in counts.items():
                fam.add_metric([kind], n)
            yield fam


class _BrokerCollector(Collector):
    """The broker's own numbers (a :class:`~oncelog.broker.metrics.counts.BrokerMetrics`): requests and their
    latency, error codes, bytes and records per topic, open connections."""

    def __init__(self, metrics: Any, latency_buckets: Sequence[float]) -> None:
        self.metrics = metrics
        self.latency_buckets = latency_buckets

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        m = self.metrics
        requests = CounterMetricFamily("oncelog_requests", "Requests served", labels=["api"])
        latency = HistogramMetricFamily("oncelog_request_latency_seconds",
                                        "Request latency from read to response written", labels=["api"])
        for api, st in list(m.requests.items()):
            counts, total = list(st.buckets), st.total  # a scrape runs on another thread: copy, then sum
            cumulative, buckets = 0, []
            for bound, n in zip(self.latency_buckets, counts):
                cumulative += n
                buckets.append((repr(float(bound)), cumulative))  # '0.0001', '1.0': as prometheus_client writes them
            cumulative += counts[-1]
            buckets.append(("+Inf", cumulative))
            requests.add_metric([api], cumulative)
            latency.add_metric([api], buckets, total)
        yield requests
        yield latency
        errors = CounterMetricFamily("oncelog_request_errors", "Error codes in responses, by API (Kafka's "
                                     "RequestMetrics ErrorsPerSec); a response counts each failed partition",
                                     labels=["api", "error"])
        for (api, code), n in list(m.errors.counts.items()):
            errors.add_metric([api, _error_name(code)], n)
        yield errors
        families = (CounterMetricFamily("oncelog_bytes_in", "Record batch bytes appended", labels=["topic"]),
                    CounterMetricFamily("oncelog_records_in", "Records appended", labels=["topic"]),
                    CounterMetricFamily("oncelog_bytes_out", "Record batch bytes served to fetchers",
                                        labels=["topic"]))
        for topic, counts3 in list(m.topics_io.items()):
            for family, count in zip(families, counts3):
                family.add_metric([topic], count.value, created=count.created)
        yield from families
        for counter in list(m.counters):
            family = CounterMetricFamily(counter.name, counter.documentation, labels=list(counter.label_names))
            for values, count in list(counter.children.items()):
                family.add_metric(list(values), count.value, created=count.created)
            yield family
        connections = GaugeMetricFamily("oncelog_connections", "Open client connections")
        connections.add_metric([], m.connections.value)
        yield connections


def build_registry(metrics: Any, latency_buckets: Sequence[float]) -> CollectorRegistry:
    """A registry exporting ``metrics`` (a :class:`~oncelog.broker.metrics.counts.BrokerMetrics`; not imported
    here: that module imports this one when asked for its registry) and the process's CPU, memory and files."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_BrokerCollector(metrics, latency_buckets))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds
    return registry


def serve(registry: CollectorRegistry, listen: str) -> None:
    host, _, port = listen.rpartition(":")
    try:
        start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
        log.info("Prometheus metrics on http://%s/metrics", listen)
    except OSError as e:
        log.warning("cannot serve metrics on %s (%s); the broker runs without a /metrics endpoint", listen, e)
