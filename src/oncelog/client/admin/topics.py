"""Topic, partition and config operations of the admin client (Kafka's Admin createTopics, deleteTopics,
listTopics, describeTopics, createPartitions, describeConfigs, incrementalAlterConfigs, listOffsets,
deleteRecords): topic and config requests go to the controller, partition requests to each partition's leader."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.protocol.messages.create_partitions_request import CreatePartitionsRequest, CreatePartitionsTopic
from oncelog.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from oncelog.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from oncelog.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from oncelog.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from oncelog.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)

from ..errors import KafkaError, raise_for_code
from .base import AdminBase
from .results import (
    RESOURCE_TOPIC,
    ConfigEntry,
    ListedOffset,
    PartitionDescription,
    Spec,
    TopicDescription,
    TopicListing,
    TopicPartition,
)

__all__ = ["TopicAdmin"]

_OP_SET, _OP_DELETE = 0, 1
_SPECS = {"latest": -1, "earliest": -2, "max_timestamp": -3}
_SOURCES = {-1: "unknown", 1: "dynamic_topic", 2: "dynamic_broker", 3: "dynamic_default_broker",
            4: "static_broker", 5: "default", 6: "dynamic_broker_logger", 7: "client_metrics", 8: "group"}


def _spec_ts(spec: Spec | Any) -> int:
    spec = getattr(spec, "value", spec)  # confluent-kafka's OffsetSpec
    if isinstance(spec, int):
        return spec
    try:
        return _SPECS[spec]
    except KeyError:
        raise ValueError(f"offset spec must be one of {', '.join(_SPECS)} or a timestamp in ms, got {spec!r}")


class TopicAdmin(AdminBase):
    """Topics, partitions and configs."""

    async def create_topics(self, names: str | Sequence[str], partitions: int = 1,
                            configs: Mapping[str, str] | None = None, *, replication_factor: int = -1,
                            validate_only: bool = False) -> None:
        """Create topics (``replication_factor`` -1: the broker's ``default.replication.factor``, as Kafka's
        admin client does when none is given)."""
        names = [names] if isinstance(names, str) else list(names)
        cfgs = [CreatableTopicConfig(name=k, value=None if v is None else str(v)) for k, v in (configs or {}).items()]
        req = CreateTopicsRequest(
            topics=[CreatableTopic(name=n, num_partitions=partitions, replication_factor=replication_factor,
                                   assignments=[], configs=cfgs) for n in names],
            timeout_ms=int(self.timeout * 1000), validate_only=validate_only)
        resp = await self._controller_send(req)
        for t in resp.topics:
            raise_for_code(t.error_code, t.error_message, f"create topic {t.name!r}")
        if not validate_only:
            await self.cluster.refresh()

    async def delete_topics(self, names: str | Sequence[str]) -> None:
        names = [names] if isinstance(names, str) else list(names)
        await self.start()
        conn = await self.cluster.controller_connection()
        version = conn.version_for(20)
        if version >= 6:
            req = DeleteTopicsRequest(topics=[DeleteTopicState(name=n) for n in names],
                                      timeout_ms=int(self.timeout * 1000))
        else:
            req = DeleteTopicsRequest(topic_names=names, timeout_ms=int(self.timeout * 1000))
        resp = await conn.send(req)
        for r in resp.responses:
            raise_for_code(r.error_code, r.error_message, f"delete topic {r.name!r}")
        await self.cluster.refresh()

    async def list_topics(self, include_internal: bool = False) -> list[TopicListing]:
        await self.start()
        await self.cluster.refresh()
        return sorted(
            (TopicListing(t.name, str(t.topic_id), len(t.partitions), t.is_internal)
             for t in self.cluster.topics.values() if include_internal or not t.is_internal),
            key=lambda t: t.name)

    async def describe_topic(self, name: str) -> TopicDescription:
        """Partitions with leader/replicas and log start offset, high watermark and last stable offset."""
        await self.start()
        resp = await self.cluster.refresh([name])
        for t in resp.topics:
            if t.name == name and t.error_code == 3:
                raise KafkaError(3, f"topic {name!r} does not exist")
            if t.name == name:
                raise_for_code(t.error_code, None, f"topic {name!r}")
        info = self.cluster.topic(name)
        if info is None:
            raise KafkaError(3, f"topic {name!r} does not exist")
        tps = [(name, p) for p in sorted(info.partitions)]
        start, hw, lso = await asyncio.gather(
            self.list_offsets({tp: "earliest" for tp in tps}),
            self.list_offsets({tp: "latest" for tp in tps}),
            self.list_offsets({tp: "latest" for tp in tps}, isolation_level=1))
        parts = [PartitionDescription(p, info.partitions[p].leader, info.partitions[p].replicas,
                                      info.partitions[p].isr, start[(name, p)].offset, hw[(name, p)].offset,
                                      lso[(name, p)].offset, info.partitions[p].leader_epoch) for _, p in tps]
        return TopicDescription(name, str(info.topic_id), info.is_internal, parts)

    async def create_partitions(self, name: str, total_count: int, *, validate_only: bool = False) -> None:
        """Grow ``name`` to ``total_count`` partitions."""
        req = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name=name, count=total_count, assignments=None)],
                                      timeout_ms=int(self.timeout * 1000), validate_only=validate_only)
        resp = await self._controller_send(req)
        for r in resp.results:
            raise_for_code(r.error_code, r.error_message, f"create partitions for {r.name!r}")
        await self.cluster.refresh()

    # ------------------------------------------------------------------ configs

    async def describe_configs(self, name: str, resource_type: int = RESOURCE_TOPIC,
                               keys: Sequence[str] | None = None) -> dict[str, ConfigEntry]:
        """Configs of a topic (or broker, ``resource_type=RESOURCE_BROKER``, ``name`` = node id)."""
        req = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=None if keys is None else list(keys))])
        resp = await self._controller_send(req)
        out: dict[str, ConfigEntry] = {}
        for r in resp.results:
            raise_for_code(r.error_code, r.error_message, f"describe configs of {r.resource_name!r}")
            for c in r.configs:
                out[c.name] = ConfigEntry(c.name, c.value, _SOURCES.get(c.config_source, str(c.config_source)),
                                          c.is_default or c.config_source == 5, c.read_only, c.is_sensitive)
        return out

    async def alter_configs(self, name: str, set: Mapping[str, str] | None = None,
                            delete: Iterable[str] = (), *, resource_type: int = RESOURCE_TOPIC,
                            validate_only: bool = False) -> None:
        """Incremental: set some keys, reset others to their default; other keys are left alone."""
        ops = [AlterableConfig(name=k, config_operation=_OP_SET, value=str(v)) for k, v in (set or {}).items()]
        ops += [AlterableConfig(name=k, config_operation=_OP_DELETE, value=None) for k in delete]
        req = IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=resource_type, resource_name=name, configs=ops)], validate_only=validate_only)
        resp = await self._controller_send(req)
        for r in resp.responses:
            raise_for_code(r.error_code, r.error_message, f"alter configs of {r.resource_name!r}")

    async def list_offsets(self, specs: Mapping[TopicPartition, Spec], *,
                           isolation_level: int = 0) -> dict[TopicPartition, ListedOffset]:
        """Offsets by spec per partition; offset -1 when no record matches a timestamp."""
        groups = await self._by_leader(specs)

        async def one(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, ListedOffset]:
            by_topic: dict[str, list[ListOffsetsPartition]] = defaultdict(list)
            for t, p in tps:
                by_topic[t].append(ListOffsetsPartition(partition_index=p, timestamp=_spec_ts(specs[(t, p)])))
            req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level,
                                     topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                                     timeout_ms=int(self.timeout * 1000))
            conn = await self.cluster.connection(node)
            resp = await conn.send(req)
            out = {}
            for rt in resp.topics:
                for rp in rt.partitions:
                    raise_for_code(rp.error_code, None, f"list offsets of {rt.name}[{rp.partition_index}]")
                    out[(rt.name, rp.partition_index)] = ListedOffset(rp.offset, rp.timestamp)
            return out

        result: dict[TopicPartition, ListedOffset] = {}
        for part in await asyncio.gather(*(one(n, tps) for n, tps in groups.items())):
            result.update(part)
        return result

    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete records before each offset (-1 = the high watermark); returns the new log start offsets."""
        groups = await self._by_leader(offsets)

        async def one(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            by_topic: dict[str, list[DeleteRecordsPartition]] = defaultdict(list)
            for t, p in tps:
                by_topic[t].append(DeleteRecordsPartition(partition_index=p, offset=offsets[(t, p)]))
            req = DeleteRecordsRequest(topics=[DeleteRecordsTopic(name=t, partitions=ps)
                                               for t, ps in by_topic.items()], timeout_ms=int(self.timeout * 1000))
            resp = await (await self.cluster.connection(node)).send(req)
            out = {}
            for rt in resp.topics:
                for rp in rt.partitions:
                    raise_for_code(rp.error_code, None, f"delete records of {rt.name}[{rp.partition_index}]")
                    out[(rt.name, rp.partition_index)] = rp.low_watermark
            return out

        result: dict[TopicPartition, int] = {}
        for part in await asyncio.gather(*(one(n, tps) for n, tps in groups.items())):
            result.update(part)
        return result
