"""Transaction operations of the admin client (Kafka's Admin listTransactions, describeTransactions,
describeProducers, abortTransaction, and ``kafka-transactions.sh find-hanging``): transaction requests go to the
transaction coordinators, producer and marker requests to each partition's leader."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_producers_request import DescribeProducersRequest, TopicRequest
from oncelog.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from oncelog.protocol.messages.list_transactions_request import ListTransactionsRequest
from oncelog.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from ..cluster import COORDINATOR_RETRIABLE, COORDINATOR_TRANSACTION
from ..errors import KafkaError, UnsupportedVersionError, raise_for_code
from .results import (
    RESOURCE_BROKER,
    TXN_STATES,
    HangingTransaction,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from .topics import TopicAdmin

__all__ = ["DEFAULT_TXN_MAX_TIMEOUT_MS", "TransactionAdmin"]

#: States in which the coordinator will still write markers to the transaction's partitions.
_LIVE_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
#: Kafka's default transaction.max.timeout.ms (15 minutes)
DEFAULT_TXN_MAX_TIMEOUT_MS = 900_000
#: Slack past transaction.max.timeout.ms before a live transaction counts as stuck: the coordinator only looks for
#: timed-out transactions every transaction.abort.timed.out.transaction.cleanup.interval.ms (10 s by default).
_TXN_ABORT_GRACE_MS = 60_000


class TransactionAdmin(TopicAdmin):
    """Transactions, the producers of a partition, and hanging transactions."""

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
            return int(value.value) if value is not None and value.value is not None else DEFAULT_TXN_MAX_TIMEOUT_MS
        except (KafkaError, ValueError):
            return DEFAULT_TXN_MAX_TIMEOUT_MS

    async def find_hanging_transactions(self, max_duration_ms: int = DEFAULT_TXN_MAX_TIMEOUT_MS,
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
