"""TxnOffsetCommit (28): offsets committed inside a transaction, written to ``__consumer_offsets`` as a
transactional batch and visible only after the COMMIT marker (KIP-98; Kafka's
OffsetMetadataManager.replayEndTransactionMarker)."""

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
from oncelog.protocol.errors import ErrorCode
from dataclasses import replace
from typing import Any

from ..authorization import allowed, allowed_names
from ._authz import then
from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4


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
    return gc.txn_offset_commit(request, ctx.api_version)
