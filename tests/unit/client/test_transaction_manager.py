"""The transaction/idempotence driver and the sender against a scripted fake at the protocol level: a fake
cluster whose connections answer each request with the next scripted decoded response (no network)."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from oncelog.client import KafkaError, PreparedTxnState
from oncelog.client.config import parse_producer_config
from oncelog.client.errors import UnsupportedVersionError
from oncelog.client.producer.accumulator import RecordAccumulator
from oncelog.client.producer.sender import Sender
from oncelog.client.producer.transaction_manager import TransactionManager, normalize_offsets
from oncelog.client.producer.txn_state import TxnState
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse
from oncelog.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from oncelog.protocol.messages.end_txn_response import EndTxnResponse
from oncelog.protocol.messages.init_producer_id_response import InitProducerIdResponse
from oncelog.protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from oncelog.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from oncelog.protocol.records import parse_batch_header

S = TxnState
R = TypeVar("R")


class FakeConn:
    """Answers each request with the next scripted response for its API (a callable gets the request)."""

    def __init__(self, name: str, script: dict[str, deque[Any]], log: list[tuple[str, str, Any]],
                 versions: dict[int, int], features: dict[str, int] | None = None,
                 sent_versions: list[tuple[str, int | None]] | None = None) -> None:
        self.name, self.script, self.log, self.versions = name, script, log, versions
        self.connected = True
        self.address = f"fake-{name}:9092"
        self.finalized_features = features or {}
        self.sent_versions = sent_versions if sent_versions is not None else []

    def version_for(self, api_key: int) -> int:
        return self.versions.get(api_key, 99)

    async def send(self, req: Any, **kw: Any) -> Any:
        api = type(req).__name__.removesuffix("Request")
        self.log.append((self.name, api, req))
        self.sent_versions.append((api, kw.get("version")))
        answers = self.script[api]
        if not answers:
            raise AssertionError(f"unscripted {api} request: {req}")
        a = answers.popleft()
        if isinstance(a, BaseException):
            raise a
        return a(req) if callable(a) else a


class FakeCluster:
    def __init__(self, versions: dict[int, int] | None = None, features: dict[str, int] | None = None) -> None:
        self.script: dict[str, deque[Any]] = defaultdict(deque)
        self.log: list[tuple[str, str, Any]] = []
        self.lookups: list[tuple[int, str]] = []
        self.sent_versions: list[tuple[str, int | None]] = []  # (api, the version it was sent at; None: negotiated)
        v = versions or {}
        self.txn_coord = FakeConn("txn-coordinator", self.script, self.log, v, features, self.sent_versions)
        self.group_coord = FakeConn("group-coordinator", self.script, self.log, v, features, self.sent_versions)
        self.leader = FakeConn("leader", self.script, self.log, v, features, self.sent_versions)

    def answer(self, api: str, *responses: Any) -> None:
        self.script[api].extend(responses)

    def sent(self, api: str) -> list[Any]:
        return [req for _, a, req in self.log if a == api]

    async def coordinator_connection(self, key_type: int, key: str, timeout: float | None = None) -> FakeConn:
        self.lookups.append((key_type, key))
        return self.txn_coord if key_type == 1 else self.group_coord

    async def any_connection(self) -> FakeConn:
        return self.leader

    async def connection(self, node: int) -> FakeConn:
        return self.leader

    def leader_for(self, topic: str, partition: int) -> int:
        return 0

    async def refresh(self, topics: Any = None) -> None:
        return None


def run(coro: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coro)


def manager(cluster: FakeCluster, **conf: Any) -> TransactionManager:
    c = parse_producer_config({"bootstrap.servers": "h:1", "transactional.id": "tid", "max.block.ms": 2000,
                               **conf})
    return TransactionManager(cluster, c)  # type: ignore[arg-type]


def init_ok(pid: int = 7, epoch: int = 3, ongoing: tuple[int, int] = (-1, -1)) -> InitProducerIdResponse:
    return InitProducerIdResponse(producer_id=pid, producer_epoch=epoch, ongoing_txn_producer_id=ongoing[0],
                                  ongoing_txn_producer_epoch=ongoing[1])


def add_result(code: int = 0, *tps: tuple[str, int]) -> AddPartitionsToTxnResponse:
    by: dict[str, list[AddPartitionsToTxnPartitionResult]] = defaultdict(list)
    for t, p in tps:
        by[t].append(AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code))
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
        AddPartitionsToTxnTopicResult(name=t, results_by_partition=rs) for t, rs in by.items()])


# ---------------------------------------------------------------------- InitProducerId


def test_init_retries_retriable_errors_and_looks_the_coordinator_up_again() -> None:
    c = FakeCluster()
    c.answer("InitProducerId", InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
             InitProducerIdResponse(error_code=ErrorCode.NOT_COORDINATOR),
             InitProducerIdResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS), init_ok())
    tm = manager(c, **{"transaction.timeout.ms": 4321})
    run(tm.init_transactions())
    assert tm.state is S.READY and (tm.pid.producer_id, tm.pid.epoch) == (7, 3)
    reqs = c.sent("InitProducerId")
    assert len(reqs) == 4 and all(r.transactional_id == "tid" and r.transaction_timeout_ms == 4321 for r in reqs)
    assert not reqs[0].enable2_pc and not reqs[0].keep_prepared_txn
    assert len(c.lookups) == 2  # cached coordinator, looked up again only after NOT_COORDINATOR


@pytest.mark.parametrize("code", [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_PRODUCER_EPOCH,
                                  ErrorCode.INVALID_TRANSACTION_TIMEOUT])
def test_init_fatal_errors(code: ErrorCode) -> None:
    c = FakeCluster()
    c.answer("InitProducerId", InitProducerIdResponse(error_code=code))
    tm = manager(c)
    with pytest.raises(KafkaError, match=code.name):
        run(tm.init_transactions())
    assert tm.state is S.FATAL_ERROR
    with pytest.raises(KafkaError, match="create a new producer"):
        tm.begin_transaction()


def test_init_timeout_allows_a_retry() -> None:
    c = FakeCluster()
    c.answer("InitProducerId", *[InitProducerIdResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)] * 100)
    tm = manager(c)
    with pytest.raises(KafkaError, match="CONCURRENT_TRANSACTIONS"):
        run(tm.init_transactions(timeout=0.1))
    assert tm.state is S.UNINITIALIZED
    c.script["InitProducerId"].clear()
    c.answer("InitProducerId", init_ok())
    run(tm.init_transactions())
    assert tm.state is S.READY


def test_init_keep_prepared_finds_the_kept_transaction() -> None:
    c = FakeCluster()
    c.answer("InitProducerId", init_ok(7, 4, ongoing=(7, 3)))
    tm = manager(c, **{"transaction.two.phase.commit.enable": True})
    run(tm.init_transactions(keep_prepared_txn=True))
    (req,) = c.sent("InitProducerId")
    assert req.enable2_pc and req.keep_prepared_txn
    assert tm.state is S.PREPARED_TRANSACTION and tm.prepared == PreparedTxnState(7, 3)
    # commit it (what complete_transaction does when the state matches)
    c.answer("EndTxn", EndTxnResponse())
    tm.fsm.transition(S.COMMITTING_TRANSACTION)
    run(tm.end_transaction(True))
    (end,) = c.sent("EndTxn")
    assert end.committed and (end.producer_id, end.producer_epoch) == (7, 4)
    assert tm.state is S.READY and tm.prepared is None


def test_init_keep_prepared_without_a_kept_transaction_is_ready() -> None:
    c = FakeCluster()
    c.answer("InitProducerId", init_ok(7, 4))
    tm = manager(c, **{"transaction.two.phase.commit.enable": True})
    run(tm.init_transactions(keep_prepared_txn=True))
    assert tm.state is S.READY and tm.prepared is None


def test_two_phase_needs_init_producer_id_v6() -> None:
    c = FakeCluster(versions={22: 5})
    tm = manager(c, **{"transaction.two.phase.commit.enable": True})
    with pytest.raises(UnsupportedVersionError, match="KIP-939"):
        run(tm.init_transactions())
    assert tm.state is S.FATAL_ERROR and c.sent("InitProducerId") == []


def test_keep_prepared_needs_the_setting() -> None:
    tm = manager(FakeCluster())
    with pytest.raises(KafkaError, match="transaction.two.phase.commit.enable"):
        run(tm.init_transactions(keep_prepared_txn=True))
    assert tm.state is S.UNINITIALIZED


# ---------------------------------------------------------------------- AddPartitionsToTxn


def ready_manager(c: FakeCluster, **conf: Any) -> TransactionManager:
    c.answer("InitProducerId", init_ok())
    tm = manager(c, **conf)
    run(tm.init_transactions())
    return tm


def test_partitions_are_added_in_one_batch_before_they_may_be_drained() -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    c.answer("AddPartitionsToTxn", AddPartitionsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS),
             lambda req: add_result(0, *[(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]))

    async def go() -> list[tuple[str, int]]:
        tps = [("a", 0), ("a", 2), ("b", 1)]
        assert tm.sendable(tps) == []  # not added yet: nothing drained
        assert tm._add_task is not None
        await tm._add_task
        return tm.sendable(tps)

    assert run(go()) == [("a", 0), ("a", 2), ("b", 1)]
    reqs = c.sent("AddPartitionsToTxn")
    assert len(reqs) == 2  # CONCURRENT_TRANSACTIONS retried
    r = reqs[-1]
    assert (r.v3_and_below_transactional_id, r.v3_and_below_producer_id, r.v3_and_below_producer_epoch) == \
        ("tid", 7, 3)
    assert {(t.name, tuple(t.partitions)) for t in r.v3_and_below_topics} == {("a", (0, 2)), ("b", (1,))}
    assert tm.txn_started


@pytest.mark.parametrize(("code", "state"), [(ErrorCode.TOPIC_AUTHORIZATION_FAILED, S.ABORTABLE_ERROR),
                                              (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, S.ABORTABLE_ERROR),
                                              (ErrorCode.PRODUCER_FENCED, S.FATAL_ERROR),
                                              (ErrorCode.INVALID_PRODUCER_EPOCH, S.FATAL_ERROR)])
def test_add_partitions_errors(code: ErrorCode, state: TxnState) -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    c.answer("AddPartitionsToTxn", add_result(code, ("a", 0)))

    async def go() -> None:
        tm.sendable([("a", 0)])
        assert tm._add_task is not None
        await tm._add_task

    run(go())
    assert tm.state is state and tm.has_error
    assert tm.current_error().code() == code


# ---------------------------------------------------------------------- EndTxn, send_offsets


def test_commit_retries_then_fenced_is_fatal() -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    tm.txn_started = True
    tm.fsm.transition(S.COMMITTING_TRANSACTION)
    c.answer("EndTxn", EndTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS),
             EndTxnResponse(error_code=ErrorCode.PRODUCER_FENCED))
    with pytest.raises(KafkaError, match="PRODUCER_FENCED"):
        run(tm.end_transaction(True))
    assert tm.state is S.FATAL_ERROR and len(c.sent("EndTxn")) == 2


def test_empty_transaction_ends_without_a_request() -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    tm.fsm.transition(S.COMMITTING_TRANSACTION)
    run(tm.end_transaction(True))
    assert tm.state is S.READY and c.sent("EndTxn") == []


def test_abort_after_unresolved_sequence_bumps_the_epoch() -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    tm.txn_started = True
    tm.batch_failed(KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "gap"), unresolved_sequence=True)
    assert tm.state is S.ABORTABLE_ERROR
    tm.fsm.transition(S.ABORTING_TRANSACTION)
    c.answer("EndTxn", EndTxnResponse())
    c.answer("InitProducerId", init_ok(7, 4))
    run(tm.end_transaction(False))
    bump = c.sent("InitProducerId")[-1]
    assert (bump.producer_id, bump.producer_epoch) == (7, 3)
    assert tm.state is S.READY and tm.pid.epoch == 4


class GroupMeta:
    group_id = "grp"
    generation_id = 5
    member_id = "m-1"
    group_instance_id = "inst"


def test_send_offsets_adds_the_group_then_commits_to_the_group_coordinator() -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    c.answer("AddOffsetsToTxn", AddOffsetsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS),
             AddOffsetsToTxnResponse())
    c.answer("TxnOffsetCommit", TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(
        name="in", partitions=[TxnOffsetCommitResponsePartition(0, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                               TxnOffsetCommitResponsePartition(1, 0)])]),
             TxnOffsetCommitResponse())
    run(tm.send_offsets([("in", 1, 10), ("in", 0, 4)], GroupMeta()))
    (add,) = [r for n, a, r in c.log if a == "AddOffsetsToTxn" and n == "txn-coordinator"][-1:]
    assert (add.transactional_id, add.group_id, add.producer_id, add.producer_epoch) == ("tid", "grp", 7, 3)
    commits = [(n, r) for n, a, r in c.log if a == "TxnOffsetCommit"]
    assert len(commits) == 2 and all(n == "group-coordinator" for n, _ in commits)
    r = commits[-1][1]
    assert (r.group_id, r.generation_id, r.member_id, r.group_instance_id) == ("grp", 5, "m-1", "inst")
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in r.topics] == \
        [("in", [(0, 4), (1, 10)])]
    assert (1, "grp") not in c.lookups and (0, "grp") in c.lookups
    assert tm.state is S.IN_TRANSACTION and tm.txn_started


@pytest.mark.parametrize(("code", "state"), [(ErrorCode.ILLEGAL_GENERATION, S.ABORTABLE_ERROR),
                                              (ErrorCode.FENCED_INSTANCE_ID, S.ABORTABLE_ERROR),
                                              (ErrorCode.PRODUCER_FENCED, S.FATAL_ERROR)])
def test_send_offsets_errors(code: ErrorCode, state: TxnState) -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    c.answer("AddOffsetsToTxn", AddOffsetsToTxnResponse())
    c.answer("TxnOffsetCommit", TxnOffsetCommitResponse(topics=[TxnOffsetCommitResponseTopic(
        name="in", partitions=[TxnOffsetCommitResponsePartition(0, code)])]))
    with pytest.raises(KafkaError, match=code.name):
        run(tm.send_offsets({("in", 0): 1}, "grp"))
    assert tm.state is state


def test_normalize_offsets_accepts_the_documented_forms() -> None:
    class TP:
        topic, partition, offset = "x", 2, 30

    assert normalize_offsets({("a", 0): 5}) == {("a", 0): 5}
    assert normalize_offsets([("a", 1, 6), TP()]) == {("a", 1): 6, ("x", 2): 30}


def test_prepare_needs_two_phase_and_a_transaction() -> None:
    c = FakeCluster()
    tm = ready_manager(c)
    tm.begin_transaction()
    with pytest.raises(KafkaError, match="two.phase"):
        tm.prepare()
    c2 = FakeCluster()
    tm2 = ready_manager(c2, **{"transaction.two.phase.commit.enable": True})
    with pytest.raises(KafkaError, match="IN_TRANSACTION"):
        tm2.prepare()
    tm2.begin_transaction()
    assert tm2.prepare() == PreparedTxnState(7, 3) and tm2.state is S.PREPARED_TRANSACTION


# ---------------------------------------------------------------------- sender: sequences and retries


def produce_answer(code: int = 0, base_offset: int = 0) -> Callable[[Any], ProduceResponse]:
    def answer(req: Any) -> ProduceResponse:
        return ProduceResponse(responses=[TopicProduceResponse(name=t.name, partition_responses=[
            PartitionProduceResponse(index=p.index, error_code=code, base_offset=base_offset)
            for p in t.partition_data]) for t in req.topic_data])
    return answer


def batch_headers(c: FakeCluster) -> list[tuple[int, int, int, int, bool]]:
    out = []
    for req in c.sent("Produce"):
        for t in req.topic_data:
            for p in t.partition_data:
                h = parse_batch_header(p.records)
                out.append((h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta + 1,
                            h.is_transactional))
    return out


def idempotent_sender(c: FakeCluster) -> tuple[Sender, TransactionManager, RecordAccumulator, list[Any]]:
    conf = parse_producer_config({"bootstrap.servers": "h:1", "retry.backoff.ms": 1, "linger.ms": 0,
                                  "max.block.ms": 2000})
    tm = TransactionManager(c, conf)  # type: ignore[arg-type]
    acc = RecordAccumulator(conf.batch_size, 0, 0)
    reports: list[Any] = []
    sender = Sender(c, acc, conf, reports.extend, txn=tm)  # type: ignore[arg-type]
    tm.wakeup = sender.wakeup
    return sender, tm, acc, reports


def drive(sender: Sender, acc: RecordAccumulator, appends: list[int]) -> None:
    async def go() -> None:
        sender.start()
        for n in appends:
            for i in range(n):
                acc.append(("t", 0), 1000 + i, None, b"v%d" % i, [], lambda e, m: None)
            acc.begin_flush()
            sender.wakeup()
            for _ in range(200):
                if acc.pending_records == 0:
                    break
                await asyncio.sleep(0.005)
            acc.end_flush()
        await sender.close()
    run(go())


def test_retried_batch_keeps_its_sequence_and_later_batches_follow() -> None:
    c = FakeCluster()
    sender, tm, acc, _ = idempotent_sender(c)
    c.answer("InitProducerId", init_ok(11, 0))
    run(tm.init_idempotent())
    c.answer("Produce", produce_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER), KafkaError(ErrorCode.NETWORK_EXCEPTION),
             produce_answer(0, 0), produce_answer(0, 3))
    drive(sender, acc, [3, 2])
    assert batch_headers(c) == [(11, 0, 0, 3, False)] * 3 + [(11, 0, 3, 2, False)]


def test_duplicate_sequence_is_a_success() -> None:
    c = FakeCluster()
    sender, tm, acc, reports = idempotent_sender(c)
    c.answer("InitProducerId", init_ok(11, 0))
    run(tm.init_idempotent())
    c.answer("Produce", produce_answer(ErrorCode.DUPLICATE_SEQUENCE_NUMBER))
    drive(sender, acc, [2])
    assert len(reports) == 2 and all(err is None for _, err, _m in reports)
    assert tm.sequences.next_sequence(("t", 0)) == 2


@pytest.mark.parametrize("first_answer, error", [
    # the next expected batch answered OUT_OF_ORDER: a real sequence error (not retried)
    (produce_answer(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), "OUT_OF_ORDER_SEQUENCE_NUMBER"),
    # the request may have been written (a bug in the client, no answer for the partition): failing the batch for
    # good must not leave a sequence gap for the next batch, which the broker would refuse OUT_OF_ORDER
    (RuntimeError("unexpected"), "UNKNOWN"),
    (ProduceResponse(responses=[]), "UNKNOWN"),
], ids=["out-of-order", "unexpected-exception", "no-answer-for-the-partition"])
def test_a_batch_failed_with_its_sequence_unresolved_bumps_the_idempotent_epoch(first_answer: Any, error: str) -> None:
    c = FakeCluster()
    sender, tm, acc, reports = idempotent_sender(c)
    c.answer("InitProducerId", init_ok(11, 0), init_ok(11, 1))
    run(tm.init_idempotent())
    c.answer("Produce", first_answer, produce_answer(0, 9))

    async def go() -> None:
        sender.start()
        for v in (b"a", b"b"):
            acc.append(("t", 0), 1, None, v, [], lambda e, m: None)
        acc.begin_flush()
        sender.wakeup()
        for _ in range(200):
            if acc.pending_records == 0:
                break
            await asyncio.sleep(0.005)
        assert [err.name() if err else None for _cb, err, _m in reports] == [error] * 2
        acc.append(("t", 0), 2, None, b"c", [], lambda e, m: None)
        sender.wakeup()
        for _ in range(200):
            if acc.pending_records == 0 and tm.pid.epoch == 1:
                break
            await asyncio.sleep(0.005)
        acc.end_flush()
        await sender.close()

    run(go())
    bump = c.sent("InitProducerId")[-1]
    assert (bump.producer_id, bump.producer_epoch) == (11, 0)  # KIP-360: bump our own epoch
    # the failed batch went out once; the next one with the new epoch from sequence 0: no gap
    assert batch_headers(c)[-1] == (11, 1, 0, 1, False)
    assert [err for _cb, err, _m in reports[2:]] == [None]


def test_rejected_batch_rewinds_the_sequence() -> None:
    c = FakeCluster()
    sender, tm, acc, reports = idempotent_sender(c)
    c.answer("InitProducerId", init_ok(11, 0))
    run(tm.init_idempotent())
    c.answer("Produce", produce_answer(ErrorCode.MESSAGE_TOO_LARGE), produce_answer(0))
    drive(sender, acc, [2, 1])
    assert [err.name() if err else None for _, err, _m in reports] == ["MSG_SIZE_TOO_LARGE"] * 2 + [None]
    assert batch_headers(c) == [(11, 0, 0, 2, False), (11, 0, 0, 1, False)]


def pipelined(c: FakeCluster, answers: list[Any], records: int) -> tuple[list[Any], TransactionManager]:
    """``records`` one-record batches of t[0] sent with up to 5 in flight; returns the delivery reports."""
    conf = parse_producer_config({"bootstrap.servers": "h:1", "retry.backoff.ms": 1, "linger.ms": 0,
                                  "max.block.ms": 2000, "batch.size": 100})
    tm = TransactionManager(c, conf)  # type: ignore[arg-type]
    acc = RecordAccumulator(conf.batch_size, 0, 0)
    reports: list[Any] = []
    sender = Sender(c, acc, conf, reports.extend, txn=tm)  # type: ignore[arg-type]
    c.answer("InitProducerId", init_ok(11, 0))
    c.answer("Produce", *answers)

    async def go() -> None:
        await tm.init_idempotent()
        for i in range(records):
            acc.append(("t", 0), 1, None, b"%d" % i + b"." * 70, [], lambda e, m: None)
        sender.start()
        for _ in range(400):
            if acc.pending_records == 0:
                break
            await asyncio.sleep(0.005)
        await sender.close()

    run(go())
    return reports, tm


def test_pipelined_batches_retry_in_their_original_order_with_their_sequences() -> None:
    c = FakeCluster()
    # 3 batches in flight at once; the first hits NOT_LEADER, the broker then sees gaps for the others
    reports, _ = pipelined(c, [produce_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                               produce_answer(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
                               produce_answer(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
                               produce_answer(0, 0), produce_answer(0, 1), produce_answer(0, 2)], 3)
    seqs = [h[2] for h in batch_headers(c)]
    assert seqs == [0, 1, 2, 0, 1, 2]  # retried one by one, in order, same sequences
    assert [err for _, err, _m in reports] == [None] * 3
    assert [m.offset() for _, _e, m in reports] == [0, 1, 2]


def test_rejected_batch_gives_its_sequence_to_the_batches_behind_it() -> None:
    c = FakeCluster()
    reports, tm = pipelined(c, [produce_answer(ErrorCode.MESSAGE_TOO_LARGE),
                                produce_answer(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
                                produce_answer(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
                                produce_answer(0, 0), produce_answer(0, 1)], 3)
    assert [h[2] for h in batch_headers(c)] == [0, 1, 2, 0, 1]  # re-sequenced after the rejected one
    assert [err.name() if err else None for _, err, _m in reports] == ["MSG_SIZE_TOO_LARGE", None, None]
    assert tm.sequences.next_sequence(("t", 0)) == 2 and not tm.bump_requested


class SlowFirstConnection(FakeCluster):
    """The first connection takes a while (connecting); later callers find it open at once."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def connection(self, node: int) -> FakeConn:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(0.05)
        return self.leader


