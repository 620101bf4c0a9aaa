"""The controller's decisions: a ClusterView and an event in, partition changes out (pure, deterministic, no I/O).

What Kafka's KRaft ``ReplicationControlManager`` decides, over our metadata model:

- a broker gone (lease expired) or in controlled shutdown: ``handleBrokerFenced`` /
  ``handleBrokerInControlledShutdown`` -> :func:`broker_gone`, :func:`controlled_shutdown`;
- a broker back: ``handleBrokerUnfenced`` -> :func:`broker_back`;
- ElectLeaders (KIP-460) and ``auto.leader.rebalance.enable``: ``electLeaders``, ``maybeBalancePartitionLeaders``
  -> :func:`elect_leaders`, :func:`rebalance_leaders`;
- AlterPartitionReassignments / ListPartitionReassignments (KIP-455) -> :func:`alter_reassignments`,
  :func:`list_reassignments`;
- :func:`reconcile` derives all of the above from two consecutive views, which is how the driver
  (:mod:`oncelog.cluster.controller_driver`) runs them: etcd gives us views, not Kafka's heartbeat events.

Placement of new partitions is :mod:`oncelog.cluster.placement`; the per-partition rules (who may lead, the ISR,
epochs, reassignment steps) are :func:`oncelog.cluster.partition_change.change_partition`, so every decision here
keeps them. Each returns :class:`~oncelog.cluster.store.PartitionChange` values naming the mod_revision they were
decided from; the caller writes them with ``MetadataStore.update_partitions`` and decides again on a lost race.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ..protocol.errors import ErrorCode
from .api_error import NO_ERROR, ApiError
from .model import NO_LEADER, ClusterView, PartitionState, TopicPartition
from .partition_map import changed_since
from .partition_change import Election, change_partition, reassignment_replicas, revert_reassignment
from .placement import validate_manual_assignment
from .store import PartitionChange

__all__ = [
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "ControllerConfig",
    "Decision",
    "ElectionType",
    "OngoingReassignment",
    "alter_reassignments",
    "broker_back",
    "broker_gone",
    "controlled_shutdown",
    "elect_leaders",
    "eligible_for_isr",
    "is_active",
    "leads_nothing",
    "list_reassignments",
    "rebalance_leaders",
    "reconcile",
    "unclean_election_enabled",
]

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's static settings (Kafka's names and defaults)."""

    unclean_leader_election_enable: bool = False  # default of the topic setting; a dynamic cluster default wins
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: float = 300.0
    max_elections_per_imbalance: int = 1000  # KRaft's MAX_ELECTIONS_PER_IMBALANCE: the rest on the next run


class ElectionType(enum.IntEnum):
    """ElectLeaders' ``election_type`` (Kafka's ``org.apache.kafka.common.ElectionType``)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class Decision:
    """The changes of a request-driven decision and the per-partition result to answer with."""

    changes: tuple[PartitionChange, ...] = ()
    results: Mapping[TopicPartition, ApiError] = field(default_factory=lambda: MappingProxyType({}))


# ---------------------------------------------------------------------------------------------------- helpers
def is_active(view: ClusterView, broker: int) -> bool:
    """Alive and not in controlled shutdown: may lead and may be placed (Kafka's ``ClusterControlManager.isActive``)."""
    info = view.brokers.get(broker)
    return info is not None and not info.shutting_down


def eligible_for_isr(view: ClusterView) -> frozenset[int]:
    """The brokers a leader may add to an ISR (alive, not shutting down): Kafka refuses the others in
    AlterPartition with INELIGIBLE_REPLICA. Pass it to :func:`~oncelog.cluster.partition_change.expand_isr`."""
    return frozenset(b for b, info in view.brokers.items() if not info.shutting_down)


def _parse_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None


def unclean_election_enabled(view: ClusterView, topic: str, config: ControllerConfig) -> bool:
    """``unclean.leader.election.enable`` for a topic: its own setting, else the controller's own dynamic broker
    config, else the dynamic cluster-wide default, else the static one (Kafka's
    ``ConfigurationControlManager.uncleanLeaderElectionEnabledForTopic``)."""
    meta = view.topics.get(topic)
    controller = view.controller.node_id if view.controller is not None else None
    for value in (None if meta is None else meta.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE),
                  None if controller is None else view.broker_configs.get(controller, {}).get(
                      UNCLEAN_LEADER_ELECTION_ENABLE),
                  view.broker_configs.get(None, {}).get(UNCLEAN_LEADER_ELECTION_ENABLE)):
        parsed = _parse_bool(value)
        if parsed is not None:
            return parsed
    return config.unclean_leader_election_enable


