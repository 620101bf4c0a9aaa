"""The controller at work: runs the pure decisions of :mod:`oncelog.cluster.controller` on the one broker that holds
the controller role, against any :class:`~oncelog.cluster.store.MetadataStore`.

The etcd layer elects the controller and hands this driver the controller epoch. The driver then

- reconciles every new view with the last one it acted on (brokers gone, back, bounced or shutting down; ISR
  changes completing reassignments; see :func:`~oncelog.cluster.controller.reconcile`), starting with a full check
  of the first view, since the previous controller may have died before acting;
- writes the changes with ``apply_partition_changes(..., controller_epoch=epoch)``, leader elections first, in
  calls of their own (the store sends etcd transactions of at most ``--max-txn-ops`` operations, 128 by default,
  several at once: one compare and one put per change plus the controller-epoch compare; each change is applied or
  lost on its own);
- when a change lost its compare-and-swap waits for a newer view and decides again from it, without moving its
  "acted on" view forward, so nothing that happened in between is lost;
- runs the preferred-leader rebalance every ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable`` (Kafka's ``QuorumController.maybeScheduleNextBalancePartitionLeaders``);
- runs request-driven decisions (ElectLeaders, AlterPartitionReassignments) through :meth:`ControllerDriver.apply`,
  serialised with the above;
- returns once a view names another controller (or none): its writes would be refused by the epoch check anyway;
- after etcd was unreachable or stalled (``hold_absent`` says until when), does not act on brokers that the
  partitions name (as leader or in an ISR) but that are not registered, until they are registered again or that
  time has passed: a stall of etcd expires every lease when it resumes, while the brokers kept running and register
  again within a heartbeat, so nothing is re-elected because of the coordination service alone (Kafka's new active
  controller likewise gives every broker a fresh session timeout before fencing it).
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ..protocol.errors import ErrorCode
from .api_error import ApiError
from .controller import ControllerConfig, Decision, rebalance_leaders, reconcile
from .model import NO_LEADER, ClusterView, TopicPartition
from .store import MetadataStore, MetadataUnavailableError, PartitionChange

__all__ = ["ControllerDriver", "ControllerStats", "ELECTION_BUCKETS"]

#: upper bounds (seconds) of the leader-election time histogram
ELECTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

log = logging.getLogger("oncelog.cluster.controller")


class _Role(enum.Enum):
    ACTIVE = "active"
    PENDING = "pending"  # the view has not caught up with our election yet
    DEPOSED = "deposed"


@dataclass
class ControllerStats:
    """Counters for metrics and tests."""

    writes: int = 0  # update_partitions calls that succeeded
    lost_races: int = 0  # update_partitions calls that returned False (decided again from a newer view)
    unavailable: int = 0  # update_partitions calls that raised MetadataUnavailableError
    changes: int = 0  # partition changes written
    leader_changes: int = 0
    unclean_elections: int = 0
    offline: int = 0  # changes that left a partition leaderless
    rebalances: int = 0  # preferred-leader rebalance runs
    # leader elections of the reconcile loop (a leader gone, fenced or shutting down), Kafka's
    # LeaderElectionRateAndTimeMs: seconds from the view that needed them to the new leaders written in etcd
    election_counts: list[int] = field(default_factory=lambda: [0] * (len(ELECTION_BUCKETS) + 1))  # last: +Inf
    election_seconds: float = 0.0  # sum

    def observe_election(self, seconds: float) -> None:
        self.election_counts[bisect.bisect_left(ELECTION_BUCKETS, seconds)] += 1
        self.election_seconds += seconds


#: changes that fit one etcd transaction (``--max-txn-ops`` 128 by default: a compare and a put per change, and the
#: controller-epoch compare)
_ONE_TRANSACTION = 127


def _absent(view: ClusterView) -> set[int]:
    """Brokers that lead a partition, or are in the ISR of a partition with a leader, but are not registered."""
    named = {r for vp in view.partitions.values() if vp.state.leader != NO_LEADER
             for r in (vp.state.leader, *vp.state.isr)}
    return {r for r in named if r not in view.brokers}


class ControllerDriver:
    def __init__(self, store: MetadataStore, controller_epoch: int, config: ControllerConfig | None = None, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 max_changes_per_write: int = 10_000, retry_backoff_s: float = 0.5,
                 stats: ControllerStats | None = None,
                 hold_absent: Callable[[], float | None] | None = None) -> None:
        """``stats``: counters to add to (a broker keeps one across its terms as controller). ``hold_absent``: the
        event-loop time until which brokers named by the partitions but not registered may still be registering
        again after an outage of etcd (None: no such time)."""
        if max_changes_per_write < 1:
            raise ValueError("max_changes_per_write must be at least 1")
        self._store = store
        self.epoch = controller_epoch
        self.config = config or ControllerConfig()
        self._sleep = sleep
        self._max_batch = max_changes_per_write
        self._backoff = retry_backoff_s
        self._lock = asyncio.Lock()
        self.stats = stats if stats is not None else ControllerStats()
        self._hold_absent = hold_absent
        self._holding_logged = False

    # ------------------------------------------------------------------------------------------------ role
    def _role(self, view: ClusterView) -> _Role:
        c = view.controller
        if c is not None and c.epoch == self.epoch:
            return _Role.ACTIVE
        # Controller epochs are etcd revisions: a view at or past ours that names no controller or another one
        # comes after our election, so we have been deposed (lease lost, resigned, or a newer election).
        return _Role.PENDING if view.revision < self.epoch else _Role.DEPOSED

    def is_active(self) -> bool:
        return self._role(self._store.view) is _Role.ACTIVE

    def _holding(self, view: ClusterView) -> float | None:
        """The loop time until which not to act on ``view``: some broker it names is not registered and may still
        be registering again after an outage of etcd; None: act now."""
        until = self._hold_absent() if self._hold_absent is not None else None
        now = asyncio.get_running_loop().time()
        if until is None or until <= now:
            self._holding_logged = False
            return None
        absent = sorted(_absent(view))
        if not absent:
            self._holding_logged = False
            return None
        if not self._holding_logged:
            self._holding_logged = True
            log.warning("controller: broker(s) %s lead or replicate partitions but are not registered, just after "
                        "etcd was unreachable or stalled: waiting up to %.1f s for them to register again before "
                        "moving anything off them", absent, until - now)
        return until

    # ----------------------------------------------------------------------------------------------- run
    async def run(self) -> None:
        """Act as the controller until a view shows another one (or none); then return."""
        log.info("controller: active with epoch %d", self.epoch)
        rebalancer = None
        if self.config.auto_leader_rebalance_enable:
            rebalancer = asyncio.create_task(self._rebalance_loop(), name="controller-rebalance")
        try:
            await self._react_loop()
        finally:
            if rebalancer is not None:
                rebalancer.cancel()
                await asyncio.gather(rebalancer, return_exceptions=True)
        log.info("controller: epoch %d is over (the metadata names controller %s)", self.epoch,
                 self._store.view.controller)

    async def _react_loop(self) -> None:
        acted_on: ClusterView | None = None  # the last view whose consequences are all written
        now = asyncio.get_running_loop().time
        view, seen = self._store.view, now()
        electing_since: float | None = None  # when a view first needed leader elections not yet all written
        while True:
            role = self._role(view)
            if role is _Role.DEPOSED:
                return
            if role is _Role.PENDING:
                view = await self._store.wait_for_change(view.revision)
                seen = now()
                continue
            until = self._holding(view)
            if until is not None:
                view = await self._store.wait_for_change(view.revision, timeout=until - now())
                seen = now()
                continue
            async with self._lock:
                view = self._store.view  # the newest, now that nothing else of ours is writing
                if self._role(view) is not _Role.ACTIVE or self._holding(view) is not None:
                    continue
                changes = reconcile(acted_on, view, self.config)
                if electing_since is None and any(c.state.leader != view.partitions[c.tp].state.leader
                                                  for c in changes):
                    electing_since = seen
                written = await self._write(view, changes, "reconcile")
            if written is None:  # unavailable: retry from whatever view we have after a pause
                await self._sleep(self._backoff)
                view = self._store.view
            elif written:
                acted_on = view
                if electing_since is not None:
                    self.stats.observe_election(now() - electing_since)
                    electing_since = None
                view = await self._store.wait_for_change(view.revision)
            else:
                view = await self._store.wait_for_change(view.revision)
            seen = now()

    async def _rebalance_loop(self) -> None:
        interval = self.config.leader_imbalance_check_interval_seconds
        while True:
            await self._sleep(interval)
            await self.rebalance_once()

    async def rebalance_once(self) -> int:
        """One preferred-leader rebalance (every change it needs, in runs of ``max_elections_per_imbalance``);
        the number of leaders moved."""
        moved = 0
        while True:
            async with self._lock:
                view = self._store.view
                if self._role(view) is not _Role.ACTIVE or self._holding(view) is not None:
                    return moved
                changes, more = rebalance_leaders(view, self.config)
                written = await self._write(view, changes, "preferred leader rebalance")
            if written is None:
                await self._sleep(self._backoff)
            elif not written:
                await self._store.wait_for_change(view.revision)
            else:
                moved += len(changes)
                if not more:
                    self.stats.rebalances += 1
                    return moved

    async def apply(self, decide: Callable[[ClusterView], Decision]) -> dict[TopicPartition, ApiError]:
        """Run a request-driven decision (e.g. ``lambda v: elect_leaders(v, ...)``) until its changes are written,
        deciding again from a newer view after a lost race; the per-partition results. A partition whose change was
        written keeps the result it was written with. NOT_CONTROLLER for all when this controller is deposed."""
        final: dict[TopicPartition, ApiError] = {}
        while True:
            async with self._lock:
                view = self._store.view
                if self._role(view) is not _Role.ACTIVE:
                    error = ApiError(ErrorCode.NOT_CONTROLLER, "The controller moved; retry.")
                    return {**{tp: error for tp in decide(view).results}, **final}
                decision = decide(view)
                todo = [c for c in decision.changes if c.tp not in final]
                done: list[PartitionChange] = []
                written = await self._write(view, todo, "request", done)
                for c in done:
                    final[c.tp] = decision.results.get(c.tp, ApiError(ErrorCode.NONE))
            if written:
                return {**decision.results, **final}
            if written is None:
                await self._sleep(self._backoff)
            else:
                await self._store.wait_for_change(view.revision)

    # --------------------------------------------------------------------------------------------- writes
    async def _write(self, view: ClusterView, changes: Sequence[PartitionChange], why: str,
                     done: list[PartitionChange] | None = None) -> bool | None:
        """Write ``changes`` (each of one partition, independent of the others) with the store's
        ``apply_partition_changes``: it sends transactions of ``--max-txn-ops`` several at once and waits for the
        view once, instead of once per transaction (after a broker loss every partition changes: 10,000 partitions
        took 30 s one transaction and view update at a time). Leader elections go first (in calls of their own when
        the changes need more than one transaction), so the partitions the lost broker led are led again before the
        ISR shrinks of the others are sent. At most
        ``max_changes_per_write`` changes per call; a call with changes that lost a race does not stop the others
        (each change compares its own partition), a fenced one does. True if all were written; False if some lost
        a race or the epoch was fenced (the others are written); None if the metadata service is unavailable."""
        elections = [c for c in changes
                     if (vp := view.partitions.get(c.tp)) is None or c.state.leader != vp.state.leader]
        chosen = {c.tp for c in elections}
        others = [c for c in changes if c.tp not in chosen]
        if len(changes) <= _ONE_TRANSACTION:
            # one etcd transaction holds them all: written together, a broker in controlled shutdown sees its
            # leaderships and its ISR places go at once (it leaves as soon as it leads nothing)
            chunks = [elections + others] if changes else []
        else:
            chunks = [group[start:start + self._max_batch] for group in (elections, others)
                      for start in range(0, len(group), self._max_batch)]
        complete = True
        for chunk in chunks:
            try:
                res = await self._store.apply_partition_changes(chunk, controller_epoch=self.epoch)
            except MetadataUnavailableError as e:
                self.stats.unavailable += 1
                log.warning("controller: cannot write %d partition change(s) (%s): %s; retrying", len(chunk), why, e)
                return None
            applied = [c for c in chunk if c.tp in res.applied]
            if applied:
                self.stats.writes += 1
                self._log_written(view, applied, why)
                if done is not None:
                    done.extend(applied)
            if len(applied) != len(chunk):
                # leaders write ISR changes concurrently (many at once after a broker loss): decide again
                self.stats.lost_races += 1
                complete = False
                log.debug("controller: %d of %d change(s) lost a race (%s)%s; deciding again",
                          len(res.conflicts), len(chunk), why, ", fenced" if res.fenced else "")
                if res.fenced:
                    return False
        return complete

    def _log_written(self, view: ClusterView, batch: Sequence[PartitionChange], why: str) -> None:
        self.stats.changes += len(batch)
        for c in batch:
            old, new = view.partitions[c.tp].state, c.state
            name = f"{c.tp[0]}-{c.tp[1]}"
            if new.leader != old.leader:
                self.stats.leader_changes += 1
                if new.leader == NO_LEADER:
                    self.stats.offline += 1
                    log.warning("controller: %s is offline: no live in-sync replica among ISR %s (replicas %s); "
                                "it stays leaderless until one returns", name, list(new.isr), list(new.replicas))
                elif new.leader not in old.isr:
                    self.stats.unclean_elections += 1
                    log.error("controller: unclean election of %s: broker %d leads from outside the ISR %s; records "
                              "acknowledged by that ISR may be lost", name, new.leader, list(old.isr))
            log.debug("controller: %s (%s): leader %d -> %d (epoch %d), ISR %s -> %s, replicas %s -> %s", name, why,
                      old.leader, new.leader, new.leader_epoch, list(old.isr), list(new.isr),
                      list(old.replicas), list(new.replicas))
        log.info("controller: wrote %d partition change(s) (%s)", len(batch), why)
