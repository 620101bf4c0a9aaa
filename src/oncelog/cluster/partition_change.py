"""How one partition's state may change: leader election, ISR, reassignment steps (pure functions).

This is Kafka's ``PartitionChangeBuilder`` (KRaft controller) together with ``PartitionReassignmentReplicas`` and
``PartitionReassignmentRevert`` (KIP-455), over :class:`~oncelog.cluster.model.PartitionState`. Every decision of
the controller about a partition ends in :func:`change_partition`, so the rules below hold for all of them:

- the leader is elected from the ISR among *acceptable* brokers (alive, not in controlled shutdown), the current
  leader kept when it still qualifies, otherwise the first qualifying replica in replica order (``PREFERRED``
  tries the first replica first); ``UNCLEAN`` falls back to any acceptable replica and then sets the ISR to that
  leader alone (data may be lost: it is what ``unclean.leader.election.enable`` means);
- the ISR is never emptied: a change that would leave no member keeps the members it has, and the partition goes
  leaderless (``NO_LEADER``) until one of them returns (KRaft without ELR, where brokers are fenced one at a time,
  so that is the last one; brokers gone in the same view all stay, as each may hold every acknowledged record);
- a reassignment completes in the same change as soon as every target replica is in the ISR (replicas := target,
  ISR := ISR without the removed ones);
- every change bumps the partition epoch by one; the leader epoch is bumped when the leader changes, and when the
  replica set loses a member with the same leader (Kafka's ``triggerLeaderEpochBumpForReplicaReassignmentIfNeeded``:
  a removed replica must be fenced from fetching), never on an ISR change alone (Kafka >= 3.6, KAFKA-15021).

Left out of Kafka's builder: Eligible Leader Replicas and the last-known leader (KIP-966; our durable default
counts only fsynced data towards ``acks=all``, the loss ELR guards against cannot happen there), the leader
recovery state after an unclean election (KIP-704), and log directories (KIP-858).

The ISR changes the *leader* makes (Kafka's ``AlterPartition``, KIP-497) are :func:`shrink_isr`,
:func:`expand_isr` and, for a proposal of :class:`oncelog.cluster.replica.LeaderReplicas`, :func:`apply_isr_change`:
the leader writes their result as a compare-and-swap on the partition's mod_revision.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from .model import NO_LEADER, PartitionState

__all__ = [
    "Election",
    "apply_isr_change",
    "ReassignmentReplicas",
    "change_partition",
    "complete_reassignment",
    "expand_isr",
    "reassignment_replicas",
    "revert_reassignment",
    "shrink_isr",
]


class Election(enum.Enum):
    """Kafka's ``PartitionChangeBuilder.Election``."""

    PREFERRED = "preferred"  # the first replica if it qualifies, else keep the partition online
    ONLINE = "online"  # keep the current leader if it qualifies, else any qualifying ISR member
    UNCLEAN = "unclean"  # as ONLINE, then any acceptable replica even out of the ISR (may lose data)


def _elect(state: PartitionState, replicas: Sequence[int], isr: Sequence[int],
           acceptable: Callable[[int], bool], election: Election) -> tuple[int, bool]:
    """(leader, unclean) as Kafka's ``electPreferredLeader`` / ``electAnyLeader``."""

    def valid(r: int) -> bool:
        return r in isr and acceptable(r)

    if election is Election.PREFERRED:
        if replicas and valid(replicas[0]):
            return replicas[0], False
        if valid(state.leader):
            return state.leader, False
        return next((r for r in replicas[1:] if valid(r)), NO_LEADER), False
    if valid(state.leader):
        return state.leader, False
    clean = next((r for r in replicas if valid(r)), NO_LEADER)
    if clean != NO_LEADER or election is not Election.UNCLEAN:
        return clean, False
    unclean = next((r for r in replicas if acceptable(r)), NO_LEADER)
    return unclean, unclean != NO_LEADER