def _election(view: ClusterView, topic: str, config: ControllerConfig) -> Election:
    return Election.UNCLEAN if unclean_election_enabled(view, topic, config) else Election.ONLINE


def _change(view: ClusterView, tp: TopicPartition, state: PartitionState) -> PartitionChange:
    return PartitionChange(tp, view.partitions[tp].mod_revision, state)


def _remove_broker(view: ClusterView, broker: int, config: ControllerConfig) -> list[PartitionChange]:
    """Kafka's ``generateLeaderAndIsrUpdates(brokerToRemove=broker)`` over the partitions it is in the ISR of
    (or leads): drop it from the ISR, elect another leader if it led; it is never an acceptable leader."""

    def acceptable(r: int) -> bool:
        return r != broker and is_active(view, r)

    changes = []
    for tp in sorted(view.partitions):
        state = view.partitions[tp].state
        if broker not in state.isr and state.leader != broker:
            continue
        new = change_partition(state, acceptable, election=_election(view, tp[0], config),
                               isr=[r for r in state.isr if r != broker])
        if new is not None:
            changes.append(_change(view, tp, new))
    return changes


# ----------------------------------------------------------------------------------------------------- events
def broker_gone(view: ClusterView, broker: int, config: ControllerConfig) -> list[PartitionChange]:
    """A broker's lease expired (or it deregistered): it leaves every ISR, and the partitions it led get a new
    leader from the rest of the ISR in replica order. With no live ISR member left the partition goes leaderless
    and the ISR keeps its last member, unless unclean election is enabled for the topic (any live replica then)."""
    return _remove_broker(view, broker, config)


def controlled_shutdown(view: ClusterView, broker: int, config: ControllerConfig) -> list[PartitionChange]:
    """A broker asked to stop cleanly: the same as losing it, done while it still serves, so clients see one
    quick leader change instead of a timeout. It may stop once it :func:`leads_nothing`."""
    return _remove_broker(view, broker, config)


def leads_nothing(view: ClusterView, broker: int) -> bool:
    """A broker in controlled shutdown may stop (Kafka's SHUTDOWN_NOW once ``hasLeaderships`` is false)."""
    return all(vp.state.leader != broker for vp in view.partitions.values())


def broker_back(view: ClusterView, broker: int, config: ControllerConfig) -> list[PartitionChange]:
    """A broker (re)registered: leaderless partitions whose ISR holds it get it as leader (any leaderless partition
    it is a replica of, with unclean election). It is not put back into ISRs: its leader adds it once caught up."""

    def acceptable(r: int) -> bool:
        return is_active(view, r)

    if not is_active(view, broker):
        return []
    changes = []
    for tp in sorted(view.partitions):
        state = view.partitions[tp].state
        if state.leader != NO_LEADER:
            continue
        new = change_partition(state, acceptable, election=_election(view, tp[0], config))
        if new is not None:
            changes.append(_change(view, tp, new))
    return changes


# -------------------------------------------------------------------------------------------------- elections
def _lookup(view: ClusterView, tp: TopicPartition) -> PartitionState | ApiError:
    meta = view.topics.get(tp[0])
    if meta is None or meta.deleting:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {tp[0]}")
    state = view.partition(*tp)
    if state is None or not 0 <= tp[1] < meta.num_partitions:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {tp[0]}-{tp[1]}")
    return state


def _all_partitions(view: ClusterView) -> list[TopicPartition]:
    return sorted(tp for tp in view.partitions
                  if (meta := view.topics.get(tp[0])) is not None and not meta.deleting)


