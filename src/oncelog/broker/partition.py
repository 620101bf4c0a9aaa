"""A partition as the broker serves it: its log, high watermark, and the waiters on both.

The high watermark of this single-node broker is the durable end of the log when produce is durable per append
(``log.flush.interval.messages=1``, the default) and the log end otherwise: the log keeps it
(``HighWatermarkRule``), the partition wakes the readers waiting for it. This broker leads every partition at
leader epoch 0, recorded in the log's leader-epoch cache when it takes the partition (Kafka's makeLeader) and
stamped on every batch it appends.

In a cluster (``replicated``) the partition takes its role from the view (``broker/replication/manager.py``): leader at
an epoch (it owns a :class:`~oncelog.cluster.replica.LeaderReplicas`; the high watermark is the minimum end offset
over the ISR, the leader counting its durable end in the durable default), follower (the replica fetcher appends
what the leader sends), or neither. The log's high watermark rule is then ``EXTERNAL``: this class moves it.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections import deque
from typing import TYPE_CHECKING, Callable, Protocol

from oncelog.cluster.replica import IsrChange, LeaderReplicas
from oncelog.protocol.errors import ErrorCode
from oncelog.storage.interface import HighWatermarkRule

if TYPE_CHECKING:
    from oncelog.protocol.records import BatchHeader
    from oncelog.storage import AppendResult
    from oncelog.storage.interface import BrokerLog

__all__ = ["NO_LEADER", "Partition", "ReplicaHost", "Role"]

NO_LEADER = -1


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # not a replica (any more), or not told yet


class ReplicaHost(Protocol):
    """What a replicated partition needs of the broker's replica manager."""

    node_id: int

    def now_ms(self) -> int: ...

    def live_broker_epochs(self) -> dict[int, int]: ...

    def write_isr_change(self, partition: Partition, change: IsrChange) -> None: ...

