"""OffsetFetch (9): committed offsets of one group (v1-7) or several (v8+); pending transactional offsets are
invisible, and with ``require_stable`` (v7+) a partition that has one answers UNSTABLE_OFFSET_COMMIT."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from oncelog.coordinator.group.offsets import FetchedOffset
from oncelog.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from oncelog.protocol.messages.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode

from ..security.authorization import allowed
from ._groups import NOT_AVAILABLE, coordinator

_Check = Callable[[ResourceType, str], bool]

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext
    from oncelog.coordinator.group.coordinator import GroupCoordinator

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9


def _grouped(offsets: list[FetchedOffset]) -> dict[str, list[FetchedOffset]]:
    by_topic: dict[str, list[FetchedOffset]] = {}
    for f in offsets:
        by_topic.setdefault(f.topic, []).append(f)
    return by_topic


async def _one(gc: GroupCoordinator | None, group_id: str,
               topics: Sequence[OffsetFetchRequestTopic | OffsetFetchRequestTopics] | None,
               stable: bool, may: _Check, member_id: str | None = None,
               member_epoch: int = -1) -> tuple[int, list[FetchedOffset]]:
    if not may(ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    if gc is None:
        return NOT_AVAILABLE, []
    if topics is None:  # every committed offset: only of the topics the principal may describe
        code, offsets = await gc.fetch_offsets(group_id, None, stable, member_id, member_epoch)
        return code, [f for f in offsets if may(ResourceType.TOPIC, f.topic)]
    refused = [FetchedOffset(t.name, p, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
               for t in topics if not may(ResourceType.TOPIC, t.name) for p in t.partition_indexes]
    wanted = [(t.name, list(t.partition_indexes)) for t in topics if may(ResourceType.TOPIC, t.name)]
    code, offsets = await gc.fetch_offsets(group_id, wanted, stable, member_id, member_epoch)
    return code, offsets + refused if not code else offsets


async def _handle(gc: GroupCoordinator | None, version: int,
                  request: OffsetFetchRequest, may: _Check) -> OffsetFetchResponse:
    stable = request.require_stable if version >= 7 else False
    if version >= 8:
        groups = []
        for g in request.groups:
            # v9 (KIP-848): a member of a consumer group names itself and its epoch, checked by the coordinator
            member = (g.member_id, g.member_epoch) if version >= 9 else (None, -1)
            code, offs = await _one(gc, g.group_id, g.topics, stable, may, *member)
            groups.append(OffsetFetchResponseGroup(group_id=g.group_id, error_code=code, topics=[
                OffsetFetchResponseTopics(name=t, partitions=[
                    OffsetFetchResponsePartitions(partition_index=f.partition, committed_offset=f.offset,
                                                  committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                                  error_code=f.error_code) for f in fs])
                for t, fs in _grouped(offs).items()]))
        return OffsetFetchResponse(groups=groups)
    topics = request.topics if version >= 2 else (request.topics or [])
    code, offs = await _one(gc, request.group_id, topics, stable, may)
    resp = OffsetFetchResponse(error_code=code, topics=[
        OffsetFetchResponseTopic(name=t, partitions=[
            OffsetFetchResponsePartition(partition_index=f.partition, committed_offset=f.offset,
                                         committed_leader_epoch=f.leader_epoch, metadata=f.metadata,
                                         error_code=f.error_code) for f in fs])
        for t, fs in _grouped(offs).items()])
    if version < 2 and code:  # v0-1 have no top-level error: put it on every partition asked for
        resp.topics = [OffsetFetchResponseTopic(name=t.name, partitions=[
            OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="", error_code=code)
            for p in t.partition_indexes]) for t in topics or []]
    return resp


def handle(broker: BrokerContext, ctx: RequestContext,
           request: OffsetFetchRequest) -> Awaitable[OffsetFetchResponse]:
    answers: dict[tuple[ResourceType, str], bool] = {}

    def may(resource_type: ResourceType, name: str) -> bool:  # DESCRIBE on the group, then on each topic
        if (resource_type, name) not in answers:
            answers[resource_type, name] = allowed(broker, ctx, AclOperation.DESCRIBE, resource_type, name)
        return answers[resource_type, name]
    return _handle(coordinator(broker), ctx.api_version, request, may)
