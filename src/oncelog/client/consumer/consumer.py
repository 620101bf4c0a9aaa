"""``AsyncConsumer`` (asyncio) and ``Consumer`` (sync facade): subscribe (group-managed) or assign, poll/consume,
commit, pause/resume, seek. Names, arguments and results follow confluent-kafka: partitions are
:class:`TopicPartition` objects (``(topic, partition[, offset])`` tuples are accepted too); inside, partitions
are ``(topic, partition)`` tuples.

Membership and offsets live in :mod:`.group` (driver), :mod:`.membership` (state machine) and :mod:`.offsets`;
this module holds the message buffer, what the application consumed (the offsets ``commit()`` commits: the last
record ``poll()`` returned + 1), and the public surface.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from oncelog.protocol.errors import ErrorCode

from .._sync import LoopThread
from ..cluster import Cluster
from ..config import ConsumerConfig, parse_consumer_config
from ..errors import LOCAL_CODES, ConfigError, KafkaError
from ..group_metadata import ConsumerGroupMetadata
from ..message import Message
from ..metadata import ClusterMetadata, list_topics
from ..topic_partition import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, split, to_offsets, tp_list
from ..topic_partition import TopicPartition as TP
from .buffer import MessageBuffer, decode_chunk
from .fetcher import Fetcher, TopicPartition
from .consumer_group import HeartbeatCoordinator
from .group import ConsumerCoordinator, RebalanceHooks
from .subscription import SubscriptionMode, SubscriptionState

__all__ = ["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "Assignment", "AsyncConsumer",
           "Consumer"]

log = logging.getLogger(__name__)

#: a TopicPartition (offset OFFSET_BEGINNING / OFFSET_END / OFFSET_INVALID / >= 0), or (topic, partition[, offset])
Assignment = TP | tuple[str, int] | tuple[str, int, int | None]
#: on_assign / on_revoke / on_lost: (consumer, [TopicPartition, ...]); may be a coroutine function
RebalanceCallback = Callable[[Any, list[TP]], Any]
_split = split
_offsets_arg = to_offsets


class AsyncConsumer:
    def __init__(self, conf: Mapping[str, Any] | ConsumerConfig) -> None:
        self.config = conf if isinstance(conf, ConsumerConfig) else parse_consumer_config(conf)
        c = self.config
        self.cluster = Cluster.from_config(c)
        self.subscription = SubscriptionState()
        self.fetcher = Fetcher(self.cluster, c)
        self.fetcher.paused = self.subscription.paused
        self.coordinator: ConsumerCoordinator | HeartbeatCoordinator | None = None
        if c.group_id is not None:
            hooks = RebalanceHooks(self._revoked, self._lost, self._assigned, self._before_join)
            kind = HeartbeatCoordinator if c.group_protocol == "consumer" else ConsumerCoordinator  # KIP-848
            self.coordinator = kind(self.cluster, c, self.subscription, hooks)
        self._buffer = MessageBuffer()
        self._stored: dict[TopicPartition, int] = {}  # offsets commit() commits (last returned + 1, or stored)
        self._last_committed: dict[TopicPartition, int] = {}
        self._next_auto_commit = time.monotonic() + c.auto_commit_interval_ms / 1000
        self._commit_tasks: set[asyncio.Task[None]] = set()
        self._callbacks: dict[str, RebalanceCallback | None] = {"assign": None, "revoke": None, "lost": None}
        self._in_callback = False
        #: held by a fetch round and by the rebalance hooks: the assignment never changes under a fetch
        self._fetch_lock = asyncio.Lock()
        self._started = False
        self._closed = False

    async def start(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "this consumer is closed; create a new one",
                             retriable=False)
        if not self._started:
            await self.cluster.bootstrap()
            self._started = True

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _group(self, what: str) -> ConsumerCoordinator | HeartbeatCoordinator:
        if self.coordinator is None:
            raise ConfigError(f"{what} needs a consumer group: set group.id in the consumer configuration")
        return self.coordinator

    # ------------------------------------------------------------------ subscription

    def subscribe(self, topics: list[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None, on_lost: RebalanceCallback | None = None) -> None:
        """Join the group (at the next poll) for ``topics``; a name starting with ``^`` is a regular expression.
        ``on_assign`` / ``on_revoke`` / ``on_lost`` get ``(consumer, [(topic, partition), ...])``; ``on_lost``
        defaults to ``on_revoke`` (partitions taken away without a chance to commit)."""
        coordinator = self._group("subscribe()")
        before = (self.subscription.topics, tuple(p.pattern for p in self.subscription.patterns))
        self.subscription.subscribe(topics)
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        after = (self.subscription.topics, tuple(p.pattern for p in self.subscription.patterns))
        if before != after:
            coordinator.membership.request_rejoin(f"subscription changed to {list(topics)}")

    async def unsubscribe(self) -> None:
        """Leave the group (revoking the assignment first) and stop consuming."""
        if self.coordinator is not None and self.subscription.auto:
            await self.coordinator.leave("the consumer unsubscribed")
        self.subscription.unsubscribe()
        self.fetcher.unassign_all()
        self._buffer.clear()

    # ------------------------------------------------------------------ rebalance hooks (run by the coordinator)

    async def _call(self, which: str, tps: list[TopicPartition]) -> None:
        cb = self._callbacks.get(which) or (self._callbacks["revoke"] if which == "lost" else None)
        if cb is None:
            return
        self._in_callback = True
        try:
            result = cb(self, tp_list(tps))
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("consumer %s callback raised for %s; the rebalance continues", which, tps)
        finally:
            self._in_callback = False

    def _uncommitted(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Stored offsets of ``tps`` not committed yet by this consumer."""
        return {tp: o for tp in tps if (o := self._stored.get(tp)) is not None and self._last_committed.get(tp) != o}

    async def _auto_commit_sync(self, tps: Iterable[TopicPartition], why: str) -> None:
        offsets = self._uncommitted(tps) if self.config.enable_auto_commit else {}
        if offsets:
            try:
                await self._commit_now(offsets)
            except KafkaError as e:
                log.warning("auto commit %s failed: %s", why, e)

    async def _before_join(self) -> None:
        await self._auto_commit_sync(list(self.subscription.assigned), "before rejoining the group")

    async def _revoked(self, tps: list[TopicPartition]) -> None:
        async with self._fetch_lock:
            await self._auto_commit_sync(tps, f"before revoking {tps}")
            await self._call("revoke", tps)
            self._remove(tps)

    async def _lost(self, tps: list[TopicPartition]) -> None:
        async with self._fetch_lock:
            await self._call("lost", tps)
            self._remove(tps)

    async def _assigned(self, tps: list[TopicPartition]) -> None:
        async with self._fetch_lock:
            self.subscription.assign(tps, await_committed=True)
            await self._call("assign", tps)

    def _remove(self, tps: Iterable[TopicPartition]) -> None:
        gone = set(tps)
        self.subscription.unassign(gone)
        self.fetcher.unassign(gone)
        self._buffer.drop(gone)
        for tp in gone:
            self._stored.pop(tp, None)

    def _add(self, tp: TopicPartition, offset: int | None) -> None:
        self.subscription.assign([tp], await_committed=False)
        self._drop_buffered([tp], rewind=False)
        if offset is None or offset in (OFFSET_INVALID, OFFSET_STORED):
            if self.coordinator is not None:
                self.fetcher.unassign([tp])
                self.subscription.awaiting_committed[tp] = None
                return
            offset = None
        self.subscription.awaiting_committed.pop(tp, None)
        self.fetcher.assign(tp, offset)

    def _drop_buffered(self, tps: Iterable[TopicPartition], *, rewind: bool) -> None:
        """Forget buffered records of ``tps``; ``rewind``: fetch them again later (pause)."""
        first = self._buffer.drop(set(tps))
        if rewind:
            for tp, off in first.items():
                if tp in self.fetcher.positions:
                    self.fetcher.positions[tp] = off

    # ------------------------------------------------------------------ manual assignment

    def _check_manual(self, what: str) -> None:
        if self.subscription.auto and not self._in_callback:
            raise ValueError(f"{what} while subscribed: the group assigns partitions (call it from on_assign / "
                             "on_revoke, or unsubscribe() first)")

    def assign(self, partitions: Iterable[Assignment]) -> None:
        """Replace the assignment. Offsets: >= 0 exact, OFFSET_BEGINNING, OFFSET_END; none / OFFSET_INVALID /
        OFFSET_STORED: the group's committed offset (with group.id), else auto.offset.reset."""
        self._check_manual("assign()")
        items = [_split(i) for i in partitions]
        if not self.subscription.auto:
            self.subscription.set_manual()
        self._remove(list(self.subscription.assigned))
        self.fetcher.unassign_all()
        self._buffer.clear()
        if not self.subscription.auto:
            self.subscription.set_manual()
        for tp, offset in items:
            self._add(tp, offset)

    def unassign(self) -> None:
        self._check_manual("unassign()")
        self._remove(list(self.subscription.assigned))

    def incremental_assign(self, partitions: Iterable[Assignment]) -> None:
        self._check_manual("incremental_assign()")
        items = [_split(i) for i in partitions]
        if not self.subscription.auto:
            self.subscription.set_manual()
        for tp, offset in items:
            self._add(tp, offset)

    def incremental_unassign(self, partitions: Iterable[Assignment]) -> None:
        self._check_manual("incremental_unassign()")
        self._remove([_split(i)[0] for i in partitions])

    def assignment(self) -> list[TP]:
        return tp_list(self.subscription.assignment())

    # ------------------------------------------------------------------ positions

    def seek(self, topic: str | Assignment, partition: int | None = None, offset: int | None = None) -> None:
        """``seek(TopicPartition(topic, partition, offset))`` (or ``seek(topic, partition, offset)``)."""
        if not isinstance(topic, str):
            tp, off = _split(topic)
        else:
            if partition is None or offset is None:
                raise TypeError("seek(topic, partition, offset) needs all three")
            tp, off = (topic, partition), offset
        if off is None:
            raise TypeError("seek needs an offset")
        if tp not in self.subscription.assigned:
            if self.subscription.auto:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"cannot seek {tp[0]}[{tp[1]}]: it is not assigned to this consumer", retriable=False)
            self.subscription.set_manual()
        self._stored.pop(tp, None)
        self._add(tp, off)

    def position(self, topic: str | Iterable[Any], partition: int | None = None) -> Any:
        """``position([TopicPartition, ...])`` -> [TopicPartition] with the offset of the next record poll()
        returns (OFFSET_INVALID until known); also ``position(topic, partition)`` -> offset or None."""
        firsts = self._buffer.firsts()

        def one(tp: TopicPartition) -> int | None:
            return firsts.get(tp, self.fetcher.positions.get(tp))

        if isinstance(topic, str):
            if partition is None:
                raise TypeError("position(topic, partition) needs a partition")
            return one((topic, partition))
        out = []
        for item in topic:
            tp, _ = _split(item)
            pos = one(tp)
            out.append(TP(tp[0], tp[1], OFFSET_INVALID if pos is None else pos))
        return out

    def pause(self, partitions: Iterable[Assignment]) -> None:
        """Stop returning records of these assigned partitions (membership goes on) until resume()."""
        tps = [_split(i)[0] for i in partitions]
        unknown = self.subscription.pause(tps)
        if unknown:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"cannot pause {unknown}: not assigned",
                             retriable=False)
        self._drop_buffered(tps, rewind=True)

    def resume(self, partitions: Iterable[Assignment]) -> None:
        self.subscription.resume(_split(i)[0] for i in partitions)

    def paused(self) -> list[TP]:
        return tp_list(self.subscription.paused)

    # ------------------------------------------------------------------ poll

    async def _resolve_committed(self) -> None:
        waiting = list(self.subscription.awaiting_committed)
        if not waiting:
            return
        if self.coordinator is None:
            for tp in waiting:
                self._add(tp, None)
            return
        committed = await self.coordinator.fetch_committed(waiting, self.config.request_timeout_ms / 1000)
        for tp, off in committed.items():
            if tp in self.subscription.awaiting_committed:
                del self.subscription.awaiting_committed[tp]
                self.fetcher.assign(tp, off if off >= 0 else None)

    async def _before_fetch(self, deadline: float) -> None:
        """What a fetch round does before each fetch: keep the group membership (join/rebalance, or raise what
        failed it), auto commit when due, and look up the committed offsets of partitions that wait for them."""
        co = self.coordinator
        if co is not None:
            if self.subscription.auto:
                await co.ensure_active(deadline, block=not self.subscription.assigned)
            else:
                co.raise_if_failed()
            self._maybe_auto_commit()
        await self._resolve_committed()

    async def _fetch_round(self, deadline: float, max_messages: int) -> list[Message]:
        await self.start()
        co = self.coordinator
        while True:
            await self._before_fetch(deadline)
            if self._buffer:
                break
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            if co is not None and co.joining and not self.subscription.assigned:
                continue  # ensure_active waits for the join
            async with self._fetch_lock:
                self._buffer.extend(await self.fetcher.fetch(min(left_ms, self.config.fetch_max_wait_ms),
                                                             decode_chunk))
        stored = self._stored if self.config.enable_auto_offset_store else None
        out = self._buffer.take(max_messages, self.subscription.assigned, self.subscription.paused, stored)
        return out

    async def poll(self, timeout: float = 1.0) -> Message | None:
        """The next message, or None if none arrives within ``timeout`` seconds (group rebalances and the
        rebalance callbacks run inside poll)."""
        msgs = await self._fetch_round(time.monotonic() + timeout, 1)
        return msgs[0] if msgs else None

    async def consume(self, num_messages: int = 1, timeout: float = 1.0) -> list[Message]:
        """Up to ``num_messages``: returns as soon as some are available (or empty after ``timeout``)."""
        return await self._fetch_round(time.monotonic() + timeout, num_messages)

    async def consume_arrow(self, timeout: float = 1.0) -> list[Any]:
        """What one fetch round brings, as pyarrow RecordBatches (one per partition; columns topic, partition,
        offset, timestamp, timestamp_type, key, value, headers), decoded column-wise; [] after ``timeout``.
        Honours the isolation level, assignment, pause and offset store as :meth:`consume` does (see
        :mod:`.arrow_batches`; needs numpy and pyarrow)."""
        from .arrow_batches import FetchedBatches, decode_batches, from_messages, to_record_batch

        deadline = time.monotonic() + timeout
        if self._buffer:  # records poll()/consume() fetched and did not return yet come first
            msgs = await self._fetch_round(deadline, len(self._buffer))
            if msgs:
                return [from_messages(msgs)]
        await self.start()
        co = self.coordinator
        while True:
            await self._before_fetch(deadline)
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return []
            if co is not None and co.joining and not self.subscription.assigned:
                continue  # ensure_active waits for the join
            out: list[Any] = []
            async with self._fetch_lock:
                fetched: list[FetchedBatches] = await self.fetcher.fetch(min(left_ms, self.config.fetch_max_wait_ms),
                                                                         decode_batches)
                assigned, paused = self.subscription.assigned, self.subscription.paused
                for f in fetched:
                    tp = (f.topic, f.partition)
                    if tp not in assigned:
                        continue
                    if tp in paused:  # paused while the fetch was in flight: fetch these records again on resume
                        if tp in self.fetcher.positions:
                            self.fetcher.positions[tp] = f.fetch_offset
                        continue
                    rb = to_record_batch(f)
                    if rb is not None:
                        out.append(rb)
                        if self.config.enable_auto_offset_store:  # as poll() stores after each record
                            self._stored[tp] = int(rb.column(2)[rb.num_rows - 1].as_py()) + 1
            if out:
                return out

    # ------------------------------------------------------------------ offsets

    def store_offsets(self, message: Message | None = None,
                      offsets: Iterable[Any] | Mapping[Any, int] | None = None) -> None:
        """Set what commit() / auto commit will commit (with enable.auto.offset.store=false)."""
        if message is not None:
            self._stored[(message._topic, message._partition)] = message._offset + 1
        if offsets is not None:
            self._stored.update(_offsets_arg(offsets))

    def _maybe_auto_commit(self) -> None:
        if not self.config.enable_auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        co = self.coordinator
        if co is None or (self.subscription.auto and not co.membership.stable):
            return
        todo = self._uncommitted(self.subscription.assigned)
        if todo:
            self._spawn_commit(todo)

    def _spawn_commit(self, offsets: dict[TopicPartition, int]) -> None:
        async def run() -> None:
            try:
                await self._commit_now(offsets)
            except KafkaError as e:
                log.warning("asynchronous commit of %d offset(s) failed: %s", len(offsets), e)
        task = asyncio.get_running_loop().create_task(run())
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)

    async def _commit_now(self, offsets: dict[TopicPartition, int]) -> None:
        await self._group("commit()").commit(offsets, self.config.request_timeout_ms / 1000)
        self._last_committed.update(offsets)

    async def commit(self, message: Message | None = None,
                     offsets: Iterable[Any] | Mapping[Any, int] | None = None,
                     asynchronous: bool = True) -> list[TP] | None:
        """Commit ``message.offset() + 1``, or ``offsets`` ([TopicPartition], [(topic, partition, offset)] or
        {tp: offset}), or by default the position after the last record poll() returned for each assigned
        partition. Synchronous: returns the committed [TopicPartition]; raises CommitFailedError if the group
        moved on, KafkaException(_NO_OFFSET) if there is nothing to commit (as confluent-kafka)."""
        self._group("commit()")
        await self.start()
        if message is not None:
            todo = {(message._topic, message._partition): message._offset + 1}
        elif offsets is not None:
            todo = _offsets_arg(offsets)
        else:
            todo = {tp: o for tp, o in self._stored.items() if tp in self.subscription.assigned}
        if not todo:
            if asynchronous:
                return None
            raise KafkaError(LOCAL_CODES["_NO_OFFSET"], "no offset to commit", retriable=False)
        if asynchronous:
            self._spawn_commit(todo)
            return None
        await self._commit_now(todo)
        return tp_list(todo, todo)

    async def committed(self, partitions: Iterable[Any], timeout: float | None = None) -> list[TP]:
        """The group's committed offsets: [TopicPartition] (offset OFFSET_INVALID where none is committed)."""
        co = self._group("committed()")
        await self.start()
        tps = [_split(i)[0] for i in partitions]
        got = await co.fetch_committed(tps, self.config.request_timeout_ms / 1000 if timeout is None else timeout)
        return [TP(t, p, got.get((t, p), -1) if got.get((t, p), -1) >= 0 else OFFSET_INVALID) for t, p in tps]

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """For ``Producer.send_offsets_to_transaction``: group id, generation, member id, instance id."""
        return self._group("consumer_group_metadata()").group_metadata()

    # ------------------------------------------------------------------ metadata and offsets lookups

    async def _list_offsets(self, specs: Mapping[tuple[str, int], int | str]) -> dict[tuple[str, int], Any]:
        from ..admin.async_admin import AsyncAdmin  # the admin's ListOffsets per leader, on this consumer's connections

        await self.start()
        admin = AsyncAdmin(self.config)
        admin.cluster, admin._started = self.cluster, True
        result: dict[tuple[str, int], Any] = await admin.list_offsets(specs,
                                                                      isolation_level=self.config.isolation_level)
        return result

    async def list_topics(self, topic: str | None = None) -> ClusterMetadata:
        await self.start()
        return await list_topics(self.cluster, topic)

    async def get_watermark_offsets(self, partition: Any) -> tuple[int, int]:
        """(low, high) offsets of ``partition`` (high: the last stable offset with read_committed)."""
        tp = split(partition)[0]
        low = await self._list_offsets({tp: "earliest"})
        high = await self._list_offsets({tp: "latest"})
        return low[tp].offset, high[tp].offset

    async def offsets_for_times(self, partitions: Iterable[Any]) -> list[TP]:
        """For each TopicPartition whose ``offset`` is a timestamp (ms): the first offset at or after it (-1: none)."""
        specs = {}
        for item in partitions:
            tp, ts = split(item)
            specs[tp] = ts if ts is not None else OFFSET_END
        got = await self._list_offsets(specs)
        return [TP(t, p, got[(t, p)].offset) for t, p in specs]

    # ------------------------------------------------------------------ close

    async def close(self) -> None:
        """Commit (with auto commit), revoke and leave the group (a static member stays: its partitions wait
        session.timeout.ms for it), then close the connections."""
        if self._closed:
            return
        try:
            co = self.coordinator
            if co is not None and self._started:
                if self._commit_tasks:
                    await asyncio.gather(*list(self._commit_tasks), return_exceptions=True)
                if not self.subscription.auto:
                    await self._auto_commit_sync(list(self.subscription.assigned), "on close")
                await co.close(leave=self.subscription.mode is SubscriptionMode.AUTO)
        finally:
            self._closed = True
            await self.cluster.close()
            self._started = False


