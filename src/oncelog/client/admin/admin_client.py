"""confluent-kafka's ``AdminClient``: each call returns at once a dict of ``concurrent.futures.Future`` keyed as
confluent-kafka keys them (topic name, :class:`ConfigResource`, group id, :class:`TopicPartition`); a future's
``result()`` raises :class:`KafkaException` (``args[0]`` the KafkaError) when the broker refused.

``from oncelog.client.admin import AdminClient, NewTopic, NewPartitions, ConfigResource`` as from
``confluent_kafka.admin``. The oncelog-native blocking :class:`~oncelog.client.admin.Admin` (plain return
values, raising at once) stays available. The futures run :class:`~.async_admin.AsyncAdmin` coroutines on a
background event loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from .._sync import LoopThread
from ..errors import KafkaError
from ..metadata import ClusterMetadata, list_topics
from ..topic_partition import TopicPartition, split
from .async_admin import AsyncAdmin
from .results import RESOURCE_BROKER, RESOURCE_TOPIC, ConfigEntry, GroupDescription, GroupListing

__all__ = ["AdminClient", "ConfigResource", "ConsumerGroupListing", "ListConsumerGroupsResult",
           "ListOffsetsResultInfo", "NewPartitions", "NewTopic", "OffsetSpec", "ResourceType"]

T = TypeVar("T")


class NewTopic:
    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment: list[list[int]] | None = None, config: Mapping[str, str] | None = None) -> None:
        self.topic, self.num_partitions, self.replication_factor = topic, num_partitions, replication_factor
        self.replica_assignment = replica_assignment
        self.config = dict(config or {})

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"


class NewPartitions:
    def __init__(self, topic: str, new_total_count: int, replica_assignment: list[list[int]] | None = None) -> None:
        self.topic, self.new_total_count, self.replica_assignment = topic, new_total_count, replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic},new_total_count={self.new_total_count})"


class ResourceType(enum.IntEnum):
    """confluent-kafka's ``ResourceType`` (librdkafka's values)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4


#: librdkafka's resource types -> Kafka's (DescribeConfigs/IncrementalAlterConfigs)
_KAFKA_TYPE = {ResourceType.TOPIC: RESOURCE_TOPIC, ResourceType.BROKER: RESOURCE_BROKER}


class ConfigResource:
    """A topic or broker whose configuration is described or altered; hashable by (type, name)."""

    Type = ResourceType

    def __init__(self, restype: ResourceType | int | str, name: str, set_config: Mapping[str, str] | None = None,
                 described_configs: Any = None, error: KafkaError | None = None) -> None:
        if isinstance(restype, str):
            restype = ResourceType[restype.upper()]
        self.restype = ResourceType(int(restype))
        self.name = name
        self.set_config_dict: dict[str, str] = dict(set_config or {})
        self.incremental_configs: list[Any] = []
        self.configs = described_configs
        self.error = error

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        if overwrite or name not in self.set_config_dict:
            self.set_config_dict[name] = value

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return (self.restype, self.name) == (other.restype, other.name)

    def __repr__(self) -> str:
        return f"ConfigResource({self.restype.name},{self.name})"


class OffsetSpec:
    """confluent-kafka's ``OffsetSpec``: ``earliest()``, ``latest()``, ``max_timestamp()``, ``for_timestamp(ms)``."""

    def __init__(self, value: str | int) -> None:
        self.value = value

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls("earliest")

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls("latest")

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls("max_timestamp")

    @classmethod
    def for_timestamp(cls, timestamp: int) -> OffsetSpec:
        return cls(int(timestamp))


class ListOffsetsResultInfo:
    def __init__(self, offset: int, timestamp: int, leader_epoch: int | None = None) -> None:
        self.offset, self.timestamp, self.leader_epoch = offset, timestamp, leader_epoch


class ConsumerGroupListing:
    def __init__(self, group_id: str, is_simple_consumer_group: bool, state: str | None = None) -> None:
        self.group_id, self.is_simple_consumer_group, self.state = group_id, is_simple_consumer_group, state


class ListConsumerGroupsResult:
    def __init__(self, valid: list[ConsumerGroupListing], errors: list[KafkaError]) -> None:
        self.valid, self.errors = valid, errors


