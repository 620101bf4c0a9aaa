"""Incremental fetch sessions (KIP-227; Kafka's ``FetchSession.scala``: ``FetchSessionCache``, ``FetchManager``).

Without a session every Fetch lists every partition its sender reads and every answer carries all of them, so the
cost of an idle follower or consumer grows with its partition count. A session keeps that list here:

- a *full* fetch (``session_epoch`` 0) lists every partition; the answer carries a new session id (0 when the cache
  has no slot for it) and all of them, and the session remembers each partition's fetch parameters and the high
  watermark, last stable offset and log start offset it last reported;
- an *incremental* fetch (the session's id and its next epoch) lists only the partitions added or whose fetch
  parameters changed, and ``forgotten_topics_data`` the ones to drop; the answer carries only the partitions with
  records, a changed high watermark / last stable offset / log start offset, a diverging epoch, or an error;
- ``session_epoch`` -1 (``FINAL_EPOCH``) with a session id closes it; with id 0 it is a sessionless fetch (what every
  client before Fetch v7 sends): every partition listed and answered, nothing kept.

Errors (the answer's top-level ``error_code``, with no partitions): an unknown session id is
FETCH_SESSION_ID_NOT_FOUND (evicted, or this broker restarted), an epoch other than the session's next one is
INVALID_FETCH_SESSION_EPOCH (a lost or duplicated fetch), a session created with topic ids (Fetch v13+) fetched with
names or the other way round is FETCH_SESSION_TOPIC_ID_ERROR; the fetcher then starts again with a full fetch.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1,000). When it is full a new
session takes the slot of one unused for ``EVICTION_MS``, else of the least valuable one created more than
``EVICTION_MS`` ago (a follower's session beats a consumer's; then more partitions beat fewer), and a follower's also
of any consumer's session; otherwise it gets none and its fetcher goes on with full fetches.
"""

from __future__ import annotations

import asyncio
import functools
import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest
from oncelog.protocol.messages.fetch_response import FetchableTopicResponse, FetchResponse, PartitionData

if TYPE_CHECKING:
    from oncelog.cluster.replica import FollowerState

    from .partition import Partition

__all__ = ["EVICTION_MS", "FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "CachedPartition", "FetchContext",
           "FULL_VISIT_MS", "FetchSession", "FetchSessionCache", "Groups", "Key", "caught_up_follower", "new_context",
           "next_epoch"]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a session
FINAL_EPOCH = -1  # a full fetch that closes the session it names (or, with id 0, wants none)
#: a session unused this long may be evicted by any new one (Kafka's FetchSessionCache evictionMs, fixed at 120 s)
EVICTION_MS = 120_000
#: an incremental fetch visits every partition of its session at least this often (a safety net: a change that
#: marked nothing, such as a log start moved by retention, is answered within it)
FULL_VISIT_MS = 30_000
_MAX_EPOCH = 2**31 - 1

