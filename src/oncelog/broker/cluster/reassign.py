"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46): where the decisions run.

The decisions are the controller's pure functions (:func:`oncelog.cluster.controller.elect_leaders`,
:func:`~oncelog.cluster.controller.alter_reassignments`, :func:`~oncelog.cluster.controller.list_reassignments`);
this module decides *where* they run and how they are written.

**Decisions run on the active controller only**, through its driver (:meth:`ControllerDriver.apply`): written with
``update_partitions(..., controller_epoch=...)``, decided again from a newer view after a lost compare-and-swap,
and serialised with the controller's own writes (reconcile of each view, the preferred-leader rebalance). A broker
that is not the controller forwards the request, as received, to the broker the view names as controller and
relays its answer, as Kafka's brokers forward these APIs to the KRaft controller (KIP-590). Why not decide and
write from any broker, with the partition key's compare-and-swap as the only fence: that CAS catches a partition
that changed since the decision, but not a decision made from a view older than what the controller already acted
on (a broker gone or restarted is a change of *its* key, not of the partition's), and it would let two deciders
interleave their writes with the controller's reconcile of the same event. On the controller everything about
partitions is decided in one place, fenced by the controller epoch, so a deposed controller writes nothing.

One more guard than Kafka's: a broker whose process registered after the partition's last write restarted since
(it may have come back with an empty log) and is still in the ISR only until the controller has acted on that view
(:func:`~oncelog.cluster.controller.reconcile` takes it out). A decision that would make such a broker the leader
is not written: an election answers PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE (retriable);
a reassignment waits for the next view and is decided again, within the request's timeout.

A request forwarded once is never forwarded again (it carries the client id :data:`FORWARDED_CLIENT_PREFIX`): a
broker that receives one and is not the controller answers NOT_CONTROLLER, and the client retries after a
metadata refresh (Kafka's admin clients send these APIs to the controller named in Metadata anyway).
ListPartitionReassignments reads this broker's view (the same view Metadata answers from) and is not forwarded.

On a single node (no ``--metadata``) the same functions run over the degenerate view (this broker alone, leading
every partition at epoch 0), so the answers are Kafka's: ELECTION_NOT_NEEDED for an election, NONE for a
reassignment to this broker, NO_REASSIGNMENT_IN_PROGRESS for a cancel, INVALID_REPLICA_ASSIGNMENT for another
broker, UNKNOWN_TOPIC_OR_PARTITION for what does not exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from oncelog.cluster.api_error import ApiError
from oncelog.cluster.controller import (
    ControllerConfig,
    Decision,
    ElectionType,
    OngoingReassignment,
    alter_reassignments,
    elect_leaders,
    list_reassignments,
)
from oncelog.cluster.model import BrokerInfo, ClusterView, PartitionState, TopicMeta, TopicPartition, VersionedPartition
from oncelog.protocol.errors import ErrorCode

from .controller_config import controller_config

if TYPE_CHECKING:
    from .node import ClusterNode
    from ..context import BrokerContext

__all__ = [
    "FORWARDED_CLIENT_PREFIX",
    "Outcome",
    "alter",
    "by_topic",
    "elect",
    "forward",
    "is_forwarded",
    "list_ongoing",
    "request_timeout",
    "single_node_view",
]

log = logging.getLogger("oncelog.broker.reassign")

#: the client id of a request one broker forwards to the controller
FORWARDED_CLIENT_PREFIX = "oncelog-forwarded-by-"
MIN_TIMEOUT_S = 5.0
_WAIT_MESSAGE = "waiting for the controller to act on a restarted broker"

#: per-partition results, or one error for the whole request (the controller could not be reached in time)
Outcome = Mapping[TopicPartition, ApiError] | ApiError


def request_timeout(timeout_ms: int) -> float:
    """The request's ``timeout_ms`` in seconds, at least :data:`MIN_TIMEOUT_S`: a write to etcd that is cut short
    may still land, and the answer would then be wrong (a timeout for a change that was made)."""
    return max(MIN_TIMEOUT_S, timeout_ms / 1000)


def is_forwarded(client_id: str | None) -> bool:
    return client_id is not None and client_id.startswith(FORWARDED_CLIENT_PREFIX)


# --------------------------------------------------------------------------------------------- single node
def single_node_view(broker: BrokerContext) -> ClusterView:
    """A single node as the degenerate cluster: this broker alone, leader of every partition at epoch 0."""
    node = broker.config.node_id
    topics: dict[str, TopicMeta] = {}
    partitions: dict[TopicPartition, VersionedPartition] = {}
    for t in broker.topics:
        topics[t.name] = TopicMeta(t.name, t.topic_id, len(t.partitions), MappingProxyType(dict(t.configs)))
        for p in t.partitions:
            partitions[(t.name, p.index)] = VersionedPartition(PartitionState((node,), (node,), node), 0)
    return ClusterView(cluster_id=broker.cluster_id, revision=1,
                       brokers=MappingProxyType({node: BrokerInfo(node, "", 0, epoch=0)}),
                       topics=MappingProxyType(topics), partitions=MappingProxyType(partitions))


def _decide_locally(decision: Decision) -> dict[TopicPartition, ApiError]:
    """A single node writes nothing: a decision that would change a partition is refused (it cannot happen with
    one broker, whose partitions all have it as their only replica, leader and ISR)."""
    results = dict(decision.results)
    for c in decision.changes:
        results[c.tp] = ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "a single node has no other broker")
    return results


# -------------------------------------------------------------------------------------------------- guards
def _restarted_leader(view: ClusterView, tp: TopicPartition, new: PartitionState) -> bool:
    """The change makes a leader of a broker whose process registered after the partition's last write (restarted
    since, maybe with an empty log; the controller takes it out of the ISR once it acts on that view)."""
    vp = view.partitions.get(tp)
    if vp is None or new.leader == vp.state.leader:
        return False
    info = view.brokers.get(new.leader)
    return info is not None and info.process_epoch > vp.mod_revision


def _guarded(view: ClusterView, decision: Decision, refuse: Callable[[TopicPartition], ApiError]) -> Decision:
    """``decision`` without the changes :func:`_restarted_leader` refuses (their result: ``refuse(tp)``)."""
    bad = {c.tp for c in decision.changes if _restarted_leader(view, c.tp, c.state)}
    if not bad:
        return decision
    log.info("not electing a broker that restarted since the last change of %s; the controller acts first",
             ", ".join(f"{t}-{p}" for t, p in sorted(bad)))
    results = dict(decision.results)
    for tp in bad:
        results[tp] = refuse(tp)
    return Decision(tuple(c for c in decision.changes if c.tp not in bad), MappingProxyType(results))


# ----------------------------------------------------------------------------------------------- decisions
async def _on_controller(node: ClusterNode, decide: Callable[[ClusterView], Decision],
                         timeout: float) -> Outcome:
    driver = node.driver
    if driver is None:
        return ApiError(ErrorCode.NOT_CONTROLLER, f"node {node.node_id} is not the controller; retry")
    try:
        return await asyncio.wait_for(driver.apply(decide), timeout)
    except TimeoutError:
        return ApiError(ErrorCode.REQUEST_TIMED_OUT, "the metadata (etcd) did not take the change in time; retry")


async def elect(broker: BrokerContext, election_type: ElectionType, partitions: Sequence[TopicPartition] | None,
                timeout: float) -> Outcome:
    """ElectLeaders on this broker: decided here if it is the controller (or a single node)."""
    node = broker.cluster
    if node is None:
        view = single_node_view(broker)
        return _decide_locally(elect_leaders(view, election_type, partitions, ControllerConfig()))
    config = controller_config(node.config)

    def refuse(tp: TopicPartition) -> ApiError:
        code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election_type is ElectionType.PREFERRED
                else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        return ApiError(code, f"The leader to elect for {tp[0]}-{tp[1]} restarted since its last change and is not "
                              f"known to be in sync yet; retry.")

    def decide(view: ClusterView) -> Decision:
        return _guarded(view, elect_leaders(view, election_type, partitions, config), refuse)

    return await _on_controller(node, decide, timeout)


async def alter(broker: BrokerContext, targets: Sequence[tuple[TopicPartition, Sequence[int] | None]],
                timeout: float) -> Outcome:
    """AlterPartitionReassignments on this broker: decided here if it is the controller (or a single node)."""
    node = broker.cluster
    if node is None:
        return _decide_locally(alter_reassignments(single_node_view(broker), targets, ControllerConfig()))
    config = controller_config(node.config)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    final: dict[TopicPartition, ApiError] = {}
    todo = list(targets)

    def wait(tp: TopicPartition) -> ApiError:
        return ApiError(ErrorCode.REQUEST_TIMED_OUT, _WAIT_MESSAGE)

    while True:
        todo_now = todo

        def decide(view: ClusterView) -> Decision:
            return _guarded(view, alter_reassignments(view, todo_now, config), wait)

        got = await _on_controller(node, decide, max(0.0, deadline - loop.time()))
        if isinstance(got, ApiError):
            return got if not final else {**{tp: got for tp, _ in todo}, **final}
        again = {tp for tp, e in got.items() if e.message == _WAIT_MESSAGE}
        final.update({tp: e for tp, e in got.items() if tp not in again})
        todo = [(tp, t) for tp, t in todo if tp in again]
        left = deadline - loop.time()
        if not todo or left <= 0:
            return {**got, **final}
        await node.store.wait_for_change(node.view.revision, timeout=min(left, 1.0))


def list_ongoing(broker: BrokerContext, partitions: Iterable[TopicPartition] | None,
                 ) -> dict[TopicPartition, OngoingReassignment]:
    """ListPartitionReassignments from this broker's view (a single node never has one)."""
    view = broker.cluster.view if broker.cluster is not None else single_node_view(broker)
    return list_reassignments(view, partitions)


# ------------------------------------------------------------------------------------------------ forwarding
async def forward(node: ClusterNode, request: Any, api_version: int, timeout: float) -> Any | ApiError | None:
    """Send ``request`` to the controller the view names and return its response (or the error to answer with);
    None when this broker has become the controller meanwhile (decide here)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    view = node.view
    while view.controller is None or view.controller.node_id == node.node_id:
        # no controller yet, or the view still names this broker while its driver has stopped: wait for the next
        left = deadline - loop.time()
        if left <= 0:
            return ApiError(ErrorCode.NOT_CONTROLLER, "no active controller in the cluster now; retry")
        view = await node.store.wait_for_change(view.revision, timeout=min(left, 1.0))
        if node.is_controller():
            return None
    target = view.controller.node_id
    info = view.brokers.get(target)
    if info is None:
        return ApiError(ErrorCode.NOT_CONTROLLER, f"the controller (node {target}) is not registered; retry")
    left = max(1.0, deadline - loop.time())
    from oncelog.client.errors import KafkaError  # the forwarding broker's client, imported on use

    from ..network.peer_connections import peer_link

    try:  # to the controller's inter-broker listener, with this broker's credentials
        conn = peer_link(node.config).connection(info, client_id=f"{FORWARDED_CLIENT_PREFIX}{node.node_id}",
                                                 node_id=target, request_timeout=left + 5.0,
                                                 connect_timeout=min(left, 5.0))
    except KafkaError as e:
        return ApiError(ErrorCode.NOT_CONTROLLER, f"the controller (node {target}) cannot be reached: {e}")
    try:
        await conn.connect()
        response = await conn.send(request, version=api_version)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # connection refused, timed out, closed: the controller is moving or gone
        log.info("forwarding %s to the controller (node %d) failed: %s", type(request).__name__, target, e)
        return ApiError(ErrorCode.NOT_CONTROLLER, f"the controller (node {target}) did not answer: {e}; retry")
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
    return response


def by_topic(results: Mapping[TopicPartition, Any]) -> dict[str, list[tuple[int, Any]]]:
    """Results grouped by topic in name order, partitions in index order."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for (topic, index), value in sorted(results.items()):
        out.setdefault(topic, []).append((index, value))
    return out

