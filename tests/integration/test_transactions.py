"""Transactions with real clients (confluent-kafka, kafka-python, aiokafka) against a real broker.

Every client: commit and abort across 2 topics, an open transaction holding back read_committed at the LSO
(also the later non-transactional records of another producer on the same partition) until it commits, fencing
by a second instance with the same transactional id. Coordinator-side timeouts run on a dedicated broker whose
abort check runs every 500 ms. Everything is read back both by the raw client (read_committed as a consumer
does it, read_uncommitted, the log's markers, ListOffsets with isolation_level=1) and by the client's own
read_committed consumer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.txn_raw import (
    END_TXN,
    FENCED,
    INVALID_TXN_STATE,
    NONE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TxnClient,
    txn_batch,
)
from helpers.topics import make_topics

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TIMEOUT = 20
CLIENTS = ["confluent", "kafka-python", "aiokafka"]


# ---------------------------------------------------------------------------------------- client adapters
class TxnProducer:
    """The same few steps over each client's transactional producer."""

    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, partition: int, value: bytes) -> None: ...
    def flush(self) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...


class ConfluentTxn(TxnProducer):
    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = 60_000) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                           "transaction.timeout.ms": timeout_ms, "linger.ms": 5})

    def init(self) -> None:
        self.p.init_transactions(TIMEOUT)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.p.produce(topic, value=value, partition=partition)

    def flush(self) -> None:
        assert self.p.flush(TIMEOUT) == 0

    def commit(self) -> None:
        self.p.commit_transaction(TIMEOUT)

    def abort(self) -> None:
        self.p.abort_transaction(TIMEOUT)

    def close(self) -> None:
        try:
            self.p.flush(1)
        except KafkaException:  # a fenced producer raises its fatal error again
            pass


class KafkaPythonTxn(TxnProducer):
    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = 60_000) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                               transaction_timeout_ms=timeout_ms, linger_ms=5, request_timeout_ms=TIMEOUT * 1000)
        self.futures: list[Any] = []

    def init(self) -> None:
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.futures.append(self.p.send(topic, value=value, partition=partition))

    def flush(self) -> None:
        self.p.flush(TIMEOUT)
        for f in self.futures:
            f.get(TIMEOUT)
        self.futures.clear()

    def commit(self) -> None:
        self.p.commit_transaction()

    def abort(self) -> None:
        self.p.abort_transaction()

    def close(self) -> None:
        self.p.close(timeout=2)


class AioTxn(TxnProducer):
    def __init__(self, bootstrap: str, txn_id: str, timeout_ms: int = 60_000) -> None:
        from aiokafka import AIOKafkaProducer

        self.loop = asyncio.new_event_loop()
        self.futures: list[Any] = []

        async def make() -> Any:
            return AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, enable_idempotence=True,
                                    transaction_timeout_ms=timeout_ms, linger_ms=5)

        self.p = self.loop.run_until_complete(make())

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT))

    def init(self) -> None:
        self._run(self.p.start())  # start() runs InitProducerId for a transactional producer

    def begin(self) -> None:
        self._run(self.p.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes) -> None:
        self.futures.append(self._run(self.p.send(topic, value=value, partition=partition)))

    def flush(self) -> None:
        self._run(self.p.flush())
        for f in self.futures:
            self._run(f)
        self.futures.clear()

    def commit(self) -> None:
        self._run(self.p.commit_transaction())

    def abort(self) -> None:
        self._run(self.p.abort_transaction())

    def close(self) -> None:
        try:
            self.loop.run_until_complete(asyncio.wait_for(self.p.stop(), 5))
        except Exception:  # noqa: BLE001 - a fenced producer may fail to stop cleanly
            pass
        self.loop.close()


FACTORIES: dict[str, Callable[..., TxnProducer]] = {
    "confluent": ConfluentTxn, "kafka-python": KafkaPythonTxn, "aiokafka": AioTxn}


@pytest.fixture
def txn_producers(bootstrap: str) -> Iterator[Callable[..., TxnProducer]]:
    made: list[TxnProducer] = []

    def make(client: str, txn_id: str, timeout_ms: int = 60_000, server: str | None = None) -> TxnProducer:
        p = FACTORIES[client](server or bootstrap, txn_id, timeout_ms)
        made.append(p)
        return p

    yield make
    for p in made:
        try:
            p.close()
        except Exception:  # noqa: BLE001
            pass


