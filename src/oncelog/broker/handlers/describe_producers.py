"""DescribeProducers (61): the producer state of partitions (the data behind hanging-transaction tools)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_producers_request import DescribeProducersRequest
from oncelog.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

from oncelog.security.acl import AclOperation, ResourceType
from ..security.authorization import allowed_names

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    readable = allowed_names(broker, ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            out = PartitionResponse(partition_index=index, error_code=0, error_message=None, active_producers=[])
            partition = broker.topics.partition(t.name, index)
            if t.name not in readable:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out.error_message = f"no partition {t.name}-{index} on this broker"
            else:
                out.active_producers = [
                    ProducerState(producer_id=s.producer_id, producer_epoch=s.producer_epoch,
                                  last_sequence=s.last_sequence, last_timestamp=s.last_timestamp,
                                  coordinator_epoch=s.coordinator_epoch,
                                  current_txn_start_offset=s.current_txn_start_offset)
                    for s in partition.log.producer_states()]
            parts.append(out)
        topics.append(TopicResponse(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
