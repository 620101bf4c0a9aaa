"""FindCoordinator (10): which broker coordinates a group (key type 0) or a transactional id (key type 1).

On a single node: this broker, for every key; the first lookup of a key type creates and loads its internal topic
(``coordinators/single_node.py``) before answering. In a cluster: the leader of the key's partition of
``__consumer_offsets`` / ``__transaction_state`` (Kafka's ``partitionFor``: Java's String.hashCode of the key, modulo
the topic's partition count), from this broker's view; COORDINATOR_NOT_AVAILABLE while that partition has no live
leader. The internal topic behind the coordinator is created on first use, as Kafka does (in a cluster with its
replication settings: ``offsets.topic.replication.factor``, ``transaction.state.log.replication.factor`` and
``transaction.state.log.min.isr``; fewer live brokers than the factor: COORDINATOR_NOT_AVAILABLE, as Kafka).
Batched lookups (v4+) answer each key separately.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, NamedTuple

from oncelog.cluster.model import NO_LEADER
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse

from oncelog.security.acl import AclOperation, ResourceType
from ..security.authorization import allowed

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP, TRANSACTION = 0, 1
log = logging.getLogger("oncelog.broker.coordinator")
_TOPIC = {GROUP: "__consumer_offsets", TRANSACTION: "__transaction_state"}


class _Answer(NamedTuple):
    code: int
    message: str | None
    node: int = -1
    host: str = ""
    port: int = -1


def _check(key_type: int, key: str) -> _Answer | None:
    if key_type not in (GROUP, TRANSACTION):
        return _Answer(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if not key:
        return _Answer(ErrorCode.INVALID_REQUEST, "coordinator key must not be empty")
    return None


def _local(broker: "BrokerContext", key_type: int, key: str, listener: str) -> _Answer:
    refused = _check(key_type, key)
    if refused is not None:
        return refused
    if not broker.coordinator_available(key_type):
        return _Answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is loading; retry shortly")
    host, port = broker.config.advertised_for(listener)  # the address of the listener the client came in on
    return _Answer(ErrorCode.NONE, None, broker.config.node_id, host, port)


async def _in_cluster(broker: "BrokerContext", key_type: int, keys: list[str], listener: str) -> list[_Answer]:
    node, creator = broker.cluster, broker.auto_creator
    assert node is not None and creator is not None
    topic = _TOPIC.get(key_type)
    if topic is not None and topic not in node.view.topics and any(_check(key_type, k) is None for k in keys):
        error = await creator.create(topic, broker.log_defaults)
        if error is not None:
            why = f"{topic} could not be created: {error.message or error.code.name}"
            return [_check(key_type, k) or _Answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, why) for k in keys]
    view = node.view
    answers = []
    for key in keys:
        refused = _check(key_type, key)
        if refused is not None or topic is None:
            answers.append(refused or _Answer(ErrorCode.INVALID_REQUEST, "unknown key type"))
            continue
        meta = view.topics.get(topic)
        if meta is None:
            answers.append(_Answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic} is being created; retry"))
            continue
        index = partition_for(key, meta.num_partitions)
        state = view.partition(topic, index)
        leader = state.leader if state is not None else NO_LEADER
        info = view.counted_on.get(leader) if leader != NO_LEADER else None
        address = info.endpoint(listener) if info is not None else None  # on the client's listener
        if info is None or address is None:
            answers.append(_Answer(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   f"{topic}-{index} has no live leader with listener {listener} now; retry"))
        else:
            answers.append(_Answer(ErrorCode.NONE, None, info.node_id, *address))
    return answers


def _response(ctx: "RequestContext", keys: list[str], answers: list[_Answer]) -> FindCoordinatorResponse:
    if ctx.api_version >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            Coordinator(key=k, node_id=a.node, host=a.host, port=a.port, error_code=a.code, error_message=a.message)
            for k, a in zip(keys, answers)])
    a = answers[0]
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=a.code, error_message=a.message, node_id=a.node,
                                   host=a.host, port=a.port)


async def _answer_in_cluster(broker: "BrokerContext", ctx: "RequestContext", key_type: int,
                             keys: list[str], refused: dict[str, _Answer]) -> FindCoordinatorResponse:
    asked = [k for k in keys if k not in refused]
    found = dict(zip(asked, await _in_cluster(broker, key_type, asked, ctx.listener))) if asked else {}
    return _response(ctx, keys, [refused.get(k) or found[k] for k in keys])


def _unauthorized(broker: "BrokerContext", ctx: "RequestContext", key_type: int,
                  keys: list[str]) -> dict[str, _Answer]:
    """DESCRIBE on the group, or on the transactional id (Kafka's ``KafkaApis.getCoordinator``)."""
    if broker.authorizer is None or key_type not in (GROUP, TRANSACTION):
        return {}
    resource, code = (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED) if key_type == GROUP else \
        (ResourceType.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return {k: _Answer(code, f"{ctx.principal} may not DESCRIBE {resource.name} {k}") for k in set(keys)
            if not allowed(broker, ctx, AclOperation.DESCRIBE, resource, k)}


async def _answer_once_loaded(broker: "BrokerContext", ctx: "RequestContext", key_type: int,
                              keys: list[str], refused: dict[str, _Answer]) -> FindCoordinatorResponse:
    try:
        await broker.internal_topics[key_type].ensure()
    except Exception as e:  # noqa: BLE001 - the data folder refused the topic: the client retries
        log.warning("could not create or load %s: %s", _TOPIC[key_type], e)
        why = f"{_TOPIC[key_type]} could not be created or loaded; retry"
        return _response(ctx, keys, [refused.get(k) or _check(key_type, k)
                                     or _Answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, why) for k in keys])
    return _response(ctx, keys, [refused.get(k) or _local(broker, key_type, k, ctx.listener) for k in keys])


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: FindCoordinatorRequest) -> FindCoordinatorResponse | Awaitable[FindCoordinatorResponse]:
    keys = list(request.coordinator_keys) if ctx.api_version >= 4 else [request.key]
    refused = _unauthorized(broker, ctx, request.key_type, keys)
    if broker.cluster is not None:
        return _answer_in_cluster(broker, ctx, request.key_type, keys, refused)
    broker.load_coordinators()  # a fresh single node builds its coordinators on the first request for one
    first_use = broker.internal_topics.get(request.key_type)
    if first_use is not None and not first_use.loaded and any(
            _check(request.key_type, k) is None and k not in refused for k in keys):
        return _answer_once_loaded(broker, ctx, request.key_type, keys, refused)
    return _response(ctx, keys, [refused.get(k) or _local(broker, request.key_type, k, ctx.listener) for k in keys])