def complete_reassignment(replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                          isr: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, ISR) once a reassignment in progress completes with this ISR, or None while it cannot
    (Kafka's ``PartitionReassignmentReplicas.maybeCompleteReassignment``): every target replica must be in sync,
    and at least one in-sync replica must stay."""
    if not adding and not removing:
        return None
    new_isr = tuple(r for r in isr if r not in removing)
    new_replicas = tuple(r for r in replicas if r not in removing)
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def change_partition(state: PartitionState, acceptable: Callable[[int], bool], *,
                     election: Election = Election.ONLINE,
                     isr: Iterable[int] | None = None,
                     replicas: Iterable[int] | None = None,
                     adding: Iterable[int] | None = None,
                     removing: Iterable[int] | None = None) -> PartitionState | None:
    """The next state of a partition given target values (None: keep), or None when nothing changes.

    ``acceptable(broker)`` says whether a broker may lead (alive and not shutting down); the ISR a leader is
    chosen from is the target ISR. See the module docstring for the rules (Kafka's ``PartitionChangeBuilder.build``).
    """
    target_isr = state.isr if isr is None else tuple(isr)
    target_replicas = state.replicas if replicas is None else tuple(replicas)
    target_adding = state.adding if adding is None else tuple(adding)
    target_removing = state.removing if removing is None else tuple(removing)

    completed = complete_reassignment(target_replicas, target_adding, target_removing, target_isr)
    if completed is not None:
        target_replicas, target_isr = completed
        target_adding, target_removing = (), ()

    leader, unclean = _elect(state, target_replicas, target_isr, acceptable, election)
    leader_changed = leader != state.leader
    if unclean:
        new_isr: tuple[int, ...] = (leader,)
    elif target_isr:
        new_isr = target_isr
    else:
        new_isr = state.isr  # never an empty ISR: the last member stays (and the partition is leaderless)
    bump_leader_epoch = leader_changed or not set(state.replicas) <= set(target_replicas)
    if (not bump_leader_epoch and new_isr == state.isr and target_replicas == state.replicas
            and target_adding == state.adding and target_removing == state.removing):
        return None
    return PartitionState(replicas=target_replicas, isr=new_isr, leader=leader,
                          leader_epoch=state.leader_epoch + (1 if bump_leader_epoch else 0),
                          partition_epoch=state.partition_epoch + 1,
                          adding=target_adding, removing=target_removing)


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    """The replica lists a reassignment starts with (Kafka's ``PartitionReassignmentReplicas``)."""

    replicas: tuple[int, ...]  # the target first (its order is the new preference), then the ones to remove
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def reassignment_replicas(current: Sequence[int], target: Sequence[int]) -> ReassignmentReplicas:
    """``replicas = target + sorted(current - target)``, ``adding = sorted(target - current)``,
    ``removing = sorted(current - target)`` (KIP-455)."""
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    return ReassignmentReplicas(tuple(target) + removing, adding, removing)


@dataclass(frozen=True, slots=True)
class ReassignmentRevert:
    """What cancelling a reassignment goes back to (Kafka's ``PartitionReassignmentRevert``)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool  # every ISR member was being added: going back needs an out-of-sync replica in the ISR


def revert_reassignment(state: PartitionState) -> ReassignmentRevert:
    """Drop the replicas being added and keep the ones being removed; when the ISR holds only replicas being
    added, the first original replica becomes the ISR, which is an unclean election."""
    replicas = tuple(r for r in state.replicas if r not in state.adding)
    isr = tuple(r for r in state.isr if r not in state.adding)
    if isr:
        return ReassignmentRevert(replicas, isr, False)
    if not replicas:
        raise ValueError(f"cannot revert a reassignment that adds every replica of {state}")
    return ReassignmentRevert(replicas, (replicas[0],), True)


# ---------------------------------------------------------------------------------------------- leader side
def shrink_isr(state: PartitionState, leader: int, leader_epoch: int,
               out_of_sync: Iterable[int]) -> PartitionState | None:
    """The state with ``out_of_sync`` followers dropped from the ISR, as the leader writes it after
    ``replica.lag.time.max.ms`` (Kafka's ``Partition.maybeShrinkIsr`` -> ``AlterPartition``).

    None when ``leader``/``leader_epoch`` no longer lead the partition (the leader is fenced: it must drop its
    plan and follow the new state); ``state`` itself when nothing changes. The leader never drops itself.
    """
    if state.leader != leader or state.leader_epoch != leader_epoch:
        return None
    drop = set(out_of_sync)
    if leader in drop:
        raise ValueError(f"the leader {leader} cannot drop itself from the ISR")
    new_isr = tuple(r for r in state.isr if r not in drop)
    return state if new_isr == state.isr else state.with_isr(new_isr)


def expand_isr(state: PartitionState, leader: int, leader_epoch: int, caught_up: Iterable[int], *,
               eligible: Collection[int] | None = None) -> PartitionState | None:
    """The state with the ``caught_up`` followers added to the ISR (Kafka's ``Partition.maybeExpandIsr``).

    A follower joins only if it is a replica of the partition and, when ``eligible`` is given (the brokers alive and
    not shutting down, :func:`oncelog.cluster.controller.eligible_for_isr`), one of those: Kafka's controller refuses
    the others with INELIGIBLE_REPLICA. New members are appended in replica order. None when the leader/epoch no
    longer match; ``state`` itself when nothing changes. A reassignment the new ISR completes is finished by the
    controller, which sees the change.
    """
    if state.leader != leader or state.leader_epoch != leader_epoch:
        return None
    joining = set(caught_up) - set(state.isr)
    added = tuple(r for r in state.replicas if r in joining and (eligible is None or r in eligible))
    return state if not added else state.with_isr(state.isr + added)


def apply_isr_change(state: PartitionState, leader: int, leader_epoch: int, partition_epoch: int,
                     isr: Iterable[int]) -> PartitionState | None:
    """The state with the ISR the leader decided at ``partition_epoch`` (``replica.IsrChange``), or None when the
    partition moved on since (another leader or leader epoch, or another change at a newer partition epoch: the
    proposal is stale and must be decided again). ``state`` itself when the ISR is already that one.

    Kafka's controller checks the same in ``validateAlterPartitionData``: the ISR holds the leader and only replicas
    (an ISR that does not is a bug of the caller: ValueError).
    """
    if state.leader != leader or state.leader_epoch != leader_epoch or state.partition_epoch != partition_epoch:
        return None
    new_isr = tuple(isr)
    if leader not in new_isr or not set(new_isr) <= set(state.replicas) or len(set(new_isr)) != len(new_isr):
        raise ValueError(f"invalid ISR {list(new_isr)} for leader {leader} of replicas {list(state.replicas)}")
    return state if new_isr == state.isr else state.with_isr(new_isr)
