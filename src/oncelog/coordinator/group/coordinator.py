"""GroupCoordinator: the classic consumer-group coordinator over the partitions of ``__consumer_offsets``.

A group lives on partition ``partition_for(group_id)`` (Kafka's abs(String.hashCode) % partitions). Every
operation runs on that partition's serial queue of the :class:`CoordinatorRuntime`: the shard function validates
and returns (records, response); the runtime appends the records durably, replays them, and only then answers.
JoinGroup and a follower's SyncGroup answer with a future that completes when the join phase ends / the leader's
assignment is durable. The methods take a request message and its version and return the response message; the
broker handlers only adapt versions.

Time: nothing here sleeps. Every shard keeps its timers keyed by deadline (``GroupShard.timers``);
:meth:`GroupCoordinator.next_deadline` is the earliest of them and ``on_timer`` hears of every deadline sooner than
all the others, so the broker (``broker/coordinators/groups.py``) arms one timer at the earliest deadline and calls
:meth:`GroupCoordinator.tick` when it fires; tests advance a ``MockClock`` and call ``tick()``.

Transactional offsets (TxnOffsetCommit): one transactional operation of the runtime — validated, written as a
transactional batch with the producer's id and epoch, replayed as *pending* offsets of that producer. The broker
calls :meth:`replay_end_transaction_marker` once a COMMIT/ABORT marker is durable on the partition; loading replays
the same markers from the log. ``verify_transaction`` (optional hook) lets the broker check with the transaction
coordinator, inside the operation (so nothing can end the transaction between the check and the write), that the
offsets partition was added to the producer's ongoing transaction (AddOffsetsToTxn): a transactional batch written
to a partition outside the transaction would never get its marker (KIP-890 part 1 verifies Produce the same way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from oncelog.clock import Clock
from oncelog.coordinator.runtime import (
    CoordinatorError,
    CoordinatorLog,
    CoordinatorResult,
    CoordinatorRuntime,
    LogEntry,
)
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import consumer_group_describe_response as cgd
from oncelog.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest
from oncelog.protocol.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse
from oncelog.protocol.messages.delete_groups_response import DeletableGroupResult
from oncelog.protocol.messages.describe_groups_response import DescribedGroup
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.heartbeat_response import HeartbeatResponse
from oncelog.protocol.messages.join_group_request import JoinGroupRequest
from oncelog.protocol.messages.join_group_response import JoinGroupResponse
from oncelog.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from oncelog.protocol.messages.leave_group_response import LeaveGroupResponse
from oncelog.protocol.messages.list_groups_response import ListedGroup
from oncelog.protocol.messages.offset_commit_request import OffsetCommitRequest
from oncelog.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from oncelog.protocol.messages.offset_delete_request import OffsetDeleteRequest
from oncelog.protocol.messages.offset_delete_response import OffsetDeleteResponse
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest
from oncelog.protocol.messages.sync_group_response import SyncGroupResponse
from oncelog.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from oncelog.protocol.messages.txn_offset_commit_response import TxnOffsetCommitResponse

from . import membership
from .offsets import (
    FetchedOffset,
    commit_offsets,
    delete_offsets,
    fetch_offsets,
    txn_commit_error,
    txn_commit_offsets,
    validate_fetch,
)
from .config import GroupConfig
from .shard import GroupShard
from .topic_image import TopicImage

__all__ = ["GroupCoordinator", "TxnVerifier"]

log = logging.getLogger("oncelog.coordinator.group")

#: (transactional id, producer id, producer epoch, __consumer_offsets partition) -> error code (NONE: in the transaction)
TxnVerifier = Callable[[str, int, int, int], int]


class GroupCoordinator:
    def __init__(self, group_log: CoordinatorLog, num_partitions: int, clock: Clock,
                 config: GroupConfig | None = None, partition_exists: Callable[[str, int], bool] | None = None,
                 verify_transaction: TxnVerifier | None = None, write_timeout_ms: int | None = None,
                 topics: TopicImage | None = None,
                 group_overrides: Callable[[str], dict[str, str]] | None = None) -> None:
        self.num_partitions = num_partitions
        self.clock = clock
        self.config = config or GroupConfig()
        self.partition_exists = partition_exists
        self.topics = topics  # what consumer groups (KIP-848) read of the topics
        self.group_overrides = group_overrides  # a group's dynamic configs (ConfigResource GROUP)
        self.verify_transaction = verify_transaction
        #: told of a timer deadline (monotonic ms) sooner than every other one scheduled (the broker re-arms)
        self.on_timer: Callable[[int], None] | None = None
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            group_log, self._make_shard, write_timeout_ms=write_timeout_ms)

    def _make_shard(self, partition: int) -> GroupShard:
        return GroupShard(partition, self.clock, self.config, self.partition_exists, on_timer=self._timer_scheduled,
                          topics=self.topics, group_overrides=self.group_overrides)

    def _timer_scheduled(self, deadline: int) -> None:
        if self.on_timer is not None:
            self.on_timer(deadline)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    # ------------------------------------------------------------------ loading
    async def load(self, partition: int, epoch: int, entries: Iterable[LogEntry]) -> GroupShard | None:
        """Become the coordinator of a partition: replay its log (records, transactional records and markers, in
        order) into a new shard, then start its members' sessions. None if a newer epoch already holds it."""
        shard = await self.runtime.load(partition, epoch, entries)
        if shard is not None:
            await self.runtime.run(partition, lambda s: s.on_loaded())
        return shard

    def unload(self, partition: int, epoch: int | None = None) -> None:
        """Stop coordinating a partition (another broker leads it now, at ``epoch``)."""
        self.runtime.unload(partition, epoch)

    async def close(self) -> None:
        await self.runtime.close()

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> int | None:
        """The earliest timer deadline (monotonic ms) of the loaded partitions; None when none is scheduled."""
        deadlines = [d for d in (s.next_deadline() for s in self.runtime.shards().values()) if d is not None]
        return min(deadlines, default=None)

    async def tick(self) -> None:
        """Fire every deadline that has passed, on the partitions that have one (the others cost a heap peek)."""
        now = self.clock.monotonic_ms()
        for partition, shard in list(self.runtime.shards().items()):
            deadline = shard.next_deadline()
            if deadline is None or deadline > now:
                continue
            try:
                await self.runtime.run(partition, lambda s: s.tick())
            except CoordinatorError as e:
                log.warning("group timers of partition %d: %s", partition, e)

    # ------------------------------------------------------------------ helpers
    async def _run(self, group_id: str, op: Callable[[GroupShard], CoordinatorResult[Any]],
                   member_id: str | None = None) -> Any:
        """Run ``op`` on the group's partition; its timers are scheduled after it (``GroupShard.run_timed``): only
        ``member_id``'s when given (an operation that can only push that member's session later)."""
        return await self.runtime.run(self.partition_for(group_id), lambda s: s.run_timed(group_id, op, member_id))

    # ------------------------------------------------------------------ membership
    async def join_group(self, req: JoinGroupRequest, version: int, client_id: str,
                         client_host: str) -> JoinGroupResponse:
        try:
            fut = await self._run(req.group_id, lambda s: s.classic_join(req, version, client_id, client_host))
        except CoordinatorError as e:
            return membership.join_error(e.code, req.member_id)
        # The future is the member's parked JoinGroup, owned by the group: a caller cancelled because its client's
        # connection closed must not cancel it (the member would stop counting as joined). As in Kafka's
        # purgatory, the member stays joined, its answer is dropped, and the next phase's session timeout removes
        # it if it is gone.
        return await asyncio.shield(fut)

    async def sync_group(self, req: SyncGroupRequest, version: int) -> SyncGroupResponse:
        try:
            fut = await self._run(req.group_id, lambda s: s.classic_sync(req, version))
        except CoordinatorError as e:
            return membership.sync_error(e.code)
        return await asyncio.shield(fut)  # the parked SyncGroup: as in join_group

    async def heartbeat(self, req: HeartbeatRequest, version: int) -> HeartbeatResponse:
        instance_id = req.group_instance_id if version >= 3 else None
        try:
            return await self._run(req.group_id, lambda s: s.classic_heartbeat(  # type: ignore[no-any-return]
                req.group_id, req.generation_id, req.member_id, instance_id), req.member_id)
        except CoordinatorError as e:
            return HeartbeatResponse(error_code=e.code)

    async def leave_group(self, req: LeaveGroupRequest, version: int) -> LeaveGroupResponse:
        members = list(req.members) if version >= 3 else [MemberIdentity(member_id=req.member_id)]
        try:
            return await self._run(req.group_id,  # type: ignore[no-any-return]
                                   lambda s: s.classic_leave(req.group_id, members))
        except CoordinatorError as e:
            return LeaveGroupResponse(error_code=e.code)

    # ------------------------------------------------------------------ offsets
    async def commit_offsets(self, req: OffsetCommitRequest, version: int) -> OffsetCommitResponse:
        try:
            return await self._run(req.group_id,  # type: ignore[no-any-return]
                                   lambda s: commit_offsets(s.offset_manager, req, version), req.member_id)
        except CoordinatorError as e:
            return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=e.code)
                for p in t.partitions]) for t in req.topics])

    async def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                            require_stable: bool, member_id: str | None = None,
                            member_epoch: int = -1) -> tuple[int, list[FetchedOffset]]:
        """(group error code, offsets). Served from memory once the partition is loaded. ``member_id`` /
        ``member_epoch`` (OffsetFetch v9+) are checked against a consumer group's member."""
        partition = self.partition_for(group_id)
        shard = self.runtime.shard(partition)
        if shard is None:
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading(partition) \
                else ErrorCode.NOT_COORDINATOR
            return code, []
        refused = validate_fetch(shard.offset_manager, group_id, member_id, member_epoch)
        if refused:
            return refused, []
        return ErrorCode.NONE, fetch_offsets(shard.offset_manager, group_id, topics, require_stable)

    async def delete_offsets(self, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
        try:
            return await self._run(req.group_id, lambda s: delete_offsets(s.offset_manager, req))  # type: ignore[no-any-return]
        except CoordinatorError as e:
            return OffsetDeleteResponse(error_code=e.code)

    async def txn_offset_commit(self, req: TxnOffsetCommitRequest, version: int) -> TxnOffsetCommitResponse:
        partition = self.partition_for(req.group_id)
        verify = self.verify_transaction

        def op(shard: GroupShard) -> CoordinatorResult[TxnOffsetCommitResponse]:
            if verify is not None:
                code = verify(req.transactional_id, req.producer_id, req.producer_epoch, partition)
                if code:
                    if code == ErrorCode.PRODUCER_FENCED and version < 3:  # KIP-588: older clients know this one
                        code = ErrorCode.INVALID_PRODUCER_EPOCH
                    return CoordinatorResult([], txn_commit_error(req, code))
            return txn_commit_offsets(shard.offset_manager, req, version)

        try:
            return await self.runtime.run_transactional(partition, req.producer_id, req.producer_epoch, op)
        except CoordinatorError as e:  # a fenced producer keeps its code (INVALID_PRODUCER_EPOCH, ...)
            return txn_commit_error(req, e.code)

    async def replay_end_transaction_marker(self, partition: int, producer_id: int, producer_epoch: int,
                                            commit: bool, offset: int) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` is durable at ``offset`` of ``__consumer_offsets`` partition
        ``partition``: its pending offsets there become visible (commit) or are dropped (abort)."""
        try:
            await self.runtime.replay_end_transaction_marker(partition, producer_id, producer_epoch, commit, offset)
        except CoordinatorError as e:
            log.info("marker of producer %d on partition %d not replayed here (%s); whoever loads the partition "
                     "reads it from the log", producer_id, partition, e.code.name)

    # ------------------------------------------------------------------ admin
    async def delete_groups(self, group_ids: list[str]) -> list[DeletableGroupResult]:
        by_partition: dict[int, list[str]] = {}
        for gid in group_ids:
            by_partition.setdefault(self.partition_for(gid), []).append(gid)
        results: dict[str, DeletableGroupResult] = {}
        for partition, gids in by_partition.items():
            try:
                for r in await self.runtime.run(partition, lambda s, g=gids: s.delete_groups(g)):  # type: ignore[misc]
                    results[r.group_id] = r
            except CoordinatorError as e:
                for gid in gids:
                    results[gid] = DeletableGroupResult(group_id=gid, error_code=e.code)
        return [results[g] for g in group_ids]

    def describe_group(self, group_id: str) -> DescribedGroup:
        partition = self.partition_for(group_id)
        shard = self.runtime.shard(partition)
        if shard is None:
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading(partition) \
                else ErrorCode.NOT_COORDINATOR
            return DescribedGroup(error_code=code, group_id=group_id)
        if not group_id:
            return DescribedGroup(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id)
        return shard.describe(group_id)

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[ListedGroup]:
        """Groups of both types (ListGroups v4 states filter, v5 types filter: case-insensitive)."""
        wanted = {n.strip().lower() for n in states} if states else None
        kinds = {t.strip().lower() for t in types} if types else None
        out: list[ListedGroup] = []
        for _, shard in sorted(self.runtime.shards().items()):
            out += shard.list_groups(wanted, kinds)
        return out

    # ------------------------------------------------------------------ consumer groups (KIP-848)
    async def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeatRequest, version: int, client_id: str,
                                       client_host: str, describable: Callable[[str], bool] | None = None,
                                       ) -> ConsumerGroupHeartbeatResponse:
        """ConsumerGroupHeartbeat. ``describable(topic)``: may the member describe the topic (regex matches)."""
        partition = self.partition_for(req.group_id)
        try:
            return await self.runtime.run(partition, lambda s: s.consumer_heartbeat(
                req, version, client_id, client_host, describable))
        except CoordinatorError as e:
            return ConsumerGroupHeartbeatResponse(error_code=e.code)

    def consumer_group_describe(self, group_id: str) -> cgd.DescribedGroup:
        """ConsumerGroupDescribe of one group, from memory once its partition is loaded."""
        partition = self.partition_for(group_id)
        shard = self.runtime.shard(partition)
        if shard is None:
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading(partition) \
                else ErrorCode.NOT_COORDINATOR
            return cgd.DescribedGroup(group_id=group_id, error_code=code)
        if not group_id:
            return cgd.DescribedGroup(group_id=group_id, error_code=ErrorCode.INVALID_GROUP_ID)
        return shard.consumer_group_describe(group_id)

    def group(self, group_id: str) -> Any:
        """The in-memory group, classic or consumer (tests, diagnostics)."""
        shard = self.runtime.shard(self.partition_for(group_id))
        if shard is None:
            return None
        return shard.groups.get(group_id) or shard.consumer_groups.get(group_id)
