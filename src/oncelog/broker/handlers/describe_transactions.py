"""DescribeTransactions (65)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from oncelog.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed_names
from ._txn import coordinator_or_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    coordinator, code = coordinator_or_error(broker)
    if coordinator is None:
        return DescribeTransactionsResponse(transaction_states=[
            TransactionState(error_code=code, transactional_id=t) for t in request.transactional_ids])
    states = []
    described = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                              request.transactional_ids)
    refused = [TransactionState(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=t)
               for t in request.transactional_ids if t not in described]
    for d in coordinator.describe([t for t in request.transactional_ids if t in described]):
        shown = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, d.topics)  # only these
        states.append(TransactionState(
            error_code=d.error_code, transactional_id=d.transactional_id, transaction_state=d.state,
            transaction_timeout_ms=d.transaction_timeout_ms, transaction_start_time_ms=d.transaction_start_time_ms,
            producer_id=d.producer_id, producer_epoch=d.producer_epoch,
            topics=[TopicData(topic=t, partitions=sorted(ps)) for t, ps in d.topics.items() if t in shown]))
    states += refused
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
