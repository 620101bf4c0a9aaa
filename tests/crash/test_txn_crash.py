"""SIGKILL the broker at each step of a transaction, restart it, and check that every transaction ends in the
state that was decided before the crash.

One dedicated broker for the module (the abort check runs every 300 ms), driven step by step with the raw client
so each cut point is hit for sure:

* after AddPartitionsToTxn (no data): the transaction is still Ongoing after the restart; it is aborted by its
  timeout, or fenced by a new InitProducerId with the same transactional id;
* after Produce (data written, no EndTxn): the LSO is still held by the open transactions after the restart; a
  retried batch is answered with its original offsets and not stored again; the transaction can still be
  committed by its producer, or it is fenced, or it times out;
* right after sending EndTxn(commit), without waiting (several transactions with staggered sends per kill, a few
  rounds, so PrepareCommit not yet logged / markers partly written / complete are all likely): all-or-nothing per
  transaction, committed if PrepareCommit was durable (or the commit was answered), else aborted;
* after EndTxn was answered (CompleteCommit / CompleteAbort durable): the outcome stands.

After every restart new producer ids are above every id handed out before. The checker reads every partition
back (read_committed as a consumer does it, read_uncommitted, and the log's markers) and counts every record:
no committed record lost, none stored twice, no aborted or undecided record readable, per-partition order kept.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Iterator

import pytest

from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.rawclient import read_frame
from helpers.txn_raw import (
    END_TXN,
    FENCED,
    INIT_PRODUCER_ID,
    NONE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TxnClient,
    txn_batch,
)
from helpers.topics import make_topics

from oncelog.protocol import api as kapi
from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

PARTITIONS = 3
SHORT_MS = 3000  # transactions the coordinator must abort by timeout after the restart
LONG_MS = 120_000  # transactions that must survive the restart
SEGMENT_BYTES = 4096  # topics roll often, so producer state is rebuilt from snapshots + replay after a crash
PAD = b"." * 300


@pytest.fixture(scope="module")
def cbroker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process on a disk folder: the tests SIGKILL it and recover what it wrote
    proc = kafka_module_broker_factory({"num.partitions": PARTITIONS,
                                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300},
                                       in_process=False, memory=False)
    yield proc
    proc.kill()


# ---------------------------------------------------------------------------------------- bookkeeping
@dataclass
class Txn:
    tid: str
    pid: int
    epoch: int
    tps: list[tuple[str, int]]
    seq: dict[tuple[str, int], int] = field(default_factory=dict)
    outcome: str | None = None  # "commit" / "abort" once decided


class Ledger:
    """Everything acked to the log, in send order per partition, and the fate of each record's transaction."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, int], list[bytes]] = {}
        self.owner: dict[bytes, Txn | None] = {}  # None: a non-transactional record
        self.batches: dict[tuple[str, int], list[tuple[bytes, int, Txn]]] = {}  # tp -> (batch, base offset, txn)
        self.counter = 0

    def produce(self, c: TxnClient, txn: Txn, tp: tuple[str, int], n: int = 3) -> None:
        values = [f"{txn.tid}|{tp[0][-2:]}{tp[1]}|{self.counter + i}|".encode() + PAD for i in range(n)]
        self.counter += n
        seq = txn.seq.get(tp, 0)
        batch = txn_batch(values, txn.pid, txn.epoch, seq)
        r = c.produce_batch(tp[0], tp[1], batch, txn.tid)
        assert r.error_code == NONE, (txn.tid, tp, r.error_code, r.error_message)
        txn.seq[tp] = seq + n
        self.sent.setdefault(tp, []).extend(values)
        self.batches.setdefault(tp, []).append((batch, int(r.base_offset), txn))
        for v in values:
            self.owner[v] = txn

    def plain(self, c: TxnClient, pid: int, seq: dict[tuple[str, int], int], tp: tuple[str, int]) -> None:
        """A non-transactional idempotent record of another producer."""
        value = f"plain|{tp[0][-2:]}{tp[1]}|{self.counter}".encode()
        self.counter += 1
        s = seq.get(tp, 0)
        r = c.produce_batch(tp[0], tp[1], txn_batch([value], pid, 0, s, transactional=False))
        assert r.error_code == NONE, r
        seq[tp] = s + 1
        self.sent.setdefault(tp, []).append(value)
        self.owner[value] = None

    def committed(self, value: bytes) -> bool:
        txn = self.owner[value]
        if txn is None:
            return True
        assert txn.outcome is not None, f"transaction {txn.tid} is still undecided at check time"
        return txn.outcome == "commit"


