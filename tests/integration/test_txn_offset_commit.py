"""TxnOffsetCommit writes only into the producer's ongoing transaction (the offsets partition added by
AddOffsetsToTxn), checked on the coordinator's queue right before the write. Written outside it, the offsets would
stay pending for ever: no marker would end them, and OffsetFetch with require_stable (what read_committed consumers
send) would answer UNSTABLE_OFFSET_COMMIT for good."""

from __future__ import annotations

from helpers.txn_raw import INVALID_TXN_STATE, NONE, TxnClient

from oncelog.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from oncelog.protocol.messages.offset_fetch_request import OffsetFetchRequest, OffsetFetchRequestTopic
from oncelog.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from oncelog.testing.broker_process import BrokerProcess

OFFSET_FETCH, ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT = 9, 25, 28


def _commit(c: TxnClient, txn_id: str, group: str, pid: int, epoch: int, topic: str, offset: int) -> int:
    r = c.request(TXN_OFFSET_COMMIT, 3, TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", topics=[TxnOffsetCommitRequestTopic(name=topic, partitions=[
            TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)])]))
    return int(r.topics[0].partitions[0].error_code)


def _stable_offset(c: TxnClient, group: str, topic: str) -> tuple[int, int]:
    r = c.request(OFFSET_FETCH, 7, OffsetFetchRequest(group_id=group, require_stable=True, topics=[
        OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
    p = r.topics[0].partitions[0]
    return int(p.error_code), int(p.committed_offset)


def test_txn_offset_commit_outside_the_transaction_is_refused(broker: BrokerProcess, topic_name: str) -> None:
    txn_id, group = f"{topic_name}-tx", f"{topic_name}-g"
    with TxnClient(broker.bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        pid, epoch = c.init_txn(txn_id)
        assert c.add_partitions(txn_id, pid, epoch, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        # no AddOffsetsToTxn: refused, nothing written
        assert _commit(c, txn_id, group, pid, epoch, topic_name, 7) == INVALID_TXN_STATE
        assert c.end_txn(txn_id, pid, epoch, True) == NONE
        assert _stable_offset(c, group, topic_name) == (NONE, -1)  # stable, nothing pending
        # the same with AddOffsetsToTxn: accepted, and visible once the transaction commits
        r = c.request(ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                                   producer_epoch=epoch, group_id=group))
        assert r.error_code == NONE
        assert _commit(c, txn_id, group, pid, epoch, topic_name, 8) == NONE
        assert c.end_txn(txn_id, pid, epoch, True) == NONE
        assert _stable_offset(c, group, topic_name) == (NONE, 8)
