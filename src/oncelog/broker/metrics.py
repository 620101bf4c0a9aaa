"""Prometheus metrics: bytes and records in/out, request rate and latency per API, per-partition offsets.

Each broker owns its own registry (tests run several brokers in one process). Per-partition gauges are collected
at scrape time from the live partitions, so the produce and fetch paths pay nothing for them.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .operator_metrics import ErrorCounts

if TYPE_CHECKING:
    from collections.abc import Callable

    from oncelog.coordinator.group.coordinator import GroupCoordinator

    from .durability import GroupCommitFlusher
    from .fetch_session import FetchSessionCache
    from .topics import TopicRegistry

__all__ = ["BrokerMetrics"]

log = logging.getLogger("oncelog.broker.metrics")


class _PartitionCollector(Collector):
    def __init__(self, topics: "TopicRegistry") -> None:
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


class _FlusherCollector(Collector):
    def __init__(self, flusher: "GroupCommitFlusher") -> None:
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


class _FetchSessionCollector(Collector):
    """Kafka's NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached, IncrementalFetchSessionEvictions,
    and the partitions fetch requests listed and answers carried (what sessions save)."""

    def __init__(self, cache: "FetchSessionCache") -> None:
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


LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)


class _RequestStats:
    """Latency buckets and sum of one API (the count is the buckets' total): plain numbers updated on the event
    loop (every request pays for this, so no locks: prometheus_client's locked Counter + Histogram cost ~3% of a
    transaction's CPU)."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: above every bound (+Inf)


class _RequestCollector(Collector):
    def __init__(self, stats: dict[str, _RequestStats], errors: ErrorCounts) -> None:
        self.stats = stats
        self.errors = errors

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily("oncelog_requests", "Requests served", labels=["api"])
        latency = HistogramMetricFamily("oncelog_request_latency_seconds",
                                        "Request latency from read to response written", labels=["api"])
        for api, st in list(self.stats.items()):
            counts, total = list(st.buckets), st.total  # a scrape runs on another thread: copy, then sum
            cumulative, buckets = 0, []
            for bound, n in zip(LATENCY_BUCKETS, counts):
                cumulative += n
                buckets.append((repr(float(bound)), cumulative))  # '0.0001', '1.0': as prometheus_client writes them
            cumulative += counts[-1]
            buckets.append(("+Inf", cumulative))
            requests.add_metric([api], cumulative)
            latency.add_metric([api], buckets, total)
        yield requests
        yield latency
        yield self.errors.collect()


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests: dict[str, _RequestStats] = {}
        self._errors = ErrorCounts()
        r.register(_RequestCollector(self._requests, self._errors))
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds
        self.bytes_in = Counter("oncelog_bytes_in", "Record batch bytes appended", ["topic"], registry=r)
        self.records_in = Counter("oncelog_records_in", "Records appended", ["topic"], registry=r)
        self.bytes_out = Counter("oncelog_bytes_out", "Record batch bytes served to fetchers", ["topic"], registry=r)
        self.connections = Gauge("oncelog_connections", "Open client connections", registry=r)
        self.authorization_denials = Counter("oncelog_authorization_denials", "Requests (or parts of them) refused "
                                             "by the authorizer", ["api", "operation"], registry=r)
        self.failed_authentications = Counter("oncelog_failed_authentications", "Logins refused",
                                              ["listener", "mechanism"], registry=r)
        self._topic_children: dict[str, tuple[Counter, Counter, Counter]] = {}

    def topic(self, topic: str) -> tuple[Counter, Counter, Counter]:
        """(bytes in, records in, bytes out) counters of ``topic``: ``labels()`` looked up once, not per request."""
        child = self._topic_children.get(topic)
        if child is None:
            child = self._topic_children[topic] = (self.bytes_in.labels(topic), self.records_in.labels(topic),  # type: ignore[assignment,unused-ignore]
                                                   self.bytes_out.labels(topic))
        return child

    def observe_request(self, api: str, seconds: float, response: object = None) -> None:
        if response is not None:
            self._errors.add(api, response)
        st = self._requests.get(api)
        if st is None:
            st = self._requests[api] = _RequestStats()
        st.total += seconds
        st.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # bucket i counts seconds <= LATENCY_BUCKETS[i]

    def watch_partitions(self, topics: "TopicRegistry") -> None:
        self.registry.register(_PartitionCollector(topics))

    def watch_operator_view(self, topics: "TopicRegistry", groups: "Callable[[], GroupCoordinator | None]") -> None:
        """Consumer-group lag and open transactions (see :mod:`.operator_metrics`)."""
        from .operator_metrics import register

        register(topics, groups, self.registry)

    def watch_flusher(self, flusher: "GroupCommitFlusher") -> None:
        self.registry.register(_FlusherCollector(flusher))

    def watch_fetch_sessions(self, cache: "FetchSessionCache") -> None:
        self.registry.register(_FetchSessionCollector(cache))

    def serve(self, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        try:
            start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
            log.info("Prometheus metrics on http://%s/metrics", listen)
        except OSError as e:
            log.warning("cannot serve metrics on %s (%s); the broker runs without a /metrics endpoint", listen, e)