def check_log(c: TxnClient, ledger: Ledger) -> None:
    """Every partition: read_uncommitted == every acked record once, in send order; read_committed == exactly
    the committed ones, in order, and agrees with the log's markers; no transaction left open."""
    for tp, sent in sorted(ledger.sent.items()):
        ru = c.read(*tp, READ_UNCOMMITTED)
        rc = c.read(*tp, READ_COMMITTED)
        view = c.log_view(*tp)
        ru_v = [v for _, v in ru]
        rc_v = [v for _, v in rc]
        dupes = sorted({v for v in ru_v if ru_v.count(v) > 1})
        assert not dupes, f"{tp}: records stored twice: {dupes[:5]}"
        lost = [v for v in sent if v not in set(ru_v)]
        assert not lost, f"{tp}: acked records lost: {lost[:5]}"
        assert ru_v == sent, f"{tp}: records not in send order (or unknown records): {ru_v} != {sent}"
        want = [v for v in sent if ledger.committed(v)]
        missing = [v for v in want if v not in set(rc_v)]
        assert not missing, f"{tp}: committed records not readable with read_committed: {missing[:5]}"
        leaked = [v for v in rc_v if not ledger.committed(v)]
        assert not leaked, f"{tp}: aborted records readable with read_committed: {leaked[:5]}"
        assert rc_v == want, f"{tp}: read_committed order {rc_v} != {want}"
        assert [v for _, v in view.committed] == want, f"{tp}: the log's markers disagree: {view}"
        assert view.open == [], f"{tp}: transactional records without a marker: {view.open[:5]}"
        assert c.lso(*tp) == c.hw(*tp) == view.hw


class Pids:
    """Every producer id handed out, and by whom; a new id after a restart must be above all of them."""

    def __init__(self) -> None:
        self.by_pid: dict[int, str] = {}

    def note(self, pid: int, owner: str) -> None:
        prev = self.by_pid.setdefault(pid, owner)
        assert prev == owner, f"producer id {pid} handed to {owner!r} was already {prev!r}'s"

    def fresh(self, c: TxnClient) -> int:
        code, pid, epoch = c.init_producer_id(None)
        assert code == NONE and epoch == 0
        if self.by_pid:
            assert pid > max(self.by_pid), f"producer id {pid} after a restart is not above {max(self.by_pid)}"
        self.note(pid, f"idempotent-{pid}")
        return pid


PIDS = Pids()


def begin(c: TxnClient, tid: str, tps: list[tuple[str, int]], timeout_ms: int) -> Txn:
    pid, epoch = c.init_txn(tid, timeout_ms)
    PIDS.note(pid, tid)
    assert c.add_partitions(tid, pid, epoch, tps) == {tp: NONE for tp in tps}
    return Txn(tid, pid, epoch, list(tps))


def assert_ongoing(c: TxnClient, txn: Txn) -> None:
    d = c.describe_txn(txn.tid)
    assert d.error_code == NONE and d.transaction_state == "Ongoing", d
    assert (d.producer_id, d.producer_epoch) == (txn.pid, txn.epoch)
    assert {(t.topic, p) for t in d.topics for p in t.partitions} == set(txn.tps)


def crash_restart(proc: KafkaBroker) -> None:
    proc.kill()
    proc.start()


def fence_with_new_instance(c: TxnClient, txn: Txn) -> None:
    """A new InitProducerId with the same transactional id aborts the old transaction and fences its epoch."""
    pid, epoch = c.init_txn(txn.tid, LONG_MS)
    assert pid == txn.pid and epoch > txn.epoch, (pid, epoch, txn)
    txn.outcome = "abort"
    assert c.describe_txn(txn.tid).transaction_state in ("Empty", "CompleteAbort")
    assert c.end_txn(txn.tid, txn.pid, txn.epoch, True) in FENCED


