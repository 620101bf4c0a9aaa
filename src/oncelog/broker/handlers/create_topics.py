"""CreateTopics (19). Replication factor must be -1 or 1 on this single-node broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_topics_request import CreateTopicsRequest
from oncelog.protocol.messages.create_topics_response import CreatableTopicResult, CreateTopicsResponse
from oncelog.storage import LogConfig, validate_topic_name

from ._common import error_for

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: CreateTopicsRequest) -> CreateTopicsResponse:
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
