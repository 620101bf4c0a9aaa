"""The async driver of KIP-848 group membership (``group.protocol=consumer``): the same surface as the classic
:class:`~oncelog.client.consumer.group.ConsumerCoordinator`, over :class:`HeartbeatMembership`.

A background task sends ConsumerGroupHeartbeat when due (the coordinator sets the interval); the assignment it
brings is applied inside ``poll()`` (the rebalance callbacks never run in the background, as with the classic
protocol): first the partitions given up are revoked (``on_revoke``), then the new ones assigned (``on_assign``),
each incrementally (only what changed), and the next heartbeat, sent at once, reports what the member owns. Topic
ids of the assignment are named from the metadata (refreshed when one is unknown). A fenced member loses its
partitions (``on_lost``) and rejoins. Commits carry the member epoch; one answered STALE_MEMBER_EPOCH (the epoch
moved while it was in flight) is sent again after the heartbeat that brings the new epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from oncelog.protocol.errors import ErrorCode

from ..cluster import COORDINATOR_GROUP, COORDINATOR_RETRIABLE, Cluster
from ..config import ConsumerConfig
from ..connection import BrokerConnection
from ..errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from ..group_metadata import ConsumerGroupMetadata
from .group import RebalanceHooks
from .heartbeat_membership import CgState, HeartbeatMembership, IdPartition
from .membership import Step
from .offsets import COMMIT_FAILED, CommitFailedError, commit_offsets, fetch_committed
from .subscription import SubscriptionState, TopicPartition

__all__ = ["HeartbeatCoordinator"]

log = logging.getLogger(__name__)

_RETRY_CODES = COORDINATOR_RETRIABLE | {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNSTABLE_OFFSET_COMMIT,
                                        ErrorCode.NETWORK_EXCEPTION}


class HeartbeatCoordinator:
    def __init__(self, cluster: Cluster, config: ConsumerConfig, subscription: SubscriptionState,
                 hooks: RebalanceHooks, clock: Callable[[], float] = time.monotonic) -> None:
        assert config.group_id is not None
        self.cluster = cluster
        self.config = config
        self.group_id: str = config.group_id
        self.subscription = subscription
        self.hooks = hooks
        self.clock = clock
        self.membership = HeartbeatMembership(
            config.group_id, group_instance_id=config.group_instance_id,
            rebalance_timeout_ms=config.max_poll_interval_ms, server_assignor=config.group_remote_assignor,
            retry_backoff_ms=config.retry_backoff_ms, clock=clock)
        self._conn: BrokerConnection | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._answered = asyncio.Event()  # set by each heartbeat answer (waiters clear it first)
        self._fatal: BaseException | None = None
        self._sent_subscription: tuple[tuple[str, ...], str | None] | None = None
        self._last_poll = clock()
        self._closed = False
        self.rebalances = 0

    # ------------------------------------------------------------------ coordinator connection
    async def coordinator(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and conn.connected:
            return conn
        self._conn = await self.cluster.coordinator_connection(COORDINATOR_GROUP, self.group_id)
        return self._conn

    def coordinator_dead(self, why: str) -> None:
        if self._conn is not None:
            log.info("group %r: coordinator %s unusable (%s); looking it up again", self.group_id,
                     self._conn.address, why)
        self._conn = None

    def group_metadata(self) -> ConsumerGroupMetadata:
        m = self.membership
        return ConsumerGroupMetadata(self.group_id, m.member_epoch, m.member_id, m.group_instance_id)

    # ------------------------------------------------------------------ poll-side entry points
    def raise_if_failed(self) -> None:
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            raise err

    def needs_join(self) -> bool:
        return self.subscription.auto and self.membership.state in (CgState.UNSUBSCRIBED, CgState.JOINING)

    @property
    def joining(self) -> bool:
        return self.membership.state is CgState.JOINING

    def _subscription(self) -> tuple[tuple[str, ...], str | None]:
        """(topic names, one regex of every ^pattern, as librdkafka combines them, or None)."""
        patterns = self.subscription.patterns
        regex = "|".join(f"({p.pattern})" for p in patterns) if patterns else None
        return tuple(self.subscription.topics), regex

    def _sync_subscription(self) -> None:
        if not self.subscription.auto:
            return
        current = self._subscription()
        if current != self._sent_subscription or self.membership.state is CgState.UNSUBSCRIBED:
            self._sent_subscription = current
            self.membership.subscribe(current[0], current[1])

    async def ensure_active(self, deadline: float, *, block: bool) -> None:
        """Keep the membership going and apply what the coordinator assigned (the callbacks run here)."""
        self.raise_if_failed()
        self._last_poll = self.clock()
        self._sync_subscription()
        self._start_heartbeat()
        await self._apply()
        while block and not self.subscription.assigned and self.membership.state in (CgState.JOINING,
                                                                                     CgState.RECONCILING):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._answered.clear()
            try:
                await asyncio.wait_for(self._answered.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass
            self.raise_if_failed()
            await self._apply()

    async def _apply(self) -> None:
        """Report lost partitions, then reconcile with the assignment the last heartbeat brought."""
        m = self.membership
        if m.take_lost():
            lost = sorted(self.subscription.assigned)
            if lost:
                log.info("group %r: partitions lost (fenced): %s", self.group_id, lost)
                await self.hooks.lose(lost)
        if m.state is not CgState.RECONCILING:
            return
        target = m.target
        if target is None:
            m.reconciled(m.owned, m.owned)
            return
        named = self._names(target)
        if named is None:
            try:
                await self.cluster.refresh()
            except KafkaError as e:
                log.debug("group %r: metadata refresh failed: %s", self.group_id, e)
            named = self._names(target)
            if named is None:
                return  # a topic the metadata does not know yet: at the next poll
        owned = set(self.subscription.assigned)
        revoked = sorted(owned - named)
        added = sorted(named - owned)
        if revoked:
            await self.hooks.revoke(revoked)
        if added:
            await self.hooks.assign(added)
        self.rebalances += 1
        log.info("group %r epoch %d: member %s revoked %d and got %d partition(s)", self.group_id, m.member_epoch,
                 m.member_id, len(revoked), len(added))
        m.reconciled(set(target), target)
        self._wake()

    def _names(self, target: set[IdPartition]) -> set[TopicPartition] | None:
        out = set()
        for topic_id, p in target:
            name = self.cluster.topic_name(topic_id)
            if name is None:
                return None
            out.add((name, p))
        return out

    # ------------------------------------------------------------------ heartbeat
    def _start_heartbeat(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    def _wake(self) -> None:
        self._answered.set()

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        try:
            while not self._closed:
                if not m.active:
                    await asyncio.sleep(0.05)
                    continue
                if self.clock() - self._last_poll > self.config.max_poll_interval_ms / 1000:
                    log.warning("group %r: poll() was not called for max.poll.interval.ms=%d; leaving the group so "
                                "its partitions go to other members", self.group_id, self.config.max_poll_interval_ms)
                    await self._send_leave()
                    m.fence()  # rejoin at the next poll, the partitions lost
                    continue
                delay = m.heartbeat_delay()
                if delay > 0:
                    await asyncio.sleep(min(delay, 0.05))
                    continue
                self._sync_subscription()
                await self._heartbeat_once()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a fatal heartbeat error surfaces in the next poll()
            self._fatal = e
            self._wake()

    async def _heartbeat_once(self) -> None:
        m = self.membership
        try:
            conn = await self.coordinator()
            resp = await conn.send(m.heartbeat_request())
        except KafkaError as e:
            if not e.retriable() and not isinstance(e, KafkaConnectionError):
                raise
            m.on_heartbeat_failure()
            self.coordinator_dead(f"heartbeat: {e}")
            return
        step = m.on_heartbeat_response(resp)
        if step is Step.FIND_COORDINATOR:
            self.coordinator_dead(f"heartbeat: {KafkaError(resp.error_code).name}")
        elif step is Step.REJOIN:
            log.info("group %r: heartbeat says %s; rejoining", self.group_id, KafkaError(resp.error_code).name)
        self._wake()

    # ------------------------------------------------------------------ leave / close
    async def _send_leave(self) -> None:
        req = self.membership.leave_request()
        if req is None:
            return
        try:
            conn = await self.coordinator()
            resp = await conn.send(req)
            self.membership.on_heartbeat_response(resp)
        except KafkaError as e:
            log.info("group %r: leaving failed (%s); the coordinator drops us after the session timeout",
                     self.group_id, e)
            self.membership.state = CgState.UNSUBSCRIBED

    async def leave(self, reason: str) -> None:
        """Revoke what we own (the caller committed first), then leave (a static member: for a while)."""
        owned = sorted(self.subscription.assigned)
        if owned:
            if self.membership.take_lost():
                await self.hooks.lose(owned)
            else:
                await self.hooks.revoke(owned)
        log.info("group %r: member %s leaves (%s)", self.group_id, self.membership.member_id, reason)
        await self._send_leave()
        self._sent_subscription = None

    async def close(self, leave: bool) -> None:
        try:
            if leave and self.subscription.auto:
                await self.leave("the consumer is closing")
        finally:
            self._closed = True
            task, self._heartbeat_task = self._heartbeat_task, None
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # ------------------------------------------------------------------ offsets
    async def commit(self, offsets: Mapping[TopicPartition, int], timeout: float) -> None:
        """OffsetCommit (v9: the member epoch), retried on coordinator errors and, after the next heartbeat, on
        STALE_MEMBER_EPOCH, until ``timeout`` seconds; CommitFailedError when the member was fenced."""
        deadline = time.monotonic() + timeout
        pending = dict(offsets)
        m = self.membership
        while pending:
            auto = self.subscription.auto
            epoch, member = (m.member_epoch, m.member_id) if auto else (-1, "")
            try:
                conn = await self.coordinator()
                codes = await commit_offsets(conn, self.group_id, pending, generation_id=epoch, member_id=member,
                                             group_instance_id=m.group_instance_id if auto else None)
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
            pending = {tp: pending[tp] for tp in failed}
            if time.monotonic() >= deadline:
                tp = next(iter(failed))
                raise KafkaError(code, f"commit for group {self.group_id!r} failed on {tp[0]}[{tp[1]}]")
            if code == ErrorCode.STALE_MEMBER_EPOCH:
                self._answered.clear()
                m.on_commit_error(code)
                try:
                    await asyncio.wait_for(self._answered.wait(), max(deadline - time.monotonic(), 0.01))
                except asyncio.TimeoutError:
                    pass
                continue
            if code in COMMIT_FAILED or code == ErrorCode.FENCED_MEMBER_EPOCH:
                raise CommitFailedError(code, self.group_id)
            if code not in _RETRY_CODES:
                tp = next(iter(failed))
                raise KafkaError(code, f"commit for group {self.group_id!r} failed on {tp[0]}[{tp[1]}]")
            if code in COORDINATOR_RETRIABLE:
                self.coordinator_dead(f"OffsetCommit: {KafkaError(code).name}")
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