#: bytes of a COMMIT/ABORT control batch (61-byte header + one 17-byte record), for the group-commit heuristics
CONTROL_BATCH_SIZE = 78
#: the leader epoch of every partition of this single node
LEADER_EPOCH = 0


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        log: "BrokerLog",
        *,
        durable_per_append: bool,
        mark_dirty: Callable[["Partition", int, bool], None],
        replicated: bool = False,
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.durable_per_append = durable_per_append
        self._mark_dirty = mark_dirty
        self.replicated = replicated
        self.leader_epoch = LEADER_EPOCH
        self.role = Role.LEADER
        self.leader_id = NO_LEADER  # in a cluster: the leader as this broker's view says
        self.leader_replicas: LeaderReplicas | None = None  # in a cluster, while leading
        self.host: ReplicaHost | None = None
        self.mod_revision = 0  # of the partition key the role was taken from (the ISR change's CAS)
        if replicated:
            self.role = Role.NONE
            log.high_watermark_rule = HighWatermarkRule.EXTERNAL
        else:
            log.high_watermark_rule = (HighWatermarkRule.DURABLE if durable_per_append
                                       else HighWatermarkRule.LOG_END)
            log.assign_leader_epoch(self.leader_epoch, log.log_end_offset)
        self._notified_hw = log.high_watermark
        self.deleted = False
        self._durable_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._hw_future: asyncio.Future[None] | None = None
        self._end_future: asyncio.Future[None] | None = None
        self._hw_waiters: list[tuple[int, asyncio.Future[int]]] = []  # acks=all in a cluster: (last offset, ...)
        self._sessions: dict[int, Callable[[], bool]] = {}  # fetch sessions holding it: session id -> poke

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest transaction not yet decided below the high watermark, else the HW."""
        return self.log.last_stable_offset(self.high_watermark)

    def append(self, payload: bytearray, headers: list["BatchHeader"], log_append_time_ms: int | None,
               origin: str = "client", lazy: bool = False) -> "AppendResult":
        """Append validated batches; producer-state errors (storage.ProducerStateError) propagate unchanged.
        ``lazy``: nobody waits for this append's durability now, so it starts no fsync round of its own (see
        ``GroupCommitFlusher.mark_dirty``); the high watermark still advances only once it is durable."""
        result = self.log.append(payload, headers, log_append_time_ms=log_append_time_ms, origin=origin,
                                 leader_epoch=self.leader_epoch)
        self._appended(len(payload), lazy)
        return result

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      timestamp_ms: int) -> "AppendResult":
        """Write a COMMIT/ABORT control batch ending ``producer_id``'s transaction on this partition."""
        result = self.log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, timestamp_ms,
                                        leader_epoch=self.leader_epoch)
        self._appended(CONTROL_BATCH_SIZE)
        return result

    def watch_session(self, session_id: int, poke: Callable[[], bool]) -> None:
        """A fetch session (KIP-227) holds this partition: ``poke()`` at every append, high watermark move, log start
        move and role change, so its next fetch visits it; a poke that returns False is not called again."""
        self._sessions[session_id] = poke

    def _poke_sessions(self) -> None:
        if self._sessions:
            gone = [sid for sid, poke in self._sessions.items() if not poke()]
            for sid in gone:
                del self._sessions[sid]

    def _appended(self, nbytes: int, lazy: bool = False) -> None:
        self._poke_sessions()
        fut = self._end_future
        if fut is not None:  # replica fetches long-poll on the log end
            self._end_future = None
            if not fut.done():
                fut.set_result(None)
        if self.durable_per_append:
            self._mark_dirty(self, nbytes, lazy)
        else:  # nobody waits for the disk: the broker's periodic flush (log.flush.interval.ms) covers it
            self._notify_if_advanced()  # the log moved the high watermark to its end

    def wait_durable(self, last_offset: int) -> asyncio.Future[None]:
        """A future done once every offset <= last_offset is on disk (immediately if it already is)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.durable_offset > last_offset or not self.durable_per_append:
            fut.set_result(None)
        else:
            self._durable_waiters.append((last_offset, fut))
        return fut

    def on_durable(self, durable_offset: int) -> None:
        waiters = self._durable_waiters
        while waiters and waiters[0][0] < durable_offset:
            _, fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
        if self.durable_per_append:
            self._notify_if_advanced()  # the log's flush moved the high watermark to the durable end

    def _notify_if_advanced(self) -> None:
        if self.replicated:
            self._increment_leader_high_watermark()
        hw = self.log.high_watermark
        if hw > self._notified_hw:
            self._notified_hw = hw
            self.notify_readers()
            if self._hw_waiters:
                self._release_hw_waiters(hw)

    def notify_readers(self) -> None:
        self._poke_sessions()
        fut = self._hw_future
        if fut is not None:
            self._hw_future = None
            if not fut.done():
                fut.set_result(None)

    def data_available(self) -> asyncio.Future[None]:
        """A future done at the next advance of the high watermark (long-poll fetches wait on it)."""
        if self._hw_future is None or self._hw_future.done():
            self._hw_future = asyncio.get_running_loop().create_future()
        return self._hw_future

    def log_end_advanced(self) -> asyncio.Future[None]:
        """A future done at the next append (replica fetches long-poll on it)."""
        if self._end_future is None or self._end_future.done():
            self._end_future = asyncio.get_running_loop().create_future()
        return self._end_future

    # ------------------------------------------------------------------------------------------- in a cluster
    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def leader_end(self) -> int:
        """The leader's own end offset that the high watermark may count: its durable end in the durable default."""
        end = self.log.log_end_offset
        return min(self.log.durable_offset, end) if self.durable_per_append else end

    def make_leader(self, host: ReplicaHost, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...],
                    partition_epoch: int, mod_revision: int, max_lag_ms: int) -> bool:
        """Lead at ``leader_epoch`` (Kafka's Partition.makeLeader), or take a new ISR / replica set at the same
        epoch. True if this broker just became leader (at a new epoch)."""
        self.host = host
        self.mod_revision = mod_revision
        self.leader_id = host.node_id
        current = self.leader_replicas
        if self.role is Role.LEADER and current is not None and leader_epoch == self.leader_epoch:
            current.on_metadata(replicas, isr, partition_epoch)
            current.min_isr = self.log.config.min_insync_replicas
            self.maybe_advance_high_watermark()
            return False
        end = self.log.log_end_offset
        self.log.assign_leader_epoch(leader_epoch, end)
        self.leader_epoch = leader_epoch
        self.leader_replicas = LeaderReplicas(
            host.node_id, replicas, isr, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
            epoch_start_offset=end, now_ms=host.now_ms(), max_lag_ms=max_lag_ms,
            min_isr=self.log.config.min_insync_replicas, previous=current)
        self.role = Role.LEADER
        self._notified_hw = self.log.high_watermark
        self.maybe_advance_high_watermark()
        self._poke_sessions()
        return True

    def make_follower(self, leader: int, leader_epoch: int) -> None:
        """Follow ``leader`` (NO_LEADER: none now) at ``leader_epoch``: waiters on this broker's leadership fail."""
        if self.role is Role.LEADER:
            self._fail_hw_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.notify_readers()
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.leader_replicas = None
        self._poke_sessions()

    def stop_replica(self) -> None:
        """Not a replica any more (or the view is not trusted: the session was lost)."""
        if self.role is Role.LEADER:
            self._fail_hw_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self.notify_readers()
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.leader_replicas = None
        self._poke_sessions()

    def on_replica_fetch(self, node_id: int, fetch_offset: int, log_start_offset: int, broker_epoch: int) -> bool:
        """A follower fetched at ``fetch_offset`` (its end offset): record it, maybe expand the ISR, maybe move
        the high watermark. False if ``node_id`` is not a replica."""
        lr, host = self.leader_replicas, self.host
        if lr is None or host is None:
            return False
        if not lr.on_fetch(node_id, fetch_offset, log_start_offset, self.log.log_end_offset, host.now_ms(),
                           broker_epoch):
            return False
        if node_id not in lr.isr and lr.pending is None:
            live = host.live_broker_epochs().get(node_id)
            change = lr.propose_expand(node_id, self.log.high_watermark, live)
            if change is not None:
                host.write_isr_change(self, change)
        self._notify_if_advanced()
        return True

    def maybe_shrink_isr(self) -> None:
        lr, host = self.leader_replicas, self.host
        if lr is None or host is None or self.role is not Role.LEADER:
            return
        change = lr.propose_shrink(host.now_ms(), self.log.log_end_offset)
        if change is not None:
            host.write_isr_change(self, change)

    def maybe_advance_high_watermark(self) -> None:
        """Leader: move the high watermark if the replicas allow it now (a new ISR or replica set, a follower's
        broker that re-registered) and complete what waits on it: acks=all produces, coordinator writes and markers,
        long-polling consumers (Kafka's ``tryCompleteDelayedRequests`` after ``maybeIncrementLeaderHW``). Without
        the wake-up they would wait for the next follower fetch, up to ``replica.fetch.wait.max.ms`` when the
        followers are parked."""
        self._notify_if_advanced()

    def _increment_leader_high_watermark(self) -> None:
        """Leader: HW = min end offset over the maximal ISR (Partition.maybeIncrementLeaderHW)."""
        lr, host = self.leader_replicas, self.host
        if lr is None or host is None or self.role is not Role.LEADER:
            return
        hw = lr.high_watermark(self.leader_end(), host.now_ms(), host.live_broker_epochs())
        if hw is not None and hw > self.log.high_watermark:
            self.log.maybe_increment_high_watermark(min(hw, self.log.log_end_offset))

    def wait_replicated(self, last_offset: int) -> asyncio.Future[int]:
        """acks=all in a cluster: a future of the error code (NONE once the high watermark passes
        ``last_offset``; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min ISR meanwhile;
        NOT_LEADER_OR_FOLLOWER if leadership moved)."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.role is not Role.LEADER:
            fut.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif self.log.high_watermark > last_offset:
            fut.set_result(self._after_append_code())
        else:
            if len(self._hw_waiters) >= 256:  # drop the ones that timed out (while the HW could not advance)
                self._hw_waiters = [w for w in self._hw_waiters if not w[1].done()]
            self._hw_waiters.append((last_offset, fut))
        return fut

    def _after_append_code(self) -> int:
        lr = self.leader_replicas
        return ErrorCode.NONE if lr is None or lr.enough_replicas() else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def _release_hw_waiters(self, hw: int) -> None:
        keep = []
        code = self._after_append_code()
        for last, fut in self._hw_waiters:
            if fut.done():
                continue
            if last < hw:
                fut.set_result(code)
            else:
                keep.append((last, fut))
        self._hw_waiters = keep

    def _fail_hw_waiters(self, code: int) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(code)

    def reset_after_truncation(self) -> None:
        """After DeleteRecords/retention the log start moved (the log keeps the high watermark at or above it)."""
        self._notified_hw = max(self._notified_hw, self.log.high_watermark)
        self._poke_sessions()

    def fail_waiters(self, exc: BaseException) -> None:
        self._fail_hw_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        while self._durable_waiters:
            _, fut = self._durable_waiters.popleft()
            if not fut.done():
                fut.set_exception(exc)
        self.notify_readers()