def plain_produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    """Non-transactional (and non-idempotent) writes by another producer."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "acks": "all", "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(TIMEOUT) == 0


# ---------------------------------------------------------------------------------------- client consumers
def consume_committed(client: str, bootstrap: str, tps: list[tuple[str, int]],
                      want: int) -> dict[tuple[str, int], list[bytes]]:
    """Values per partition a read_committed consumer of ``client`` sees from offset 0 (``want`` records in
    total expected; after reaching it, polls a little longer to catch extra records)."""
    out: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in tps}
    deadline = time.monotonic() + TIMEOUT
    if client == "confluent":
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-test-unused", "enable.auto.commit": False,
                      "isolation.level": "read_committed", "enable.partition.eof": False})
        c.assign([TopicPartition(t, p, 0) for t, p in tps])
        try:
            extra_until = None
            while time.monotonic() < deadline:
                for m in c.consume(500, 0.2):
                    assert m.error() is None, m.error()
                    out[(m.topic(), m.partition())].append(m.value())
                if sum(map(len, out.values())) >= want:
                    extra_until = extra_until or time.monotonic() + 0.5
                    if time.monotonic() > extra_until:
                        break
        finally:
            c.close()
    elif client == "kafka-python":
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                          isolation_level="read_committed")
        ktps = [KTP(t, p) for t, p in tps]
        c.assign(ktps)
        for tp in ktps:
            c.seek(tp, 0)
        try:
            extra_until = None
            while time.monotonic() < deadline:
                for tp, msgs in c.poll(200).items():
                    out[(tp.topic, tp.partition)].extend(m.value for m in msgs)
                if sum(map(len, out.values())) >= want:
                    extra_until = extra_until or time.monotonic() + 0.5
                    if time.monotonic() > extra_until:
                        break
        finally:
            c.close()
    else:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP

        async def run() -> None:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 isolation_level="read_committed")
            await c.start()
            try:
                atps = [ATP(t, p) for t, p in tps]
                c.assign(atps)
                for tp in atps:
                    c.seek(tp, 0)
                extra_until = None
                while time.monotonic() < deadline:
                    for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                        out[(tp.topic, tp.partition)].extend(m.value for m in msgs)
                    if sum(map(len, out.values())) >= want:
                        extra_until = extra_until or time.monotonic() + 0.5
                        if time.monotonic() > extra_until:
                            break
            finally:
                await c.stop()

        asyncio.run(run())
    return out


# ---------------------------------------------------------------------------------------- checks
def check_partition(c: TxnClient, topic: str, partition: int, committed: list[bytes], aborted: list[bytes],
                    uncommitted_all: list[bytes] | None = None) -> None:
    """read_committed == ``committed`` (in order); read_uncommitted == every data record; the log's markers
    agree (``aborted`` records are followed by an ABORT marker); no open transaction is left (LSO == HW)."""
    rc = [v for _, v in c.read(topic, partition, READ_COMMITTED)]
    ru = [v for _, v in c.read(topic, partition, READ_UNCOMMITTED)]
    view = c.log_view(topic, partition)
    assert rc == committed, f"{topic}-{partition} read_committed: {rc} != {committed}"
    if uncommitted_all is not None:
        assert ru == uncommitted_all, f"{topic}-{partition} read_uncommitted: {ru} != {uncommitted_all}"
    assert sorted(ru) == sorted(committed + aborted), f"{topic}-{partition} read_uncommitted: {ru}"
    assert [v for _, v in view.committed] == committed
    assert sorted(v for _, v in view.aborted) == sorted(aborted)
    assert view.open == [], f"{topic}-{partition} has open transactional records {view.open}"
    assert c.lso(topic, partition) == c.hw(topic, partition) == view.hw


def vals(prefix: str, n: int = 4) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# ---------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("client", CLIENTS)
def test_commit_abort_and_lso(client: str, bootstrap: str, topic_name: str,
                              txn_producers: Callable[..., TxnProducer]) -> None:
    ta, tb = f"{topic_name}-a", f"{topic_name}-b"
    make_topics(bootstrap, (ta, 2), (tb, 1))
    tps = [(ta, 0), (ta, 1), (tb, 0)]
    p = txn_producers(client, f"{topic_name}-tid")
    p.init()

    def txn(tag: str) -> dict[tuple[str, int], list[bytes]]:
        sent = {tp: vals(f"{tag}-{tp[0][-1]}{tp[1]}") for tp in tps}
        for i in range(4):
            for tp in tps:
                p.send(tp[0], tp[1], sent[tp][i])
        return sent

    # 1: committed
    p.begin()
    c1 = txn("c1")
    p.commit()
    # 2: aborted, after the records reached the log (librdkafka would purge unsent ones on abort)
    p.begin()
    a2 = txn("a2")
    p.flush()
    p.abort()
    # 3: left open while another producer appends non-transactional records to ta-0
    p.begin()
    c3 = txn("c3")
    p.flush()
    with TxnClient(bootstrap) as c:
        view = c.log_view(ta, 0)
        first_open = view.first_open_offset
        assert first_open is not None and [v for o, v in view.open] == c3[(ta, 0)]
        plain = vals("plain", 3)
        plain_produce(bootstrap, ta, 0, plain)
        hw = c.hw(ta, 0)
        assert hw == view.hw + 3
        # LSO held at the open transaction's first offset: ListOffsets(read_committed) and Fetch agree
        assert c.lso(ta, 0) == first_open
        assert c.list_offset_iso(ta, 0, -1, READ_UNCOMMITTED) == hw
        batches, _, fhw, flso = c.fetch_batches(ta, 0, READ_COMMITTED)
        assert (fhw, flso) == (hw, first_open)
        assert all(b.base_offset < first_open for b in batches)
        assert [v for _, v in c.read(ta, 0, READ_COMMITTED)] == c1[(ta, 0)], "read_committed passed the LSO"
        assert [v for _, v in c.read(ta, 0, READ_UNCOMMITTED)] == c1[(ta, 0)] + a2[(ta, 0)] + c3[(ta, 0)] + plain
        for tp in tps[1:]:
            assert c.lso(*tp) < c.hw(*tp)
            assert [v for _, v in c.read(*tp, READ_COMMITTED)] == c1[tp]
        d = c.describe_txn(f"{topic_name}-tid")
        assert d.transaction_state == "Ongoing"
        assert {(t.topic, p_) for t in d.topics for p_ in t.partitions} == set(tps)
        p.commit()
        # commit releases the transaction and the records behind it
        assert c.lso(ta, 0) == c.hw(ta, 0) == hw + 1  # + the COMMIT marker
        check_partition(c, ta, 0, c1[(ta, 0)] + c3[(ta, 0)] + plain, a2[(ta, 0)],
                        c1[(ta, 0)] + a2[(ta, 0)] + c3[(ta, 0)] + plain)
        for tp in tps[1:]:
            check_partition(c, *tp, committed=c1[tp] + c3[tp], aborted=a2[tp],
                            uncommitted_all=c1[tp] + a2[tp] + c3[tp])
        assert c.describe_txn(f"{topic_name}-tid").transaction_state == "CompleteCommit"
    # the client's own read_committed consumer agrees
    want = {tp: c1[tp] + c3[tp] for tp in tps}
    want[(ta, 0)] = want[(ta, 0)] + plain
    got = consume_committed(client, bootstrap, tps, sum(map(len, want.values())))
    assert got == want


def _is_fenced_error(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(w in text for w in ("fenc", "epoch", "invalidproducer"))


@pytest.mark.parametrize("client", CLIENTS)
def test_fencing(client: str, bootstrap: str, topic_name: str, txn_producers: Callable[..., TxnProducer]) -> None:
    ta, tb = f"{topic_name}-a", f"{topic_name}-b"
    make_topics(bootstrap, (ta, 1), (tb, 1))
    tid = f"{topic_name}-tid"
    old = txn_producers(client, tid)
    old.init()
    old.begin()
    for v in vals("zombie"):
        old.send(ta, 0, v)
        old.send(tb, 0, v)
    old.flush()
    new = txn_producers(client, tid)
    new.init()  # fences `old` and aborts its open transaction
    with TxnClient(bootstrap) as c:
        d = c.describe_txn(tid)
        assert d.transaction_state in ("Empty", "CompleteAbort"), d
        for t in (ta, tb):
            assert c.lso(t, 0) == c.hw(t, 0), "the fenced transaction still holds the LSO"
    with pytest.raises(Exception) as exc:
        old.commit()
    print(f"{client}: commit of the fenced producer: {exc.value!r}")
    assert _is_fenced_error(exc.value), f"commit of the fenced producer failed with {exc.value!r}"
    new.begin()
    for v in vals("live"):
        new.send(ta, 0, v)
        new.send(tb, 0, v)
    new.commit()
    with TxnClient(bootstrap) as c:
        for t in (ta, tb):
            check_partition(c, t, 0, committed=vals("live"), aborted=vals("zombie"),
                            uncommitted_all=vals("zombie") + vals("live"))
    got = consume_committed(client, bootstrap, [(ta, 0), (tb, 0)], 8)
    assert got == {(ta, 0): vals("live"), (tb, 0): vals("live")}


def test_fencing_raw(bootstrap: str, topic_name: str) -> None:
    """The zombie's every call is refused after a second InitProducerId: AddPartitions, Produce, EndTxn."""
    tid = f"{topic_name}-tid"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 2) == 0
        pid, e0 = c.init_txn(tid)
        assert c.add_partitions(tid, pid, e0, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch(vals("z"), pid, e0, 0), tid).error_code == NONE
        pid1, e1 = c.init_txn(tid)  # CONCURRENT_TRANSACTIONS while the old one is aborted, then a new epoch
        assert pid1 == pid and e1 > e0
        assert set(c.add_partitions(tid, pid, e0, [(topic_name, 1)]).values()) <= FENCED
        r = c.produce_batch(topic_name, 0, txn_batch([b"late"], pid, e0, 4), tid)
        assert r.error_code in FENCED, (r.error_code, r.error_message)
        assert c.end_txn(tid, pid, e0, True) in FENCED
        # the new instance works normally
        assert c.add_partitions(tid, pid, e1, [(topic_name, 0), (topic_name, 1)]) == {
            (topic_name, 0): NONE, (topic_name, 1): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch(vals("n"), pid, e1, 0), tid).error_code == NONE
        assert c.produce_batch(topic_name, 1, txn_batch(vals("n"), pid, e1, 0), tid).error_code == NONE
        assert c.end_txn(tid, pid, e1, True) == NONE
        check_partition(c, topic_name, 0, committed=vals("n"), aborted=vals("z"))
        check_partition(c, topic_name, 1, committed=vals("n"), aborted=[])


