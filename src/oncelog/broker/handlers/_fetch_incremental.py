"""An incremental fetch of a fetch session (KIP-227): it visits only what can have something to answer.

That is the partitions the fetch lists (new ones, or a fetch offset or epoch that moved) and the partitions the
session's watch marked since its last fetch (:class:`~oncelog.broker.fetch_session.FetchSession`: an append, a
high watermark / last stable offset / log start move, a role change); the others are as they were when last
answered, so an idle follower's or consumer's fetch costs nothing per partition, and its answer is empty. A
follower's fetch still counts as a fetch of every partition of its session for ``replica.lag.time.max.ms``
(``refresh_followers``). A parked fetch wakes when the watch marks any partition of the session, and then visits
it too. What may need another look stays marked for the next fetch: a partition answered with an error or with
records (read again from the same offset if the fetcher did not move on), one with more to read than this answer
carried, one whose follower is not in the ISR yet (its expansion is retried).

The reading itself (leadership, a follower's fetch offset and diverging epoch, limits, authorization) is the full
fetch's, in :mod:`.fetch`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from oncelog.protocol.messages.fetch_request import FetchRequest
from oncelog.protocol.messages.fetch_response import FetchableTopicResponse, FetchResponse

from ..fetch_session import FULL_VISIT_MS, CachedPartition, FetchContext, FetchSession, Key, caught_up_follower
from ._fetch_read import READ_COMMITTED, Want, plan, read

if TYPE_CHECKING:
    from collections.abc import Callable

    from oncelog.broker.context import BrokerContext

class _Visit:
    """The partitions one incremental fetch has planned and read, with their cached state."""

    def __init__(self, broker: BrokerContext, request: FetchRequest, version: int, session: FetchSession,
                 may_read: Callable[[str], bool] | None, replica_id: int) -> None:
        self.broker = broker
        self.request = request
        self.version = version
        self.session = session
        self.may_read = may_read
        self.replica_id = replica_id
        self.topics: list[FetchableTopicResponse] = []
        self.wants: list[Want] = []
        self.cached: list[tuple[Key, CachedPartition]] = []  # as wants
        self.keys: set[Key] = set()

    def add(self, keys: set[Key]) -> None:
        keys = keys - self.keys
        if not keys:
            return
        groups = self.session.groups(keys)
        self.keys |= keys
        topics, wants = plan(self.broker, self.request, self.version,
                              [(name, topic_id, [c.request for _, c in items]) for name, topic_id, items in groups],
                              self.may_read)
        self.topics += topics
        self.wants += wants
        first = len(self.cached)
        for _, _, items in groups:
            self.cached += items
        for (key, c), w in zip(self.cached[first:], wants, strict=True):
            p = w.partition
            self.session.watch(key, c, p)
            c.follower = caught_up_follower(p, self.replica_id, w.fetch_offset) \
                if p is not None and w.replica else None

    def respond(self, context: FetchContext) -> FetchResponse:
        """The answer: only the partitions with something new (merged per topic); marks what needs another look."""
        session = self.session
        merged: dict[object, FetchableTopicResponse] = {}
        isolation = self.request.isolation_level
        g = 0
        topic_end = len(self.topics[0].partitions) if self.topics else 0
        for i, (w, (key, c)) in enumerate(zip(self.wants, self.cached, strict=True)):
            while i >= topic_end:  # the topic response this partition belongs to
                g += 1
                topic_end += len(self.topics[g].partitions)
            out = w.out
            if c.must_respond(out):
                t = self.topics[g]
                resp = merged.get(key[0])
                if resp is None:
                    resp = merged[key[0]] = FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[])
                resp.partitions.append(out)
                if out.records:
                    session.served(key)
            p = w.partition
            if out.error_code or p is None or out.records:
                # an error is answered until it is gone; records are read again from the same offset unless the
                # next fetch moves it (a fetcher that dropped them, as Kafka's sessions re-read every partition)
                session.dirty.add(key)
            else:
                limit = p.log_end_offset if w.replica else \
                    p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
                lr = p.leader_replicas
                if w.fetch_offset < limit or (w.replica and lr is not None and self.replica_id not in lr.isr):
                    session.dirty.add(key)
        return context.count(self.broker.fetch_sessions,
                             FetchResponse(error_code=0, session_id=session.id, responses=list(merged.values())))


def fetch(broker: BrokerContext, request: FetchRequest, version: int, context: FetchContext,
          may_read: Callable[[str], bool] | None, replica_id: int) -> object:
    session = context.session
    assert session is not None
    now = broker.clock.monotonic_ms()
    keys = context.listed | session.take_dirty()
    if now - session.full_visit_ms >= FULL_VISIT_MS:
        keys = set(session.partitions)
        session.full_visit_ms = now
    visit = _Visit(broker, request, version, session, may_read, replica_id)
    visit.add(keys)
    if context.privileged:
        host = next((c.partition.host for c in session.partitions.values()
                     if c.partition is not None and c.partition.host is not None), None)
        if host is not None:
            session.refresh_followers(visit.keys, host.now_ms())
    total, error = read(broker, visit.wants, request.max_bytes, request.isolation_level)
    if error or total >= max(request.min_bytes, 1) or request.max_wait_ms <= 0:
        return visit.respond(context)
    # the wake-up is registered in this step, with the read (as the full fetch's watch)
    waiter = session.waiter = asyncio.get_running_loop().create_future()
    return _long_poll(visit, context, waiter)


async def _long_poll(visit: _Visit, context: FetchContext, waiter: asyncio.Future[None]) -> FetchResponse:
    request, session = visit.request, visit.session
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    try:
        while (remaining := deadline - loop.time()) > 0:
            await asyncio.wait([waiter], timeout=remaining)
            visit.add(session.take_dirty())
            total, error = read(visit.broker, visit.wants, request.max_bytes, request.isolation_level)
            if error or total >= request.min_bytes:
                break
            waiter = session.waiter = loop.create_future()  # no await since the read: nothing can move unseen
    finally:
        if session.waiter is waiter:
            session.waiter = None
    return visit.respond(context)
