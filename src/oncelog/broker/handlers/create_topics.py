"""CreateTopics (19). On a single node the replication factor must be -1 or 1; in a cluster the topic is written to
etcd with its replicas placed over the live brokers (``broker.cluster_topics``), and answered once the view has it."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_topics_request import CreateTopicsRequest
from oncelog.protocol.messages.create_topics_response import CreatableTopicResult, CreateTopicsResponse
from oncelog.storage import LogConfig, validate_topic_name
from oncelog.security.acl import AclOperation, ResourceType
from dataclasses import replace

from ..security.authorization import allowed, allowed_names
from ._authz import then
from ._common import error_for

if TYPE_CHECKING:
    from oncelog.broker.cluster.node import ClusterNode
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: CreateTopicsRequest) -> CreateTopicsResponse | Awaitable[CreateTopicsResponse]:
    if broker.authorizer is None:
        return _handle(broker, ctx, request)
    names = [t.name for t in request.topics]  # CREATE on the cluster, else on each topic; a name given twice is
    once = {n for n in names if names.count(n) == 1}  # answered INVALID_REQUEST first, as Kafka does
    creatable = once if allowed(broker, ctx, AclOperation.CREATE, ResourceType.CLUSTER, audit_denial=False) \
        else allowed_names(broker, ctx, AclOperation.CREATE, ResourceType.TOPIC, once)
    configs_shown = allowed_names(broker, ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names,
                                  audit_denial=False)
    refused = once - creatable

    def merged(r: CreateTopicsResponse) -> CreateTopicsResponse:
        done = iter(r.topics)
        out = [CreatableTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    error_message="Authorization failed.", num_partitions=-1, replication_factor=-1,
                                    configs=None) if t.name in refused else next(done) for t in request.topics]
        for o in out:
            if o.name not in configs_shown:
                o.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return replace(r, topics=out)
    return then(_handle(broker, ctx, replace(request, topics=[t for t in request.topics if t.name not in refused])),
                merged)


def _handle(broker: "BrokerContext", ctx: "RequestContext",
            request: CreateTopicsRequest) -> CreateTopicsResponse | Awaitable[CreateTopicsResponse]:
    if broker.cluster is not None:
        return _create_in_cluster(broker, broker.cluster, request)
    results = []
    seen: set[str] = set()
    for t in request.topics:
        out = CreatableTopicResult(name=t.name, error_code=0, error_message=None, num_partitions=-1,
                                   replication_factor=-1, configs=None)
        results.append(out)
        if t.name in seen:
            out.error_code, out.error_message = ErrorCode.INVALID_REQUEST, f"topic {t.name} listed twice"
            continue
        seen.add(t.name)
        partitions = t.num_partitions if t.num_partitions != -1 else broker.config.num_partitions
        if t.assignments:
            partitions = len(t.assignments)
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        try:
            validate_topic_name(t.name)
            if partitions <= 0:
                out.error_code = ErrorCode.INVALID_PARTITIONS
                out.error_message = f"number of partitions must be positive, got {partitions}"
                continue
            if t.replication_factor not in (-1, 1):
                out.error_code = ErrorCode.INVALID_REPLICATION_FACTOR
                out.error_message = (f"replication factor {t.replication_factor} is larger than the 1 broker "
                                     "of this cluster")
                continue
            LogConfig.from_kafka(configs, broker.log_defaults)
            if broker.topics.get(t.name) is not None:
                out.error_code = ErrorCode.TOPIC_ALREADY_EXISTS
                out.error_message = f"topic {t.name} already exists"
                continue
            if not request.validate_only:
                view = broker.topics.create(t.name, partitions, configs)
                out.topic_id = view.topic_id
            out.num_partitions = partitions
            out.replication_factor = 1
        except Exception as e:
            out.error_code, out.error_message = error_for(e)
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


async def _create_in_cluster(broker: "BrokerContext", node: "ClusterNode",
                             request: CreateTopicsRequest) -> CreateTopicsResponse:
    from oncelog.broker.cluster.topic_admin import NewTopic, create_topic

    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    results = []
    for t in request.topics:
        out = CreatableTopicResult(name=t.name, error_code=0, error_message=None, num_partitions=-1,
                                   replication_factor=-1, configs=None)
        results.append(out)
        if counts[t.name] > 1:  # Kafka answers every entry of a name given twice
            out.error_code = ErrorCode.INVALID_REQUEST
            out.error_message = f"Found multiple entries for topic {t.name}."
            continue
        got = await create_topic(node, t.name, t.num_partitions, t.replication_factor,
                                 [(a.partition_index, a.broker_ids) for a in t.assignments],
                                 {c.name: c.value for c in t.configs}, broker.log_defaults,
                                 validate_only=request.validate_only)
        if isinstance(got, NewTopic):
            out.topic_id = got.topic_id if not request.validate_only else out.topic_id
            out.num_partitions = got.num_partitions
            out.replication_factor = got.replication_factor
        else:
            out.error_code, out.error_message = got.code, got.message
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)