def test_requests_reach_the_wire_in_drain_order_while_connecting() -> None:
    """A batch drained while the first request still waits for its connection must not overtake it (the broker
    would see a sequence gap)."""
    c = SlowFirstConnection()
    reports, _ = pipelined(c, [produce_answer(0, 0), produce_answer(0, 1), produce_answer(0, 2)], 3)
    assert [h[2] for h in batch_headers(c)] == [0, 1, 2]
    assert [err for _, err, _m in reports] == [None] * 3


# ---------------------------------------------------------------------- transactions V2 (KIP-890 part 2)
#: what a Kafka 4.0 broker negotiates: Produce v12, EndTxn v5, TxnOffsetCommit v5
V2_VERSIONS = {0: 12, 26: 5, 28: 5}


def txn_sender(c: FakeCluster) -> tuple[Sender, TransactionManager, RecordAccumulator]:
    conf = parse_producer_config({"bootstrap.servers": "h:1", "transactional.id": "tid", "retry.backoff.ms": 1,
                                  "linger.ms": 0, "max.block.ms": 2000})
    tm = TransactionManager(c, conf)  # type: ignore[arg-type]
    acc = RecordAccumulator(conf.batch_size, 0, 0)
    sender = Sender(c, acc, conf, lambda reports: None, txn=tm)  # type: ignore[arg-type]
    tm.wakeup = sender.wakeup
    return sender, tm, acc


