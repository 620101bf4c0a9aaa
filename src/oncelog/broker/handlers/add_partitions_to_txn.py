"""AddPartitionsToTxn (24): register partitions with the producer's ongoing transaction (v0-3 from clients; v4+
batched, with verify_only, as brokers send it: verify_only for KIP-890 part 1's check of a transactions V1 write,
without it to add the partition of a transactions V2 write, KIP-890 part 2)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from oncelog.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.broker.topics import INTERNAL_TOPICS

from ..security.authorization import allowed, allowed_names
from ._txn import coordinator_or_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.coordinator.transaction import TransactionCoordinator

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 5


def _topic_results(results: dict[tuple[str, int], int]) -> list[AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, p), code in results.items():
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code))
    return [AddPartitionsToTxnTopicResult(name=t, results_by_partition=r) for t, r in by_topic.items()]


def _check_topics(broker: "BrokerContext", partitions: list[tuple[str, int]]) -> dict[tuple[str, int],
                  int] | None:
    """UNKNOWN_TOPIC_OR_PARTITION for missing ones and OPERATION_NOT_ATTEMPTED for the rest, as Kafka does. In a
    cluster a partition exists when the view has it (the coordinator need not hold a replica of it)."""
    missing = {tp for tp in partitions if not broker.partition_exists(*tp)}
    if not missing:
        return None
    return {tp: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else ErrorCode.OPERATION_NOT_ATTEMPTED)
            for tp in partitions}


async def _one(broker: "BrokerContext", coordinator: "TransactionCoordinator", txn_id: str, pid: int,
               epoch: int,
               partitions: list[tuple[str, int]], verify_only: bool, version: int) -> dict[tuple[str, int], int]:
    bad = _check_topics(broker, partitions)
    if bad is not None:
        return bad
    # Kafka's transactionVersionForAddPartitionsToTxn: v4+ comes from a broker, and one that adds (not verify_only)
    # registers the partition of a transactions V2 write (Produce v12, TxnOffsetCommit v5)
    result = await coordinator.add_partitions(txn_id, pid, epoch, partitions, verify_only=verify_only,
                                              version=version, client_transaction_version=2 if version >= 4 else 0)
    return {tp: int(code) for tp, code in result.items()}


def _refused(broker: "BrokerContext", ctx: "RequestContext", txn_id: str,
             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
    """A client's request (v0-3): WRITE on the transactional id, then on each topic (internal ones are not asked);
    any topic refused fails the whole request as Kafka does (the others OPERATION_NOT_ATTEMPTED)."""
    if broker.authorizer is None:
        return None
    if not allowed(broker, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in partitions}
    names = {t for t, _ in partitions if t not in INTERNAL_TOPICS}
    denied = names - allowed_names(broker, ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    if not denied:
        return None
    return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if not broker.partition_exists(*tp) else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions}


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: AddPartitionsToTxnRequest) -> Awaitable[AddPartitionsToTxnResponse]:
    coordinator, code = coordinator_or_error(broker)
    return _handle(broker, ctx, request, coordinator, code)


async def _handle(broker: "BrokerContext", ctx: "RequestContext", request: AddPartitionsToTxnRequest,
                  coordinator: "TransactionCoordinator | None", code: int) -> AddPartitionsToTxnResponse:
    if ctx.api_version <= 3:
        partitions = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
        refused = _refused(broker, ctx, request.v3_and_below_transactional_id, partitions)
        if refused is not None:
            results = refused
        elif coordinator is None:
            results = {tp: code for tp in partitions}
        else:
            results = await _one(broker, coordinator, request.v3_and_below_transactional_id,
                                 request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                                 partitions, False, ctx.api_version)
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(results))
    if not allowed(broker, ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):  # v4+: from brokers only
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if coordinator is None:
        return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=code)
    out = []
    for txn in request.transactions:
        partitions = [(t.name, p) for t in txn.topics for p in t.partitions]
        results = await _one(broker, coordinator, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                             partitions, txn.verify_only, ctx.api_version)
        out.append(AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                            topic_results=_topic_results(results)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results_by_transaction=out)
