"""``Admin``: the blocking admin client, each method the :class:`~.async_admin.AsyncAdmin` coroutine of the same
name run on a background event loop thread (plain return values; a refusal raises :class:`KafkaError` at once)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._sync import LoopThread
from .async_admin import AsyncAdmin
from .transactions import DEFAULT_TXN_MAX_TIMEOUT_MS
from .results import (
    RESOURCE_TOPIC,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    HangingTransaction,
    ListedOffset,
    ProducerState,
    Spec,
    TopicDescription,
    TopicListing,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

__all__ = ["Admin"]


class Admin:
    """Blocking facade: each method runs the :class:`AsyncAdmin` coroutine on a background event loop thread."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._async = AsyncAdmin(conf)
        self._runner = LoopThread("oncelog-admin")
        self._op_timeout = self._async.timeout * 2 + 5

    def _run(self, coro: Any) -> Any:
        return self._runner.run(coro, self._op_timeout)

    def create_topics(self, names: str | Sequence[str], partitions: int = 1,
                      configs: Mapping[str, str] | None = None, *, replication_factor: int = -1,
                      validate_only: bool = False) -> None:
        self._run(self._async.create_topics(names, partitions, configs, replication_factor=replication_factor,
                                            validate_only=validate_only))

    def delete_topics(self, names: str | Sequence[str]) -> None:
        self._run(self._async.delete_topics(names))

    def list_topics(self, include_internal: bool = False) -> list[TopicListing]:
        result: list[TopicListing] = self._run(self._async.list_topics(include_internal))
        return result

    def describe_topic(self, name: str) -> TopicDescription:
        result: TopicDescription = self._run(self._async.describe_topic(name))
        return result

    def create_partitions(self, name: str, total_count: int, *, validate_only: bool = False) -> None:
        self._run(self._async.create_partitions(name, total_count, validate_only=validate_only))

    def describe_configs(self, name: str, resource_type: int = RESOURCE_TOPIC,
                         keys: Sequence[str] | None = None) -> dict[str, ConfigEntry]:
        result: dict[str, ConfigEntry] = self._run(self._async.describe_configs(name, resource_type, keys))
        return result

    def alter_configs(self, name: str, set: Mapping[str, str] | None = None,
                      delete: Iterable[str] = (), *, resource_type: int = RESOURCE_TOPIC,
                      validate_only: bool = False) -> None:
        self._run(self._async.alter_configs(name, set, delete, resource_type=resource_type,
                                            validate_only=validate_only))

    def list_offsets(self, specs: Mapping[TopicPartition, Spec], *,
                     isolation_level: int = 0) -> dict[TopicPartition, ListedOffset]:
        result: dict[TopicPartition, ListedOffset] = self._run(
            self._async.list_offsets(specs, isolation_level=isolation_level))
        return result

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._run(self._async.delete_records(offsets))
        return result

    def list_transactions(self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
                          min_duration_ms: int = -1) -> list[TransactionListing]:
        result: list[TransactionListing] = self._run(
            self._async.list_transactions(states, producer_ids, min_duration_ms))
        return result

    def describe_transactions(self, ids: str | Sequence[str]) -> dict[str, TransactionDescription]:
        result: dict[str, TransactionDescription] = self._run(self._async.describe_transactions(ids))
        return result

    def describe_producers(self, topic_partitions: Iterable[TopicPartition]
                           ) -> dict[TopicPartition, list[ProducerState]]:
        result: dict[TopicPartition, list[ProducerState]] = self._run(
            self._async.describe_producers(list(topic_partitions)))
        return result

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        self._run(self._async.abort_transaction(topic, partition, producer_id, producer_epoch, coordinator_epoch))

    def find_hanging_transactions(self, max_duration_ms: int = DEFAULT_TXN_MAX_TIMEOUT_MS,
                                  topics: Iterable[str] | None = None, *,
                                  partition: int | None = None) -> list[HangingTransaction]:
        result: list[HangingTransaction] = self._run(self._async.find_hanging_transactions(
            max_duration_ms, None if topics is None else list(topics), partition=partition))
        return result

    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        result: list[GroupListing] = self._run(self._async.list_groups(None if states is None else list(states)))
        return result

    def describe_groups(self, ids: str | Sequence[str]) -> dict[str, GroupDescription]:
        result: dict[str, GroupDescription] = self._run(self._async.describe_groups(ids))
        return result

    def delete_groups(self, ids: str | Sequence[str]) -> None:
        self._run(self._async.delete_groups(ids))

    def list_group_offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None
                           ) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = self._run(
            self._async.list_group_offsets(group, None if partitions is None else list(partitions)))
        return result

    def alter_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._run(self._async.alter_group_offsets(group, dict(offsets)))

    def delete_group_offsets(self, group: str, topic_partitions: Iterable[TopicPartition]) -> None:
        self._run(self._async.delete_group_offsets(group, list(topic_partitions)))

    def close(self) -> None:
        try:
            self._runner.run(self._async.close(), 10)
        finally:
            self._runner.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
