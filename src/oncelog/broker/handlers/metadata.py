"""Metadata (3): on a single node this broker leads every partition; in a cluster the answer comes from the view
(``_cluster_metadata``). Unknown topics may be auto-created."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

from ._cluster_metadata import handle_metadata
from ._common import lookup_or_create

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.broker.topics import TopicView

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12

LEADER_EPOCH = 0
ZERO_UUID = uuid.UUID(int=0)


def _topic(view: "TopicView", node: int) -> MetadataResponseTopic:
    parts = [MetadataResponsePartition(error_code=0, partition_index=p.index, leader_id=node,
                                       leader_epoch=LEADER_EPOCH, replica_nodes=[node], isr_nodes=[node],
                                       offline_replicas=[])
             for p in view.partitions]
    return MetadataResponseTopic(error_code=0, name=view.name, topic_id=view.topic_id,
                                 is_internal=view.is_internal, partitions=parts)


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: MetadataRequest) -> MetadataResponse | Awaitable[MetadataResponse]:
    if broker.cluster is not None:
        return handle_metadata(broker, broker.cluster, ctx, request)
    node = broker.config.node_id
    host, port = broker.config.advertised_for(ctx.listener)
    topics: list[MetadataResponseTopic] = []
    auto = request.allow_auto_topic_creation if ctx.api_version >= 4 else True
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        topics = [_topic(v, node) for v in broker.topics]
    else:
        for t in request.topics:
            view = None
            if t.name is None:
                view = broker.topics.by_id(t.topic_id) if t.topic_id != ZERO_UUID else None
                if view is None:
                    topics.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                                        topic_id=t.topic_id))
                    continue
            else:
                try:
                    view = lookup_or_create(broker, t.name, auto)
                except Exception:
                    view = None
                if view is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    from oncelog.storage import validate_topic_name, InvalidTopicError
                    try:
                        validate_topic_name(t.name)
                    except InvalidTopicError:
                        code = ErrorCode.INVALID_TOPIC_EXCEPTION
                    topics.append(MetadataResponseTopic(error_code=code, name=t.name))
                    continue
            topics.append(_topic(view, node))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponseBroker(node_id=node, host=host, port=port, rack=None)],
        cluster_id=broker.cluster_id,
        controller_id=node,
        topics=topics,
    )