def test_raw_reused_sequence_after_abort_is_refused(bootstrap: str, topic_name: str) -> None:
    """A record whose answer was lost is written, then purged by abort_transaction(); librdkafka gives its
    sequence to the next transaction. The broker must not take that batch for a retry of the aborted one (it
    would answer success with the aborted record's offset, and the commit would miss the record): it refuses it
    with INVALID_TXN_STATE, the producer aborts and goes on in sequence."""
    tid = f"{topic_name}-tid"
    tp = (topic_name, 0)
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        pid, ep = c.init_txn(tid)
        assert c.add_partitions(tid, pid, ep, [tp]) == {tp: NONE}
        assert c.produce_batch(topic_name, 0, txn_batch(vals("a", 2), pid, ep, 0), tid).error_code == NONE
        lost = c.produce_batch(topic_name, 0, txn_batch(vals("lost", 2), pid, ep, 2), tid)
        assert lost.error_code == NONE
        retry = c.produce_batch(topic_name, 0, txn_batch(vals("lost", 2), pid, ep, 2), tid)
        assert (retry.error_code, retry.base_offset) == (NONE, lost.base_offset)  # a true retry: a duplicate
        assert c.end_txn(tid, pid, ep, False) == NONE
        c.wait_txn_state(tid, {"CompleteAbort"})
        # the next transaction reuses sequences 2..3 for new records
        assert c.add_partitions(tid, pid, ep, [tp]) == {tp: NONE}
        r = c.produce_batch(topic_name, 0, txn_batch(vals("new", 2), pid, ep, 2), tid)
        assert r.error_code == INVALID_TXN_STATE, (r.error_code, r.base_offset, r.error_message)
        assert c.end_txn(tid, pid, ep, False) == NONE  # the producer aborts
        c.wait_txn_state(tid, {"CompleteAbort"})
        assert c.add_partitions(tid, pid, ep, [tp]) == {tp: NONE}
        assert c.produce_batch(topic_name, 0, txn_batch(vals("next", 2), pid, ep, 4), tid).error_code == NONE
        assert c.end_txn(tid, pid, ep, True) == NONE
        check_partition(c, topic_name, 0, committed=vals("next", 2), aborted=vals("a", 2) + vals("lost", 2))


