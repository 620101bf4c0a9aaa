"""KIP-890 in a cluster: a transactional write is checked with (part 1), or added to (part 2), its transaction's
coordinator, wherever it is.

A transactional batch may be appended only to a partition its producer added to its ongoing transaction; otherwise
a late write of an ended transaction (a request delayed in the network, retried after an abort) would open a
transaction on the partition that no marker ever ends (a "hanging" transaction holding the LSO back), or, with
transactions V1's unchanged epoch, be committed by the producer's next transaction. On a single node the produce
path asks the local coordinator. In a cluster the coordinator is the leader of the transactional id's
``__transaction_state`` partition: when that is another broker, the leader of the data partition asks it with
AddPartitionsToTxn (batched per request, as Kafka's ``AddPartitionsToTxnManager`` does) before it appends:
``verify_only`` (v4) for a transactions V1 write (Produce up to v11), an add (v5, not verify_only) for a transactions
V2 write (Produce v12, TxnOffsetCommit v5: the client sent no AddPartitionsToTxn, the broker registers the partition
for it, KIP-890 part 2). Only the first batch of a transaction on a partition needs it: once the partition's
producer state has an ongoing transaction of that producer at that epoch, the coordinator has already said yes.

Requests to one coordinator broker go one at a time, in the order the produce requests arrived, and each produce
appends in the same step its answer arrives; a later produce request of the same transactional id that needs no
check waits for the earlier ones to be appended (``txn_order.AppendOrder``, shared with the local coordinator's adds),
so pipelined batches of one producer keep their order (a request appended ahead of one still being checked would
have its sequence numbers refused as out of order, which librdkafka takes as fatal). Answers a producer can retry
(the coordinator moving or loading, the network) become NOT_ENOUGH_REPLICAS, as Kafka maps them for the Produce API.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from oncelog.cluster.model import NO_LEADER, ClusterView, TopicPartition
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)

from ..network.peer_connections import PeerConnections, PeerLink

__all__ = ["RETRIABLE_AS_NOT_ENOUGH_REPLICAS", "RemoteTxnVerifier"]

log = logging.getLogger("oncelog.broker.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
VERIFY_VERSION = 4
ADD_VERSION = 5
#: coordinator answers the producer may retry: its Produce gets NOT_ENOUGH_REPLICAS (Kafka's mapping)
RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_SERVER_ERROR})


class RemoteTxnVerifier:
    def __init__(self, node_id: int, view: Callable[[], ClusterView], request_timeout_ms: int,
                 link: PeerLink | None = None) -> None:
        self.node_id = node_id
        self._view = view
        self._peers = PeerConnections(node_id, lambda n: view().address(n), request_timeout_ms, "txn-verify",
                                      link)
        self._order: dict[int, asyncio.Lock] = {}
        self.requests_sent = 0

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker leading the transactional id's ``__transaction_state`` partition (NO_LEADER if none)."""
        view = self._view()
        meta = view.topics.get(TRANSACTION_STATE_TOPIC)
        if meta is None:
            return NO_LEADER
        state = view.partition(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, meta.num_partitions))
        return NO_LEADER if state is None else state.leader

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Sequence[TopicPartition], add: bool = False) -> dict[TopicPartition, int]:
        """Each partition's answer: NONE (it is in the producer's ongoing transaction; with ``add``, it was added
        to it, transactions V2) or the error to answer the Produce with."""
        coordinator = self.coordinator_of(transactional_id)
        if coordinator == NO_LEADER:
            return dict.fromkeys(partitions, int(ErrorCode.NOT_ENOUGH_REPLICAS))
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add,
            topics=[AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])])
        lock = self._order.setdefault(coordinator, asyncio.Lock())
        async with lock:
            self.requests_sent += 1
            try:
                response = await self._peers.send(coordinator, request, version=ADD_VERSION if add else VERIFY_VERSION)
            except Exception as e:  # noqa: BLE001 - the producer retries
                log.info("%s %s's write to %s with its coordinator %d failed: %s", "adding" if add else "verifying",
                         transactional_id, ", ".join(f"{t}-{p}" for t, p in partitions), coordinator, e)
                return dict.fromkeys(partitions, int(ErrorCode.NOT_ENOUGH_REPLICAS))
        answers: dict[TopicPartition, int] = {}
        if response.error_code:
            answers = dict.fromkeys(partitions, int(response.error_code))
        else:
            for txn in response.results_by_transaction:
                for t in txn.topic_results:
                    for r in t.results_by_partition:
                        answers[(t.name, r.partition_index)] = int(r.partition_error_code)
        out: dict[TopicPartition, int] = {}
        for tp in partitions:
            code = answers.get(tp, int(ErrorCode.UNKNOWN_SERVER_ERROR))
            out[tp] = int(ErrorCode.NOT_ENOUGH_REPLICAS) if code in RETRIABLE_AS_NOT_ENOUGH_REPLICAS else code
        return out

    async def close(self) -> None:
        await self._peers.close()
