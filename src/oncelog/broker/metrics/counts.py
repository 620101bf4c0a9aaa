"""Broker metrics: bytes and records in/out, request rate and latency per API, errors, per-partition offsets.

Each broker owns its own numbers (tests run several brokers in one process). They are plain numbers updated on the
event loop (every request pays for them, so no locks and no prometheus_client objects on the request path); the
Prometheus registry that exports them (:mod:`.export`) is built on first use, when ``metrics.listen`` is set or a
test reads :attr:`BrokerMetrics.registry`, so a broker starts without importing prometheus_client. Per-partition
gauges are collected at scrape time from the live partitions.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.coordinator.group.coordinator import GroupCoordinator

    from ..durability import GroupCommitFlusher
    from ..fetch_session import FetchSessionCache
    from ..topics import TopicRegistry

__all__ = ["LATENCY_BUCKETS", "BrokerMetrics", "Count", "ErrorCounts", "LabelledCount"]

#: a field annotated as a list of generated message structures (``list[MetadataResponseTopic]``), not of ids
_STRUCT_LIST = re.compile(r"\blist\[([A-Z]\w*)")

LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)


class Count:
    """A counter or gauge as a plain number, with prometheus_client's ``inc``/``dec`` (exported at scrape time)."""

    __slots__ = ("value", "created")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount


class LabelledCount:
    """A counter with labels as plain numbers: ``labels(*values)`` is the :class:`Count` of those values, as
    prometheus_client's ``Counter.labels`` (exported at scrape time as ``NAME_total``)."""

    __slots__ = ("name", "documentation", "label_names", "children")

    def __init__(self, name: str, documentation: str, label_names: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = tuple(label_names)
        self.children: dict[tuple[str, ...], Count] = {}

    def labels(self, *values: str) -> Count:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name}: {len(self.label_names)} label values expected, got {values}")
            child = self.children[values] = Count()
        return child


class RequestStats:
    """Latency buckets and sum of one API (the count is the buckets' total): plain numbers updated on the event
    loop (every request pays for this, so no locks: prometheus_client's locked Counter + Histogram cost ~3% of a
    transaction's CPU)."""

    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one: above every bound (+Inf)


class ErrorCounts:
    """Error codes in responses, by API: every ``error_code`` field of a response, nested ones included (a Produce
    response has one per partition), as Kafka's ``AbstractResponse.errorCounts`` counts them; NONE is not kept."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = {}
        self._plans: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def _plan(self, cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(its ``error_code`` field, its lists of structures that can hold one) of a response class; nothing for
        anything else."""
        self._plans[cls] = _PLANNING
        fields = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()
        lists = []
        for f in fields:
            element = _structure_in(cls, str(f.type))
            if element is None:
                continue
            if isinstance(element, type) and (self._plans.get(element) or self._plan(element)) == ((), ()):
                continue  # no error code anywhere in it (a partition result whose code has another name...)
            lists.append(f.name)
        plan = (tuple(f.name for f in fields if f.name == "error_code"), tuple(lists))
        self._plans[cls] = plan
        return plan

    def add(self, api: str, response: object) -> None:
        plans = self._plans
        errors, lists = plans.get(type(response)) or self._plan(type(response))
        for name in errors:
            code = getattr(response, name)
            if code:
                key = (api, code)
                self.counts[key] = self.counts.get(key, 0) + 1
        for name in lists:
            items = getattr(response, name)
            if items:
                for item in items:
                    self.add(api, item)


#: the plan of a structure while its own is being made (one nested in itself is kept: it may hold codes)
_PLANNING: tuple[tuple[str, ...], tuple[str, ...]] = ((), ("?",))


def _structure_in(cls: type, annotation: str) -> type | str | None:
    """The structure a field annotated so (``list[X]``, maybe ``| None``) of ``cls`` lists: X's class when it is
    found beside ``cls``, else its name; None when the field is not a list of structures."""
    m = _STRUCT_LIST.search(annotation)
    if m is None:
        return None
    found = getattr(sys.modules.get(cls.__module__), m.group(1), None)
    return found if isinstance(found, type) else m.group(1)