class AdminClient:
    """confluent-kafka's admin client over :class:`~oncelog.client.admin.AsyncAdmin` on a background event loop
    thread. ``close()`` is oncelog's addition (confluent-kafka's client has none): without it, the loop thread
    ends with the interpreter."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._async = AsyncAdmin(conf)
        self._runner = LoopThread("oncelog-admin-client")
        self._start_lock: asyncio.Lock | None = None

    async def _started(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        try:
            async with self._start_lock:
                await self._async.start()
        except BaseException:
            coro.close()
            raise
        try:
            return await coro
        except KafkaError as e:
            e._retriable = False  # as confluent-kafka's admin results: retriable() is for transactional calls
            raise

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(self._started(coro), self._runner.loop)

    def _wait(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self._runner.run(self._started(coro), None if timeout < 0 else timeout)

    # ------------------------------------------------------------------ topics

    def create_topics(self, new_topics: Iterable[NewTopic], operation_timeout: float = 0,
                      request_timeout: float | None = None, validate_only: bool = False
                      ) -> dict[str, concurrent.futures.Future[None]]:
        async def one(t: NewTopic) -> None:
            await self._async.create_topics(t.topic, t.num_partitions if t.num_partitions > 0 else 1,
                                            t.config or None, validate_only=validate_only,
                                            replication_factor=t.replication_factor
                                            if t.replication_factor > 0 else 1)
        return {t.topic: self._submit(one(t)) for t in new_topics}

    def delete_topics(self, topics: Iterable[str], operation_timeout: float = 0,
                      request_timeout: float | None = None) -> dict[str, concurrent.futures.Future[None]]:
        return {t: self._submit(self._async.delete_topics(t)) for t in topics}

    def create_partitions(self, new_partitions: Iterable[NewPartitions], operation_timeout: float = 0,
                          request_timeout: float | None = None, validate_only: bool = False
                          ) -> dict[str, concurrent.futures.Future[None]]:
        return {p.topic: self._submit(self._async.create_partitions(p.topic, p.new_total_count,
                                                                    validate_only=validate_only))
                for p in new_partitions}

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._wait(list_topics(self._async.cluster, topic), timeout)

    # ------------------------------------------------------------------ configs

    def describe_configs(self, resources: Iterable[ConfigResource], request_timeout: float | None = None
                         ) -> dict[ConfigResource, concurrent.futures.Future[dict[str, ConfigEntry]]]:
        def one(r: ConfigResource) -> Coroutine[Any, Any, dict[str, ConfigEntry]]:
            return self._async.describe_configs(r.name, _KAFKA_TYPE.get(r.restype, int(r.restype)))
        return {r: self._submit(one(r)) for r in resources}

    def incremental_alter_configs(self, resources: Iterable[ConfigResource], request_timeout: float | None = None,
                                  validate_only: bool = False) -> dict[ConfigResource, concurrent.futures.Future[None]]:
        """Set the keys of each resource's ``set_config_dict`` (other keys are left alone)."""
        def one(r: ConfigResource) -> Coroutine[Any, Any, None]:
            return self._async.alter_configs(r.name, r.set_config_dict, (), validate_only=validate_only,
                                             resource_type=_KAFKA_TYPE.get(r.restype, int(r.restype)))
        return {r: self._submit(one(r)) for r in resources}

    # ------------------------------------------------------------------ groups

    def list_consumer_groups(self, request_timeout: float | None = None, states: Iterable[Any] | None = None
                             ) -> concurrent.futures.Future[ListConsumerGroupsResult]:
        async def go() -> ListConsumerGroupsResult:
            names = [getattr(s, "name", s) for s in states or ()]
            found: list[GroupListing] = await self._async.list_groups(
                [n.title().replace("_", "") for n in names] or None)
            return ListConsumerGroupsResult(
                [ConsumerGroupListing(g.group_id, g.protocol_type != "consumer", g.state) for g in found], [])
        return self._submit(go())

    def describe_consumer_groups(self, group_ids: Iterable[str], request_timeout: float | None = None
                                 ) -> dict[str, concurrent.futures.Future[GroupDescription]]:
        """Futures of oncelog's :class:`~oncelog.client.admin.GroupDescription` (group_id, state, members...)."""
        async def one(g: str) -> GroupDescription:
            return (await self._async.describe_groups([g]))[g]
        return {g: self._submit(one(g)) for g in group_ids}

    def delete_consumer_groups(self, group_ids: Iterable[str], request_timeout: float | None = None
                               ) -> dict[str, concurrent.futures.Future[None]]:
        return {g: self._submit(self._async.delete_groups([g])) for g in group_ids}

    # ------------------------------------------------------------------ partitions

    def list_offsets(self, topic_partition_offsets: Mapping[TopicPartition, OffsetSpec],
                     isolation_level: Any = None, request_timeout: float | None = None
                     ) -> dict[TopicPartition, concurrent.futures.Future[ListOffsetsResultInfo]]:
        level = int(getattr(isolation_level, "value", isolation_level or 0))

        async def one(tp: TopicPartition, spec: OffsetSpec) -> ListOffsetsResultInfo:
            key = split(tp)[0]
            got = (await self._async.list_offsets({key: spec.value}, isolation_level=level))[key]
            return ListOffsetsResultInfo(got.offset, got.timestamp)
        return {tp: self._submit(one(tp, spec)) for tp, spec in topic_partition_offsets.items()}

    def delete_records(self, topic_partition_offsets: Iterable[TopicPartition], request_timeout: float | None = None,
                       operation_timeout: float | None = None) -> dict[TopicPartition, concurrent.futures.Future[int]]:
        """Futures of the new low watermark of each partition (delete before ``tp.offset``; -1: everything)."""
        async def one(tp: TopicPartition) -> int:
            key = split(tp)[0]
            return (await self._async.delete_records({key: tp.offset}))[key]
        return {tp: self._submit(one(tp)) for tp in topic_partition_offsets}

    def close(self) -> None:
        try:
            self._runner.run(self._async.close(), self._async.timeout + 5)
        finally:
            self._runner.stop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
