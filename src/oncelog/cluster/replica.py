"""The leader's view of a partition's replicas: follower fetch states, the ISR, and the high watermark.

Pure: no I/O, time passed in. ``broker/partition.py`` owns one :class:`LeaderReplicas` per partition it leads (a
new one for every leader epoch), feeds it the replica fetches, asks it for the high watermark and for ISR changes,
writes those changes to the metadata store (a compare-and-swap of the partition key) and reports the outcome back.

The rules are Kafka's (``kafka.cluster.Partition`` and ``Replica``):

- A follower is *caught up* at a fetch if its fetch offset reaches the leader's log end, or reaches the log end the
  leader had at the follower's previous fetch (then it was caught up as of that previous fetch)
  (``Replica.updateFetchStateOrThrow``). It is *out of sync* when it has not been caught up for
  ``replica.lag.time.max.ms``, unless its end equals the leader's (``Replica.isCaughtUp``).
- The high watermark is the minimum end offset over the *maximal* ISR: the committed ISR plus a member being
  added (a pending expansion counts at once: waiting for one more replica is always safe), or the old ISR while a
  shrink is pending (KIP-497). Followers that are caught up and eligible to join also hold it back, so a follower
  that is catching up is not outrun for ever. It does not advance while the ISR is smaller than
  ``min.insync.replicas`` (``Partition.maybeIncrementLeaderHW``).
- A follower may join the ISR once its end offset reaches the high watermark and the start offset of the current
  leader epoch (so committed data between a new leader's HW and log end can never be lost by electing it), and
  only with the broker epoch of its live registration (KIP-380); only one ISR change is in flight at a time.

"End offset" of a member is what the high watermark may count: its fetch offset for a follower, and for the leader
the value the caller passes (its durable end in the durable default, its log end otherwise). In the durable default a
follower fetches from its durable end, so the high watermark only covers data fsynced on every ISR member.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["FollowerState", "IsrChange", "LeaderReplicas", "UNKNOWN_OFFSET"]

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    node_id: int
    end_offset: int = UNKNOWN_OFFSET  # its last fetch offset
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_end: int = UNKNOWN_OFFSET  # the leader's log end at its last fetch
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    broker_epoch: int = -1  # of its last fetch

    def is_caught_up(self, leader_end: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_end == self.end_offset or now_ms - self.last_caught_up_ms <= max_lag_ms


@dataclass(frozen=True, slots=True)
class IsrChange:
    """An ISR change the leader wants written: ``isr`` replaces the committed ISR at ``partition_epoch``."""

    isr: tuple[int, ...]
    partition_epoch: int  # the committed partition epoch it was decided from
    added: int | None = None
    removed: frozenset[int] = frozenset()


class LeaderReplicas:
    """Follower states and the ISR of one partition led by ``local_id`` at one leader epoch."""

    def __init__(self, local_id: int, replicas: Iterable[int], isr: Iterable[int], *, leader_epoch: int,
                 partition_epoch: int, epoch_start_offset: int, now_ms: int, max_lag_ms: int, min_isr: int,
                 previous: LeaderReplicas | None = None) -> None:
        self.local_id = local_id
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset  # the log end when this leader epoch began
        self.max_lag_ms = max_lag_ms
        self.min_isr = min_isr
        self.replicas: tuple[int, ...] = tuple(replicas)
        self.isr: frozenset[int] = frozenset(isr)  # committed
        self.partition_epoch = partition_epoch
        self.pending: IsrChange | None = None
        self.followers: dict[int, FollowerState] = {}
        same_leader = previous is not None and previous.local_id == local_id
        for r in self.replicas:
            if r == local_id:
                continue
            in_sync = r in self.isr
            old = previous.followers.get(r) if same_leader and previous is not None else None
            if old is None:  # a new leader knows nothing of its followers yet (Replica.resetReplicaState)
                self.followers[r] = FollowerState(r, last_caught_up_ms=now_ms if in_sync else 0)
            else:  # the same leader at a new epoch keeps what it knew of each follower's log
                self.followers[r] = FollowerState(
                    r, old.end_offset, old.log_start_offset, last_fetch_leader_end=epoch_start_offset,
                    last_fetch_ms=now_ms if in_sync else 0, last_caught_up_ms=now_ms if in_sync else 0,
                    broker_epoch=old.broker_epoch)

    # ------------------------------------------------------------------ the ISR
    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending is None:
            return self.isr
        return self.isr | frozenset(self.pending.isr)

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.min_isr

    def on_metadata(self, replicas: Iterable[int], isr: Iterable[int], partition_epoch: int) -> None:
        """The view shows the partition at the same leader epoch: a committed ISR change (ours or not)."""
        if partition_epoch < self.partition_epoch:
            return
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        if self.pending is not None and partition_epoch > self.pending.partition_epoch:
            self.pending = None  # ours landed or lost to another change: decide again from the committed state
        for r in self.replicas:
            if r != self.local_id and r not in self.followers:
                self.followers[r] = FollowerState(r)  # a reassignment added it
        for r in list(self.followers):
            if r not in self.replicas:
                del self.followers[r]

    def change_failed(self) -> None:
        """The metadata store refused the pending change (lost a race, or unreachable): drop it."""
        self.pending = None

    def propose_shrink(self, now_ms: int, leader_end: int) -> IsrChange | None:
        """Drop followers that have not been caught up for ``max_lag_ms`` (Partition.maybeShrinkIsr)."""
        if self.pending is not None:
            return None
        out = frozenset(r for r in self.isr if r != self.local_id and
                        not self._follower(r).is_caught_up(leader_end, now_ms, self.max_lag_ms))
        if not out:
            return None
        # while it is pending the high watermark keeps counting the old ISR (maximal_isr = the committed ISR)
        self.pending = IsrChange(tuple(sorted(self.isr - out)), self.partition_epoch, removed=out)
        return self.pending

    def propose_expand(self, node_id: int, high_watermark: int, live_broker_epoch: int | None) -> IsrChange | None:
        """Add a follower that has caught up to the high watermark within this leader epoch
        (Partition.maybeExpandIsr / isFollowerInSync / isReplicaIsrEligible)."""
        if self.pending is not None or node_id in self.isr or node_id not in self.followers:
            return None
        f = self.followers[node_id]
        if live_broker_epoch is None or f.broker_epoch not in (-1, live_broker_epoch):
            return None
        if f.end_offset < high_watermark or f.end_offset < self.epoch_start_offset:
            return None
        isr = tuple(sorted(self.isr | {node_id}))
        self.pending = IsrChange(isr, self.partition_epoch, added=node_id)
        return self.pending

    # ------------------------------------------------------------------ fetches and the high watermark
    def on_fetch(self, node_id: int, fetch_offset: int, log_start_offset: int, leader_end: int, now_ms: int,
                 broker_epoch: int = -1) -> bool:
        """A replica fetch of ``node_id`` at ``fetch_offset`` (its end offset); False if it is not a replica."""
        f = self.followers.get(node_id)
        if f is None:
            return False
        if fetch_offset >= leader_end:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif fetch_offset >= f.last_fetch_leader_end:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.end_offset = fetch_offset
        f.log_start_offset = log_start_offset
        f.last_fetch_leader_end = max(leader_end, f.last_fetch_leader_end)
        f.last_fetch_ms = now_ms
        f.broker_epoch = broker_epoch
        return True

    def high_watermark(self, leader_end: int, now_ms: int,
                       live_broker_epochs: Mapping[int, int] | None = None) -> int | None:
        """The high watermark the replicas allow now, or None while under min ISR (it must not advance). A
        candidate: the caller keeps the larger of it and the current high watermark, which never goes back (a
        member that has not fetched yet counts as -1). ``leader_end``: the leader's own end offset that may count
        (its durable end in the durable default). ``live_broker_epochs``: live brokers and their registration
        epochs, so caught-up followers eligible to join the ISR hold the high watermark back too."""
        if self.under_min_isr:
            return None
        hw = leader_end
        maximal = self.maximal_isr
        for r, f in self.followers.items():
            if f.end_offset >= hw:
                continue
            if r in maximal or (live_broker_epochs is not None and r in live_broker_epochs
                                and f.end_offset != UNKNOWN_OFFSET
                                and f.is_caught_up(leader_end, now_ms, self.max_lag_ms)
                                and f.broker_epoch in (-1, live_broker_epochs[r])):
                hw = f.end_offset
        return hw

    def enough_replicas(self) -> bool:
        """An acknowledged acks=all write needs the maximal ISR at min ISR (else NOT_ENOUGH_REPLICAS_AFTER_APPEND;
        Partition.checkEnoughReplicasReachOffset)."""
        return len(self.maximal_isr) >= self.min_isr

    def _follower(self, node_id: int) -> FollowerState:
        f = self.followers.get(node_id)
        if f is None:  # in the ISR but not a replica any more (reassignment): never caught up
            f = self.followers[node_id] = FollowerState(node_id)
        return f