class Consumer:
    """Blocking facade over :class:`AsyncConsumer`, run on a background event loop thread. Rebalance callbacks
    run in a worker thread while the consumer waits for them, so they may call this consumer's methods."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._async = AsyncConsumer(conf)
        self._runner = LoopThread("oncelog-consumer")
        self._timeout = self._async.config.request_timeout_ms / 1000 + 5
        try:
            self._runner.run(self._async.start(), self._timeout)
        except BaseException:
            self._runner.stop()
            raise

    @property
    def config(self) -> ConsumerConfig:
        return self._async.config

    def _do(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        async def call() -> Any:
            return fn(*args)
        return self._runner.run(call(), self._timeout if timeout is None else timeout)

    def partitions_for(self, topic: str) -> list[int]:
        """Partitions of ``topic`` from fresh metadata ([] if the topic does not exist)."""
        async def do() -> list[int]:
            await self._async.cluster.refresh([topic])
            return self._async.cluster.partitions_for(topic)
        result: list[int] = self._runner.run(do(), self._timeout)
        return result

    def _wrap(self, cb: RebalanceCallback | None) -> RebalanceCallback | None:
        if cb is None:
            return None

        async def run(_: AsyncConsumer, tps: list[TP]) -> None:
            await asyncio.get_running_loop().run_in_executor(None, cb, self, tps)
        return run

    def subscribe(self, topics: list[str], on_assign: RebalanceCallback | None = None,
                  on_revoke: RebalanceCallback | None = None, on_lost: RebalanceCallback | None = None) -> None:
        self._do(self._async.subscribe, topics, self._wrap(on_assign), self._wrap(on_revoke), self._wrap(on_lost))

    def unsubscribe(self) -> None:
        self._runner.run(self._async.unsubscribe(), self._timeout + self._async.config.max_poll_interval_ms / 1000)

    def assign(self, partitions: Iterable[Assignment]) -> None:
        self._do(self._async.assign, list(partitions))

    def unassign(self) -> None:
        self._do(self._async.unassign)

    def incremental_assign(self, partitions: Iterable[Assignment]) -> None:
        self._do(self._async.incremental_assign, list(partitions))

    def incremental_unassign(self, partitions: Iterable[Assignment]) -> None:
        self._do(self._async.incremental_unassign, list(partitions))

    def assignment(self) -> list[TP]:
        result: list[TP] = self._do(self._async.assignment)
        return result

    def seek(self, topic: str | Assignment, partition: int | None = None, offset: int | None = None) -> None:
        self._do(self._async.seek, topic, partition, offset)

    def position(self, topic: str | Iterable[Any], partition: int | None = None) -> Any:
        return self._do(self._async.position, topic if isinstance(topic, str) else list(topic), partition)

    def pause(self, partitions: Iterable[Assignment]) -> None:
        self._do(self._async.pause, list(partitions))

    def resume(self, partitions: Iterable[Assignment]) -> None:
        self._do(self._async.resume, list(partitions))

    def paused(self) -> list[TP]:
        result: list[TP] = self._do(self._async.paused)
        return result

    def poll(self, timeout: float = 1.0) -> Message | None:
        result: Message | None = self._runner.run(self._async.poll(timeout), timeout + self._timeout)
        return result

    def consume(self, num_messages: int = 1, timeout: float = 1.0) -> list[Message]:
        result: list[Message] = self._runner.run(self._async.consume(num_messages, timeout),
                                                 timeout + self._timeout)
        return result

    def consume_arrow(self, timeout: float = 1.0) -> list[Any]:
        """See :meth:`AsyncConsumer.consume_arrow`: a list of pyarrow RecordBatches ([] after ``timeout``)."""
        result: list[Any] = self._runner.run(self._async.consume_arrow(timeout), timeout + self._timeout)
        return result

    def store_offsets(self, message: Message | None = None,
                      offsets: Iterable[Any] | Mapping[Any, int] | None = None) -> None:
        self._do(self._async.store_offsets, message, offsets if offsets is None or isinstance(offsets, Mapping)
                 else list(offsets))

    def commit(self, message: Message | None = None,
               offsets: Iterable[Any] | Mapping[Any, int] | None = None,
               asynchronous: bool = True) -> list[TP] | None:
        if offsets is not None and not isinstance(offsets, Mapping):
            offsets = list(offsets)
        result: list[TP] | None = self._runner.run(
            self._async.commit(message, offsets, asynchronous), self._timeout)
        return result

    def committed(self, partitions: Iterable[Any], timeout: float | None = None) -> list[TP]:
        result: list[TP] = self._runner.run(
            self._async.committed(list(partitions), timeout), (timeout or self._timeout) + 5)
        return result

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        result: ConsumerGroupMetadata = self._do(self._async.consumer_group_metadata)
        return result

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        result: ClusterMetadata = self._runner.run(self._async.list_topics(topic),
                                                   self._timeout if timeout < 0 else timeout)
        return result

    def get_watermark_offsets(self, partition: Any, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high) offsets of a TopicPartition, asked of its leader (``cached`` is ignored: always fresh)."""
        result: tuple[int, int] = self._runner.run(self._async.get_watermark_offsets(partition),
                                                   timeout or self._timeout)
        return result

    def offsets_for_times(self, partitions: Iterable[Any], timeout: float | None = None) -> list[TP]:
        result: list[TP] = self._runner.run(self._async.offsets_for_times(list(partitions)),
                                            timeout or self._timeout)
        return result

    def close(self) -> None:
        try:
            self._runner.run(self._async.close(), self._timeout + 10)
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