def await_timeout_abort(c: TxnClient, txn: Txn) -> None:
    d = c.wait_txn_state(txn.tid, {"CompleteAbort"}, timeout=20)
    assert d.producer_epoch > txn.epoch, "the coordinator's abort did not bump the epoch"
    txn.outcome = "abort"
    assert c.end_txn(txn.tid, txn.pid, txn.epoch, True) in FENCED, "late commit of a timed-out transaction"


def crash_topics(bootstrap: str, base: str, n: int = 2) -> list[str]:
    """``n`` topics named after ``base``, with small segments, so that open transactions span several."""
    names = [f"{base}-{i}" for i in range(n)]
    make_topics(bootstrap, *((name, PARTITIONS) for name in names), config={"segment.bytes": str(SEGMENT_BYTES)})
    return names


# ---------------------------------------------------------------------------------------- tests
def test_kill_after_add_partitions(cbroker: KafkaBroker, topic_name: str) -> None:
    ledger = Ledger()
    with TxnClient(cbroker.bootstrap) as c:
        t1, t2 = crash_topics(cbroker.bootstrap, topic_name)
        tps = [(t1, 0), (t1, 1), (t2, 2)]
        PIDS.fresh(c)
        done = begin(c, f"{topic_name}-done", tps, LONG_MS)  # a committed transaction before the crash
        for tp in tps:
            ledger.produce(c, done, tp)
        assert c.end_txn(done.tid, done.pid, done.epoch, True) == NONE
        done.outcome = "commit"
        timed = begin(c, f"{topic_name}-timed", tps, SHORT_MS)
        fenced = begin(c, f"{topic_name}-fenced", tps, LONG_MS)
        assert_ongoing(c, timed)
        assert_ongoing(c, fenced)
    crash_restart(cbroker)
    with TxnClient(cbroker.bootstrap) as c:
        PIDS.fresh(c)
        assert_ongoing(c, fenced)  # loaded back from __transaction_state
        fence_with_new_instance(c, fenced)
        await_timeout_abort(c, timed)
        # the fenced producer cannot add partitions or write any more
        assert set(c.add_partitions(fenced.tid, fenced.pid, fenced.epoch, tps).values()) <= FENCED
        r = c.produce_batch(t1, 0, txn_batch([b"zombie"], fenced.pid, fenced.epoch, 0), fenced.tid)
        assert r.error_code != NONE
        check_log(c, ledger)


