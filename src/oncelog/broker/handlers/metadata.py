"""Metadata (3): on a single node this broker leads every partition; in a cluster the answer comes from the view
(``_cluster_metadata``). Unknown topics may be auto-created."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import replace
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.broker.topics import INTERNAL_TOPICS

from ..security.authorization import allowed, allowed_names, authorized_operations
from ._cluster_metadata import handle_metadata
from ._authz import then
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
    if broker.authorizer is None and not (ctx.api_version >= 8 and (
            request.include_topic_authorized_operations or request.include_cluster_authorized_operations)):
        return _handle(broker, ctx, request)
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    refused: list[MetadataResponseTopic] = []
    kept: set[str] = set()
    if not all_topics:  # DESCRIBE on each topic named; CREATE (on the cluster or the topic) for one to auto-create
        names = [t.name for t in request.topics or () if t.name is not None]
        kept = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        missing = [n for n in kept if broker.topic_overrides(n) is None]
        auto = (request.allow_auto_topic_creation if ctx.api_version >= 4 else True) \
            and broker.config.auto_create_topics_enable
        if auto and missing and not allowed(broker, ctx, AclOperation.CREATE, ResourceType.CLUSTER,
                                            audit_denial=False):
            kept -= set(missing) - allowed_names(broker, ctx, AclOperation.CREATE, ResourceType.TOPIC, missing)
        refused = [MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n,
                                         is_internal=n in INTERNAL_TOPICS) for n in dict.fromkeys(names)
                   if n not in kept]
        request = replace(request, topics=[t for t in request.topics or () if t.name is None or t.name in kept])
    return then(_handle(broker, ctx, request), lambda r: _authorized_view(broker, ctx, request, r, all_topics,
                                                                          kept, refused))


def _authorized_view(broker: "BrokerContext", ctx: "RequestContext", request: MetadataRequest,
                     r: MetadataResponse, all_topics: bool, kept: set[str],
                     refused: list[MetadataResponseTopic]) -> MetadataResponse:
    """Leave out what the principal may not describe (every topic: silently; a topic asked by id:
    TOPIC_AUTHORIZATION_FAILED with its id), add the refused names, and KIP-430's authorized operations."""
    by_id = {t.topic_id for t in request.topics or () if t.name is None}
    shown = allowed_names(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                          (t.name for t in r.topics if t.name is not None), audit_denial=not all_topics)
    topics: list[MetadataResponseTopic] = []
    for t in r.topics:
        if t.name is None or t.error_code == ErrorCode.UNKNOWN_TOPIC_ID:
            topics.append(t)
        elif t.topic_id in by_id and t.name not in shown:
            topics.append(MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None,
                                                topic_id=t.topic_id))
        elif t.name in shown and (all_topics or t.topic_id in by_id or t.name in kept):
            topics.append(t)
    if ctx.api_version >= 8 and request.include_topic_authorized_operations:
        for t in topics:
            if t.error_code == ErrorCode.NONE and t.name is not None:
                t.topic_authorized_operations = authorized_operations(broker, ctx, ResourceType.TOPIC, t.name)
    if 8 <= ctx.api_version <= 10 and request.include_cluster_authorized_operations:
        r.cluster_authorized_operations = authorized_operations(broker, ctx, ResourceType.CLUSTER) \
            if allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER) else 0
    r.topics = topics + refused
    return r


def _handle(broker: "BrokerContext", ctx: "RequestContext",
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
