"""Transactions V2 (KIP-890 part 2) on the wire, with the raw client against the shared broker.

KAFKA-17754: a transactional request of an ended transaction that reaches the broker after the producer's next
transaction has begun. The usual way: EndTxn(commit) is sent, stalls in the network, the client gives up on that
connection and sends it again on a new one, the retry commits, the producer begins its next transaction, and then
the stalled original arrives. With transactions V1 (EndTxn up to v4, what librdkafka, kafka-python and aiokafka
send) both transactions run at the same producer epoch, so the broker cannot tell the late request from one about
the next transaction: it commits that one while the producer is still writing it (a read_committed consumer reads
records the producer then aborts, and the producer's later records of it are refused). With transactions V2 every
EndTxn bumps the epoch, the late request carries an epoch older than the next transaction's and is fenced; so is a
late Produce of the ended transaction, on a partition that has its marker and on one it never wrote to.

Here "late" is simply "sent later": the test sends the stalled request itself after the next transaction began.
"""

from __future__ import annotations

import pytest

from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest

from helpers.txn_raw import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TxnClient,
    txn_batch,
)

pytestmark = pytest.mark.timeout(60)
V1_END_TXN, V1_PRODUCE, V2_PRODUCE = 4, 11, 12


def values(records: list[tuple[int, bytes | None]]) -> list[bytes | None]:
    return [v for _, v in records]


def test_the_broker_offers_transactions_v2(bootstrap: str) -> None:
    with TxnClient(bootstrap) as c:
        r = c.request(18, 4, ApiVersionsRequest(client_software_name="raw", client_software_version="1"))
        served = {k.api_key: k.max_version for k in r.api_keys}
        assert (served[0], served[26], served[28]) == (12, 5, 5)  # Produce, EndTxn, TxnOffsetCommit
        assert {(f.name, f.max_version_level) for f in r.finalized_features} == {
            ("group.version", 1), ("transaction.version", 2)}
        assert {(f.name, f.min_version, f.max_version) for f in r.supported_features} == {
            ("group.version", 0, 1), ("transaction.version", 0, 2)}
        r3 = c.request(18, 3, ApiVersionsRequest(client_software_name="raw", client_software_version="1"))
        assert r3.supported_features == []  # v3 leaves out a feature whose min version is 0 (KAFKA-17011)
        assert sorted(f.name for f in r3.finalized_features) == ["group.version", "transaction.version"]


def test_v1_a_delayed_end_txn_commits_the_next_transaction(bootstrap: str, topic_name: str) -> None:
    txn_id = f"{topic_name}-v1"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 2) == NONE
        pid, e = c.init_txn(txn_id)
        # transaction 1 on partition 0, committed (by the retry of its EndTxn; the original stalls)
        assert c.add_partitions(txn_id, pid, e, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch([b"t1"], pid, e, 0), txn_id, version=V1_PRODUCE).error_code \
            == NONE
        assert c.end_txn(txn_id, pid, e, True, version=V1_END_TXN) == NONE
        # transaction 2 begins on partition 1, at the same epoch
        assert c.add_partitions(txn_id, pid, e, [(topic_name, 1)]) == {(topic_name, 1): NONE}
        assert c.produce_batch(topic_name, 1, txn_batch([b"t2-a"], pid, e, 0), txn_id,
                               version=V1_PRODUCE).error_code == NONE
        # the stalled EndTxn(commit) of transaction 1 arrives: it is taken for one about transaction 2
        assert c.end_txn(txn_id, pid, e, True, version=V1_END_TXN) == NONE
        assert c.describe_txn(txn_id).transaction_state == "CompleteCommit"
        # transaction 2's next record is refused (its transaction is over), and so is its abort
        r = c.produce_batch(topic_name, 1, txn_batch([b"t2-b"], pid, e, 1), txn_id, version=V1_PRODUCE)
        assert r.error_code == INVALID_TXN_STATE, r
        assert c.end_txn(txn_id, pid, e, False, version=V1_END_TXN) == INVALID_TXN_STATE
        # a read_committed consumer reads the record of a transaction its producer meant to abort
        assert values(c.read(topic_name, 1, READ_COMMITTED)) == [b"t2-a"]
        assert values(c.read(topic_name, 0, READ_COMMITTED)) == [b"t1"]


def test_v2_a_delayed_end_txn_or_produce_is_fenced(bootstrap: str, topic_name: str) -> None:
    txn_id = f"{topic_name}-v2"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 3) == NONE
        pid, e = c.init_txn(txn_id)
        # transaction 1 on partition 0: Produce v12 adds the partition itself (no AddPartitionsToTxn)
        assert c.produce_batch(topic_name, 0, txn_batch([b"t1"], pid, e, 0), txn_id, version=V2_PRODUCE).error_code \
            == NONE
        assert c.describe_txn(txn_id).topics[0].partitions == [0]
        assert c.end_txn_v2(txn_id, pid, e, True) == (NONE, pid, e + 1)
        # transaction 2 on partition 1, at the bumped epoch (sequences start again at 0)
        assert c.produce_batch(topic_name, 1, txn_batch([b"t2-a"], pid, e + 1, 0), txn_id,
                               version=V2_PRODUCE).error_code == NONE
        # the stalled EndTxn(commit) of transaction 1 arrives: fenced, transaction 2 goes on
        assert c.end_txn_v2(txn_id, pid, e, True) == (PRODUCER_FENCED, -1, -1)
        d = c.describe_txn(txn_id)
        assert (d.transaction_state, d.producer_epoch, [(t.topic, t.partitions) for t in d.topics]) == \
            ("Ongoing", e + 1, [(topic_name, [1])])
        assert c.read(topic_name, 1, READ_COMMITTED) == []
        # a stalled Produce of transaction 1: fenced where its marker is, and where it never wrote
        for p in (0, 2):
            r = c.produce_batch(topic_name, p, txn_batch([b"t1-late"], pid, e, 1 if p == 0 else 0), txn_id,
                                version=V2_PRODUCE)
            assert r.error_code == INVALID_PRODUCER_EPOCH, (p, r)
        assert c.produce_batch(topic_name, 1, txn_batch([b"t2-b"], pid, e + 1, 1), txn_id,
                               version=V2_PRODUCE).error_code == NONE
        # the producer aborts transaction 2; the retry of that abort is answered from the epoch before the bump
        assert c.end_txn_v2(txn_id, pid, e + 1, False) == (NONE, pid, e + 2)
        assert c.end_txn_v2(txn_id, pid, e + 1, False) == (NONE, pid, e + 2)
        assert values(c.read(topic_name, 1, READ_COMMITTED)) == []
        assert values(c.read(topic_name, 1, READ_UNCOMMITTED)) == [b"t2-a", b"t2-b"]
        assert values(c.read(topic_name, 0, READ_COMMITTED)) == [b"t1"]
        assert c.read(topic_name, 2, READ_UNCOMMITTED) == []
        # each partition's markers carry the epoch the transaction ended with
        markers = [(p, b.commit, b.producer_epoch) for p in (0, 1)
                   for b in c.fetch_batches(topic_name, p, READ_UNCOMMITTED)[0] if b.control]
        assert markers == [(0, True, e + 1), (1, False, e + 2)]