def test_kill_after_produce(cbroker: KafkaBroker, topic_name: str) -> None:
    ledger = Ledger()
    with TxnClient(cbroker.bootstrap) as c:
        t1, t2 = crash_topics(cbroker.bootstrap, topic_name)
        tps = [(t1, 0), (t1, 1), (t2, 0)]
        ipid = PIDS.fresh(c)
        iseq: dict[tuple[str, int], int] = {}
        for tp in tps:
            ledger.plain(c, ipid, iseq, tp)
        survivor = begin(c, f"{topic_name}-survivor", tps, LONG_MS)  # committed by its producer after restart
        fenced = begin(c, f"{topic_name}-fenced", tps, LONG_MS)  # fenced by a new instance after restart
        timed = begin(c, f"{topic_name}-timed", tps, SHORT_MS)  # aborted by its timeout after restart
        for round_ in range(3):
            for tp in tps:
                for txn in (survivor, fenced, timed):
                    ledger.produce(c, txn, tp)
                ledger.plain(c, ipid, iseq, tp)
        for txn in (survivor, fenced, timed):
            assert_ongoing(c, txn)
        first_open = {tp: ledger.batches[tp][0][1] for tp in tps}
        for tp in tps:
            assert c.lso(*tp) == first_open[tp]
            segments = list((cbroker.data_dir / f"{tp[0]}-{tp[1]}").glob("*.log"))
            assert len(segments) >= 2, f"{tp}: no segment roll: the open transactions span one segment only"
    crash_restart(cbroker)
    with TxnClient(cbroker.bootstrap) as c:
        PIDS.fresh(c)
        # the open transactions still hold the LSO: nothing of theirs (nor after them) is readable
        for tp in tps:
            assert c.lso(*tp) == first_open[tp], f"{tp}: LSO not recovered after the crash"
            assert [v for _, v in c.read(*tp, READ_COMMITTED)] == ledger.sent[tp][:1]
        assert_ongoing(c, survivor)
        assert_ongoing(c, fenced)
        # retries of acked batches (first and last of each partition) are answered with the original offsets
        for tp in tps:
            hw = c.hw(*tp)
            for batch, base, txn in ledger.batches[tp]:
                if txn is survivor:
                    r = c.produce_batch(tp[0], tp[1], batch, txn.tid)
                    assert (r.error_code, r.base_offset) == (NONE, base), f"{tp}: retry after the crash"
            assert c.hw(*tp) == hw, f"{tp}: a retried batch was stored again"
        fence_with_new_instance(c, fenced)
        r = c.produce_batch(t1, 0, txn_batch([b"zombie"], fenced.pid, fenced.epoch, fenced.seq[(t1, 0)]), fenced.tid)
        assert r.error_code != NONE
        assert c.end_txn(survivor.tid, survivor.pid, survivor.epoch, True) == NONE
        survivor.outcome = "commit"
        await_timeout_abort(c, timed)
        for tp in tps:
            ledger.plain(c, ipid, iseq, tp)  # the same idempotent producer goes on after the restart
        check_log(c, ledger)


def _poll_answer(c: TxnClient) -> int | None:
    """The EndTxn answer if it is already in the socket (non-blocking), else None."""
    ready, _, _ = select.select([c.sock], [], [], 0)
    if not ready:
        return None
    try:
        _, msg = kapi.decode_response(END_TXN, 3, read_frame(c.sock))
    except Exception:  # noqa: BLE001 - a partial frame: treat as not answered
        return None
    return int(msg.error_code)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _broker_log_since(proc: KafkaBroker, pos: int) -> str:
    with open(proc.log_path, "rb") as f:
        f.seek(pos)
        return f.read().decode(errors="replace")