#: a session's key for one partition: (topic id, partition) from Fetch v13 on, (topic name, partition) before
Key = tuple[uuid.UUID | str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch): it wraps to 1, never back to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetch parameters last sent for it, what was last answered, and the partition
    it watches (its appends, high watermark moves and role changes mark it for the session's next fetch)."""

    topic: str
    topic_id: uuid.UUID
    request: FetchPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1  # this broker's, as last answered
    partition: Partition | None = None  # watched
    follower: FollowerState | None = None  # a follower's session: its state here while it is caught up

    def must_respond(self, out: PartitionData) -> bool:
        """Whether an incremental answer carries ``out`` (Kafka's CachedPartition.maybeUpdateResponseData, plus the
        last stable offset, which a read_committed consumer follows); records what it reports."""
        respond = bool(out.records) or out.error_code != 0 or out.preferred_read_replica >= 0 \
            or out.diverging_epoch.epoch >= 0
        if out.high_watermark != self.high_watermark:
            self.high_watermark = out.high_watermark
            respond = True
        if out.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = out.last_stable_offset
            respond = True
        if out.log_start_offset != self.log_start_offset:
            self.log_start_offset = out.log_start_offset
            respond = True
        if out.error_code:
            self.high_watermark = -1  # reported again once the error is gone
        return respond


@dataclass(slots=True)
class FetchSession:
    """An incremental fetch session. An incremental fetch visits only the partitions it lists and those marked
    since the last one (``dirty``: appended to, a new high watermark, last stable offset or log start, a role
    change); the others cannot have anything new to answer. Every ``FULL_VISIT_MS`` a fetch visits them all."""

    id: int
    privileged: bool  # a follower's (replica fetcher): evicted only by another follower's, once old
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int  # the epoch the next incremental fetch must carry
    partitions: dict[Key, CachedPartition] = field(default_factory=dict)
    dirty: set[Key] = field(default_factory=set)
    waiter: asyncio.Future[None] | None = None  # a parked (long-polling) fetch of this session
    closed: bool = False
    full_visit_ms: int = 0

    def update(self, request: FetchRequest) -> set[Key]:
        """Add or update the partitions an incremental fetch lists, drop the forgotten ones; the listed keys."""
        ids = self.uses_topic_ids
        listed: set[Key] = set()
        for t in request.topics:
            for p in t.partitions:
                key: Key = (t.topic_id if ids else t.topic, p.partition)
                listed.add(key)
                cached = self.partitions.get(key)
                if cached is None:
                    self.partitions[key] = CachedPartition(t.topic, t.topic_id, p)
                else:
                    cached.request = p
        for f in request.forgotten_topics_data:
            topic: uuid.UUID | str = f.topic_id if ids else f.topic
            for index in f.partitions:
                self.partitions.pop((topic, index), None)
        return listed

    def poke(self, key: Key) -> bool:
        """``key``'s partition changed: the next fetch visits it (a parked one wakes). False once the session no
        longer holds it (the partition stops calling)."""
        if self.closed or key not in self.partitions:
            return False
        self.dirty.add(key)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)
        return True

    def take_dirty(self) -> set[Key]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def groups(self, keys: set[Key]) -> list[tuple[str, uuid.UUID, list[tuple[Key, CachedPartition]]]]:
        """The partitions of ``keys`` grouped by topic; in session order (a partition that returned records last
        time comes last: Kafka's round robin under ``max_bytes``) when they are most of the session."""
        groups: dict[uuid.UUID | str, tuple[str, uuid.UUID, list[tuple[Key, CachedPartition]]]] = {}
        parts = self.partitions
        if 4 * len(keys) >= len(parts):
            chosen: Iterable[tuple[Key, CachedPartition]] = ((k, c) for k, c in parts.items() if k in keys)
        else:
            chosen = ((k, parts[k]) for k in keys if k in parts)
        for key, c in chosen:
            g = groups.get(key[0])
            if g is None:
                g = groups[key[0]] = (c.topic, c.topic_id, [])
            g[2].append((key, c))
        return list(groups.values())

    def refresh_followers(self, visited: set[Key], now_ms: int) -> None:
        """A follower's fetch: the partitions it did not list and that did not change are still caught up, as at
        their last visit (Kafka records every partition of every fetch; ``replica.lag.time.max.ms`` counts from
        here)."""
        for key, c in self.partitions.items():
            f = c.follower
            if f is not None and key not in visited:
                f.last_fetch_ms = now_ms
                if f.last_caught_up_ms < now_ms:
                    f.last_caught_up_ms = now_ms

    def watch(self, key: Key, c: CachedPartition, partition: Partition | None) -> None:
        if partition is not c.partition:
            c.partition = partition
            if partition is not None:
                partition.watch_session(self.id, functools.partial(self.poke, key))

    def served(self, key: Key) -> None:
        """``key`` returned records: it moves to the end of the session's order."""
        c = self.partitions.pop(key, None)
        if c is not None:
            self.partitions[key] = c


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCache, one shard)."""

    def __init__(self, max_slots: int, now_ms: Callable[[], int], eviction_ms: int = EVICTION_MS) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._now_ms = now_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        #: partitions listed in Fetch requests and carried in their answers, by fetcher ("follower", "consumer")
        self.requested = {"follower": 0, "consumer": 0}
        self.answered = {"follower": 0, "consumer": 0}

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def partitions_cached(self) -> int:
        """Kafka's NumIncrementalFetchPartitionsCached."""
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.closed = True
        return session

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self._now_ms()

    def create(self, privileged: bool, uses_topic_ids: bool, partitions: dict[Key, CachedPartition]) -> int:
        """A new session holding ``partitions`` (its first incremental fetch carries epoch 1); its id, or
        ``INVALID_SESSION_ID`` when no slot is free and none may be taken."""
        now = self._now_ms()
        if len(self.sessions) >= self.max_slots and not self._evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        while True:
            sid = random.randint(1, _MAX_EPOCH)
            if sid not in self.sessions:
                break
        session = FetchSession(sid, privileged, uses_topic_ids, now, now, next_epoch(INITIAL_EPOCH), partitions,
                               full_visit_ms=now)
        self.sessions[sid] = session
        for key, c in partitions.items():
            p, c.partition = c.partition, None
            session.watch(key, c, p)
        return sid

    def _evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's FetchSessionCacheShard.tryEvict: a stale session first; else the least valuable evictable one,
        if the new session is worth more (privileged, then size)."""
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self._evicted(stale)
            return True
        old = now - self.eviction_ms
        # a consumer's session may evict sessions created over EVICTION_MS ago; a follower's also any consumer's
        candidates = [s for s in self.sessions.values()
                      if s.created_ms < old or (privileged and not s.privileged)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) <= (victim.privileged, len(victim.partitions)):
            return False
        self._evicted(victim)
        return True

    def _evicted(self, session: FetchSession) -> None:
        del self.sessions[session.id]
        session.closed = True
        self.evictions += 1


#: what a fetch reads: (topic name, topic id, partitions) per topic, from the request or from its session
Groups = list[tuple[str, uuid.UUID, list[FetchPartition]]]


@dataclass(slots=True)
class FetchContext:
    """What one Fetch reads and how its answer is made (Kafka's Sessionless/Full/IncrementalFetchContext)."""

    groups: Groups  # a full or sessionless fetch's
    session: FetchSession | None = None  # an incremental fetch's session
    listed: set[Key] = field(default_factory=set)  # the partitions an incremental fetch listed
    create: bool = False  # a full fetch asking for a session
    privileged: bool = False
    uses_topic_ids: bool = False
    replica_id: int = -1  # a follower's fetch: its node id

    def respond(self, cache: FetchSessionCache, topics: list[FetchableTopicResponse],
                partitions: Sequence[Partition | None] = ()) -> FetchResponse:
        """A full or sessionless fetch's answer (``topics``: one per group, partitions in group order); a full fetch
        asking for a session gets one if the cache has room (``partitions``: what each partition read from, in the
        same order; the session watches them)."""
        session_id = INVALID_SESSION_ID
        if self.create:
            parts: dict[Key, CachedPartition] = {}
            read_from = iter(partitions)
            for (name, topic_id, fetched), resp in zip(self.groups, topics, strict=True):
                for p, out in zip(fetched, resp.partitions, strict=True):
                    partition = next(read_from, None)
                    parts[(topic_id if self.uses_topic_ids else name, p.partition)] = c = CachedPartition(
                        name, topic_id, p, out.high_watermark, out.last_stable_offset, out.log_start_offset, partition)
                    if self.privileged and partition is not None and not out.error_code:
                        c.follower = caught_up_follower(partition, self.replica_id, p.fetch_offset)
            session_id = cache.create(self.privileged, self.uses_topic_ids, parts)
            session = cache.get(session_id)
            if session is not None:
                # the first incremental fetch visits everything once (what this answer left unread, errors); from
                # then on a partition is visited when listed or marked
                session.dirty.update(parts)
        return self.count(cache, FetchResponse(error_code=0, session_id=session_id, responses=topics))

    def count(self, cache: FetchSessionCache, resp: FetchResponse) -> FetchResponse:
        cache.answered["follower" if self.privileged else "consumer"] += sum(len(t.partitions) for t in resp.responses)
        return resp


def new_context(cache: FetchSessionCache, request: FetchRequest, version: int, privileged: bool) -> FetchContext | int:
    """The context of a Fetch (Kafka's FetchManager.newContext), or the session error code to answer it with."""
    cache.requested["follower" if privileged else "consumer"] += sum(len(t.partitions) for t in request.topics)
    if version < 7:  # no sessions before Fetch v7
        return FetchContext(_groups(request), privileged=privileged)
    sid, epoch = request.session_id, request.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch closes the session it names
        if sid != INVALID_SESSION_ID:
            cache.remove(sid)
        return FetchContext(_groups(request), create=epoch == INITIAL_EPOCH and cache.max_slots > 0,
                            privileged=privileged, uses_topic_ids=version >= 13)
    session = cache.get(sid)
    if session is None:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if session.epoch != epoch:
        return ErrorCode.INVALID_FETCH_SESSION_EPOCH
    if session.uses_topic_ids != (version >= 13):
        return ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    listed = session.update(request)
    if not session.partitions:  # everything forgotten: the session ends, this fetch is sessionless
        cache.remove(sid)
        return FetchContext(_groups(request), privileged=privileged)
    cache.touch(session)
    session.epoch = next_epoch(session.epoch)
    return FetchContext([], session=session, listed=listed, privileged=privileged)


def caught_up_follower(partition: Partition, replica_id: int, fetch_offset: int) -> FollowerState | None:
    """The state of follower ``replica_id`` of a partition led here, if its fetch offset is the log end."""
    lr = partition.leader_replicas
    if lr is None or fetch_offset < partition.log_end_offset:
        return None
    return lr.followers.get(replica_id)


def _groups(request: FetchRequest) -> Groups:
    return [(t.topic, t.topic_id, t.partitions) for t in request.topics]
