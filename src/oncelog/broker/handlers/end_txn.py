"""EndTxn (26): commit or abort. Answered once every marker is durable and the transaction is complete, so the
producer's next transaction never meets CONCURRENT_TRANSACTIONS. Version 5 is transactions V2 (KIP-890 part 2): the
end bumps the producer's epoch and the answer carries the producer id and epoch of its next transaction (Kafka's
``TransactionVersion.transactionVersionForEndTxn``: chosen by the request's version, whatever the broker's
``transaction.version``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.messages.end_txn_request import EndTxnRequest
from oncelog.protocol.messages.end_txn_response import EndTxnResponse
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._txn import coordinator_or_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.coordinator.transaction import TransactionCoordinator

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 5


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: EndTxnRequest) -> EndTxnResponse | Awaitable[EndTxnResponse]:
    if not allowed(broker, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator, code = coordinator_or_error(broker)
    if coordinator is None:
        return EndTxnResponse(throttle_time_ms=0, error_code=code)
    return _end(coordinator, ctx, request)


async def _end(coordinator: "TransactionCoordinator", ctx: "RequestContext",
               request: EndTxnRequest) -> EndTxnResponse:
    r = await coordinator.end_txn_ex(request.transactional_id, request.producer_id, request.producer_epoch,
                                     request.committed, version=ctx.api_version)
    return EndTxnResponse(throttle_time_ms=0, error_code=r.error_code, producer_id=r.producer_id,
                          producer_epoch=r.producer_epoch)
