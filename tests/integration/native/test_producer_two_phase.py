"""KIP-939 two-phase commit and coordinator timeouts with the native producer, on a dedicated broker with
``transaction.two.phase.commit.enable=true`` whose timed-out-transaction check runs every 500 ms.

Producer A runs in a subprocess: it prepares a transaction, prints its PreparedTxnState, and then either closes
or is SIGKILLed. Producer B (same transactional.id) keeps the prepared transaction with
``init_transactions(keep_prepared_txn=True)`` and completes it: commit when the state matches, abort otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_producer_transactions import read_values

from oncelog.client import Admin, KafkaError, PreparedTxnState, Producer
from oncelog.client.producer import TxnState
from oncelog.testing.pytest_plugin import KafkaBroker

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]
T = 20.0

_PRODUCER_A = textwrap.dedent("""
    import os, signal, sys, time
    from oncelog.client import Producer
    bootstrap, txn_id, topic, n, ending = sys.argv[1:6]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2,
                  "transaction.two.phase.commit.enable": True, "transaction.timeout.ms": 2000})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(int(n)):
        p.produce(topic, f"2pc-{i}", key=str(i))
    state = p.prepare_transaction()
    assert p.prepared_transaction() == state
    print(state, flush=True)
    if ending == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    p.close()
