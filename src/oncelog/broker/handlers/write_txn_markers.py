"""WriteTxnMarkers (27): write COMMIT/ABORT markers for a producer to partitions of this broker, fenced by the
coordinator epoch (a marker from an older coordinator is refused with TRANSACTION_COORDINATOR_FENCED). The
transaction coordinator uses the same path internally (``LocalMarkerWriter``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.coordinator.transaction import TxnMarker
from oncelog.protocol.messages.write_txn_markers_request import WriteTxnMarkersRequest
from oncelog.protocol.messages.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode
from ..security.authorization import allowed

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 1


async def _write(broker: "BrokerContext", request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    markers = [TxnMarker(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch,
                         tuple((t.name, p) for t in m.topics for p in t.partition_indexes)) for m in request.markers]
    answers = await broker.marker_writer.write(markers)
    results = []
    for m, errors in zip(request.markers, answers):
        by_topic: dict[str, list[WritableTxnMarkerPartitionResult]] = {}
        for (topic, p), code in errors.items():
            by_topic.setdefault(topic, []).append(WritableTxnMarkerPartitionResult(partition_index=p,
                                                                                   error_code=code))
        results.append(WritableTxnMarkerResult(
            producer_id=m.producer_id,
            topics=[WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()]))
    return WriteTxnMarkersResponse(markers=results)


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse | Awaitable[WriteTxnMarkersResponse]:
    if not allowed(broker, ctx, AclOperation.ALTER, ResourceType.CLUSTER, audit_denial=False) \
            and not allowed(broker, ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return WriteTxnMarkersResponse(markers=[WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            WritableTxnMarkerTopicResult(name=t.name, partitions=[WritableTxnMarkerPartitionResult(
                partition_index=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for p in t.partition_indexes])
            for t in m.topics]) for m in request.markers])
    return _write(broker, request)
