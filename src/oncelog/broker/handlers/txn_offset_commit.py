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

from ._groups import NOT_AVAILABLE, coordinator

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4


def handle(broker: BrokerContext, ctx: RequestContext,
           request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse | Awaitable[TxnOffsetCommitResponse]:
    gc = coordinator(broker)
    if gc is None:
        return TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=NOT_AVAILABLE)
            for p in t.partitions]) for t in request.topics])
    return gc.txn_offset_commit(request, ctx.api_version)
