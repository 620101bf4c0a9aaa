"""DeleteTopics (20): by name (all versions) or by topic id (v6+); in a cluster, removed from etcd."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.delete_topics_request import DeleteTopicsRequest
from oncelog.protocol.messages.delete_topics_response import DeletableTopicResult, DeleteTopicsResponse
from oncelog.security.acl import AclOperation, ResourceType
from dataclasses import replace

from ..security.authorization import allowed
from ..topics import INTERNAL_TOPICS
from ._authz import then

if TYPE_CHECKING:
    from oncelog.broker.cluster.node import ClusterNode
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

ZERO_UUID = uuid.UUID(int=0)


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DeleteTopicsRequest) -> DeleteTopicsResponse | Awaitable[DeleteTopicsResponse]:
    wanted: list[tuple[str | None, uuid.UUID]] = []
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    refused: dict[int, DeletableTopicResult] = {}
    if broker.authorizer is not None:  # DELETE on each topic (and DESCRIBE on one named by id, or its name is kept)
        for i, (name, topic_id) in enumerate(wanted):
            known = name if name is not None else _name_of(broker, topic_id)
            if known is None:
                continue  # UNKNOWN_TOPIC_ID below
            if name is None and not allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, known):
                refused[i] = DeletableTopicResult(name=None, topic_id=topic_id,
                                                  error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif not allowed(broker, ctx, AclOperation.DELETE, ResourceType.TOPIC, known):
                refused[i] = DeletableTopicResult(name=known, topic_id=topic_id,
                                                  error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if refused:
            def merged(r: DeleteTopicsResponse) -> DeleteTopicsResponse:
                done = iter(r.responses)
                return replace(r, responses=[refused[i] if i in refused else next(done) for i in range(len(wanted))])
            return then(_delete(broker, [w for i, w in enumerate(wanted) if i not in refused]), merged)
    return _delete(broker, wanted)


def _name_of(broker: "BrokerContext", topic_id: uuid.UUID) -> str | None:
    if broker.cluster is not None:
        return next((m.name for m in broker.cluster.view.topics.values() if m.topic_id == topic_id), None)
    view = broker.topics.by_id(topic_id)
    return view.name if view is not None else None


def _delete(broker: "BrokerContext", wanted: list[tuple[str | None, uuid.UUID]]
            ) -> DeleteTopicsResponse | Awaitable[DeleteTopicsResponse]:
    if broker.cluster is not None:
        return _delete_in_cluster(broker.cluster, wanted)
    results = []
    for name, topic_id in wanted:
        view = broker.topics.get(name) if name is not None else broker.topics.by_id(topic_id)
        out = DeletableTopicResult(name=name, topic_id=topic_id, error_code=0, error_message=None)
        results.append(out)
        if view is None:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            out.error_message = f"no topic {name or topic_id} on this broker"
            continue
        out.name, out.topic_id = view.name, view.topic_id
        if not broker.config.delete_topic_enable:
            out.error_code = ErrorCode.TOPIC_DELETION_DISABLED
            out.error_message = "delete.topic.enable is false on this broker"
        elif view.name in INTERNAL_TOPICS:
            out.error_code = ErrorCode.INVALID_REQUEST  # Kafka refuses to delete internal topics
            out.error_message = f"{view.name} is an internal topic and cannot be deleted"
        else:
            broker.topics.delete(view.name)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def _delete_in_cluster(node: "ClusterNode", wanted: list[tuple[str | None, uuid.UUID]]) -> DeleteTopicsResponse:
    from oncelog.broker.cluster.topic_admin import delete_topic

    results = []
    for name, topic_id in wanted:
        out = DeletableTopicResult(name=name, topic_id=topic_id, error_code=0, error_message=None)
        results.append(out)
        view = node.view
        meta = view.topics.get(name) if name is not None else next(
            (m for m in view.topics.values() if m.topic_id == topic_id and topic_id != ZERO_UUID), None)
        if meta is None or meta.deleting:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            out.error_message = f"Topic '{name or topic_id}' does not exist."
            continue
        out.name, out.topic_id = meta.name, meta.topic_id
        error = await delete_topic(node, meta.name)
        if error is not None:
            out.error_code, out.error_message = error.code, error.message
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
