"""Metadata (3) in a cluster: every live broker, each partition's leader, leader epoch, replicas, ISR and offline
replicas, the controller, from this broker's view of etcd (Kafka's ``KRaftMetadataCache.getTopicMetadata``).

The brokers listed are the ones the partition states count on (:func:`served_brokers`): the registered ones, the
ones whose registration went (their lease expired) but that still lead a partition or are in the ISR of a led
partition because no controller has acted on it yet (a stall of etcd expires every lease at once; the brokers keep
running and register again, and the controller waits for them), and always the broker answering. While etcd is
unreachable the last view is served, so the list does not shrink because of etcd alone. A partition whose leader is
not listed (none elected: -1) is answered with leader -1 and LEADER_NOT_AVAILABLE, its replica and ISR lists as
they are, and the replicas on brokers that are not listed as offline replicas. Unknown topics are auto-created through the
CreateTopics path (``num.partitions``, ``default.replication.factor``) when the request and
``auto.create.topics.enable`` allow it, and answered once the view has them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from oncelog.cluster.model import NO_LEADER, BrokerInfo, ClusterView, TopicMeta
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from oncelog.storage import InvalidTopicError, validate_topic_name

from ..topics import INTERNAL_TOPICS

if TYPE_CHECKING:
    from oncelog.broker.cluster.node import ClusterNode
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

__all__ = ["brokers", "controller_id", "handle_metadata", "served_brokers"]

ZERO_UUID = uuid.UUID(int=0)


def served_brokers(view: ClusterView, me: BrokerInfo | None) -> dict[int, BrokerInfo]:
    """The brokers to list: those the view counts on (:attr:`ClusterView.counted_on`) and ``me``, the broker
    answering (its own registration, live or last)."""
    out = dict(view.counted_on)
    if me is not None and me.node_id not in out:
        out[me.node_id] = me
    return out


def brokers(served: dict[int, BrokerInfo], listener: str) -> list[MetadataResponseBroker]:
    """Every broker of ``served`` with its address on ``listener`` (the one the client came in on); a broker without
    that listener is left out, as Kafka does."""
    out = []
    for b in sorted(served.values(), key=lambda b: b.node_id):
        address = b.endpoint(listener)
        if address is not None:
            out.append(MetadataResponseBroker(node_id=b.node_id, host=address[0], port=address[1], rack=b.rack))
    return out


def controller_id(view: ClusterView) -> int:
    return view.controller.node_id if view.controller is not None else -1


def _topic(view: ClusterView, meta: TopicMeta, served: dict[int, BrokerInfo]) -> MetadataResponseTopic:
    parts = []
    for index in range(meta.num_partitions):
        state = view.partition(meta.name, index)
        if state is None:  # not visible yet (cannot happen for a topic key that covers it; kept safe)
            parts.append(MetadataResponsePartition(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
                                                   leader_id=NO_LEADER))
            continue
        alive = state.leader != NO_LEADER and state.leader in served
        parts.append(MetadataResponsePartition(
            error_code=ErrorCode.NONE if alive else ErrorCode.LEADER_NOT_AVAILABLE, partition_index=index,
            leader_id=state.leader if alive else NO_LEADER, leader_epoch=state.leader_epoch,
            replica_nodes=list(state.replicas), isr_nodes=list(state.isr),
            offline_replicas=[r for r in state.replicas if r not in served]))
    return MetadataResponseTopic(error_code=ErrorCode.NONE, name=meta.name, topic_id=meta.topic_id,
                                 is_internal=meta.name in INTERNAL_TOPICS, partitions=parts)


def _visible(view: ClusterView, name: str) -> TopicMeta | None:
    meta = view.topics.get(name)
    return None if meta is None or meta.deleting else meta


async def handle_metadata(broker: BrokerContext, node: ClusterNode, ctx: RequestContext,
                          request: MetadataRequest) -> MetadataResponse:
    view = node.view
    served = served_brokers(view, node.registration)
    auto = (request.allow_auto_topic_creation if ctx.api_version >= 4 else True) \
        and broker.config.auto_create_topics_enable
    topics: list[MetadataResponseTopic] = []
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        topics = [_topic(view, meta, served) for meta in sorted(view.topics.values(), key=lambda m: m.name)
                  if not meta.deleting]
    else:
        by_id = {m.topic_id: m for m in view.topics.values() if not m.deleting}
        for t in request.topics:
            if t.name is None:
                meta = by_id.get(t.topic_id) if t.topic_id != ZERO_UUID else None
                if meta is None:
                    topics.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                                        topic_id=t.topic_id))
                else:
                    topics.append(_topic(view, meta, served))
                continue
            meta = _visible(node.view, t.name)
            if meta is None:
                try:
                    validate_topic_name(t.name)
                except InvalidTopicError:
                    topics.append(MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=t.name))
                    continue
                if auto and t.name not in node.view.topics and broker.auto_creator is not None:
                    error = await broker.auto_creator.create(t.name, broker.log_defaults)
                    meta = _visible(node.view, t.name)
                    if meta is None:
                        code = error.code if error is not None else ErrorCode.LEADER_NOT_AVAILABLE
                        topics.append(MetadataResponseTopic(error_code=code, name=t.name,
                                                            is_internal=t.name in INTERNAL_TOPICS))
                        continue
                else:
                    topics.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                        name=t.name))
                    continue
            topics.append(_topic(node.view, meta, served_brokers(node.view, node.registration)))
    view = node.view  # the brokers as of the newest view, after any creation
    return MetadataResponse(throttle_time_ms=0, brokers=brokers(served_brokers(view, node.registration), ctx.listener),
                            cluster_id=view.cluster_id,
                            controller_id=controller_id(view), topics=topics)
