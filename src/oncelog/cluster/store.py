"""The contract between the cluster's metadata service and everything that uses it.

``MetadataStore`` is what the broker, the controller and the producer-id allocator see of the metadata service:
an immutable :class:`~oncelog.cluster.model.ClusterView` that moves forward, plus compare-and-swap writes. The
etcd implementation lives in ``oncelog.cluster.metadata`` (the only module that talks to etcd); tests of the
decisions above it can use any implementation of this protocol.

Rules every implementation keeps:

- Views only move forward (``revision`` grows); a write returns only once the view it is visible in may be
  observed by the writer (read-your-writes), or raises.
- Every write is a compare-and-swap. ``update_partitions`` applies all of its changes or none: each change names
  the ``mod_revision`` it was decided from, and the controller's writes also name the controller epoch they were
  decided under. A write that lost a race returns ``False``; the caller decides again from a newer view.
- A write that cannot reach the service raises :class:`MetadataUnavailableError` (retriable): nothing is known
  to have changed.
- Atomicity has a size: etcd applies at most ``--max-txn-ops`` (128 by default) operations in one transaction.
  ``update_partitions`` is all-or-nothing and refuses more changes than one transaction takes;
  ``apply_partition_changes`` takes any number of changes that are *independent of each other* (an election, an
  ISR change or a reassignment step of one partition is valid whatever happens to the others) and applies each
  one or not, each still a compare-and-swap fenced by the controller epoch. Topic creation and growth are split
  internally so that a reader never sees a topic without all of its partitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .changes import ViewSubscription
from .model import ClusterView, PartitionState, TopicMeta, TopicPartition

__all__ = [
    "DuplicateBrokerError",
    "MetadataStore",
    "MetadataUnavailableError",
    "PartitionChange",
    "PartitionWriteResult",
    "TopicExistsInClusterError",
]


class MetadataUnavailableError(RuntimeError):
    """The metadata service cannot be reached now (retriable; nothing is known to have changed)."""


class DuplicateBrokerError(RuntimeError):
    """Another live broker is registered with this node id."""


class TopicExistsInClusterError(RuntimeError):
    """CreateTopics lost to an existing topic of that name."""


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """Set ``tp`` to ``state`` if its key is still at ``expected_mod_revision`` (0: the key must not exist)."""

    tp: TopicPartition
    expected_mod_revision: int
    state: PartitionState


@dataclass(frozen=True, slots=True)
class PartitionWriteResult:
    """What ``apply_partition_changes`` did: ``applied`` were written; ``conflicts`` lost a race (their key was
    not at the expected mod_revision: decide again from a newer view); ``fenced``: the controller epoch is no
    longer the active one, so nothing more was written (changes neither applied nor in conflicts were not tried)."""

    applied: frozenset[TopicPartition]
    conflicts: frozenset[TopicPartition]
    fenced: bool = False


class MetadataStore(Protocol):
    @property
    def view(self) -> ClusterView:
        """The newest view this process has seen."""
        ...

    async def wait_for_change(self, after_revision: int, timeout: float | None = None) -> ClusterView:
        """The first view with ``revision > after_revision`` (returns at once if the current one is newer);
        the current view when ``timeout`` seconds pass first."""
        ...

    def subscribe(self) -> ViewSubscription:
        """Every change of the view from now on (coalesced between reads): what changed, not just that it did."""
        ...

    async def update_partitions(self, changes: Sequence[PartitionChange], *,
                                controller_epoch: int | None = None) -> bool:
        """All of ``changes`` or none; ``controller_epoch``: only while that controller is still the active one.
        Raises ValueError for more changes than one etcd transaction takes (see ``apply_partition_changes``)."""
        ...

    async def apply_partition_changes(self, changes: Sequence[PartitionChange], *,
                                      controller_epoch: int | None = None) -> PartitionWriteResult:
        """Each of ``changes`` (independent of each other) applied or not, any number of them."""
        ...

    async def create_topic(self, meta: TopicMeta, states: Sequence[PartitionState]) -> None:
        """Create the topic and its partition states at once; raise TopicExistsInClusterError if it exists."""
        ...

    async def add_partitions(self, name: str, expected_count: int, states: Sequence[PartitionState]) -> bool:
        """Grow a topic from ``expected_count`` partitions; False if the count changed meanwhile."""
        ...

    async def mark_topic_deleting(self, name: str) -> bool:
        ...

    async def remove_topic(self, name: str) -> None:
        """Remove a topic's keys (once its replicas have deleted their logs)."""
        ...

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> bool:
        ...

    async def set_broker_configs(self, node_id: int | None, configs: Mapping[str, str]) -> None:
        """Dynamic broker configs of one broker, or the cluster-wide default (``None``); replaces the whole set."""
        ...

    async def write_security(self, kind: str, puts: Mapping[str, bytes], deletes: Sequence[str] = ()) -> None:
        """Put and delete security records of ``kind`` (``ClusterView.security``) in one write; returns once the
        view has it. Raises :class:`MetadataUnavailableError`."""
        ...

    async def allocate_producer_ids(self, block_size: int) -> int:
        """The first id of a block of ``block_size`` producer ids never handed out before, cluster-wide."""
        ...
