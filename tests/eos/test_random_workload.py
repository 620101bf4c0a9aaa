"""Randomized exactly-once workload with broker SIGKILLs, judged by the history checker.

One dedicated broker. Several confluent-kafka producers write to a 3-partition topic at the same time:
transactional ones (random sizes, random partitions, ~30% of transactions aborted on purpose) and idempotent
ones (acks=all). A read_committed and a read_uncommitted consumer (assign, from offset 0) record everything
they are handed while it runs. The broker is SIGKILLed 3 times at random moments and restarted on the same data
dir and port; in the power-cut variant each kill lands while the broker has appends not yet durable (it is
stopped inside such a window first) and cuts every segment back to a random length at or above what was fsynced
(``oncelog.testing.power_cut``). Then the writers stop, every transactional id is re-initialised
(which settles its last transaction), and fresh read_committed and read_uncommitted readers read every partition
to its end.

Every send (with its acked offset, or fail/unknown), every transaction's outcome (commit/abort, or unknown when
the client could not tell) and every poll go into one History; ``checker.check`` must find no anomaly: no lost
write, no duplicate, no aborted read, no half-visible transaction, no offset going backwards in a consumer
session, no offset holding two values. The history and report are written to the tmp dir for post-mortems.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing.broker_process import BrokerProcess
from oncelog.testing.power_cut import FSYNC_DELAY_ENV, FSYNC_TRACE_ENV, cut_to_durable, freeze_with_undurable

from helpers.checker import ABORT, COMMIT, OK, History, Send, check
from helpers.workload import PARTITIONS, TOPIC, Workload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

RUN_SECONDS = 28
KILLS = 3


@pytest.fixture
def wbroker(tmp_path: Path, power_cut: bool) -> Iterator[BrokerProcess]:
    # power cut: a slow disk (3 ms per fsync), so written-but-not-durable windows are wide and frequent
    env = {FSYNC_TRACE_ENV: str(tmp_path / "fsync.trace"), FSYNC_DELAY_ENV: "3"} if power_cut else {}
    proc = BrokerProcess(tmp_path / "data", settings={
        "num.partitions": PARTITIONS, "log.segment.bytes": 512 * 1024,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}, env=env)
    proc.start()
    yield proc
    proc.kill()


@pytest.mark.parametrize("power_cut", [False, True], ids=["kill", "kill+power-cut"])
def test_random_workload_with_broker_kills(wbroker: BrokerProcess, tmp_path: Path, power_cut: bool) -> None:
    """``power_cut``: after each SIGKILL every segment is cut back to a random length at or above what the broker
    had fsynced (``oncelog.testing.power_cut``), as a power cut could leave it: acks=all writes, committed
    transactions and everything a reader was shown must survive that too (the durable default's promise)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    seed = int(os.environ.get("EOS_SEED", int.from_bytes(os.urandom(4), "big")))
    rnd = random.Random(seed)
    boot = wbroker.bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)

    h = History()
    stop = threading.Event()
    w = Workload(h, boot, rnd, stop)
    writers, readers = w.writers, w.readers

    t0 = time.monotonic()
    progress: list[tuple[float, int, int]] = []  # (t, acked, live read_committed polls), once a second

    def sleep_until(t: float) -> None:
        while time.monotonic() < t:
            time.sleep(min(1.0, max(0.0, t - time.monotonic())))
            progress.append((round(time.monotonic() - t0, 1), sum(1 for s in h.of(Send) if s.outcome == OK),
                             readers[0].count))

    kill_at = sorted(rnd.uniform(3, RUN_SECONDS - 4) for _ in range(KILLS))
    kills = []
    for at in kill_at:
        sleep_until(t0 + at)
        acked = sum(1 for s in h.of(Send) if s.outcome == OK)
        undurable: dict[Path, tuple[int, int]] = {}
        if power_cut:  # kill it inside a write window: stopped while some appends are not durable yet
            assert wbroker.proc is not None
            undurable = freeze_with_undurable(wbroker.proc.pid, wbroker.data_dir, tmp_path / "fsync.trace", rnd)
        wbroker.kill()
        cut = cut_to_durable(wbroker.data_dir, tmp_path / "fsync.trace", rnd) if power_cut else []
        kills.append((round(time.monotonic() - t0, 1), acked, len(undurable), [str(c) for c in cut]))
        time.sleep(rnd.uniform(0.2, 1.5))
        wbroker.start()
    sleep_until(t0 + RUN_SECONDS)
    stop.set()
    ends = w.finish()

    rep = check(h, sends_complete=True)
    rep.stats.update(seed=seed, kills=kills, progress=progress, ends=ends, **w.stats())
    h.dump(tmp_path / "history.jsonl")
    (tmp_path / "report.json").write_text(rep.to_json())
    print(rep.summary(3))
    for wr in writers:
        assert wr.error is None, f"{wr.name} crashed: {wr.error!r}"
    assert rep.ok, f"anomalies (seed {seed}, history in {tmp_path}):\n{rep.summary()}"
    # the run must have meant something
    assert rep.stats["txns"][COMMIT] >= 20 and rep.stats["txns"][ABORT] >= 5, rep.stats
    assert rep.stats["acked"] >= 2000, rep.stats
    assert all(r.count > 0 for r in readers), rep.stats["live_polls"]
    if power_cut:  # every kill found appends not yet durable, and the cuts took some of them
        assert all(undurable for _, _, undurable, _ in kills), kills
        assert any(cut for _, _, _, cut in kills), kills