def test_raw_abort_filtering_interleaved(bootstrap: str, topic_name: str) -> None:
    """Two transactional producers interleaved on one partition, one commits and one aborts, plus
    non-transactional records: read_committed (aborted_transactions) filters exactly the aborted one."""
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        ids = [f"{topic_name}-x", f"{topic_name}-y"]
        prods = [(tid, *c.init_txn(tid)) for tid in ids]
        for tid, pid, ep in prods:
            assert c.add_partitions(tid, pid, ep, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        _, ipid, _ = c.init_producer_id(None)
        seqs = {tid: 0 for tid in ids}
        iseq = 0
        expected_committed: list[bytes] = []
        aborted: list[bytes] = []
        for i in range(6):
            for tid, pid, ep in prods:
                v = [f"{tid[-1]}-{i}-{j}".encode() for j in range(2)]
                r = c.produce_batch(topic_name, 0, txn_batch(v, pid, ep, seqs[tid]), tid)
                assert r.error_code == NONE
                seqs[tid] += 2
                (expected_committed if tid == ids[0] else aborted).extend(v)
            v = [f"plain-{i}".encode()]
            assert c.produce_batch(topic_name, 0, txn_batch(v, ipid, 0, iseq, transactional=False)).error_code == 0
            iseq += 1
            expected_committed.extend(v)
        assert [v for _, v in c.read(topic_name, 0, READ_COMMITTED)] == []  # x's first batch is at offset 0
        assert c.end_txn(ids[1], prods[1][1], prods[1][2], False) == NONE
        # y aborted, x still open: the LSO is still x's first offset 0
        assert c.lso(topic_name, 0) == 0
        assert c.end_txn(ids[0], prods[0][1], prods[0][2], True) == NONE
        ordered = [v for _, v in sorted((o, v) for o, v in c.read(topic_name, 0, READ_UNCOMMITTED))
                   if v in set(expected_committed)]
        check_partition(c, topic_name, 0, committed=ordered, aborted=aborted)
        # read_committed from a middle offset still filters (the aborted txn started before it)
        batches, aborted_list, _, _ = c.fetch_batches(topic_name, 0, READ_COMMITTED, start=5)
        assert (prods[1][1], 2) in aborted_list, aborted_list


def test_raw_txn_state_errors_and_introspection(bootstrap: str, topic_name: str) -> None:
    """DescribeProducers / ListTransactions show the open transaction; the state machine's refusals."""
    from oncelog.protocol.messages.list_transactions_request import ListTransactionsRequest

    tid = f"{topic_name}-tid"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        _, ipid, _ = c.init_producer_id(None)
        assert c.produce_batch(topic_name, 0, txn_batch([b"p"], ipid, 0, 0, transactional=False)).error_code == 0
        pid, ep = c.init_txn(tid)
        assert c.end_txn(tid, pid, ep, True) == INVALID_TXN_STATE  # nothing added: Empty
        r = c.produce_batch(topic_name, 0, txn_batch([b"x"], pid, ep, 0), tid)
        assert r.error_code == INVALID_TXN_STATE, "transactional write to a partition never added"
        res = c.add_partitions(tid, pid, ep, [(f"{topic_name}-nope", 0), (topic_name, 0)])
        assert res == {(f"{topic_name}-nope", 0): 3, (topic_name, 0): 55}  # UNKNOWN_TOPIC / OPERATION_NOT_ATTEMPTED
        assert c.add_partitions(tid, pid, ep, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch([b"t0", b"t1"], pid, ep, 0), tid).error_code == NONE
        # the producer may not write outside its transaction while it is open
        r = c.produce_batch(topic_name, 0, txn_batch([b"n"], pid, ep, 2, transactional=False))
        assert r.error_code == INVALID_TXN_STATE
        prod = {p.producer_id: p for p in c.describe_producers(topic_name, 0).active_producers}
        assert prod[pid].current_txn_start_offset == 1 and prod[pid].last_sequence == 1
        assert prod[ipid].current_txn_start_offset == -1
        lt = c.request(66, 1, ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[pid],
                                                      duration_filter=-1))
        assert [(t.transactional_id, t.transaction_state) for t in lt.transaction_states] == [(tid, "Ongoing")]
        # two EndTxn(commit) at once (a client retry racing the original): both succeed, one marker
        with TxnClient(bootstrap) as c2:
            k1 = c.send_end_txn(tid, pid, ep, True)
            k2 = c2.send_end_txn(tid, pid, ep, True)
            assert c.recv(END_TXN, 3, k1).error_code == NONE
            assert c2.recv(END_TXN, 3, k2).error_code == NONE
        assert c.end_txn(tid, pid, ep, True) == NONE  # a late retry is still answered success
        assert c.end_txn(tid, pid, ep, False) == INVALID_TXN_STATE
        assert len(c.log_view(topic_name, 0).markers) == 1
        check_partition(c, topic_name, 0, committed=[b"p", b"t0", b"t1"], aborted=[])
        assert c.describe_producers(topic_name, 0).active_producers[-1].current_txn_start_offset == -1


