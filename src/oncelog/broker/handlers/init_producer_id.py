"""InitProducerId (22): a producer id for an idempotent producer, or the (bumped) id and epoch of a
transactional id, fencing older instances (KIP-360 recovery, KIP-939 two-phase commit on v6)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest
from oncelog.protocol.messages.init_producer_id_response import InitProducerIdResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed, allowed_any
from ._txn import coordinator_or_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.coordinator.transaction import TransactionCoordinator

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 6


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: InitProducerIdRequest) -> InitProducerIdResponse | Awaitable[InitProducerIdResponse]:
    txn_id = request.transactional_id
    if txn_id is not None and not allowed(broker, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                                      producer_epoch=-1)
    if txn_id is None and not allowed(broker, ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                                      audit_denial=False) \
            and not allowed_any(broker, ctx, AclOperation.WRITE, ResourceType.TOPIC):  # KIP-679
        return InitProducerIdResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                                      producer_epoch=-1)
    coordinator, code = coordinator_or_error(broker)
    if coordinator is None:
        return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)
    return _init(coordinator, ctx, request)


async def _init(coordinator: "TransactionCoordinator", ctx: "RequestContext",
                request: InitProducerIdRequest) -> InitProducerIdResponse:
    result = await coordinator.init_producer_id_ex(
        request.transactional_id, request.transaction_timeout_ms,
        expected_producer_id=request.producer_id, expected_epoch=request.producer_epoch,
        version=ctx.api_version,
        enable_2pc=request.enable2_pc, keep_prepared_txn=request.keep_prepared_txn)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=result.error_code, producer_id=result.producer_id,
                                  producer_epoch=result.producer_epoch,
                                  ongoing_txn_producer_id=result.ongoing_txn_producer_id,
                                  ongoing_txn_producer_epoch=result.ongoing_txn_producer_epoch)
