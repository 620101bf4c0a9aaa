"""Fetch (1): whole batches by reference, long-poll until min_bytes or max_wait_ms.

A client (replica id < 0) reads up to the high watermark (the last stable offset for read_committed) of a
partition this broker leads. In a cluster a follower (replica id >= 0, the replica fetcher of another broker)
reads up to the log end and long-polls on it: it must be an assigned replica at the leader's epoch
(FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH otherwise); its fetch offset is its end offset, which the leader
records (ISR, high watermark); a ``last_fetched_epoch`` whose end here is below the fetch offset is answered with
``diverging_epoch`` and no records (Fetch v12+, Kafka's Partition.fetchRecords), so the follower truncates first.

A fetch that finds too little waits (Kafka's DelayedFetch) for what can complete it: a client's for the next high
watermark move of its partitions, a follower's for the next append to them; a leader append thus answers the parked
follower fetches at once, and acks=all, coordinator writes and markers wait for the followers' copy, not for their
long poll to time out. The waits are registered in the handler's own step, as Kafka's ``tryCompleteElseWatch``
does: the long poll's task first runs an event-loop iteration later, after other connections' requests read in the
same iteration, and an append among them would otherwise go unseen until the next one or ``max_wait_ms``.

Fetch sessions (KIP-227, :mod:`oncelog.broker.fetch_session`): a full fetch (epoch 0) gets a session id when the
cache has room; an incremental fetch names the session and its next epoch, lists only what it adds or changes, and is
answered only the partitions with records, a new high watermark / last stable offset / log start offset, a diverging
epoch or an error. The session's partitions are planned, read and watched like a full fetch's (a follower's fetch
offset of each is recorded on every fetch, listed or not). Session errors (FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR) are answered at once with no partitions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from oncelog.protocol.messages.fetch_request import FetchRequest
from oncelog.protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
)
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed
from ..fetch_session import FetchContext, new_context
from . import _fetch_incremental
from ._fetch_read import Want, plan, read, replica_id_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17

def _read_check(broker: "BrokerContext", ctx: "RequestContext", request: FetchRequest) -> "Callable[[str], bool]":
    """A follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic (asked once per topic)."""
    if replica_id_of(request, ctx.api_version) >= 0:
        follower = allowed(broker, ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
        return lambda name: follower
    answers: dict[str, bool] = {}

    def may_read(name: str) -> bool:
        if name not in answers:
            answers[name] = allowed(broker, ctx, AclOperation.READ, ResourceType.TOPIC, name)
        return answers[name]
    return may_read


def handle(broker: "BrokerContext", ctx: "RequestContext", request: FetchRequest) -> object:
    quotas = broker.quotas
    if quotas is not None and quotas.enabled and replica_id_of(request, ctx.api_version) < 0:
        # a consumer with a byte-rate quota reads at most what the quota allows in its window (Kafka's
        # getMaxValueInQuotaWindow): more would be sure to be throttled
        cap = quotas.fetch_max_bytes(ctx.principal.name, ctx.client_id)
        if cap is not None and cap < request.max_bytes:
            request.max_bytes = cap
            request.min_bytes = min(request.min_bytes, cap)
    may_read = _read_check(broker, ctx, request) if broker.authorizer is not None else None
    replica_id = replica_id_of(request, ctx.api_version)
    context = new_context(broker.fetch_sessions, request, ctx.api_version, replica_id >= 0)
    if isinstance(context, int):  # a session error: the fetcher starts again with a full fetch
        return FetchResponse(error_code=context, session_id=0, responses=[])
    context.replica_id = replica_id
    if context.session is not None:
        return _fetch_incremental.fetch(broker, request, ctx.api_version, context, may_read, replica_id)
    topics, wants = plan(broker, request, ctx.api_version, context.groups, may_read)
    max_bytes = request.max_bytes
    isolation = request.isolation_level
    total, error = read(broker, wants, max_bytes, isolation)
    if error or total >= max(request.min_bytes, 1) or request.max_wait_ms <= 0 or not wants:
        return context.respond(broker.fetch_sessions, topics, [w.partition for w in wants])
    # watched in this step, with the read: an append before the long poll's task first runs must wake it
    return _long_poll(topics, wants, request, max_bytes, isolation, broker, _watch(wants), context)


def _watch(wants: list[Want]) -> list["asyncio.Future[None]"]:
    """What ends a long poll: the next append to a partition a follower fetches (it reads up to the log end), the
    next high-watermark move of a partition a client fetches."""
    return [p.log_end_advanced() if w.replica else p.data_available() for w in wants if (p := w.partition) is not None]


async def _long_poll(topics: list[FetchableTopicResponse], wants: list[Want], request: FetchRequest,
                     max_bytes: int, isolation: int, broker: "BrokerContext",
                     waits: list["asyncio.Future[None]"], context: FetchContext) -> FetchResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    while (remaining := deadline - loop.time()) > 0:
        await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        total, error = read(broker, wants, max_bytes, isolation)
        if error or total >= request.min_bytes:
            break
        waits = _watch(wants)  # no await since the read: nothing can move unseen
    return context.respond(broker.fetch_sessions, topics, [w.partition for w in wants])
