"""ListTransactions (66): filter by state, producer id and (v1) minimum running time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.list_transactions_request import ListTransactionsRequest
from oncelog.protocol.messages.list_transactions_response import ListTransactionsResponse, TransactionState
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed_names
from ._txn import coordinator_or_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: ListTransactionsRequest) -> ListTransactionsResponse:
    coordinator, code = coordinator_or_error(broker)
    if coordinator is None:
        return ListTransactionsResponse(error_code=code)
    result = coordinator.list(list(request.state_filters), list(request.producer_id_filters),
                              request.duration_filter if ctx.api_version >= 1 else -1)
    described = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                              (t.transactional_id for t in result.transactions), audit_denial=False)
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=result.error_code, unknown_state_filters=list(result.unknown_state_filters),
        transaction_states=[TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                             transaction_state=t.state) for t in result.transactions
                            if t.transactional_id in described])
