"""Admin operations: :class:`AsyncAdmin` (asyncio) and the :class:`Admin` sync facade over it.

Topic operations go to the controller, partition operations (ListOffsets, DeleteRecords) to each leader.
Every method raises :class:`KafkaError` naming the topic/partition when the broker refuses.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_partitions_request import CreatePartitionsRequest, CreatePartitionsTopic
from oncelog.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from oncelog.protocol.messages.delete_groups_request import DeleteGroupsRequest
from oncelog.protocol.messages.delete_records_request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from oncelog.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from oncelog.protocol.messages.describe_configs_request import DescribeConfigsRequest, DescribeConfigsResource
from oncelog.protocol.messages.describe_groups_request import DescribeGroupsRequest
from oncelog.protocol.messages.describe_producers_request import DescribeProducersRequest, TopicRequest
from oncelog.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from oncelog.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from oncelog.protocol.messages.list_groups_request import ListGroupsRequest
from oncelog.protocol.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from oncelog.protocol.messages.list_transactions_request import ListTransactionsRequest
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
from oncelog.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from ._sync import LoopThread
from .cluster import COORDINATOR_GROUP, COORDINATOR_RETRIABLE, COORDINATOR_TRANSACTION, Cluster
from .config import AdminConfig, parse_admin_config
from .errors import KafkaError, UnsupportedVersionError, raise_for_code

__all__ = [
    "RESOURCE_BROKER",
    "AdminClient",
    "ConfigResource",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "RESOURCE_TOPIC",
    "Admin",
    "AsyncAdmin",
    "ConfigEntry",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "HangingTransaction",
    "ListedOffset",
    "Spec",
    "PartitionDescription",
    "ProducerState",
    "TopicDescription",
    "TopicListing",
    "TransactionDescription",
    "TransactionListing",
]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_OP_SET, _OP_DELETE = 0, 1
_SPECS = {"latest": -1, "earliest": -2, "max_timestamp": -3}
_SOURCES = {-1: "unknown", 1: "dynamic_topic", 2: "dynamic_broker", 3: "dynamic_default_broker",
            4: "static_broker", 5: "default", 6: "dynamic_broker_logger", 7: "client_metrics", 8: "group"}

#: ``"earliest"``, ``"latest"``, ``"max_timestamp"`` or a timestamp in ms (first offset at or after it).
#: "earliest", "latest", "max_timestamp" or a timestamp in ms (or an admin_client.OffsetSpec)
Spec = str | int
TopicPartition = tuple[str, int]

#: Transaction states as Kafka's admin APIs name them (ListTransactions state filters, DescribeTransactions).
TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
              "PrepareEpochFence")
#: States in which the coordinator will still write markers to the transaction's partitions.
_LIVE_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
_DEFAULT_TXN_MAX_TIMEOUT_MS = 900_000
#: Slack past transaction.max.timeout.ms before a live transaction counts as stuck: the coordinator only looks for
#: timed-out transactions every transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s by default).
_TXN_ABORT_GRACE_MS = 60_000


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: str
    partitions: int
    is_internal: bool


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    leader_epoch: int = -1  # -1: the broker's Metadata did not give it


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: list[PartitionDescription] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    is_sensitive: bool

    @property
    def is_read_only(self) -> bool:
        """confluent-kafka's name of ``read_only``."""
        return self.read_only


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: wall-clock ms the current transaction started, None when there is none
    transaction_start_time_ms: int | None
    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer with state on a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    #: epoch of the coordinator that wrote this producer's last marker here, None if none was written yet
    coordinator_epoch: int | None
    #: first offset of the producer's open transaction on the partition, None if it has none
    current_txn_start_offset: int | None


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """An open transaction on a partition that the coordinator will not end (see ``find_hanging_transactions``)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int | None
    start_offset: int
    last_timestamp: int
    duration_ms: int
    transactional_id: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: partitions assigned to the member (decoded ConsumerProtocolAssignment; empty for other protocols)
    assignment: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    coordinator_id: int
    state: str
    protocol_type: str
    #: the assignor chosen for the generation (e.g. ``range``), empty when the group has none
    protocol: str
    members: list[GroupMember] = field(default_factory=list)


def decode_consumer_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a ConsumerProtocolAssignment (any version: int16 version, then
    [topic: int16-length string, [int32 partition]]; later fields are ignored). Empty/garbled bytes give []."""
    if not data or len(data) < 6:
        return []
    try:
        pos = 2
        (n_topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[TopicPartition] = []
        for _ in range(max(n_topics, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + ln]).decode()
            pos += ln
            (n_parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(n_parts, 0)):
                (p,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append((topic, p))
        return sorted(out)
    except (struct.error, UnicodeDecodeError):
        return []


def _spec_ts(spec: Spec | Any) -> int:
    spec = getattr(spec, "value", spec)  # confluent-kafka's OffsetSpec
    if isinstance(spec, int):
        return spec
    try:
        return _SPECS[spec]
    except KeyError:
        raise ValueError(f"offset spec must be one of {', '.join(_SPECS)} or a timestamp in ms, got {spec!r}")


class AsyncAdmin:
    """Admin client on the running event loop. ``async with AsyncAdmin({...}) as admin: ...``."""

    def __init__(self, conf: Mapping[str, Any] | AdminConfig) -> None:
        self.config = conf if isinstance(conf, AdminConfig) else parse_admin_config(conf)
        c = self.config
        self.timeout = c.request_timeout_ms / 1000
        self.cluster = Cluster.from_config(c)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.cluster.bootstrap()
            self._started = True

    async def close(self) -> None:
        await self.cluster.close()
        self._started = False

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _controller_send(self, request: Any) -> Any:
        await self.start()
        conn = await self.cluster.controller_connection()
        return await conn.send(request)

    # ------------------------------------------------------------------ topics

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

    # ------------------------------------------------------------------ partitions

    async def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        await self.start()
        tps = list(tps)
        if any(self.cluster.topic(t) is None for t, _ in tps):
            await self.cluster.refresh()
        groups: dict[int, list[TopicPartition]] = defaultdict(list)
        for t, p in tps:
            try:
                groups[self.cluster.leader_for(t, p)].append((t, p))
            except KafkaError as e:
                raise KafkaError(int(e.code()), f"{t}[{p}]: {e.message}") from None
        return groups

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

    # ------------------------------------------------------------------ transactions

    async def _retry_coordinator(self, op: Any) -> Any:
        """Run ``op()`` again while the coordinator is loading or moving (bounded by the request timeout)."""
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            try:
                return await op()
            except KafkaError as e:
                if e.code() not in COORDINATOR_RETRIABLE or time.monotonic() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _find_txn_coordinators(self, ids: Sequence[str]) -> dict[str, int]:
        """Node id of the transaction coordinator of each transactional id (FindCoordinator, key type 1)."""
        await self.start()
        return await self.cluster.find_coordinators(COORDINATOR_TRANSACTION, ids)

    async def list_transactions(self, states: Iterable[str] | None = None,
                                producer_ids: Iterable[int] | None = None,
                                min_duration_ms: int = -1) -> list[TransactionListing]:
        """Transactions known to the coordinators of every broker, optionally only those in ``states``
        (e.g. ``"Ongoing"``), of ``producer_ids`` or running longer than ``min_duration_ms`` (-1: any)."""
        state_filters = list(states or ())
        pid_filters = sorted(set(producer_ids or ()))
        await self.start()
        await self.cluster.refresh()
        nodes = sorted(self.cluster.brokers) or [-1]

        async def one(node: int) -> list[TransactionListing]:
            conn = await self.cluster.connection(node) if node >= 0 else await self.cluster.any_connection()
            version = conn.version_for(66)  # ListTransactions
            if min_duration_ms >= 0 and version < 1:
                raise UnsupportedVersionError(f"{conn.address} cannot filter transactions by duration "
                                              f"(ListTransactions v{version}; v1 needed)")
            req = ListTransactionsRequest(state_filters=state_filters, producer_id_filters=pid_filters,
                                          duration_filter=min_duration_ms)

            async def send() -> Any:
                resp = await conn.send(req, version=version)
                raise_for_code(resp.error_code, None, f"list transactions on node {node}")
                return resp

            resp = await self._retry_coordinator(send)
            if resp.unknown_state_filters:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"unknown transaction state(s) {', '.join(resp.unknown_state_filters)}; "
                                 f"known: {', '.join(TXN_STATES)}")
            return [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state, conn.node_id)
                    for t in resp.transaction_states]

        found: list[TransactionListing] = []
        for part in await asyncio.gather(*(one(n) for n in nodes)):
            found.extend(part)
        return sorted(found, key=lambda t: (t.transactional_id, t.coordinator_id))

    async def _describe_transactions(self, ids: Sequence[str]) -> dict[str, TransactionDescription | KafkaError]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        coordinators = await self._retry_coordinator(lambda: self._find_txn_coordinators(ids))
        groups: dict[int, list[str]] = defaultdict(list)
        for txn_id in ids:
            groups[coordinators[txn_id]].append(txn_id)

        async def one(node: int, txn_ids: list[str]) -> dict[str, TransactionDescription | KafkaError]:
            conn = await self.cluster.connection(node)
            pending = list(txn_ids)
            out: dict[str, TransactionDescription | KafkaError] = {}
            deadline = time.monotonic() + self.timeout
            while pending:
                resp = await conn.send(DescribeTransactionsRequest(transactional_ids=pending))
                retry = []
                for st in resp.transaction_states:
                    if st.error_code in COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                        retry.append(st.transactional_id)
                    elif st.error_code:
                        out[st.transactional_id] = KafkaError(
                            st.error_code, f"describe transaction {st.transactional_id!r}: "
                                           f"{KafkaError(st.error_code).message}")
                    else:
                        out[st.transactional_id] = TransactionDescription(
                            st.transactional_id, node, st.transaction_state, st.producer_id, st.producer_epoch,
                            st.transaction_timeout_ms,
                            None if st.transaction_start_time_ms < 0 else st.transaction_start_time_ms,
                            [(t.topic, p) for t in st.topics for p in t.partitions])
                pending = retry
                if pending:
                    await asyncio.sleep(0.1)
            return out

        result: dict[str, TransactionDescription | KafkaError] = {}
        for part in await asyncio.gather(*(one(n, t) for n, t in groups.items())):
            result.update(part)
        for txn_id in ids:
            result.setdefault(txn_id, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                 f"describe transaction {txn_id!r}: no answer for it"))
        return result

    async def describe_transactions(self, ids: str | Sequence[str]) -> dict[str, TransactionDescription]:
        """State, producer and partitions of each transactional id; KafkaError (e.g. TRANSACTIONAL_ID_NOT_FOUND)
        naming the first id that cannot be described."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        out: dict[str, TransactionDescription] = {}
        for txn_id, d in (await self._describe_transactions(ids)).items():
            if isinstance(d, KafkaError):
                raise d
            out[txn_id] = d
        return out

    async def describe_producers(self, topic_partitions: Iterable[TopicPartition]
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers with state on each partition (asked of its leader), with their open transaction."""
        tps = list(dict.fromkeys(topic_partitions))
        groups = await self._by_leader(tps)

        async def one(node: int, tps: list[TopicPartition]) -> dict[TopicPartition, list[ProducerState]]:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for t, p in tps:
                by_topic[t].append(p)
            req = DescribeProducersRequest(topics=[TopicRequest(name=t, partition_indexes=ps)
                                                   for t, ps in by_topic.items()])
            resp = await (await self.cluster.connection(node)).send(req)
            out = {}
            for rt in resp.topics:
                for rp in rt.partitions:
                    raise_for_code(rp.error_code, rp.error_message,
                                   f"describe producers of {rt.name}[{rp.partition_index}]")
                    out[(rt.name, rp.partition_index)] = [
                        ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                      None if s.coordinator_epoch < 0 else s.coordinator_epoch,
                                      None if s.current_txn_start_offset < 0 else s.current_txn_start_offset)
                        for s in sorted(rp.active_producers, key=lambda s: s.producer_id)]
            return out

        result: dict[TopicPartition, list[ProducerState]] = {}
        for part in await asyncio.gather(*(one(n, ps) for n, ps in groups.items())):
            result.update(part)
        for t, p in tps:
            if (t, p) not in result:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"describe producers of {t}[{p}]: no answer")
        return result

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """Write an ABORT marker for ``producer_id``'s open transaction on one partition (WriteTxnMarkers to its
        leader, as Kafka's Admin.abortTransaction): for hanging transactions the coordinator will never end.
        A negative ``coordinator_epoch`` (no marker written yet) is sent as 0."""
        tp = (topic, partition)
        node = next(iter(await self._by_leader([tp])))
        req = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            topics=[WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=max(coordinator_epoch, 0))])
        resp = await (await self.cluster.connection(node)).send(req)
        what = f"abort transaction of producer {producer_id} (epoch {producer_epoch}) on {topic}[{partition}]"
        for m in resp.markers:
            for rt in m.topics:
                for rp in rt.partitions:
                    if (rt.name, rp.partition_index) == tp:
                        raise_for_code(rp.error_code, None, what)
                        return
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: the broker did not answer for the partition")

    async def _transaction_max_timeout_ms(self) -> int:
        try:
            await self.start()
            node = self.cluster.controller_id if self.cluster.controller_id >= 0 else min(self.cluster.brokers)
            cfg = await self.describe_configs(str(node), RESOURCE_BROKER, ["transaction.max.timeout.ms"])
            value = cfg.get("transaction.max.timeout.ms")
            return int(value.value) if value is not None and value.value is not None else _DEFAULT_TXN_MAX_TIMEOUT_MS
        except (KafkaError, ValueError):
            return _DEFAULT_TXN_MAX_TIMEOUT_MS

    async def find_hanging_transactions(self, max_duration_ms: int = _DEFAULT_TXN_MAX_TIMEOUT_MS,
                                        topics: Iterable[str] | None = None, *,
                                        partition: int | None = None) -> list[HangingTransaction]:
        """Open transactions on partitions that no coordinator will end (as ``kafka-transactions.sh
        find-hanging``): among producers whose open transaction on a partition saw no write for at least
        ``max_duration_ms``, those whose producer id maps to no transactional id, whose transactional id the
        coordinator does not know, whose transaction is not live with that partition, or that has been running
        over a minute longer than the broker's ``transaction.max.timeout.ms`` (the coordinator should have aborted
        it; two-phase-commit transactions, whose timeout is above the maximum, are exempt).
        ``topics`` defaults to every non-internal topic; ``partition`` narrows to one partition of them."""
        await self.start()
        await self.cluster.refresh()
        names = sorted(topics) if topics is not None else [t.name for t in await self.list_topics()]
        tps: list[TopicPartition] = []
        for name in names:
            info = self.cluster.topic(name)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            if partition is not None:
                if partition not in info.partitions:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{name}[{partition}] does not exist")
                tps.append((name, partition))
            else:
                tps.extend((name, p) for p in sorted(info.partitions))
        producers: dict[TopicPartition, list[ProducerState]] = {}
        for i in range(0, len(tps), 500):  # Kafka's tool batches too: keep each request reasonable
            producers.update(await self.describe_producers(tps[i:i + 500]))
        now = int(time.time() * 1000)
        candidates = [(tp, s) for tp, states in producers.items() for s in states
                      if s.current_txn_start_offset is not None and now - s.last_timestamp >= max_duration_ms]
        if not candidates:
            return []
        pids = {s.producer_id for _, s in candidates}
        txn_ids = {t.producer_id: t.transactional_id
                   for t in await self.list_transactions(producer_ids=pids) if t.producer_id in pids}
        descriptions = await self._describe_transactions(sorted(set(txn_ids.values())))
        for d in descriptions.values():
            if isinstance(d, KafkaError) and d.code() != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise d
        max_timeout = await self._transaction_max_timeout_ms()
        hanging: list[HangingTransaction] = []
        for tp, s in candidates:
            txn_id = txn_ids.get(s.producer_id)
            desc = descriptions.get(txn_id) if txn_id is not None else None
            if txn_id is None:
                reason = "the coordinator knows no transactional id for this producer id"
            elif not isinstance(desc, TransactionDescription):
                reason = f"transactional id {txn_id!r} is unknown to the coordinator"
            elif desc.producer_id != s.producer_id:
                reason = f"transactional id {txn_id!r} now belongs to producer id {desc.producer_id}"
            elif desc.state not in _LIVE_TXN_STATES or tp not in desc.topic_partitions:
                reason = f"transaction {txn_id!r} is {desc.state} without this partition"
            elif desc.transaction_start_time_ms is not None and desc.transaction_timeout_ms <= max_timeout \
                    and now - desc.transaction_start_time_ms > max_timeout + _TXN_ABORT_GRACE_MS:
                reason = (f"transaction {txn_id!r} has been {desc.state} for "
                          f"{now - desc.transaction_start_time_ms} ms, longer than transaction.max.timeout.ms "
                          f"({max_timeout} ms)")
            else:
                continue
            assert s.current_txn_start_offset is not None
            hanging.append(HangingTransaction(tp[0], tp[1], s.producer_id, s.producer_epoch, s.coordinator_epoch,
                                              s.current_txn_start_offset, s.last_timestamp,
                                              now - s.last_timestamp, txn_id, reason))
        return sorted(hanging, key=lambda h: (h.topic, h.partition, h.start_offset))

    # ------------------------------------------------------------------ consumer groups

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

    def find_hanging_transactions(self, max_duration_ms: int = _DEFAULT_TXN_MAX_TIMEOUT_MS,
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


# confluent_kafka.admin's names (defined in .admin_client, which builds on this module)
from .admin_client import AdminClient, ConfigResource, NewPartitions, NewTopic, OffsetSpec  # noqa: E402
