"""TxnOffsetCommit (28): offsets committed inside a transaction, written to ``__consumer_offsets`` as a
transactional batch and visible only after the COMMIT marker (KIP-98; Kafka's
OffsetMetadataManager.replayEndTransactionMarker). From version 5 (transactions V2, KIP-890 part 2) the client sends
no AddOffsetsToTxn: the group's ``__consumer_offsets`` partition is added to the transaction here first, with the
transaction's coordinator on this broker or another one (Kafka's ``addPartition`` verification of the write)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from oncelog.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.coordinator.transaction import OFFSETS_TOPIC
from oncelog.protocol.errors import ErrorCode
from dataclasses import replace
from typing import Any

from ..security.authorization import allowed, allowed_names
from ._authz import then
from ._groups import NOT_AVAILABLE, coordinator
from ._txn_verify import add_to_transaction, coordinator_is_remote

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: BrokerContext, ctx: RequestContext,
           request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse | Awaitable[TxnOffsetCommitResponse]:
    refusal = ErrorCode.NONE
    if not allowed(broker, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        refusal = ErrorCode.GROUP_AUTHORIZATION_FAILED
    readable = allowed_names(broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)) \
        if not refusal else set()

    def refused(topics: list[Any], code: int) -> list[TxnOffsetCommitResponseTopic]:
        return [TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in topics]
    if refusal:
        return TxnOffsetCommitResponse(topics=refused(request.topics, refusal))
    denied = [t for t in request.topics if t.name not in readable]
    if denied:  # the others are committed; these answer TOPIC_AUTHORIZATION_FAILED
        kept = replace(request, topics=[t for t in request.topics if t.name in readable])
        return then(_commit(broker, ctx, kept), lambda r: replace(r, topics=r.topics + refused(
            denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
    return _commit(broker, ctx, request)


def _commit(broker: BrokerContext, ctx: RequestContext,
            request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse | Awaitable[TxnOffsetCommitResponse]:
    gc = coordinator(broker)
    if gc is None:
        return TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=NOT_AVAILABLE)
            for p in t.partitions]) for t in request.topics])
    if ctx.api_version >= 5 and request.topics:
        return _added_then_committed(broker, request, ctx.api_version)
    return gc.txn_offset_commit(request, ctx.api_version)


async def _added_then_committed(broker: BrokerContext, request: TxnOffsetCommitRequest,
                                version: int) -> TxnOffsetCommitResponse:
    """Transactions V2: the implicit AddOffsetsToTxn, then the commit."""
    gc = coordinator(broker)
    assert gc is not None
    tp = (OFFSETS_TOPIC, gc.partition_for(request.group_id))
    answer = (await add_to_transaction(broker, request.transactional_id, request.producer_id,
                                       request.producer_epoch, [tp],
                                       coordinator_is_remote(broker, request.transactional_id))).get(tp)
    if answer:
        # as Kafka answers a refused verification: a stale epoch is INVALID_PRODUCER_EPOCH, a retriable refusal
        # COORDINATOR_NOT_AVAILABLE (the producer retries the commit)
        code = ErrorCode.INVALID_PRODUCER_EPOCH if answer == ErrorCode.PRODUCER_FENCED \
            else ErrorCode.COORDINATOR_NOT_AVAILABLE if answer == ErrorCode.NOT_ENOUGH_REPLICAS else answer
        return TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in request.topics])
    return await gc.txn_offset_commit(request, version)