def test_kill_racing_end_txn(cbroker: KafkaBroker, topic_name: str) -> None:
    """EndTxn(commit) sent for several transactions at staggered times (0-1 ms apart) and the broker SIGKILLed
    right after, without waiting (an EndTxn takes a few ms here): each transaction is committed on all its
    partitions or on none, committed if PrepareCommit was durable (or the commit was answered), else aborted.

    The markers of one transaction are appended in one synchronous step (then awaited for fsync together), and a
    SIGKILL loses no page cache, so "markers on some partitions only" cannot be produced by killing the process;
    the cut points reached are printed (-rP)."""
    ledger = Ledger()
    hit: dict[str, int] = {}
    with TxnClient(cbroker.bootstrap) as c:
        t1, t2 = crash_topics(cbroker.bootstrap, topic_name)
    tps = [(t1, 0), (t1, 1), (t1, 2), (t2, 0)]
    for round_, (stagger, kill_delay) in enumerate([(0.0, 0.0), (0.0005, 0.0005), (0.001, 0.003)]):
        conns: list[TxnClient] = []
        txns: list[Txn] = []
        try:
            for i in range(5):
                c = TxnClient(cbroker.bootstrap)
                conns.append(c)
                txn = begin(c, f"{topic_name}-r{round_}-{i}", tps[i % 2:i % 2 + 3], SHORT_MS)
                for tp in txn.tps:
                    ledger.produce(c, txn, tp)
                txns.append(txn)
            # the last one is not ended by its producer: a new instance's InitProducerId fences it instead
            fence_conn = TxnClient(cbroker.bootstrap)
            conns.append(fence_conn)
            fenced = txns.pop()
            fence_conn.send(INIT_PRODUCER_ID, 4, InitProducerIdRequest(
                transactional_id=fenced.tid, transaction_timeout_ms=SHORT_MS, producer_id=-1, producer_epoch=-1))
            for c, txn in zip(conns, txns):
                c.send_end_txn(txn.tid, txn.pid, txn.epoch, True)
                _spin(stagger)
            _spin(kill_delay)
            answered = [_poll_answer(c) for c in conns[:len(txns)]]
            cbroker.kill()
        finally:
            for c in conns:
                c.close()
        log_pos = cbroker.log_path.stat().st_size
        cbroker.start()
        with TxnClient(cbroker.bootstrap) as c:
            PIDS.fresh(c)
            for txn, answer in zip(txns, answered):
                d = c.wait_txn_state(txn.tid, {"CompleteCommit", "CompleteAbort"}, timeout=20)
                txn.outcome = "commit" if d.transaction_state == "CompleteCommit" else "abort"
                if answer == NONE:
                    assert txn.outcome == "commit", f"{txn.tid}: commit answered before the crash, then aborted"
            # the broker logs "completed N transaction(s) left prepared by the previous run: id, id, ..."
            # the fenced one is aborted (by the logged fence, or else by its timeout); its producer is fenced
            d = c.wait_txn_state(fenced.tid, {"CompleteCommit", "CompleteAbort"}, timeout=20)
            assert d.transaction_state == "CompleteAbort" and d.producer_epoch > fenced.epoch, d
            fenced.outcome = "abort"
            assert c.end_txn(fenced.tid, fenced.pid, fenced.epoch, True) in FENCED
            completed_after_load = {tid for line in _broker_log_since(cbroker, log_pos).splitlines()
                                    if "left prepared by the previous run: " in line
                                    for tid in line.split("left prepared by the previous run: ", 1)[1].split(", ")}
            for txn, answer in zip(txns, answered):
                # markers on a partition before the crash show up twice: recovery writes them all again
                markers = [sum(1 for _, pid, commit in c.log_view(*tp).markers if pid == txn.pid and commit)
                           for tp in txn.tps]
                prepared = txn.tid in completed_after_load
                if prepared:
                    assert txn.outcome == "commit", f"{txn.tid}: PrepareCommit was durable, yet it was aborted"
                    written = sum(1 for m in markers if m == 2)
                    case = ("PrepareCommit logged, no marker" if written == 0 else
                            "markers partly written" if written < len(markers) else "all markers, no Complete")
                elif txn.outcome == "commit":
                    case = "complete before the crash" + (" (answered)" if answer == NONE else "")
                else:
                    case = "PrepareCommit not logged (aborted by timeout)"
                    assert markers == [0] * len(markers)
                hit[case] = hit.get(case, 0) + 1
                if case == "markers partly written":
                    print("partly:", txn.tid, txn.tps, markers)
            check_log(c, ledger)
    print("cut points hit:", hit)


def _cut_complete_records(data_dir: Path, tids: set[str]) -> int:
    """Simulate a power cut that lost what was never fsynced: the Complete* records of ``tids`` at the end of their
    ``__transaction_state`` partitions (written without waiting for their fsync) are cut off. Returns how many."""
    from oncelog.coordinator.transaction.partitioner import partition_for
    from oncelog.coordinator.transaction.records import decode_key, decode_value
    from oncelog.coordinator.transaction.state import TxnState
    from oncelog.protocol.records import decode_records, iter_batch_headers

    cut = 0
    for index in sorted({partition_for(t, 50) for t in tids}):
        seg = sorted((data_dir / f"__transaction_state-{index}").glob("*.log"))[-1]
        buf = seg.read_bytes()
        headers = list(iter_batch_headers(buf))
        end = len(buf)
        while headers:
            h = headers[-1]
            recs = decode_records(buf, h.position)
            if not all(r.key is not None and decode_key(r.key) in tids and r.value is not None
                       and decode_value(r.value).state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                       for r in recs):
                break
            end = h.position
            headers.pop()
            cut += 1
        with open(seg, "r+b") as f:
            f.truncate(end)
    return cut


