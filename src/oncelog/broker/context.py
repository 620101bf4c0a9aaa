"""What a request handler may use: the broker as handlers see it.

Every handler is ``handle(broker: BrokerContext, ctx: RequestContext, request)``. The context holds the broker's
settings, clock, metrics, topics and partitions, and its coordinators — each with its own type, so mypy checks every
call from a handler into a coordinator. Handlers reach nothing else of the broker: its listener, background jobs
and start-up wiring stay in ``server.py``, and a test can build a context around whatever parts it needs.

The coordinators are None until the broker has loaded them (a handler answers COORDINATOR_NOT_AVAILABLE meanwhile). A
fresh single node builds them on first use: a handler calls :meth:`BrokerContext.load_coordinators` before it looks
(the handlers' ``_groups.coordinator`` and ``_txn.coordinator_or_error`` do).
``cluster`` is set when the broker is one of a cluster (``--metadata``): handlers that answer cluster-wide (Metadata,
DescribeCluster, CreateTopics) then answer from its view; None on a single node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oncelog.clock import Clock

from .coordinators.txn_order import AppendOrder
from .fetch_session import FetchSessionCache

if TYPE_CHECKING:
    from oncelog.coordinator.group.coordinator import GroupCoordinator
    from oncelog.coordinator.transaction import TransactionCoordinator
    from oncelog.security.authorizer import StandardAuthorizer
    from oncelog.security.store import SecurityStore
    from oncelog.storage import LogConfig

    from .security.authentication import BrokerAuth
    from .cluster.node import ClusterNode
    from .cluster.topic_admin import AutoCreator
    from .settings.config import BrokerConfig
    from .coordinators.markers import LocalMarkerWriter
    from .coordinators.single_node import LoadOnFirstUse
    from .metrics.counts import BrokerMetrics
    from .security.quotas import ClientQuotaManager
    from .topics import TopicRegistry
    from .coordinators.txn_verifier import RemoteTxnVerifier

__all__ = ["BrokerContext", "GROUP", "TRANSACTION"]

#: FindCoordinator key types
GROUP, TRANSACTION = 0, 1


@dataclass(eq=False)
class BrokerContext:
    config: BrokerConfig
    clock: Clock
    metrics: BrokerMetrics
    api_versions: tuple[tuple[int, int, int], ...]  # (api key, min, max) served: what ApiVersions answers
    topics: TopicRegistry
    cluster_id: str
    marker_writer: LocalMarkerWriter  # writes the markers of WriteTxnMarkers requests (and of the local coordinator)
    txn_coordinator: TransactionCoordinator | None = None
    group_coordinator: GroupCoordinator | None = None
    cluster: ClusterNode | None = None
    auto_creator: AutoCreator | None = None  # Metadata's auto-creation in a cluster
    txn_verifier: RemoteTxnVerifier | None = None  # in a cluster: KIP-890 checks with a coordinator elsewhere
    #: produce requests of a transactional id waiting for its coordinator (KIP-890) append in arrival order
    txn_order: AppendOrder = field(default_factory=AppendOrder)
    security_store: SecurityStore | None = None  # ACL, SCRAM and quota records (a file, or etcd in a cluster)
    authorizer: StandardAuthorizer | None = None  # None: authorization off (no authorizer.class.name)
    #: a single node: the internal topic of each coordinator (GROUP, TRANSACTION), created on first use
    internal_topics: Mapping[int, LoadOnFirstUse] = field(default_factory=dict)
    quotas: ClientQuotaManager | None = None  # client quotas: the connection and the Fetch handler charge requests
    #: incremental fetch sessions (KIP-227), ``max.incremental.fetch.session.cache.slots`` of them
    fetch_sessions: FetchSessionCache = field(init=False)
    auth: BrokerAuth | None = None  # TLS, SASL and the credentials they check: security/authentication.py
    #: a single node on a fresh data folder: builds the coordinators (and sets the fields above) when a request
    #: first needs one (``coordinators/local.py``); None once called, and in a cluster
    coordinators_on_first_use: Callable[[], None] | None = None

    def load_coordinators(self) -> None:
        """Build the coordinators now if they wait for their first use."""
        build = self.coordinators_on_first_use
        if build is not None:
            self.coordinators_on_first_use = None
            build()

    def __post_init__(self) -> None:
        self.fetch_sessions = FetchSessionCache(self.config.max_incremental_fetch_session_cache_slots,
                                                self.clock.monotonic_ms)

    @property
    def log_defaults(self) -> LogConfig:
        """The topic settings a topic without overrides gets (from the broker's log.* settings)."""
        return self.topics.logs.defaults

    def topic_overrides(self, name: str) -> dict[str, str] | None:
        """A topic's config overrides, or None when there is no such topic. In a cluster the view answers (every
        broker knows every topic, replica or not; one being deleted is gone); on a single node the local registry."""
        if self.cluster is not None:
            meta = self.cluster.view.topics.get(name)
            return None if meta is None or meta.deleting else dict(meta.configs)
        view = self.topics.get(name)
        return None if view is None else dict(view.configs)

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the partition exists: in a cluster in the view (another broker may hold it), else locally."""
        if self.cluster is not None:
            return self.cluster.view.partition(topic, index) is not None
        return self.topics.partition(topic, index) is not None

    def coordinator_available(self, key_type: int) -> bool:
        """Whether the group (``GROUP``) or transaction (``TRANSACTION``) coordinator can serve requests now."""
        self.load_coordinators()
        return (self.group_coordinator if key_type == GROUP else self.txn_coordinator) is not None