def elect_leaders(view: ClusterView, election_type: ElectionType, partitions: Iterable[TopicPartition] | None,
                  config: ControllerConfig) -> Decision:
    """ElectLeaders (Kafka's ``ReplicationControlManager.electLeaders``).

    PREFERRED moves leadership to the first replica when it is alive and in the ISR (else
    PREFERRED_LEADER_NOT_AVAILABLE; ELECTION_NOT_NEEDED if it already leads). UNCLEAN elects a leader for a
    leaderless partition, out of the ISR if need be (ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is alive;
    ELECTION_NOT_NEEDED when it has a leader). ``partitions=None`` means every partition, and then the partitions
    that need no election are left out of the results, as Kafka does. Unlike Kafka's builder, a PREFERRED election
    writes nothing unless the preferred replica becomes the leader (Kafka would also move a leadership off a fenced
    leader to another replica, or take the partition offline, and answer NONE; here :func:`reconcile` does that).
    """
    everything = partitions is None
    tps = _all_partitions(view) if partitions is None else list(dict.fromkeys(partitions))
    election = Election.PREFERRED if election_type is ElectionType.PREFERRED else Election.UNCLEAN
    changes: list[PartitionChange] = []
    results: dict[TopicPartition, ApiError] = {}

    def acceptable(r: int) -> bool:
        return is_active(view, r)

    for tp in tps:
        state = _lookup(view, tp)
        if isinstance(state, ApiError):
            results[tp] = state
            continue
        if ((election_type is ElectionType.PREFERRED and state.leader == state.preferred_leader)
                or (election_type is ElectionType.UNCLEAN and state.leader != NO_LEADER)):
            if not everything:
                results[tp] = ApiError(ErrorCode.ELECTION_NOT_NEEDED,
                                       f"{tp[0]}-{tp[1]} is already led by broker {state.leader}.")
            continue
        new = change_partition(state, acceptable, election=election)
        if new is not None and election_type is ElectionType.PREFERRED and new.leader != state.preferred_leader:
            new = None  # only moves to the preferred replica: fixing a gone leader is reconcile's job
        if new is None:
            if election_type is ElectionType.PREFERRED:
                results[tp] = ApiError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                       f"The preferred leader {state.preferred_leader} of {tp[0]}-{tp[1]} is not "
                                       f"alive or not in the ISR {list(state.isr)}.")
            else:
                results[tp] = ApiError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                       f"No replica of {tp[0]}-{tp[1]} ({list(state.replicas)}) is alive to lead.")
            continue
        changes.append(_change(view, tp, new))
        results[tp] = NO_ERROR
    return Decision(tuple(changes), MappingProxyType(results))


def rebalance_leaders(view: ClusterView, config: ControllerConfig) -> tuple[list[PartitionChange], bool]:
    """The periodic preferred-leader rebalance (``auto.leader.rebalance.enable``): for each broker, if more than
    ``leader.imbalance.per.broker.percentage`` percent of the partitions that prefer it are led by another broker,
    move those whose preferred replica is alive and in the ISR back to it (the ZooKeeper controller's
    ``checkAndTriggerAutoLeaderRebalance``; KRaft ignores the percentage and rebalances every such partition, which
    is the percentage 0). At most ``max_elections_per_imbalance`` changes; the flag says more are due at once."""
    prefer: dict[int, list[TopicPartition]] = {}
    for tp in _all_partitions(view):
        state = view.partitions[tp].state
        if state.replicas:
            prefer.setdefault(state.preferred_leader, []).append(tp)

    def acceptable(r: int) -> bool:
        return is_active(view, r)

    changes: list[PartitionChange] = []
    threshold = config.leader_imbalance_per_broker_percentage / 100
    for broker in sorted(prefer):
        tps = prefer[broker]
        elsewhere = [tp for tp in tps if view.partitions[tp].state.leader != broker]
        if len(elsewhere) / len(tps) <= threshold:
            continue
        for tp in elsewhere:
            state = view.partitions[tp].state
            new = change_partition(state, acceptable, election=Election.PREFERRED)
            if new is None or new.leader != broker:
                continue  # the preferred replica is not alive or not in sync: leave it (ZK's canPreferredReplicaBeLeader)
            if len(changes) >= config.max_elections_per_imbalance:
                return changes, True
            changes.append(_change(view, tp, new))
    return changes, False