def test_list_offsets_by_timestamp_read_committed(bootstrap: str, topic_name: str) -> None:
    from oncelog.protocol.records import RecordBatchBuilder

    t0 = 1_700_000_000_000
    tid = f"{topic_name}-tid"
    with TxnClient(bootstrap) as c:
        assert c.create_topic(topic_name, 1) == 0
        _, ipid, _ = c.init_producer_id(None)
        b = RecordBatchBuilder(producer_id=ipid, producer_epoch=0, base_sequence=0)
        b.append(t0, None, b"committed")
        assert c.produce_batch(topic_name, 0, b.build()).error_code == NONE
        pid, ep = c.init_txn(tid)
        assert c.add_partitions(tid, pid, ep, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=ep, base_sequence=0, is_transactional=True)
        b.append(t0 + 1000, None, b"open-1")
        b.append(t0 + 2000, None, b"open-2")
        assert c.produce_batch(topic_name, 0, b.build(), tid).error_code == NONE
        assert c.lso(topic_name, 0) == 1
        # read_uncommitted finds the open records, read_committed must not
        assert c.list_offset_iso(topic_name, 0, t0 + 1000, READ_UNCOMMITTED) == 1
        assert c.list_offset_iso(topic_name, 0, -3, READ_UNCOMMITTED) == 2
        try:
            assert c.list_offset_iso(topic_name, 0, t0 + 1000, READ_COMMITTED) == -1
            assert c.list_offset_iso(topic_name, 0, -3, READ_COMMITTED) in (-1, 0)
        finally:
            assert c.end_txn(tid, pid, ep, False) == NONE


