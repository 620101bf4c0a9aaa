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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest
from oncelog.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage import OffsetOutOfRangeError

from ..authorization import allowed
from ..fetch_session import FetchContext, Groups, new_context
from ._common import error_for, leadership_error, missing_partition_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition
    from oncelog.broker.request import RequestContext

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17

READ_COMMITTED = 1


@dataclass(slots=True)
class _Want:
    out: PartitionData
    partition: "Partition | None"
    fetch_offset: int
    max_bytes: int
    replica: bool = False  # a follower's fetch: up to the log end


def _replica_id(request: FetchRequest, version: int) -> int:
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def _plan(broker: "BrokerContext", request: FetchRequest, version: int, groups: Groups,
          may_read: "Callable[[str], bool] | None" = None) -> tuple[list[FetchableTopicResponse], list[_Want]]:
    topics: list[FetchableTopicResponse] = []
    wants: list[_Want] = []
    replica_id = _replica_id(request, version) if broker.cluster is not None else -1
    broker_epoch = request.replica_state.replica_epoch if version >= 15 else -1
    for name, topic_id, partitions in groups:
        if version >= 13:
            view = broker.topics.by_id(topic_id)
            missing_code = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            view = broker.topics.get(name)
            missing_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        resp = FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=[])
        for p in partitions:
            out = PartitionData(partition_index=p.partition, high_watermark=-1, last_stable_offset=-1,
                                log_start_offset=-1, aborted_transactions=None, records=b"")
            partition = view.partitions[p.partition] if view and 0 <= p.partition < len(view.partitions) else None
            if may_read is not None and (view is not None or version < 13) \
                    and not may_read(view.name if view is not None else name):
                out.error_code, partition = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
            elif partition is None:
                out.error_code = missing_partition_error(broker, name, p.partition, missing_code) if name \
                    else missing_code
            elif code := leadership_error(partition, p.current_leader_epoch):
                out.error_code = code
                partition = None
            elif replica_id >= 0 and not _replica_fetch(partition, p, out, replica_id, broker_epoch, version):
                partition = None
            resp.partitions.append(out)
            wants.append(_Want(out, partition, p.fetch_offset, p.partition_max_bytes, replica_id >= 0))
        topics.append(resp)
    return topics, wants


def _replica_fetch(partition: "Partition", p: FetchPartition, out: PartitionData, replica_id: int,
                   broker_epoch: int, version: int) -> bool:
    """A follower's fetch of a partition led here: record its end offset; False when the answer is already
    complete (an error, or a diverging epoch)."""
    lr = partition.leader_replicas
    if lr is None or replica_id not in lr.replicas or replica_id == lr.local_id:
        out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return False
    log = partition.log
    if version >= 12 and p.last_fetched_epoch >= 0:
        epoch, end = log.end_offset_for_epoch(p.last_fetched_epoch)
        if epoch < p.last_fetched_epoch or end < p.fetch_offset:
            out.diverging_epoch.epoch, out.diverging_epoch.end_offset = epoch, end
            out.high_watermark = partition.high_watermark
            out.last_stable_offset = partition.last_stable_offset
            out.log_start_offset = partition.log_start_offset
            return False
    if log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
        partition.on_replica_fetch(replica_id, p.fetch_offset, p.log_start_offset, broker_epoch)
    return True


def _read(broker: "BrokerContext", wants: list[_Want], max_bytes: int, isolation: int) -> tuple[int, bool]:
    """Fill every partition's records; return (bytes gathered, whether any partition has an error)."""
    total = 0
    error = False
    first = True
    for want in wants:
        out = want.out
        partition = want.partition
        if partition is None:
            error = True
            continue
        hw = partition.high_watermark
        lso = partition.last_stable_offset
        out.high_watermark = hw
        out.last_stable_offset = lso
        out.log_start_offset = partition.log_start_offset
        out.error_code = ErrorCode.NONE
        limit = partition.log_end_offset if want.replica else lso if isolation == READ_COMMITTED else hw
        budget = min(want.max_bytes, max_bytes - total)
        if want.fetch_offset >= limit and want.fetch_offset <= partition.log_end_offset:
            out.records = b""
            continue
        try:
            result = partition.log.read(want.fetch_offset, max(budget, 0), limit,
                                        min_one_batch=first)
        except OffsetOutOfRangeError:
            out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            out.records = b""
            error = True
            continue
        except Exception as e:  # pragma: no cover - disk errors
            out.error_code, _ = error_for(e)
            error = True
            continue
        if result.size:
            out.records = result.records
            total += result.size
            first = False
            broker.metrics.topic(partition.topic)[2].inc(result.size)
        else:
            out.records = b""
        if isolation == READ_COMMITTED and not want.replica:
            out.aborted_transactions = [
                AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                for a in partition.log.collect_aborted_txns(want.fetch_offset, limit)
            ] if out.records else None
    return total, error


def _read_check(broker: "BrokerContext", ctx: "RequestContext", request: FetchRequest) -> "Callable[[str], bool]":
    """A follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic (asked once per topic)."""
    if _replica_id(request, ctx.api_version) >= 0:
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
    if quotas is not None and quotas.enabled and _replica_id(request, ctx.api_version) < 0:
        # a consumer with a byte-rate quota reads at most what the quota allows in its window (Kafka's
        # getMaxValueInQuotaWindow): more would be sure to be throttled
        cap = quotas.fetch_max_bytes(ctx.principal.name, ctx.client_id)
        if cap is not None and cap < request.max_bytes:
            request.max_bytes = cap
            request.min_bytes = min(request.min_bytes, cap)
    may_read = _read_check(broker, ctx, request) if broker.authorizer is not None else None
    context = new_context(broker.fetch_sessions, request, ctx.api_version, _replica_id(request, ctx.api_version) >= 0)
    if isinstance(context, int):  # a session error: the fetcher starts again with a full fetch
        return FetchResponse(error_code=context, session_id=0, responses=[])
    topics, wants = _plan(broker, request, ctx.api_version, context.groups, may_read)
    max_bytes = request.max_bytes
    isolation = request.isolation_level
    total, error = _read(broker, wants, max_bytes, isolation)
    if error or total >= max(request.min_bytes, 1) or request.max_wait_ms <= 0 or not wants:
        return context.respond(broker.fetch_sessions, topics)
    # watched in this step, with the read: an append before the long poll's task first runs must wake it
    return _long_poll(topics, wants, request, max_bytes, isolation, broker, _watch(wants), context)


def _watch(wants: list[_Want]) -> list["asyncio.Future[None]"]:
    """What ends a long poll: the next append to a partition a follower fetches (it reads up to the log end), the
    next high-watermark move of a partition a client fetches."""
    return [p.log_end_advanced() if w.replica else p.data_available() for w in wants if (p := w.partition) is not None]


async def _long_poll(topics: list[FetchableTopicResponse], wants: list[_Want], request: FetchRequest,
                     max_bytes: int, isolation: int, broker: "BrokerContext",
                     waits: list["asyncio.Future[None]"], context: FetchContext) -> FetchResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    while (remaining := deadline - loop.time()) > 0:
        await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        total, error = _read(broker, wants, max_bytes, isolation)
        if error or total >= request.min_bytes:
            break
        waits = _watch(wants)  # no await since the read: nothing can move unseen
    return context.respond(broker.fetch_sessions, topics)