@pytest.mark.parametrize("power_cut", [False, True], ids=["kill", "kill+power-cut"])
def test_kill_after_end_txn_answered(cbroker: KafkaBroker, topic_name: str, power_cut: bool) -> None:
    """The outcome of an answered EndTxn stands. ``power_cut``: CompleteCommit/CompleteAbort are applied without
    waiting for their own fsync (EndTxn answers once the markers are durable), so they are also cut from the log,
    as a power cut could lose them: the restart finds PrepareCommit/PrepareAbort and completes both transactions
    again (markers written twice, harmlessly); the producer's retry and next transaction work the same."""
    ledger = Ledger()
    with TxnClient(cbroker.bootstrap) as c:
        t1, t2 = crash_topics(cbroker.bootstrap, topic_name)
        tps = [(t1, 0), (t1, 2), (t2, 1)]
        ipid = PIDS.fresh(c)
        iseq: dict[tuple[str, int], int] = {}
        com = begin(c, f"{topic_name}-commit", tps, LONG_MS)
        ab = begin(c, f"{topic_name}-abort", tps, LONG_MS)
        for tp in tps:
            ledger.produce(c, com, tp)
            ledger.produce(c, ab, tp)
            ledger.plain(c, ipid, iseq, tp)
        assert c.end_txn(ab.tid, ab.pid, ab.epoch, False) == NONE
        ab.outcome = "abort"
        assert c.end_txn(com.tid, com.pid, com.epoch, True) == NONE
        com.outcome = "commit"
        cbroker.kill()  # right after the answer
    if power_cut:
        assert _cut_complete_records(cbroker.data_dir, {com.tid, ab.tid}) == 2
    cbroker.start()
    with TxnClient(cbroker.bootstrap) as c:
        PIDS.fresh(c)
        assert c.wait_txn_state(com.tid, {"CompleteCommit"}, timeout=20).producer_epoch == com.epoch
        assert c.wait_txn_state(ab.tid, {"CompleteAbort"}, timeout=20).producer_epoch == ab.epoch
        check_log(c, ledger)
        # a retry of the answered EndTxn is still answered the same; the producer carries on with a new one
        assert c.end_txn(com.tid, com.pid, com.epoch, True) == NONE
        assert c.add_partitions(com.tid, com.pid, com.epoch, tps[:1]) == {tps[0]: NONE}
        ledger.produce(c, com, tps[0])
        assert c.end_txn(com.tid, com.pid, com.epoch, True) == NONE
        check_log(c, ledger)


def test_clean_restart_with_open_transaction(cbroker: KafkaBroker, topic_name: str) -> None:
    """The clean-shutdown path (producer state from the snapshot taken at close): same guarantees."""
    ledger = Ledger()
    with TxnClient(cbroker.bootstrap) as c:
        t1, _ = crash_topics(cbroker.bootstrap, topic_name)
        tps = [(t1, 0), (t1, 1), (t1, 2)]
        ipid = PIDS.fresh(c)
        iseq: dict[tuple[str, int], int] = {}
        done = begin(c, f"{topic_name}-done", tps, LONG_MS)
        for tp in tps:
            ledger.produce(c, done, tp)
        assert c.end_txn(done.tid, done.pid, done.epoch, False) == NONE
        done.outcome = "abort"
        open_ = begin(c, f"{topic_name}-open", tps, LONG_MS)
        for tp in tps:
            ledger.produce(c, open_, tp)
            ledger.plain(c, ipid, iseq, tp)
        first_open = {tp: ledger.batches[tp][-1][1] for tp in tps}
    assert cbroker.stop() == 0
    cbroker.start()
    with TxnClient(cbroker.bootstrap) as c:
        PIDS.fresh(c)
        assert_ongoing(c, open_)
        for tp in tps:
            assert c.lso(*tp) == first_open[tp], f"{tp}: LSO not restored after a clean restart"
            batch, base, _ = ledger.batches[tp][-1]
            r = c.produce_batch(tp[0], tp[1], batch, open_.tid)
            assert (r.error_code, r.base_offset) == (NONE, base)
            ledger.plain(c, ipid, iseq, tp)  # the idempotent producer continues its sequence
        assert c.end_txn(open_.tid, open_.pid, open_.epoch, True) == NONE
        open_.outcome = "commit"
        check_log(c, ledger)
