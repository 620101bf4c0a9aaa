"""The thin async driver of group membership (Kafka's ConsumerCoordinator): sends what :class:`GroupMembership`
builds, runs the leader's assignor, heartbeats in a background task, commits and fetches offsets.

Rebalance protocols: when every configured assignor supports "cooperative" (cooperative-sticky alone) the
consumer rebalances incrementally (KIP-429): nothing is revoked before JoinGroup, after SyncGroup only the
partitions that moved are revoked, and the member joins once more so they can be given away. Otherwise (eager)
every partition is revoked before joining. Partitions are *lost* (``on_lost``) rather than revoked when the
generation was reset (session expired, fenced by the coordinator): committing them would fail anyway.

The JoinGroup/SyncGroup exchange runs as a task started by ``poll()``: the application keeps polling (the task
survives a poll timeout). The rebalance listener callbacks run inside ``poll()`` only (Kafka does the same), so
an application is never called back while it processes records: the revocation before JoinGroup (eager), and
the assignment after SyncGroup, which the task leaves for the next poll to apply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from oncelog.protocol.assignors import (
    Assignment,
    Assignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from oncelog.protocol.errors import ErrorCode

from ..cluster import COORDINATOR_GROUP, COORDINATOR_RETRIABLE, Cluster
from ..config import ConsumerConfig
from ..connection import BrokerConnection
from ..errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from ..group_metadata import ConsumerGroupMetadata
from .membership import GroupMembership, MemberState, Step
from .offsets import COMMIT_FAILED, CommitFailedError, commit_offsets, fetch_committed
from .subscription import SubscriptionState, TopicPartition

__all__ = ["ConsumerCoordinator", "RebalanceHooks"]

log = logging.getLogger(__name__)

#: retried by commit/fetch after a coordinator lookup / backoff
_RETRY_CODES = COORDINATOR_RETRIABLE | {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNSTABLE_OFFSET_COMMIT,
                                        ErrorCode.NETWORK_EXCEPTION}
Hook = Callable[[list[TopicPartition]], Awaitable[None]]


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


class RebalanceHooks:
    """What the consumer does when partitions come and go (it owns the fetch state and the user callbacks);
    ``before_join`` runs first in every rebalance (the auto commit of Kafka's
    ConsumerCoordinator.onJoinPrepare)."""

    def __init__(self, revoke: Hook, lose: Hook, assign: Hook,
                 before_join: Callable[[], Awaitable[None]] | None = None) -> None:
        self.revoke, self.lose, self.assign = revoke, lose, assign
        self.before_join = before_join


class ConsumerCoordinator:
    def __init__(self, cluster: Cluster, config: ConsumerConfig, subscription: SubscriptionState,
                 hooks: RebalanceHooks, clock: Callable[[], float] = time.monotonic) -> None:
        assert config.group_id is not None
        self.cluster = cluster
        self.config = config
        self.group_id: str = config.group_id
        self.subscription = subscription
        self.hooks = hooks
        self.membership = GroupMembership(
            config.group_id, group_instance_id=config.group_instance_id,
            session_timeout_ms=config.session_timeout_ms, rebalance_timeout_ms=config.max_poll_interval_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms, retry_backoff_ms=config.retry_backoff_ms,
            clock=clock)
        self.assignors: list[Assignor] = [get_assignor(n) for n in config.assignors]
        self.cooperative = all("cooperative" in a.rebalance_protocols for a in self.assignors)
        self._conn: BrokerConnection | None = None
        self._join_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._fatal: BaseException | None = None
        self._prepared = False
        self._pending_assignment: Assignment | None = None
        self._last_assigned: list[TopicPartition] = []  # for the sticky assignors' user data (eager revokes all)
        self._last_generation = -1
        self._joined_topics: list[str] = []
        self._group_topics: list[str] = []  # leader: every member's topics, and their partition counts
        self._partition_counts: dict[str, int] = {}
        self._next_metadata_check = time.monotonic() + config.metadata_max_age_ms / 1000
        self._closed = False
        self.rebalances = 0

    # ------------------------------------------------------------------ coordinator connection

    async def coordinator(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and conn.connected:
            return conn
        self._conn = await self.cluster.coordinator_connection(COORDINATOR_GROUP, self.group_id, own=True)
        return self._conn

    def coordinator_dead(self, why: str) -> None:
        if self._conn is not None:
            log.info("group %r: coordinator %s unusable (%s); looking it up again", self.group_id,
                     self._conn.address, why)
        self._conn = None

    def group_metadata(self) -> ConsumerGroupMetadata:
        m = self.membership
        return ConsumerGroupMetadata(self.group_id, m.generation_id, m.member_id, m.group_instance_id)

    # ------------------------------------------------------------------ poll-side entry points

    def raise_if_failed(self) -> None:
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            raise err

    def needs_join(self) -> bool:
        m = self.membership
        return self.subscription.auto and (m.rejoin_needed or m.state is not MemberState.STABLE)

    @property
    def joining(self) -> bool:
        return self._join_task is not None and not self._join_task.done()

    def quiet_poll(self, now: float, manual: bool) -> bool:
        """Record a poll that would do nothing else (:meth:`ensure_active` has nothing to start, finish, raise or
        check; ``manual``: an assignment by assign(), only a failure to raise) and say True, so that the sync
        consumer's poll may take buffered records on the caller's thread; False (nothing recorded) otherwise."""
        if self._fatal is not None:
            return False
        if not manual:
            heartbeat = self._heartbeat_task
            if not (self._join_task is None and not self.needs_join() and now < self._next_metadata_check
                    and heartbeat is not None and not heartbeat.done()):
                return False
        self.membership.on_poll()
        return True

    async def ensure_active(self, deadline: float, *, block: bool) -> None:
        """Start (or continue) the join if one is needed; wait for it until ``deadline`` when ``block``.

        The rebalance callbacks run here, inside poll(), never in the background: the revocation before
        JoinGroup (eager), the partitions lost, and the new assignment once SyncGroup answered."""
        self.raise_if_failed()
        self.membership.on_poll()
        self._start_heartbeat()
        await self._finish_join()
        if self._join_task is None and not self.needs_join():
            await self._check_metadata()
        if self._join_task is None and self.needs_join():
            if not self._prepared:
                await self._prepare()
                self._prepared = True
            self._join_task = asyncio.get_running_loop().create_task(self._join_loop())
        task = self._join_task
        if task is None:
            return
        if block:
            left = deadline - time.monotonic()
            if left > 0:
                await asyncio.wait([task], timeout=left)
        await self._finish_join()

    async def _check_metadata(self) -> None:
        """Every metadata.max.age.ms: rejoin when a pattern now matches other topics, or (leader) when a
        subscribed topic's partition count changed, so the new partitions get assigned."""
        now = time.monotonic()
        if now < self._next_metadata_check:
            return
        self._next_metadata_check = now + self.config.metadata_max_age_ms / 1000
        try:
            await self.cluster.refresh(None if self.subscription.has_patterns else self._joined_topics)
        except KafkaError as e:
            log.debug("group %r: metadata refresh failed: %s", self.group_id, e)
            return
        topics = self._subscribed_topics()
        counts = {t: len(self.cluster.partitions_for(t)) for t in self._group_topics}
        if topics != self._joined_topics:
            self.membership.request_rejoin(f"the subscribed topics changed to {topics}")
        elif self.membership.is_leader and counts != self._partition_counts:
            self.membership.request_rejoin(f"partition counts changed to {counts}")

    async def _finish_join(self) -> None:
        task = self._join_task
        if task is None or not task.done():
            return
        self._join_task = None
        task.result()  # raises a fatal join error
        assignment, self._pending_assignment = self._pending_assignment, None
        if self.membership.lost:
            self._prepared = False  # the generation was reset during the join: report the loss, then rejoin
        elif assignment is not None:
            self._prepared = False
            await self._complete(assignment)

    # ------------------------------------------------------------------ join

    def _subscribed_topics(self) -> list[str]:
        internal = [t.name for t in self.cluster.topics.values() if t.is_internal]
        return self.subscription.matching(self.cluster.topics, internal)

    def _protocols(self, topics: list[str]) -> list[tuple[str, bytes]]:
        owned = sorted(self.subscription.assigned)
        out = []
        for a in self.assignors:
            sub = Subscription(topics, a.subscription_user_data(topics, self._last_assigned, self._last_generation),
                               owned, self.membership.generation_id if owned else -1)
            out.append((a.name, encode_subscription(sub)))
        return out

    async def _join_loop(self) -> None:
        m = self.membership
        while not self._closed and self.needs_join() and not m.lost:
            try:
                if await self._join_once():
                    return
            except KafkaError as e:
                if not e.retriable() and e.code() not in COORDINATOR_RETRIABLE:
                    raise
                log.info("group %r: rebalance interrupted (%s); joining again", self.group_id, e)
                self.coordinator_dead(str(e))
                m.coordinator_lost(f"rebalance interrupted: {e}")
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def _join_once(self) -> bool:
        """One JoinGroup (+ assignment + SyncGroup); True once SyncGroup gave this member its assignment."""
        m = self.membership
        if self.subscription.has_patterns:
            await self.cluster.refresh()
        topics = self._subscribed_topics()
        conn = await self.coordinator()
        # the coordinator holds JoinGroup (and a follower's SyncGroup) until the group re-formed
        wait = self.config.max_poll_interval_ms / 1000 + 5
        resp = await conn.send(m.join_request(self._protocols(topics)), timeout=wait)
        res = m.on_join_response(resp.error_code, generation_id=resp.generation_id, member_id=resp.member_id,
                                 leader=resp.leader, protocol_type=resp.protocol_type,
                                 protocol_name=resp.protocol_name,
                                 members=[(x.member_id, x.group_instance_id, bytes(x.metadata))
                                          for x in resp.members])
        if res.step is not Step.SYNC:
            await self._after_error(res.step, "JoinGroup", resp.error_code)
            return False
        self._joined_topics = topics
        assignments = await self._leader_assign(res.protocol, res.members) if res.is_leader else None
        resp = await conn.send(m.sync_request(assignments), timeout=wait)
        step = m.on_sync_response(resp.error_code, resp.protocol_name)
        if step is not Step.DONE:
            await self._after_error(step, "SyncGroup", resp.error_code)
            return False
        self.rebalances += 1
        self._pending_assignment = decode_assignment(bytes(resp.assignment)) if resp.assignment else Assignment([])
        return True

    async def _after_error(self, step: Step, what: str, code: int) -> None:
        log.info("group %r: %s answered %s; %s", self.group_id, what, KafkaError(code).name, step.value)
        if step is Step.FIND_COORDINATOR:
            self.coordinator_dead(f"{what}: {KafkaError(code).name}")
        if step in (Step.FIND_COORDINATOR, Step.RETRY):
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def _prepare(self) -> None:
        """Before JoinGroup (Kafka's onJoinPrepare): commit, then revoke (eager) or report lost partitions."""
        owned = sorted(self.subscription.assigned)
        if self.membership.take_lost() or self.membership.generation_id < 0:
            if owned:
                log.info("group %r: partitions lost (generation reset): %s", self.group_id, owned)
                await self.hooks.lose(owned)
            return
        if self.hooks.before_join is not None:
            await self.hooks.before_join()
        if not self.cooperative:
            if owned:
                await self.hooks.revoke(owned)
        else:
            gone = [tp for tp in owned if tp[0] not in set(self._subscribed_topics())]
            if gone:
                await self.hooks.revoke(gone)

    async def _leader_assign(self, protocol: str | None, members: list[tuple[str, str | None, bytes]]
                             ) -> dict[str, bytes]:
        assignor = next((a for a in self.assignors if a.name == protocol), None)
        if assignor is None:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"group {self.group_id!r} chose assignor {protocol!r}, which this consumer does not "
                             f"have (partition.assignment.strategy={','.join(a.name for a in self.assignors)})",
                             retriable=False)
        subs = {mid: decode_subscription(meta) for mid, _inst, meta in members}
        topics = sorted({t for s in subs.values() for t in s.topics})
        if topics:
            await self.cluster.refresh(topics)
        per_topic = {t: len(self.cluster.partitions_for(t)) for t in topics if self.cluster.partitions_for(t)}
        self._group_topics = topics
        self._partition_counts = {t: per_topic.get(t, 0) for t in topics}
        result = assignor.assign(per_topic, subs)
        log.debug("group %r: assignor %s input %s %s -> %s", self.group_id, assignor.name, per_topic, subs, result)
        log.info("group %r generation %d: leader %s assigned %s with %s", self.group_id,
                 self.membership.generation_id, self.membership.member_id,
                 {mid: len(a.partitions) for mid, a in result.items()}, assignor.name)
        return {mid: encode_assignment(result.get(mid, Assignment([]))) for mid in subs}

    async def _complete(self, assignment: Assignment) -> None:
        """After SyncGroup (Kafka's onJoinComplete)."""
        assigned = list(dict.fromkeys(assignment.partitions))
        log.debug("group %r generation %d: member %s SyncGroup assignment %s", self.group_id,
                  self.membership.generation_id, self.membership.member_id, assigned)
        owned = set(self.subscription.assigned)
        self._last_assigned, self._last_generation = sorted(assigned), self.membership.generation_id
        log.info("group %r generation %d: member %s got %d partition(s)", self.group_id,
                 self.membership.generation_id, self.membership.member_id, len(assigned))
        topics = set(self._joined_topics)
        if any(t not in topics for t, _ in assigned):
            self.membership.request_rejoin("assigned partitions of topics this member does not subscribe to")
        elif self._subscribed_topics() != self._joined_topics:
            self.membership.request_rejoin("the subscription changed during the rebalance")
        if not self.cooperative:
            await self.hooks.assign(assigned)
            return
        revoked = sorted(owned - set(assigned))
        added = [tp for tp in assigned if tp not in owned]
        if revoked:
            await self.hooks.revoke(revoked)
        await self.hooks.assign(added)
        if revoked:
            self.membership.request_rejoin("partitions revoked in a cooperative rebalance: rejoin to hand them over")

    # ------------------------------------------------------------------ heartbeat

    def _start_heartbeat(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        try:
            while not self._closed:
                if m.poll_timeout_expired(self.config.max_poll_interval_ms):
                    log.warning("group %r: poll() was not called for max.poll.interval.ms=%d; leaving the group so "
                                "its partitions go to other members (process records faster, or raise "
                                "max.poll.interval.ms / lower max messages per poll)", self.group_id,
                                self.config.max_poll_interval_ms)
                    await self._send_leave("consumer poll timeout has expired")
                    continue
                if m.session_expired():
                    self.coordinator_dead("no heartbeat answered within session.timeout.ms")
                    m.coordinator_lost("session timeout")
                delay = m.heartbeat_delay()
                if delay > 0 or self.joining and m.state is not MemberState.STABLE:
                    await asyncio.sleep(min(max(delay, 0.01), 0.5))
                    continue
                await self._heartbeat_once()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a fatal heartbeat error surfaces in the next poll()
            self._fatal = e

    async def _heartbeat_once(self) -> None:
        m = self.membership
        generation = m.generation_id
        try:
            conn = await self.coordinator()
            resp = await conn.send(m.heartbeat_request())
        except KafkaError as e:
            if not e.retriable():
                raise
            m.on_heartbeat_failure()
            self.coordinator_dead(f"heartbeat: {e}")
            return
        step = m.on_heartbeat_response(resp.error_code, generation)
        if step is Step.FIND_COORDINATOR:
            self.coordinator_dead(f"heartbeat: {KafkaError(resp.error_code).name}")
        elif step is Step.REJOIN:
            log.info("group %r: heartbeat says %s; rejoining at the next poll", self.group_id,
                     KafkaError(resp.error_code).name)

    # ------------------------------------------------------------------ leave / close

    async def _send_leave(self, reason: str) -> None:
        req = self.membership.leave_request(reason)
        if req is None:
            return
        try:
            conn = await self.coordinator()
            resp = await conn.send(req)
            if resp.error_code:
                log.info("group %r: LeaveGroup answered %s", self.group_id, KafkaError(resp.error_code).name)
        except KafkaError as e:
            log.info("group %r: LeaveGroup failed (%s); the coordinator drops us after session.timeout.ms",
                     self.group_id, e)

    async def leave(self, reason: str) -> None:
        """Revoke what we own (the caller committed first), then LeaveGroup unless a static member."""
        await self._stop_join()
        owned = sorted(self.subscription.assigned)
        if owned:
            if self.membership.take_lost() or self.membership.generation_id < 0:
                await self.hooks.lose(owned)
            else:
                await self.hooks.revoke(owned)
        await self._send_leave(reason)
        self.membership.take_lost()

    async def _stop_join(self) -> None:
        task, self._join_task = self._join_task, None
        await _cancel(task)
        self._prepared = False
        self._pending_assignment = None

    async def close(self, leave: bool) -> None:
        try:
            if leave and self.subscription.auto:
                await self.leave("the consumer is closing")
            else:
                await self._stop_join()
        finally:
            self._closed = True
            task, self._heartbeat_task = self._heartbeat_task, None
            await _cancel(task)

    # ------------------------------------------------------------------ offsets

    def _commit_generation(self) -> tuple[int, str]:
        m = self.membership
        if not self.subscription.auto:
            return -1, ""  # manual assignment: a "simple" commit, accepted while the group has no members
        if m.state is not MemberState.STABLE:
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS,
                             f"cannot commit for group {self.group_id!r} while it rebalances (this member's "
                             "partitions are being reassigned); call poll() to complete the rebalance, then commit "
                             "the records it returns", retriable=True)
        return m.generation_id, m.member_id

    async def commit(self, offsets: Mapping[TopicPartition, int], timeout: float) -> None:
        """OffsetCommit, retried on coordinator errors until ``timeout`` seconds; CommitFailedError when this
        member's generation is over."""
        deadline = time.monotonic() + timeout
        pending = dict(offsets)
        while pending:
            generation, member = self._commit_generation()
            try:
                conn = await self.coordinator()
                codes = await commit_offsets(conn, self.group_id, pending, generation_id=generation,
                                             member_id=member, group_instance_id=self.membership.group_instance_id)
            except KafkaError as e:
                if not e.retriable() or time.monotonic() >= deadline:
                    raise
                self.coordinator_dead(f"OffsetCommit: {e}")
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                continue
            failed = {tp: c for tp, c in codes.items() if c}
            if not failed:
                return
            code = next(iter(failed.values()))
            self.membership.on_commit_error(code)
            if code in COMMIT_FAILED:
                raise CommitFailedError(code, self.group_id)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                raise KafkaError(code, f"commit for group {self.group_id!r} refused: the group is rebalancing; "
                                       "call poll() to complete the rebalance, then commit again", retriable=True)
            if code not in _RETRY_CODES or time.monotonic() >= deadline:
                tp = next(iter(failed))
                raise KafkaError(code, f"commit for group {self.group_id!r} failed on {tp[0]}[{tp[1]}]")
            if code in COORDINATOR_RETRIABLE:
                self.coordinator_dead(f"OffsetCommit: {KafkaError(code).name}")
            pending = {tp: pending[tp] for tp in failed}
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def fetch_committed(self, partitions: Iterable[TopicPartition], timeout: float
                              ) -> dict[TopicPartition, int]:
        """Committed offsets (-1: none), waiting out pending transactional commits and coordinator moves."""
        tps = list(partitions)
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = await self.coordinator()
                return await fetch_committed(conn, self.group_id, tps)
            except KafkaError as e:
                if e.code() not in _RETRY_CODES and not isinstance(e, KafkaConnectionError):
                    raise
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"committed offsets of group {self.group_id!r} not available within "
                                            f"{timeout:g} s: {e}") from None
                if e.code() != ErrorCode.UNSTABLE_OFFSET_COMMIT:
                    self.coordinator_dead(f"OffsetFetch: {e}")
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