def one_transaction(sender: Sender, tm: TransactionManager, acc: RecordAccumulator, tps: list[tuple[str, int]],
                    commit: bool = True) -> None:
    async def go() -> None:
        sender.start()
        tm.begin_transaction()
        for tp in tps:
            acc.append(tp, 1000, None, b"v", [], lambda e, m: None)
        acc.begin_flush()
        sender.wakeup()
        for _ in range(200):
            if acc.pending_records == 0:
                break
            await asyncio.sleep(0.005)
        acc.end_flush()
        tm.fsm.transition(S.COMMITTING_TRANSACTION if commit else S.ABORTING_TRANSACTION)
        await tm.end_transaction(commit)
        await sender.close()
    run(go())


def test_v2_produces_without_add_partitions_and_takes_the_epoch_end_txn_gives() -> None:
    c = FakeCluster(V2_VERSIONS, {"transaction.version": 2})
    c.answer("InitProducerId", init_ok(7, 3))
    sender, tm, acc = txn_sender(c)
    run(tm.init_transactions())
    assert tm.v2
    c.answer("Produce", produce_answer(0, 0), produce_answer(0, 1))
    c.answer("EndTxn", EndTxnResponse(producer_id=7, producer_epoch=4),
             EndTxnResponse(producer_id=8, producer_epoch=0))  # the second overflowed to a new producer id
    one_transaction(sender, tm, acc, [("a", 0)])
    assert c.sent("AddPartitionsToTxn") == [] and (tm.pid.producer_id, tm.pid.epoch) == (7, 4)
    sender2 = Sender(c, acc, tm.config, lambda reports: None, txn=tm)  # type: ignore[arg-type]
    tm.wakeup = sender2.wakeup
    one_transaction(sender2, tm, acc, [("a", 0)])
    assert (tm.pid.producer_id, tm.pid.epoch) == (8, 0) and tm.state is S.READY
    # each transaction's batches carry its epoch, sequences start again at 0
    assert [h[:3] for h in batch_headers(c)] == [(7, 3, 0), (7, 4, 0)]
    assert [(r.producer_id, r.producer_epoch) for r in c.sent("EndTxn")] == [(7, 3), (7, 4)]
    assert [v for api, v in c.sent_versions if api in ("Produce", "EndTxn")] == [12, 5, 12, 5]