# ------------------------------------------------------------------------------------------------ reassignment
@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """What ListPartitionReassignments reports for a partition being reassigned."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def alter_reassignments(view: ClusterView, targets: Sequence[tuple[TopicPartition, Sequence[int] | None]],
                        config: ControllerConfig) -> Decision:
    """AlterPartitionReassignments (KIP-455; Kafka's ``ReplicationControlManager.alterPartitionReassignments``).

    A target list starts (or replaces) a reassignment: replicas become target + the ones to remove, ``adding`` /
    ``removing`` record the difference, and it completes at once when every target replica is already in the ISR
    (a reorder, or only removals). Otherwise it completes in a later change, once the new replicas have caught up
    and their leader added them to the ISR (:func:`reconcile` sees it): replicas := target, ISR := ISR without the
    removed ones, the leader moved if it was removed. ``None`` cancels: back to the original replicas (Kafka's
    ``PartitionReassignmentRevert``), refused if that would need an unclean election the topic does not allow.
    """

    def acceptable(r: int) -> bool:
        return is_active(view, r)

    pending: dict[TopicPartition, PartitionState] = {}
    results: dict[TopicPartition, ApiError] = {}
    for tp, target in dict(targets).items():  # a partition named twice: the last target wins
        state = _lookup(view, tp)
        if isinstance(state, ApiError):
            results[tp] = ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"Unable to find partition {tp[0]}:{tp[1]}." if tp[0] in view.topics
                                   else f"Unable to find a topic named {tp[0]}.")
            continue
        if target is None:
            if not state.adding and not state.removing:
                results[tp] = ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                       f"No partition reassignment is in progress for {tp[0]}:{tp[1]}.")
                continue
            revert = revert_reassignment(state)
            unclean = unclean_election_enabled(view, tp[0], config)
            if revert.unclean and not unclean:
                results[tp] = ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"Unable to revert partition assignment for {tp[0]}:{tp[1]} because it would "
                                       f"require an unclean leader election.")
                continue
            new = change_partition(state, acceptable, election=Election.UNCLEAN if unclean else Election.ONLINE,
                                   isr=revert.isr, replicas=revert.replicas, adding=(), removing=())
        else:
            error = validate_manual_assignment(view, target, None)
            if error is not None:
                results[tp] = error
                continue
            plan = reassignment_replicas(state.replicas, target)
            # Unlike Kafka (which keeps the previous lists when the new difference is empty), ``adding`` and
            # ``removing`` are always the new target's: a target equal to the current replicas ends the reassignment.
            new = change_partition(state, acceptable, replicas=plan.replicas, adding=plan.adding,
                                   removing=plan.removing)
        if new is not None:
            pending[tp] = new
        results[tp] = NO_ERROR
    changes = tuple(_change(view, tp, s) for tp, s in pending.items())
    return Decision(changes, MappingProxyType(results))


def list_reassignments(view: ClusterView, partitions: Iterable[TopicPartition] | None = None,
                       ) -> dict[TopicPartition, OngoingReassignment]:
    """ListPartitionReassignments: the partitions (all, or those asked for that exist) with a reassignment in
    progress, with their replicas and the replicas being added and removed."""
    tps = _all_partitions(view) if partitions is None else partitions
    out: dict[TopicPartition, OngoingReassignment] = {}
    for tp in tps:
        state = _lookup(view, tp)
        if isinstance(state, PartitionState) and (state.adding or state.removing):
            out[tp] = OngoingReassignment(state.replicas, state.adding, state.removing)
    return out


# ----------------------------------------------------------------------------------------------- reconciliation
def _configs_changed(prev: ClusterView, view: ClusterView) -> bool:
    if prev.broker_configs != view.broker_configs:
        return True
    return any((old := prev.topics.get(name)) is None or old.configs != meta.configs
               for name, meta in view.topics.items())


def reconcile(prev: ClusterView | None, view: ClusterView, config: ControllerConfig) -> list[PartitionChange]:
    """Everything the controller must change after the cluster moved from ``prev`` to ``view``.

    The events come from the difference: brokers gone, brokers back (new, or restarted: registered again by a new
    process, which is a bounce: gone then back, as Kafka's broker epochs, KIP-380; a process that registers again
    after its lease expired keeps its incarnation and is not a bounce: its log is intact, as Kafka's controller
    tells a re-registration from a restart by the incarnation id), brokers entering controlled shutdown, dynamic
    configs changed (a leaderless partition may now allow an unclean election), partitions whose state changed (a
    leader's ISR change that completes a reassignment, or that re-added a broker which is gone or leaving).
    ``prev=None`` is a new controller's first view: every partition is checked.

    Each concerned partition is brought to a state where no broker that is gone, shutting down or bounced leads it
    or is in its ISR (an ISR is never emptied: its last members stay, leaderless), a leaderless partition gets a
    leader if one qualifies,
    and a reassignment whose targets are in sync completes. A broker in an ISR whose process registered after the
    partition's last write (its process epoch > the mod_revision) bounced unseen, e.g. while no controller was
    running: it is removed as well, since its log may be behind what the ISR promised.
    """
    alive = view.brokers
    restarted: set[int] = set()
    if prev is None:
        concerned = sorted(view.partitions)
    else:
        gone = set(prev.brokers) - set(alive)
        restarted = {b for b, info in alive.items()
                     if b in prev.brokers and prev.brokers[b].process_epoch != info.process_epoch}
        arrived = (set(alive) - set(prev.brokers)) | restarted | {  # or no longer shutting down
            b for b, info in alive.items() if b in prev.brokers and prev.brokers[b].shutting_down
            and not info.shutting_down}
        leaving = {b for b, info in alive.items()
                   if info.shutting_down and (b in arrived or not prev.brokers[b].shutting_down)}
        touched = gone | restarted | leaving
        leaderless_concerned = bool(arrived) or _configs_changed(prev, view)
        concerned = []
        # only partitions changed since ``prev`` can be concerned when no broker came, went or bounced: the
        # controller looks at those after each write of its own, not at all 10,000 (copy-on-write views share the rest)
        candidates = (view.partitions.items() if touched or leaderless_concerned
                      else changed_since(prev.partitions, view.partitions))
        for tp, vp in candidates:
            state = vp.state
            old = prev.partitions.get(tp)
            if ((state.leader in touched or not touched.isdisjoint(state.isr))
                    or (state.leader == NO_LEADER and leaderless_concerned)
                    or old is None or old.mod_revision != vp.mod_revision):
                concerned.append(tp)
        concerned.sort()

    changes = []
    for tp in concerned:
        vp = view.partitions[tp]
        new = _settle(view, tp, vp.state, vp.mod_revision, restarted, config)
        if new is not None:
            changes.append(PartitionChange(tp, vp.mod_revision, new))
    return changes


def _settle(view: ClusterView, tp: TopicPartition, state: PartitionState, mod_revision: int, restarted: set[int],
            config: ControllerConfig) -> PartitionState | None:
    """One partition's part of :func:`reconcile`: out with the brokers gone, leaving or bounced; a leader if one
    qualifies. A bounced broker is gone then back (two changes, as Kafka's fence then unfence): when taking it out
    changes nothing (a leaderless partition whose ISR it is the last of), it is back, and may be elected."""
    alive = view.brokers

    def leaving(r: int) -> bool:
        info = alive.get(r)
        return info is None or info.shutting_down

    def bounced(r: int) -> bool:
        info = alive.get(r)
        return info is not None and (r in restarted or info.process_epoch > mod_revision)

    election = _election(view, tp[0], config)
    for out_if in (lambda r: leaving(r) or bounced(r), leaving):
        out = {r for r in state.isr if out_if(r)}
        if state.leader != NO_LEADER and out_if(state.leader):
            out.add(state.leader)

        def acceptable(r: int, out: set[int] = out) -> bool:
            return is_active(view, r) and r not in out

        new = change_partition(state, acceptable, election=election, isr=[r for r in state.isr if r not in out])
        if new is not None or state.leader != NO_LEADER:
            return new
    return None
