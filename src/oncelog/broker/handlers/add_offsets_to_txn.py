"""AddOffsetsToTxn (25): add the group's ``__consumer_offsets`` partition to the transaction, so that the
offsets committed with TxnOffsetCommit are decided together with the transaction's data."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from oncelog.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._txn import coordinator_or_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.coordinator.transaction import TransactionCoordinator

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse | Awaitable[AddOffsetsToTxnResponse]:
    if not allowed(broker, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(broker, ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator, code = coordinator_or_error(broker)
    if coordinator is None:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
    return _add(coordinator, ctx, request)


async def _add(coordinator: "TransactionCoordinator", ctx: "RequestContext",
               request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    code = await coordinator.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                         request.group_id, version=ctx.api_version)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