def test_v2_send_offsets_is_one_txn_offset_commit_v5() -> None:
    c = FakeCluster(V2_VERSIONS, {"transaction.version": 2})
    tm = ready_manager(c)
    tm.begin_transaction()
    c.answer("TxnOffsetCommit", TxnOffsetCommitResponse())
    run(tm.send_offsets([("in", 0, 4)], GroupMeta()))
    assert c.sent("AddOffsetsToTxn") == [] and tm.txn_started
    assert [v for api, v in c.sent_versions if api == "TxnOffsetCommit"] == [5]


@pytest.mark.parametrize("features", [{}, {"transaction.version": 1}])
def test_v1_when_the_broker_does_not_finalize_transaction_version_2(features: dict[str, int]) -> None:
    c = FakeCluster(V2_VERSIONS, features)
    c.answer("InitProducerId", init_ok(7, 3))
    sender, tm, acc = txn_sender(c)
    run(tm.init_transactions())
    assert not tm.v2
    c.answer("AddPartitionsToTxn", lambda req: add_result(0, *[(t.name, p) for t in req.v3_and_below_topics
                                                                for p in t.partitions]))
    c.answer("Produce", produce_answer(0, 0))
    c.answer("EndTxn", EndTxnResponse())
    one_transaction(sender, tm, acc, [("a", 0)])
    assert len(c.sent("AddPartitionsToTxn")) == 1 and (tm.pid.producer_id, tm.pid.epoch) == (7, 3)
    assert [v for api, v in c.sent_versions if api in ("Produce", "EndTxn")] == [11, 4]


def test_v2_abort_after_an_unresolved_sequence_needs_no_init_producer_id() -> None:
    c = FakeCluster(V2_VERSIONS, {"transaction.version": 2})
    tm = ready_manager(c)
    tm.begin_transaction()
    tm.txn_started = True
    tm.batch_failed(KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "gap"), unresolved_sequence=True)
    tm.fsm.transition(S.ABORTING_TRANSACTION)
    c.answer("EndTxn", EndTxnResponse(producer_id=7, producer_epoch=4))
    run(tm.end_transaction(False))
    assert len(c.sent("InitProducerId")) == 1  # only the first init: the abort's bump settled the sequences
    assert tm.state is S.READY and (tm.pid.producer_id, tm.pid.epoch) == (7, 4)
