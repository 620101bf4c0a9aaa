"""KIP-890 part 1 for Produce: may a transactional batch be appended to this partition? (single node or cluster)

On a single node the local transaction coordinator answers. In a cluster (``broker.txn_verifier`` set) the
transaction's coordinator is the leader of its ``__transaction_state`` partition: this broker's own coordinator when
it leads that partition, else another broker, asked by :class:`~oncelog.broker.coordinators.txn_verifier.RemoteTxnVerifier`
before the append (:func:`remote_checks` says which partitions of a request need it: the first batch of a
transaction on each, when no ongoing transaction of that producer at that epoch is in the partition's producer state
yet). Answers the producer may retry become NOT_ENOUGH_REPLICAS, as Kafka maps them for Produce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.cluster.model import TopicPartition
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.produce_request import ProduceRequest
from oncelog.protocol.records import BATCH_HEADER_SIZE, parse_batch_header

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition

__all__ = ["RemoteChecks", "remote_checks", "verify_transaction"]

#: (producer id, producer epoch, partitions to check with the remote coordinator)
RemoteChecks = tuple[int, int, list[TopicPartition]]
_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.CONCURRENT_TRANSACTIONS}


def _ongoing(partition: "Partition", producer_id: int, producer_epoch: int) -> bool:
    return partition.log.has_ongoing_transaction(producer_id, producer_epoch)


def remote_checks(broker: "BrokerContext", request: ProduceRequest) -> RemoteChecks | None:
    """None unless the Produce is transactional and its coordinator is on another broker; then the partitions whose
    transactional batch must be checked with that coordinator first (often none: its transaction is ongoing here)."""
    verifier, txn_id = broker.txn_verifier, request.transactional_id
    if verifier is None or not txn_id:
        return None
    if verifier.coordinator_of(txn_id) == verifier.node_id:
        return None  # this broker's coordinator answers in the append path
    pid = epoch = -1
    todo: list[TopicPartition] = []
    for topic in request.topic_data:
        for pdata in topic.partition_data:
            partition = broker.topics.partition(topic.name, pdata.index)
            records = pdata.records
            if partition is None or not partition.is_leader or not records or len(records) < BATCH_HEADER_SIZE:
                continue  # refused (or not transactional) in the append path
            try:
                header = parse_batch_header(records, 0)
            except Exception:  # noqa: BLE001 - a malformed batch is refused with its error in the append path
                continue
            if not header.is_transactional or _ongoing(partition, header.producer_id, header.producer_epoch):
                continue
            pid, epoch = header.producer_id, header.producer_epoch
            todo.append((topic.name, pdata.index))
    return pid, epoch, todo


def verify_transaction(broker: "BrokerContext", partition: "Partition", producer_id: int, producer_epoch: int,
                       transactional_id: str | None, verified: dict[TopicPartition, int] | None) -> int:
    """NONE if the batch may be appended, else the error code to answer (PRODUCER_FENCED for a stale epoch).
    ``verified`` is set when the transaction's coordinator is on another broker: the answers it gave."""
    broker.load_coordinators()
    coordinator = broker.txn_coordinator
    if coordinator is None:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if broker.cluster is None:
        return int(coordinator.verify_partition(producer_id, producer_epoch, partition.topic, partition.index,
                                                transactional_id))
    if verified is not None:  # the coordinator is on another broker (remote_checks)
        tp = (partition.topic, partition.index)
        if tp in verified:
            return verified[tp]  # its answer
        # not asked: the transaction was ongoing here; it may have ended while another partition was being checked
        return int(ErrorCode.NONE) if _ongoing(partition, producer_id, producer_epoch) \
            else int(ErrorCode.NOT_ENOUGH_REPLICAS)
    if not transactional_id:
        return int(ErrorCode.INVALID_TXN_STATE)  # a transactional batch without its transactional id
    code = coordinator.verify_partition(producer_id, producer_epoch, partition.topic, partition.index,
                                        transactional_id)
    return int(ErrorCode.NOT_ENOUGH_REPLICAS) if code in _RETRIABLE else int(code)
