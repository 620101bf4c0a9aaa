"""KIP-890 for Produce and TxnOffsetCommit: may a transactional batch be appended to this partition? (single node
or cluster)

Part 1 (transactions V1, Produce up to v11): the partition must already be in the producer's ongoing transaction
(the client added it with AddPartitionsToTxn). On a single node the local transaction coordinator answers in the
append path. In a cluster (``broker.txn_verifier`` set) the transaction's coordinator is the leader of its
``__transaction_state`` partition: this broker's own coordinator when it leads that partition, else another broker,
asked by :class:`~oncelog.broker.coordinators.txn_verifier.RemoteTxnVerifier` before the append.

Part 2 (transactions V2, Produce v12 and TxnOffsetCommit v5, Kafka's ``TransactionSupportedOperation.addPartition``):
the client sends no AddPartitionsToTxn; the broker adds the partition to the transaction itself before the append,
with the local coordinator or with AddPartitionsToTxn v5 (not verify_only) to the coordinator's broker, and the
transaction records client transaction version 2 (its end then bumps the epoch).

Either way only the first batch of a transaction on a partition needs the coordinator: when the partition's
producer state already holds an ongoing transaction of that producer at that epoch the coordinator has said yes
(:func:`transaction_checks` lists the partitions that still need it). Answers the producer may retry become
NOT_ENOUGH_REPLICAS, as Kafka maps them for Produce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from oncelog.cluster.model import TopicPartition
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.produce_request import ProduceRequest
from oncelog.protocol.records import BATCH_HEADER_SIZE, parse_batch_header

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition

__all__ = ["ADD_PARTITION_PRODUCE_VERSION", "TxnChecks", "add_to_transaction", "coordinator_is_remote",
           "transaction_checks", "verify_transaction"]

#: Produce from this version adds its partitions to the transaction (KafkaApis: ``addPartition`` above v11)
ADD_PARTITION_PRODUCE_VERSION = 12
_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.CONCURRENT_TRANSACTIONS}


class TxnChecks(NamedTuple):
    """What a transactional Produce needs from its coordinator before it appends."""
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]  # the first batch of a transaction of the producer there: to check / add
    remote: bool  # the coordinator is on another broker
    add: bool  # transactions V2: add the partitions (else check them, transactions V1)


def _ongoing(partition: "Partition", producer_id: int, producer_epoch: int) -> bool:
    return partition.log.has_ongoing_transaction(producer_id, producer_epoch)


def coordinator_is_remote(broker: "BrokerContext", transactional_id: str) -> bool:
    """In a cluster, whether another broker coordinates ``transactional_id``'s transactions."""
    verifier = broker.txn_verifier
    return verifier is not None and verifier.coordinator_of(transactional_id) != verifier.node_id


def transaction_checks(broker: "BrokerContext", request: ProduceRequest, version: int) -> TxnChecks | None:
    """None when the Produce needs nothing of the coordinator before the append path: not transactional, or a
    transactions V1 write whose coordinator is here (it answers in the append path). Else the partitions whose first
    batch of a transaction still needs the coordinator (often none: its transaction is ongoing here already)."""
    txn_id = request.transactional_id
    if not txn_id:
        return None
    add = version >= ADD_PARTITION_PRODUCE_VERSION
    remote = coordinator_is_remote(broker, txn_id)
    if not remote and not add:
        return None
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
    return TxnChecks(pid, epoch, todo, remote, add)


async def add_to_transaction(broker: "BrokerContext", transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], remote: bool) -> dict[TopicPartition, int]:
    """Transactions V2: add ``partitions`` to the producer's transaction (KIP-890 part 2's implicit
    AddPartitionsToTxn) with its coordinator, here or on another broker. Each partition's answer: NONE, or the
    error to answer the write with (NOT_ENOUGH_REPLICAS when the producer may retry)."""
    if remote:
        assert broker.txn_verifier is not None
        return await broker.txn_verifier.verify(transactional_id, producer_id, producer_epoch, partitions, add=True)
    broker.load_coordinators()  # a fresh single node builds its coordinators on first use
    coordinator = broker.txn_coordinator
    if coordinator is None:
        return dict.fromkeys(partitions, int(ErrorCode.NOT_ENOUGH_REPLICAS))
    answers = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                               version=5, client_transaction_version=2)
    return {tp: int(ErrorCode.NOT_ENOUGH_REPLICAS) if code in _RETRIABLE else int(code)
            for tp, code in answers.items()}


def verify_transaction(broker: "BrokerContext", partition: "Partition", producer_id: int, producer_epoch: int,
                       transactional_id: str | None, answers: dict[TopicPartition, int] | None,
                       remote: bool = False) -> int:
    """NONE if the batch may be appended, else the error code to answer (PRODUCER_FENCED for a stale epoch).
    ``answers``: what the coordinator said before the append (a check or an add); ``remote``: the coordinator is on
    another broker, so only ``answers`` and the partition's producer state can tell."""
    tp = (partition.topic, partition.index)
    answer = answers.get(tp) if answers is not None else None
    if answer:
        return answer  # refused by the coordinator, or it could not be asked
    if remote:
        if answer is not None:
            return int(ErrorCode.NONE)  # its answer
        # not asked: the transaction was ongoing here; it may have ended while another partition was being checked
        return int(ErrorCode.NONE) if _ongoing(partition, producer_id, producer_epoch) \
            else int(ErrorCode.NOT_ENOUGH_REPLICAS)
    broker.load_coordinators()
    coordinator = broker.txn_coordinator
    if coordinator is None:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if broker.cluster is None:
        code = coordinator.verify_partition(producer_id, producer_epoch, partition.topic, partition.index,
                                            transactional_id)
        return int(ErrorCode.NOT_ENOUGH_REPLICAS) if code in _RETRIABLE else int(code)
    if not transactional_id:
        return int(ErrorCode.INVALID_TXN_STATE)  # a transactional batch without its transactional id
    code = coordinator.verify_partition(producer_id, producer_epoch, partition.topic, partition.index,
                                        transactional_id)
    return int(ErrorCode.NOT_ENOUGH_REPLICAS) if code in _RETRIABLE else int(code)
