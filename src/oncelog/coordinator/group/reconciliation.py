"""A member's reconciliation with its target assignment: Kafka's CurrentAssignmentBuilder (the KIP-848 member state
machine), as one pure function.

    STABLE                 at the target epoch -> unchanged (unless its subscription changed: drop what it no
                           longer subscribes to); behind the target epoch -> compute the next assignment
    UNREVOKED_PARTITIONS   still owns a partition it must revoke -> wait (its epoch stays); revoked them all ->
                           compute the next assignment
    UNRELEASED_PARTITIONS  compute the next assignment (a partition its previous owner released is added)
    UNKNOWN                (a state of a newer version) the member must rejoin owning nothing: FENCED_MEMBER_EPOCH
                           unless it reports no partitions, then reconcile from the target epoch

Computing the next assignment, per topic: kept = assigned & target (nothing of a topic it no longer subscribes to);
to revoke = assigned - kept; to assign = target - kept - partitions another member still owns. Revocation comes
first: while the member reports it still owns a partition to revoke, it stays in its epoch in
UNREVOKED_PARTITIONS and is given only ``kept``. Otherwise it moves to the target epoch, gets ``kept + to assign``,
and is STABLE, or UNRELEASED_PARTITIONS while some partition of its target is still owned by another member (it is
handed over once the owner revokes it: no partition is ever owned by two members). A partition the member itself
still has pending revocation is not "owned by another member" (Kafka's later fix for a member whose target gives
back a partition it is revoking).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from oncelog.protocol.errors import ErrorCode

from .consumer_group import Assignment, ConsumerGroupMember, GroupError, MemberState

__all__ = ["owns_any", "reconcile"]

#: the partitions a member reports it owns (the heartbeat's TopicPartitions), None when it did not say
Owned = Mapping[uuid.UUID, frozenset[int]] | None


def owns_any(owned: Owned, partitions: Assignment) -> bool:
    """Kafka's ownsRevokedPartitions: does the member still report one of ``partitions``? Unknown counts as yes."""
    if owned is None:
        return True
    for topic_id, parts in owned.items():
        pending = partitions.get(topic_id)
        if pending and not parts.isdisjoint(pending):
            return True
    return False


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[uuid.UUID, int], int], owned: Owned,
              subscribed_topic_ids: frozenset[uuid.UUID] | None = None,
              subscription_changed: bool = False) -> ConsumerGroupMember:
    """The member's next state towards ``target`` at ``target_epoch``. ``partition_epoch(topic, partition)`` is the
    epoch of the partition's current owner (-1: free); ``owned`` what the member reported owning;
    ``subscribed_topic_ids`` the ids of the topics it subscribes to now (None: do not filter), with
    ``subscription_changed`` when its subscription changed in this heartbeat (then what it no longer subscribes to is
    revoked even at the target epoch)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned,
                         subscribed_topic_ids)
        if subscription_changed and subscribed_topic_ids is not None:
            return _drop_unsubscribed(member, subscribed_topic_ids, owned)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            if subscription_changed and subscribed_topic_ids is not None:
                return _drop_unsubscribed(member, subscribed_topic_ids, owned)
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed_topic_ids)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned, subscribed_topic_ids)
    # UNKNOWN
    if owned is None or any(owned.values()):
        raise GroupError(ErrorCode.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state. The member "
                         "must abandon all its partitions and rejoin.")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned, subscribed_topic_ids)


def _drop_unsubscribed(member: ConsumerGroupMember, subscribed: frozenset[uuid.UUID],
                       owned: Owned) -> ConsumerGroupMember:
    """Kafka's updateCurrentAssignment: strip the topics the member no longer subscribes to, to be revoked."""
    dropped = {t: parts for t, parts in member.assigned.items() if t not in subscribed}
    if not dropped:
        return member
    assigned = {t: parts for t, parts in member.assigned.items() if t in subscribed}
    pending = dict(member.pending_revocation)
    for t, parts in dropped.items():
        pending[t] = pending.get(t, frozenset()) | parts
    if owns_any(owned, pending):
        return member.with_epoch(member.member_epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=pending)
    return member.with_epoch(member.member_epoch, assigned=assigned)


def _next(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
          partition_epoch: Callable[[uuid.UUID, int], int], owned: Owned,
          subscribed: frozenset[uuid.UUID] | None) -> ConsumerGroupMember:
    """Kafka's computeNextAssignment."""
    unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    own_pending = member.pending_revocation
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, frozenset())
        if subscribed is not None and topic_id not in subscribed:
            want = frozenset()
        current = member.assigned.get(topic_id, frozenset())
        kept = current & want
        gone = current - kept
        new = want - kept
        if new:
            mine = own_pending.get(topic_id, frozenset())
            free = frozenset(p for p in new if p in mine or partition_epoch(topic_id, p) == -1)
            if free != new:
                unreleased = True
            new = free
        if kept:
            assigned[topic_id] = kept
        if gone:
            revoke[topic_id] = gone
        if new:
            to_assign[topic_id] = new
    if revoke and owns_any(owned, revoke):
        return member.with_epoch(member_epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=revoke)
    for topic_id, parts in to_assign.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned, pending_revocation={})
