"""Consumer-group operations of the admin client (Kafka's Admin listConsumerGroups, describeConsumerGroups,
deleteConsumerGroups, listConsumerGroupOffsets, alterConsumerGroupOffsets, deleteConsumerGroupOffsets): each
request goes to the group's coordinator."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.delete_groups_request import DeleteGroupsRequest
from oncelog.protocol.messages.describe_groups_request import DescribeGroupsRequest
from oncelog.protocol.messages.list_groups_request import ListGroupsRequest
from oncelog.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from oncelog.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from oncelog.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)

from ..cluster import COORDINATOR_GROUP, COORDINATOR_RETRIABLE
from ..errors import KafkaError, UnsupportedVersionError, raise_for_code
from .base import AdminBase
from .results import (
    GroupDescription,
    GroupListing,
    GroupMember,
    TopicPartition,
    decode_consumer_assignment,
)

__all__ = ["GroupAdmin"]


class GroupAdmin(AdminBase):
    """Consumer groups and their committed offsets."""

    async def _find_group_coordinators(self, ids: Sequence[str]) -> dict[str, int]:
        """Node id of the group coordinator of each group id (FindCoordinator, key type 0)."""
        await self.start()
        return await self.cluster.find_coordinators(COORDINATOR_GROUP, ids)

    async def _group_connection(self, group: str) -> Any:
        node = (await self._retry_coordinator(lambda: self._find_group_coordinators([group])))[group]
        return await self.cluster.connection(node)

    async def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Groups known to the coordinators of every broker, optionally only those in ``states`` (e.g. ``Empty``,
        ``Stable``; matched case-insensitively by the broker as Kafka does)."""
        state_filters = list(states or ())
        await self.start()
        await self.cluster.refresh()
        nodes = sorted(self.cluster.brokers) or [-1]

        async def one(node: int) -> list[GroupListing]:
            conn = await self.cluster.connection(node) if node >= 0 else await self.cluster.any_connection()
            version = conn.version_for(16)  # ListGroups
            if state_filters and version < 4:
                raise UnsupportedVersionError(f"{conn.address} cannot filter groups by state "
                                              f"(ListGroups v{version}; v4 needed)")

            async def send() -> Any:
                resp = await conn.send(ListGroupsRequest(states_filter=state_filters))
                raise_for_code(resp.error_code, None, f"list groups on node {conn.node_id}")
                return resp

            resp = await self._retry_coordinator(send)
            return [GroupListing(g.group_id, g.protocol_type, g.group_state, conn.node_id) for g in resp.groups]

        found: list[GroupListing] = []
        for part in await asyncio.gather(*(one(n) for n in nodes)):
            found.extend(part)
        return sorted(found, key=lambda g: (g.group_id, g.coordinator_id))

    async def describe_groups(self, ids: str | Sequence[str]) -> dict[str, GroupDescription]:
        """State, protocol and members (client id, host, decoded assignment) of each group. A group the coordinator
        does not know is described as state ``Dead`` with no members (as Kafka before DescribeGroups v6), or
        raises GROUP_ID_NOT_FOUND; any other error raises KafkaError naming the group."""
        ids = list(dict.fromkeys([ids] if isinstance(ids, str) else ids))
        if not ids:
            return {}
        coordinators = await self._retry_coordinator(lambda: self._find_group_coordinators(ids))
        by_node: dict[int, list[str]] = defaultdict(list)
        for gid in ids:
            by_node[coordinators[gid]].append(gid)

        async def one(node: int, gids: list[str]) -> dict[str, GroupDescription]:
            conn = await self.cluster.connection(node)

            async def send() -> dict[str, GroupDescription]:
                resp = await conn.send(DescribeGroupsRequest(groups=gids))
                out = {}
                for g in resp.groups:
                    raise_for_code(g.error_code, None, f"describe group {g.group_id!r}")
                    consumer = g.protocol_type in ("consumer", "")
                    members = [GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                           decode_consumer_assignment(m.member_assignment) if consumer else [])
                               for m in g.members]
                    out[g.group_id] = GroupDescription(g.group_id, node, g.group_state, g.protocol_type,
                                                       g.protocol_data, sorted(members, key=lambda m: m.member_id))
                return out

            result: dict[str, GroupDescription] = await self._retry_coordinator(send)
            return result

        described: dict[str, GroupDescription] = {}
        for part in await asyncio.gather(*(one(n, g) for n, g in by_node.items())):
            described.update(part)
        for gid in ids:
            if gid not in described:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"describe group {gid!r}: no answer for it")
        return {gid: described[gid] for gid in ids}

    async def delete_groups(self, ids: str | Sequence[str]) -> None:
        """Delete groups (with their committed offsets); only groups without members can be deleted
        (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND for unknown ones). Raises KafkaError naming each failed
        group after all were tried."""
        ids = list(dict.fromkeys([ids] if isinstance(ids, str) else ids))
        if not ids:
            return
        coordinators = await self._retry_coordinator(lambda: self._find_group_coordinators(ids))
        by_node: dict[int, list[str]] = defaultdict(list)
        for gid in ids:
            by_node[coordinators[gid]].append(gid)

        async def one(node: int, gids: list[str]) -> dict[str, int]:
            conn = await self.cluster.connection(node)
            pending, codes = list(gids), {}
            deadline = time.monotonic() + self.timeout
            while pending:
                resp = await conn.send(DeleteGroupsRequest(groups_names=pending))
                retry = []
                for r in resp.results:
                    if r.error_code in COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                        retry.append(r.group_id)
                    else:
                        codes[r.group_id] = r.error_code
                pending = retry
                if pending:
                    await asyncio.sleep(0.1)
            return codes

        codes: dict[str, int] = {}
        for part in await asyncio.gather(*(one(n, g) for n, g in by_node.items())):
            codes.update(part)
        failed = [(g, codes.get(g, int(ErrorCode.UNKNOWN_SERVER_ERROR))) for g in ids if codes.get(g, -1) != 0]
        if failed:
            detail = "; ".join(f"{g!r}: {KafkaError(c).message} ({KafkaError(c).name})" for g, c in failed)
            raise KafkaError(failed[0][1], f"delete group(s) {detail}")

    async def list_group_offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, int]:
        """Committed offsets of ``group`` (OffsetFetch, stable offsets only): all of them, or those of
        ``partitions`` (partitions without a committed offset are left out)."""
        tps = None if partitions is None else list(dict.fromkeys(partitions))
        by_topic: dict[str, list[int]] = defaultdict(list)
        for t, p in tps or ():
            by_topic[t].append(p)

        async def send() -> dict[TopicPartition, int]:
            conn = await self._group_connection(group)
            version = conn.version_for(9)  # OffsetFetch
            if version >= 8:
                req = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(
                    group_id=group, topics=None if tps is None else [
                        OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()])],
                    require_stable=True)
            else:
                if tps is None and version < 2:
                    raise UnsupportedVersionError(f"{conn.address} cannot fetch all offsets of a group "
                                                  f"(OffsetFetch v{version}; v2 needed)")
                req = OffsetFetchRequest(group_id=group, topics=None if tps is None else [
                    OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                    require_stable=version >= 7)
            resp = await conn.send(req, version=version)
            if version >= 8:
                topics = []
                for g in resp.groups:
                    raise_for_code(g.error_code, None, f"fetch offsets of group {group!r}")
                    topics.extend(g.topics)
            else:
                if version >= 2:
                    raise_for_code(resp.error_code, None, f"fetch offsets of group {group!r}")
                topics = resp.topics
            out: dict[TopicPartition, int] = {}
            for rt in topics:
                for rp in rt.partitions:
                    raise_for_code(rp.error_code, None,
                                   f"fetch offsets of group {group!r} on {rt.name}[{rp.partition_index}]")
                    if rp.committed_offset >= 0:
                        out[(rt.name, rp.partition_index)] = rp.committed_offset
            return out

        result: dict[TopicPartition, int] = await self._retry_coordinator(send)
        return dict(sorted(result.items()))

    async def alter_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group`` as an admin (OffsetCommit with generation -1 and no member id): the
        coordinator accepts it only while the group has no members (Empty or unknown), as Kafka does."""
        if not offsets:
            return
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = defaultdict(list)
        for (t, p), off in sorted(offsets.items()):
            if off < 0:
                raise ValueError(f"offset for {t}[{p}] must be >= 0, got {off}")
            by_topic[t].append(OffsetCommitRequestPartition(partition_index=p, committed_offset=off,
                                                            committed_metadata=""))
        req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                  topics=[OffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])

        async def send() -> None:
            conn = await self._group_connection(group)
            resp = await conn.send(req)
            for rt in resp.topics:
                for rp in rt.partitions:
                    raise_for_code(rp.error_code, None,
                                   f"commit offsets of group {group!r} on {rt.name}[{rp.partition_index}]")

        await self._retry_coordinator(send)

    async def delete_group_offsets(self, group: str, topic_partitions: Iterable[TopicPartition]) -> None:
        """Delete committed offsets of ``group`` (OffsetDelete); refused (GROUP_SUBSCRIBED_TO_TOPIC) for topics the
        group's members still consume."""
        by_topic: dict[str, list[OffsetDeleteRequestPartition]] = defaultdict(list)
        for t, p in dict.fromkeys(topic_partitions):
            by_topic[t].append(OffsetDeleteRequestPartition(partition_index=p))
        if not by_topic:
            return
        req = OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequestTopic(name=t, partitions=ps)
                                                          for t, ps in by_topic.items()])

        async def send() -> None:
            conn = await self._group_connection(group)
            resp = await conn.send(req)
            raise_for_code(resp.error_code, None, f"delete offsets of group {group!r}")
            for rt in resp.topics:
                for rp in rt.partitions:
                    raise_for_code(rp.error_code, None,
                                   f"delete offsets of group {group!r} on {rt.name}[{rp.partition_index}]")

        await self._retry_coordinator(send)