class BrokerMetrics:
    def __init__(self) -> None:
        self.requests: dict[str, RequestStats] = {}
        self.errors = ErrorCounts()
        self.topics_io: dict[str, tuple[Count, Count, Count]] = {}  # topic -> (bytes in, records in, bytes out)
        self.connections = Count()  # open client connections (a gauge)
        self.counters: list[LabelledCount] = []  # labelled counters of the broker's parts (counter())
        self.authorization_denials = self.counter("oncelog_authorization_denials", "Requests (or parts of them) "
                                                  "refused by the authorizer", ("api", "operation"))
        self.failed_authentications = self.counter("oncelog_failed_authentications", "Logins refused",
                                                   ("listener", "mechanism"))
        self._pending: list[Callable[[Any], None]] = []  # registrations waiting for the registry
        self._registry: Any = None

    @property
    def registry(self) -> Any:
        """The Prometheus ``CollectorRegistry`` exporting these numbers and every watched part (built, and
        prometheus_client imported, on first use)."""
        if self._registry is None:
            from .export import build_registry

            self._registry = build_registry(self, LATENCY_BUCKETS)
            for register in self._pending:
                register(self._registry)
            self._pending.clear()
        return self._registry

    def _when_exported(self, register: Callable[[Any], None]) -> None:
        if self._registry is None:
            self._pending.append(register)
        else:
            register(self._registry)

    def add_collector(self, collector: Any) -> None:
        """Export ``collector`` (an object with ``collect()``, as prometheus_client takes) with these metrics."""
        self._when_exported(lambda registry: registry.register(collector))

    def counter(self, name: str, documentation: str, label_names: Sequence[str]) -> LabelledCount:
        """A labelled counter exported with these metrics (``NAME_total``), as a plain number on the event loop."""
        counter = LabelledCount(name, documentation, label_names)
        self.counters.append(counter)
        return counter

    def topic(self, topic: str) -> tuple[Count, Count, Count]:
        """(bytes in, records in, bytes out) counters of ``topic``: looked up once, not per request."""
        child = self.topics_io.get(topic)
        if child is None:
            child = self.topics_io[topic] = (Count(), Count(), Count())
        return child

    def observe_request(self, api: str, seconds: float, response: object = None) -> None:
        if response is not None:
            self.errors.add(api, response)
        st = self.requests.get(api)
        if st is None:
            st = self.requests[api] = RequestStats()
        st.total += seconds
        st.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # bucket i counts seconds <= LATENCY_BUCKETS[i]

    def watch_partitions(self, topics: TopicRegistry) -> None:
        def register(registry: Any) -> None:
            from .export import PartitionCollector

            registry.register(PartitionCollector(topics))

        self._when_exported(register)

    def watch_operator_view(self, topics: TopicRegistry, groups: Callable[[], GroupCoordinator | None]) -> None:
        """Consumer-group lag and open transactions (see :mod:`.lag`)."""
        def register(registry: Any) -> None:
            from .lag import register

            register(topics, groups, registry)

        self._when_exported(register)

    def watch_flusher(self, flusher: GroupCommitFlusher) -> None:
        def register(registry: Any) -> None:
            from .export import FlusherCollector

            registry.register(FlusherCollector(flusher))

        self._when_exported(register)

    def watch_fetch_sessions(self, cache: FetchSessionCache) -> None:
        """Incremental fetch sessions (KIP-227): sessions and partitions held, evictions, partitions listed and
        answered by fetcher."""
        def register(registry: Any) -> None:
            from .export import FetchSessionCollector

            registry.register(FetchSessionCollector(cache))

        self._when_exported(register)

    def serve(self, listen: str) -> None:
        from .export import serve

        serve(self.registry, listen)