def test_read_committed_long_poll_wakes_on_commit(bootstrap: str, topic_name: str) -> None:
    """A read_committed fetch waiting at the LSO (max_wait 5 s) is answered soon after the commit, with the
    transaction's records; non-transactional appends behind the open transaction do not answer it early with
    data."""
    from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
    from helpers.txn_raw import FETCH, decode_batches

    tid = f"{topic_name}-tid"
    with TxnClient(bootstrap) as c, TxnClient(bootstrap) as waiter:
        assert c.create_topic(topic_name, 1) == 0
        pid, ep = c.init_txn(tid)
        assert c.add_partitions(tid, pid, ep, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        assert c.produce_batch(topic_name, 0, txn_batch(vals("w"), pid, ep, 0), tid).error_code == NONE
        req = FetchRequest(replica_id=-1, max_wait_ms=5000, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                           session_id=0, session_epoch=-1, topics=[FetchTopic(topic=topic_name, partitions=[
                               FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        start = time.monotonic()
        corr = waiter.send(FETCH, 12, req)
        time.sleep(0.3)
        plain_produce(bootstrap, topic_name, 0, [b"behind"])
        time.sleep(0.3)
        assert c.end_txn(tid, pid, ep, True) == NONE
        resp = waiter.recv(FETCH, 12, corr).responses[0].partitions[0]
        elapsed = time.monotonic() - start
        got = [v for b in decode_batches(resp.records) if not b.control for _, _, v in b.records]
        assert got[:4] == vals("w"), got
        assert elapsed < 3.0, f"read_committed long poll answered after {elapsed:.1f} s, not at the commit"


# ---------------------------------------------------------------------------------------- timeouts
@pytest.fixture(scope="module")
def fast_abort_broker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process: the transaction timeouts the tests wait out run on the broker's clock, apart from the clients
    proc = kafka_module_broker_factory({"num.partitions": 1,
                                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
                                        "producer.id.expiration.ms": 1000,
                                        "log.retention.check.interval.ms": 300}, in_process=False)
    yield proc
    assert proc.stop() == 0


def test_timeout_aborts(fast_abort_broker: KafkaBroker, topic_name: str) -> None:
    """A confluent-kafka producer (transaction.timeout.ms=3000) and a raw one (2000) never commit: the
    coordinator aborts both, the LSO moves on past them to later non-transactional records, and their late
    commits are refused as fenced."""
    bs = fast_abort_broker.bootstrap
    ta, tb = f"{topic_name}-a", f"{topic_name}-b"
    make_topics(bs, (ta, 1), (tb, 1))
    ck_id, raw_id = f"{topic_name}-ck", f"{topic_name}-raw"
    p = ConfluentTxn(bs, ck_id, timeout_ms=3000)
    p.init()
    p.begin()
    for v in vals("ck"):
        p.send(ta, 0, v)
        p.send(tb, 0, v)
    p.flush()
    with TxnClient(bs) as c:
        pid, ep = c.init_txn(raw_id, timeout_ms=2000)
        assert c.add_partitions(raw_id, pid, ep, [(ta, 0), (tb, 0)]) == {(ta, 0): NONE, (tb, 0): NONE}
        for t in (ta, tb):
            assert c.produce_batch(t, 0, txn_batch(vals("raw"), pid, ep, 0), raw_id).error_code == NONE
        plain_produce(bs, ta, 0, vals("later", 2))
        assert c.lso(ta, 0) == 0 and [v for _, v in c.read(ta, 0, READ_COMMITTED)] == []
        ck_desc = c.describe_txn(ck_id)
        assert ck_desc.transaction_state == "Ongoing" and ck_desc.transaction_timeout_ms == 3000
        for tid in (raw_id, ck_id):
            d = c.wait_txn_state(tid, {"CompleteAbort"}, timeout=15)
            assert d.producer_epoch > (ep if tid == raw_id else ck_desc.producer_epoch), "epoch not bumped"
        check_partition(c, ta, 0, committed=vals("later", 2), aborted=vals("ck") + vals("raw"))
        check_partition(c, tb, 0, committed=[], aborted=vals("ck") + vals("raw"))
        # late commits
        assert c.end_txn(raw_id, pid, ep, True) in FENCED
        r = c.produce_batch(ta, 0, txn_batch([b"late"], pid, ep, 4), raw_id)
        assert r.error_code != NONE
    with pytest.raises(KafkaException) as exc:
        p.commit()
    print(f"late commit after the coordinator's abort: {exc.value!r}")
    assert _is_fenced_error(exc.value), repr(exc.value)
    p.close()
    del p, exc  # destroy the librdkafka instance before the broker stops
    with TxnClient(bs) as c:
        check_partition(c, ta, 0, committed=vals("later", 2), aborted=vals("ck") + vals("raw"))
        # the transactional id is usable again by a new instance
        pid2, ep2 = c.init_txn(raw_id, timeout_ms=2000)
        assert pid2 == pid and ep2 > ep


def test_idle_producer_with_open_transaction_is_kept(fast_abort_broker: KafkaBroker, topic_name: str) -> None:
    """Producer-id expiry (1 s here) must spare a producer whose transaction is open: the LSO stays at its
    first offset, a retry of its batch is still a duplicate, and its commit still works."""
    bs = fast_abort_broker.bootstrap
    tid = f"{topic_name}-tid"
    with TxnClient(bs) as c:
        assert c.create_topic(topic_name, 1) == 0
        plain_produce(bs, topic_name, 0, [b"before"])
        pid, ep = c.init_txn(tid, timeout_ms=60_000)
        assert c.add_partitions(tid, pid, ep, [(topic_name, 0)]) == {(topic_name, 0): NONE}
        batch = txn_batch(vals("kept"), pid, ep, 0)
        r = c.produce_batch(topic_name, 0, batch, tid)
        assert (r.error_code, r.base_offset) == (NONE, 1)
        time.sleep(2.0)  # > producer.id.expiration.ms + the check interval
        plain_produce(bs, topic_name, 0, [b"after"])
        assert c.lso(topic_name, 0) == 1
        assert [v for _, v in c.read(topic_name, 0, READ_COMMITTED)] == [b"before"]
        prod = {p.producer_id: p for p in c.describe_producers(topic_name, 0).active_producers}
        assert pid in prod and prod[pid].current_txn_start_offset == 1
        r = c.produce_batch(topic_name, 0, batch, tid)
        assert (r.error_code, r.base_offset) == (NONE, 1), "retry after idling was stored again"
        assert c.end_txn(tid, pid, ep, True) == NONE
        check_partition(c, topic_name, 0, committed=[b"before"] + vals("kept") + [b"after"], aborted=[])
