"""The follower side of replication: one fetcher task per source broker (Kafka's ReplicaFetcherThread and
AbstractFetcherThread).

A partition this broker follows is handed to the fetcher of its leader with the leader epoch of the view. The
fetcher first truncates the partition's log where it diverges from the leader's (OffsetForLeaderEpoch for the
latest local epoch, :func:`oncelog.cluster.truncation.truncation_for`, the loop of KIP-279), then fetches every
partition it holds in one Fetch per round (replica id = this broker, ``current_leader_epoch``, ``last_fetched_epoch``
so the leader can answer ``diverging_epoch``). Records are appended as follower (offsets, epochs and producer state
as the leader wrote them); in the durable default they are fsynced before the next fetch, so the fetch offset the
leader sees is this replica's durable end and the high watermark only covers data on disk on every ISR member. The
follower's high watermark is min(leader's, own end); its log start follows the leader's.

Errors per partition: FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / unknown topic (this view or the leader's is
old) and UNKNOWN_LEADER_EPOCH (the leader has not seen its election yet): that partition is fetched again after
``replica.fetch.backoff.ms``, or at once when a newer view hands it over at another epoch; OFFSET_OUT_OF_RANGE: the
leader's log start passed this end: the log is emptied and restarted there (otherwise truncation again). A broken
connection is retried after ``replica.fetch.backoff.ms`` on a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.client.connection import BrokerConnection
from oncelog.client.errors import KafkaError
from oncelog.client.fetch_session import FetchSessionHandler
from oncelog.cluster.truncation import UNDEFINED_EPOCH, Truncation, truncation_for
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, ReplicaState
from oncelog.protocol.messages.offset_for_leader_epoch_request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from oncelog.protocol.record_batch import CorruptRecordError, validate_batches
from oncelog.storage import UnexpectedAppendOffsetError

from ..network.peer_connections import PeerConnections, PeerLink

if TYPE_CHECKING:
    from oncelog.cluster.model import BrokerInfo

    from ..partition import Partition

__all__ = ["FetcherConfig", "ReplicaFetcher", "ReplicaFetcherManager", "epoch_end_for"]

log = logging.getLogger("oncelog.broker.replication")

FETCH_VERSION = 15  # last_fetched_epoch and diverging_epoch (v12), topic ids (v13), replica_state (v15, KIP-380)
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
#: seconds before a partition answered UNKNOWN_LEADER_EPOCH is fetched again (its leader's view is a little behind)
UNKNOWN_EPOCH_RETRY_S = 0.05
#: every partition's fetch parameters are compared at least this often (else only those this fetcher moved)
FULL_CHECK_S = 30.0


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    node_id: int
    durable: bool  # fsync what was appended before fetching again (log.flush.interval.messages=1)
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1048576  # per partition
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    link: PeerLink = PeerLink()  # the leaders' inter-broker listener, with this broker's credentials


def epoch_end_for(entries: list[tuple[int, int]], log_end: int, epoch: int) -> tuple[int, int] | None:
    """(largest epoch <= ``epoch``, its end offset) from leader-epoch cache entries (epoch, start offset); the end
    of the latest epoch is ``log_end``; None when every entry is above ``epoch`` (truncation's lookup)."""
    found = None
    for i, (e, _start) in enumerate(entries):
        if e > epoch:
            break
        end = entries[i + 1][1] if i + 1 < len(entries) else log_end
        found = (e, end)
    return found


def _epoch_entries(p: Partition) -> list[tuple[int, int]]:
    cache = getattr(p.log, "leader_epoch_cache", None)
    if cache is None:
        return []
    return [(e.epoch, e.start_offset) for e in cache.entries()]


def truncation_of(p: Partition, leader_epoch: int, leader_end: int) -> Truncation:
    """Where the follower ``p`` truncates given the leader's (epoch, end offset) answer."""
    entries = _epoch_entries(p)
    log_end = p.log.log_end_offset
    return truncation_for(leader_epoch, leader_end, log_start=p.log.log_start_offset, log_end=log_end,
                          high_watermark=p.log.high_watermark,
                          end_offset_for=lambda e: epoch_end_for(entries, log_end, e))


@dataclass(slots=True)
class _State:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0  # after an error: not fetched before this (loop time)
    errors: int = 0  # in a row
    sent: FetchPartition | None = None  # the parameters last fetched with (reused while nothing moves)


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, leader: int, config: FetcherConfig, address: Callable[[int], BrokerInfo | None]) -> None:
        self.leader = leader
        self.config = config
        self._address = address  # a node id's live registration (also gives this broker's epoch)
        self.partitions: dict[tuple[str, int], _State] = {}
        self._changed = asyncio.Event()
        self._peers = PeerConnections(config.node_id, address, config.socket_timeout_ms, "replica", config.link)
        self._task: asyncio.Task[None] | None = None
        self._closing = False  # close() was called: the loop ends even if a cancellation was swallowed
        self.fetches = 0
        self.session = FetchSessionHandler(use_topic_ids=True)  # KIP-227: idle rounds list no partitions
        #: the partitions the last round wanted, and their key in the session (topic id, partition)
        self._listed: dict[tuple[str, int], tuple[uuid.UUID | str, int]] = {}
        self._touched: set[tuple[str, int]] = set()  # whose fetch parameters may have moved since
        self._names: dict[uuid.UUID, str] = {}
        self._full_check_at = 0.0  # loop time of the next check of every partition's parameters

    # ------------------------------------------------------------------------------------------- membership
    def add(self, p: Partition, leader_epoch: int) -> None:
        key = (p.topic, p.index)
        old = self.partitions.get(key)
        if old is not None and old.partition is p and old.leader_epoch == leader_epoch:
            return
        self.partitions[key] = _State(p, leader_epoch)
        self._names[p.topic_id] = p.topic
        self._touched.add(key)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader}")

    def remove(self, key: tuple[str, int]) -> None:
        if self.partitions.pop(key, None) is not None:
            self._changed.set()

    def _current(self, key: tuple[str, int], st: _State) -> bool:
        """The state is still the one the request was built from (not removed or handed over meanwhile)."""
        return self.partitions.get(key) is st and not st.partition.deleted

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # the flag, not only the cancellation: before Python 3.12 wait_for (conn.send's timeout) returns the
            # answer and drops a cancellation that meets it (gh-86296), and the loop would fetch on, holding up
            # the broker's shutdown (seen: a controlled shutdown waiting 60 s for its fetcher)
            self._closing = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._peers.close()

    # ------------------------------------------------------------------------------------------- the loop
    async def _run(self) -> None:
        backoff = self.config.backoff_ms / 1000
        loop = asyncio.get_running_loop()
        while not self._closing:
            now = loop.time()
            active = {k: s for k, s in self.partitions.items() if s.delayed_until <= now}
            if not active:
                if self.partitions:
                    await self._pause(min(s.delayed_until for s in self.partitions.values()) - now)
                else:
                    self._changed.clear()
                    await self._changed.wait()
                continue
            try:
                conn = await self._peers.connection(self.leader)
                truncating = {k: s for k, s in active.items() if s.truncating}
                if truncating:
                    await self._truncate(conn, truncating)
                    continue
                await self._fetch(conn, active)
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError) as e:
                log.info("replica fetcher of node %d from leader %d: %s; retrying in %.1f s", self.config.node_id,
                         self.leader, e, backoff)
                self.session.reset()
                await self._peers.drop(self.leader)
                await self._pause(backoff)
            except Exception:
                log.exception("replica fetcher of node %d from leader %d failed; retrying in %.1f s",
                              self.config.node_id, self.leader, backoff)
                self.session.reset()
                await self._peers.drop(self.leader)
                await self._pause(backoff)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake early when partitions are handed over (a new view). asyncio.wait, not wait_for: a
        cancellation (close()) that meets the wake-up would be swallowed by wait_for (gh-86296) and the loop would
        run on, holding up the broker's shutdown."""
        self._changed.clear()
        waiter = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({waiter}, timeout=max(seconds, 0.001))
        finally:
            waiter.cancel()

    async def _truncate(self, conn: BrokerConnection, states: dict[tuple[str, int], _State]) -> None:
        """One OffsetForLeaderEpoch round for the partitions not yet truncated (KIP-101/KIP-279)."""
        topics: dict[str, list[OffsetForLeaderPartition]] = {}
        for (topic, index), st in states.items():
            latest = st.partition.log.latest_epoch
            if latest is None:  # nothing written under any epoch: nothing can diverge
                st.truncating = False
                continue
            topics.setdefault(topic, []).append(OffsetForLeaderPartition(
                partition=index, current_leader_epoch=st.leader_epoch, leader_epoch=latest))
        if not topics:
            return
        req = OffsetForLeaderEpochRequest(replica_id=self.config.node_id, topics=[
            OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        resp = await conn.send(req, version=OFFSET_FOR_LEADER_EPOCH_VERSION)
        for t in resp.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                got = states.get(key)
                if got is None or not self._current(key, got):
                    continue
                if r.error_code:
                    self._on_error(key, got, r.error_code)
                    continue
                got.errors = 0
                p = got.partition
                cut = truncation_of(p, r.leader_epoch, r.end_offset)
                await self._truncate_to(p, cut.offset)
                if cut.done or p.log.latest_epoch is None:
                    got.truncating = False
                    log.info("%s-%d: follower of leader %d at epoch %d from offset %d", p.topic, p.index,
                             self.leader, got.leader_epoch, p.log.log_end_offset)

    async def _truncate_to(self, p: Partition, offset: int) -> None:
        self._touched.add((p.topic, p.index))
        end = p.log.log_end_offset
        # On the event loop, not a thread: nothing else (an election making this replica the leader, an append) may
        # run in the middle of it; truncations are rare and cost an fsync or two. Called at the log end too: an epoch
        # this replica recorded there as a leader that then appended nothing goes (Kafka's UnifiedLog.truncateTo);
        # the new leader never saw it, and fetches naming it would be answered "diverging" at once, forever.
        if p.log.truncate_to(offset):
            log.info("%s-%d: truncating from %d to %d (diverged from leader %d)", p.topic, p.index, end, offset,
                     self.leader)
            p.reset_after_truncation()

    def _on_error(self, key: tuple[str, int], st: _State, code: int) -> None:
        """A partition error: that partition is fetched again after ``replica.fetch.backoff.ms`` (a newer view
        that hands it over again ends the wait at once). UNKNOWN_LEADER_EPOCH: the leader has not seen its
        election yet; FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / unknown topic: this view (or the leader's)
        is old."""
        st.errors += 1
        delay = self.config.backoff_ms / 1000
        if code == ErrorCode.UNKNOWN_LEADER_EPOCH:  # the leader learns of its election within milliseconds
            delay = min(delay, UNKNOWN_EPOCH_RETRY_S)
        st.delayed_until = asyncio.get_running_loop().time() + delay
        if st.errors == 1:
            log.info("%s-%d: leader %d answered %s at leader epoch %d; retrying every %d ms until it or the view "
                     "changes", key[0], key[1], self.leader, _name(code), st.leader_epoch, self.config.backoff_ms)

    async def _fetch(self, conn: BrokerConnection, states: dict[tuple[str, int], _State]) -> None:
        cfg = self.config
        now = asyncio.get_running_loop().time()
        if now >= self._full_check_at:  # a safety net: whatever moved a log without passing through here
            touched: set[tuple[str, int]] = set(states)
            self._full_check_at = now + FULL_CHECK_S
        else:
            touched = self._touched & states.keys()
        self._touched = set()
        listed = self._listed
        changed: dict[tuple[uuid.UUID | str, int], tuple[str, uuid.UUID, FetchPartition] | None] = {
            listed.pop(k): None for k in listed.keys() - states.keys()}
        for key in (states.keys() - listed.keys()) | touched:
            st = states[key]
            skey = (st.partition.topic_id, key[1])
            old = listed.get(key)
            if old is not None and old != skey:  # the topic was deleted and created again
                changed[old] = None
            listed[key] = skey
            plog = st.partition.log
            latest = plog.latest_epoch
            latest = UNDEFINED_EPOCH if latest is None else latest
            end, start = plog.log_end_offset, plog.log_start_offset
            fp = st.sent
            if fp is None or fp.fetch_offset != end or fp.log_start_offset != start \
                    or fp.last_fetched_epoch != latest or fp.current_leader_epoch != st.leader_epoch:
                fp = st.sent = FetchPartition(partition=key[1], current_leader_epoch=st.leader_epoch,
                                              fetch_offset=end, last_fetched_epoch=latest, log_start_offset=start,
                                              partition_max_bytes=cfg.max_bytes)
            changed[skey] = (key[0], st.partition.topic_id, fp)
        names = self._names
        me = self._address(cfg.node_id)
        # an incremental fetch (KIP-227) lists only the partitions whose fetch offset or epochs moved
        sent = self.session.build_changes(changed)
        req = FetchRequest(replica_state=ReplicaState(cfg.node_id, -1 if me is None else me.epoch),
                           max_wait_ms=cfg.max_wait_ms, min_bytes=cfg.min_bytes,
                           max_bytes=max(cfg.max_bytes, 1) * 16, isolation_level=0, session_id=sent.session_id,
                           session_epoch=sent.session_epoch, topics=sent.topics,
                           forgotten_topics_data=sent.forgotten)
        timeout = cfg.socket_timeout_ms / 1000 + cfg.max_wait_ms / 1000
        try:
            resp = await conn.send(req, version=FETCH_VERSION, timeout=timeout)
        except BaseException:
            self.session.reset()  # the leader may or may not have moved the session on
            raise
        self.fetches += 1
        if not self.session.handle_response(sent, resp):
            # evicted, or the leader restarted, or an answer was lost: start again at once with a full fetch
            log.info("replica fetcher of node %d from leader %d: fetch session %d answered %s; fetching in full",
                     cfg.node_id, self.leader, sent.session_id, _name(resp.error_code))
            return
        if resp.error_code:
            raise KafkaError(resp.error_code, f"fetch from leader {self.leader} failed")
        appended: list[Partition] = []
        for t in resp.responses:
            for r in t.partitions:
                key = (names.get(t.topic_id, t.topic), r.partition_index)
                got = states.get(key)
                if got is None or not self._current(key, got):
                    continue
                p = got.partition
                if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(p, got, r.log_start_offset)
                    continue
                if r.error_code:
                    self._on_error(key, got, r.error_code)
                    continue
                got.errors = 0
                div = r.diverging_epoch
                if div is not None and div.epoch >= 0 and div.end_offset >= 0:
                    cut = truncation_of(p, div.epoch, div.end_offset)
                    await self._truncate_to(p, cut.offset)
                    got.truncating = not cut.done
                    continue
                records = r.records
                if records:
                    try:
                        headers = validate_batches(records, from_client=False)
                    except CorruptRecordError as e:
                        log.warning("%s-%d: corrupt records from leader %d: %s; fetching again", p.topic, p.index,
                                    self.leader, e)
                        self._on_error(key, got, ErrorCode.CORRUPT_MESSAGE)
                        continue
                    try:
                        p.log.append_as_follower(bytearray(records), headers)
                    except UnexpectedAppendOffsetError as e:
                        log.warning("%s-%d: %s", p.topic, p.index, e)
                        continue
                    appended.append(p)
                    self._touched.add(key)
                if 0 <= r.log_start_offset <= p.log.log_end_offset and r.log_start_offset > p.log.log_start_offset:
                    p.log.delete_records_before(r.log_start_offset)
                    p.reset_after_truncation()
                    self._touched.add(key)
                if r.high_watermark >= 0:
                    p.log.update_high_watermark(min(r.high_watermark, p.log.log_end_offset))
        if appended and cfg.durable:  # the next fetch offset is the durable end
            for res in await asyncio.gather(*(asyncio.to_thread(p.log.flush) for p in appended),
                                            return_exceptions=True):
                if isinstance(res, BaseException) and not isinstance(res, Exception):
                    raise res
                if isinstance(res, Exception):
                    log.warning("replica fetcher of node %d: fsync failed: %s", cfg.node_id, res)

    async def _out_of_range(self, p: Partition, st: _State, leader_log_start: int) -> None:
        self._touched.add((p.topic, p.index))
        end = p.log.log_end_offset
        if 0 <= leader_log_start and end < leader_log_start:
            log.info("%s-%d: the leader's log starts at %d, past this end %d: restarting the log there", p.topic,
                     p.index, leader_log_start, end)
            p.log.truncate_fully_and_start_at(leader_log_start)  # on the loop, as truncate_to
            p.reset_after_truncation()
        else:  # this end is past the leader's: find where the logs agree
            st.truncating = True


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ReplicaFetcherManager:
    """The fetchers of one broker, one per leader it follows (Kafka's ReplicaFetcherManager)."""

    def __init__(self, config: FetcherConfig, address: Callable[[int], BrokerInfo | None]) -> None:
        self.config = config
        self._address = address
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._owner: dict[tuple[str, int], int] = {}

    def follow(self, p: Partition, leader: int, leader_epoch: int) -> None:
        key = (p.topic, p.index)
        old = self._owner.get(key)
        if old is not None and old != leader:
            self.fetchers[old].remove(key)
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(leader, self.config, self._address)
        self._owner[key] = leader
        fetcher.add(p, leader_epoch)

    def unfollow(self, key: tuple[str, int]) -> None:
        old = self._owner.pop(key, None)
        if old is not None:
            self.fetchers[old].remove(key)

    def following(self, key: tuple[str, int]) -> int | None:
        return self._owner.get(key)

    async def close(self) -> None:
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        self._owner.clear()
        await asyncio.gather(*(f.close() for f in fetchers), return_exceptions=True)