""")


@pytest.fixture(scope="module")
def twopc_broker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process: the transaction timeouts the tests wait out run on the broker's clock, apart from the clients
    proc = kafka_module_broker_factory({"num.partitions": 3, "transaction.two.phase.commit.enable": "true",
                                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500},
                                       in_process=False)
    yield proc
    proc.stop()


@pytest.fixture
def topic(twopc_broker: KafkaBroker, topic_name: str) -> str:
    with Admin({"bootstrap.servers": twopc_broker.bootstrap}) as admin:
        admin.create_topics(topic_name, 3)
    return topic_name


def prepare_in_subprocess(bootstrap: str, txn_id: str, topic: str, n: int, ending: str) -> PreparedTxnState:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3] / "src"))
    proc = subprocess.run([sys.executable, "-c", _PRODUCER_A, bootstrap, txn_id, topic, str(n), ending],
                          check=False, capture_output=True, text=True, timeout=60, env=env)
    if ending == "kill":
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
    return PreparedTxnState.parse(proc.stdout.strip().splitlines()[-1])


def producer_b(bootstrap: str, txn_id: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "transaction.two.phase.commit.enable": True})


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_prepared_transaction_is_kept_and_committed_by_a_new_producer(
        twopc_broker: KafkaBroker, topic: str, ending: str) -> None:
    bootstrap = twopc_broker.bootstrap
    txn_id = f"2pc-{uuid.uuid4().hex}"
    state = prepare_in_subprocess(bootstrap, txn_id, topic, 30, ending)
    assert read_values(bootstrap, [topic], 0, "read_committed", settle=1.0) == []  # prepared, not committed
    with producer_b(bootstrap, txn_id) as b:
        b.init_transactions(T, keep_prepared_txn=True)
        assert b.transaction_state is TxnState.PREPARED_TRANSACTION
        assert b.prepared_transaction() == state
        assert b.complete_transaction(state, T) is True
        assert b.transaction_state is TxnState.READY and b.prepared_transaction() is None
        assert b.complete_transaction(state, T) is False  # already completed: a no-op
        b.begin_transaction()  # and the producer goes on normally
        b.produce(topic, "next")
        b.commit_transaction(T)
    got = read_values(bootstrap, [topic], 31, "read_committed")
    assert sorted(got) == sorted([f"2pc-{i}".encode() for i in range(30)] + [b"next"])


def test_mismatching_state_aborts_the_prepared_transaction(twopc_broker: KafkaBroker, topic: str) -> None:
    bootstrap = twopc_broker.bootstrap
    txn_id = f"2pc-{uuid.uuid4().hex}"
    state = prepare_in_subprocess(bootstrap, txn_id, topic, 20, "kill")
    with producer_b(bootstrap, txn_id) as b:
        b.init_transactions(T, keep_prepared_txn=True)
        assert b.prepared_transaction() == state
        stale = PreparedTxnState(state.producer_id, state.epoch - 1 if state.epoch else state.epoch + 7)
        assert b.complete_transaction(stale, T) is False
        assert b.transaction_state is TxnState.READY
    assert read_values(bootstrap, [topic], 0, "read_committed", settle=1.5) == []
    assert len(read_values(bootstrap, [topic], 20, "read_uncommitted")) == 20  # written, then aborted


def test_plain_init_aborts_a_prepared_transaction(twopc_broker: KafkaBroker, topic: str) -> None:
    bootstrap = twopc_broker.bootstrap
    txn_id = f"2pc-{uuid.uuid4().hex}"
    prepare_in_subprocess(bootstrap, txn_id, topic, 10, "close")
    with producer_b(bootstrap, txn_id) as b:
        b.init_transactions(T)  # keep_prepared_txn=False: the broker aborts it
        assert b.transaction_state is TxnState.READY and b.prepared_transaction() is None
    assert read_values(bootstrap, [topic], 0, "read_committed", settle=1.5) == []


def test_prepared_transaction_outlives_the_transaction_timeout(twopc_broker: KafkaBroker, topic: str) -> None:
    bootstrap = twopc_broker.bootstrap
    txn_id = f"2pc-{uuid.uuid4().hex}"
    state = prepare_in_subprocess(bootstrap, txn_id, topic, 15, "kill")  # transaction.timeout.ms=2000 in A
    time.sleep(4.0)  # > 2x the timeout, with the abort check every 500 ms
    with producer_b(bootstrap, txn_id) as b:
        b.init_transactions(T, keep_prepared_txn=True)
        assert b.prepared_transaction() == state
        assert b.complete_transaction(state, T) is True
    assert len(read_values(bootstrap, [topic], 15, "read_committed")) == 15


def test_coordinator_aborts_a_timed_out_transaction(twopc_broker: KafkaBroker, topic: str) -> None:
    bootstrap = twopc_broker.bootstrap
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"to-{uuid.uuid4().hex}",
                   "transaction.timeout.ms": 3000}) as p:
        p.init_transactions(T)
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, f"late-{i}")
        assert p.flush(T) == 0
        time.sleep(4.5)
        with pytest.raises(KafkaError):
            p.commit_transaction(T)
        assert p.transaction_state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR)
    assert read_values(bootstrap, [topic], 0, "read_committed", settle=1.5) == []
    assert len(read_values(bootstrap, [topic], 10, "read_uncommitted")) == 10


def test_close_in_transaction_leaves_a_2pc_transaction_open(twopc_broker: KafkaBroker, topic: str) -> None:
    """close() in IN_TRANSACTION does not abort: the next instance can still keep (and commit) it."""
    bootstrap = twopc_broker.bootstrap
    txn_id = f"2pc-{uuid.uuid4().hex}"
    with producer_b(bootstrap, txn_id) as a:
        a.init_transactions(T)
        a.begin_transaction()
        for i in range(5):
            a.produce(topic, f"open-{i}")
        pid = a._async.txn.pid if a._async.txn else None
    assert pid is not None
    with producer_b(bootstrap, txn_id) as b:
        b.init_transactions(T, keep_prepared_txn=True)
        kept = b.prepared_transaction()
        assert kept == PreparedTxnState(pid.producer_id, pid.epoch)
        assert b.complete_transaction(kept, T)
    assert len(read_values(bootstrap, [topic], 5, "read_committed")) == 5


def test_keep_prepared_needs_the_two_phase_setting(twopc_broker: KafkaBroker) -> None:
    with Producer({"bootstrap.servers": twopc_broker.bootstrap, "transactional.id": "no-2pc"}) as p, \
            pytest.raises(KafkaError, match="transaction.two.phase.commit.enable"):
        p.init_transactions(T, keep_prepared_txn=True)


def test_two_phase_refused_by_a_broker_without_it(bootstrap: str) -> None:
    with producer_b(bootstrap, f"2pc-{uuid.uuid4().hex}") as p:
        with pytest.raises(KafkaError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
            p.init_transactions(T)
        assert p.transaction_state is TxnState.FATAL_ERROR
