"""The randomized exactly-once workload of ``test_random_workload`` with network partitions instead of kills.

The broker runs on its own host of an ``oncelog.testing.netns`` network; the workload's producers and consumers
run in the test process, the network's client. At random moments the client is cut from the broker for 1.5-5 s,
in one of three shapes: both directions, requests lost (client -> broker), responses lost (broker -> client: the
broker appends what it is sent, the client never hears so), and healed again. Producers run with short request
timeouts, so requests time out during a cut and are retried once it heals: the retry of a produce whose response
was lost is exactly what idempotence must deduplicate. Each cut is checked to have happened (a connection attempt
to the broker times out during it and succeeds after it) and the run reports, per cut, the client errors that
fell in it and the acknowledgements it held back.

The mutation variant disables idempotence in the non-transactional writers (``enable.idempotence=false``, still
acks=all with retries): the checker must then report duplicates, which shows that the clean run's verdict means
something.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.broker_process import BrokerProcess
from oncelog.testing.netns import CLIENT, Drop, Network, require_netns

from helpers.checker import ABORT, COMMIT, OK, History, Send, check
from helpers.workload import PARTITIONS, TOPIC, Workload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

RUN_SECONDS = 28
BROKER = 1  # the broker's host
PORT = 9092
SHAPES: dict[str, set[Drop]] = {
    "both": {(CLIENT, BROKER), (BROKER, CLIENT)},
    "requests-lost": {(CLIENT, BROKER)},
    "responses-lost": {(BROKER, CLIENT)},
}
# requests time out well within a cut, so they fail and are retried while it lasts
CLIENT_TIMEOUTS = {"request.timeout.ms": 1500, "socket.timeout.ms": 2500}


@pytest.fixture
def netbroker(tmp_path: Path) -> Iterator[tuple[Network, BrokerProcess]]:
    require_netns()
    with Network(hosts=1) as net:
        proc = BrokerProcess(tmp_path / "data", port=PORT, host=net.ip(BROKER), wrap=net.host(BROKER).command([]),
                             settings={"num.partitions": PARTITIONS, "log.segment.bytes": 512 * 1024,
                                       "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
        proc.start()
        try:
            yield net, proc
        finally:
            proc.kill()


class FailureLog:
    """librdkafka's log lines about failed requests (REQTMOUT: a request timed out in flight) and connections
    (FAIL), with the time the client reported them."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self.logger = logging.getLogger(f"rdkafka-failures-{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        handler = logging.Handler()
        handler.emit = self._record  # type: ignore[method-assign]
        self.logger.addHandler(handler)

    def _record(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith(("REQTMOUT", "FAIL")):
            self.events.append((time.monotonic(), msg[:200]))


def reachable(host: str, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, PORT), timeout=timeout):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("idempotence", [True, False], ids=["partitions", "partitions-without-idempotence"])
def test_random_workload_with_network_partitions(netbroker: tuple[Network, BrokerProcess], tmp_path: Path,
                                                  idempotence: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    net, broker = netbroker
    seed = int(os.environ.get("EOS_SEED", int.from_bytes(os.urandom(4), "big")))
    rnd = random.Random(seed)
    boot = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)

    failures = FailureLog()
    conf: dict[str, Any] = {**CLIENT_TIMEOUTS, "logger": failures.logger}
    h = History()
    stop = threading.Event()
    idem_conf = conf if idempotence else {**conf, "enable.idempotence": False}  # the mutation
    w = Workload(h, boot, rnd, stop, conf, idem_conf)
    writers, readers = w.writers, w.readers

    def acked() -> int:
        return sum(1 for s in h.of(Send) if s.outcome == OK)

    t0 = time.monotonic()
    cuts: list[dict[str, Any]] = []
    shapes = sorted(SHAPES)
    rnd.shuffle(shapes)  # then in turn: every shape in any 3 cuts in a row
    try:
        while time.monotonic() - t0 < RUN_SECONDS - 6:
            time.sleep(rnd.uniform(1.0, 3.0))
            shape = shapes[len(cuts) % len(shapes)]
            start, before = time.monotonic(), acked()
            net.set_drops(SHAPES[shape])
            cut_seen = not reachable(broker.host)  # a connect during the cut must go unanswered
            time.sleep(max(0.0, rnd.uniform(1.5, 5.0) - (time.monotonic() - start)))
            during = acked()
            net.heal()
            end = time.monotonic()
            cuts.append({"at": round(start - t0, 1), "shape": shape, "seconds": round(end - start, 1),
                         "cut_seen": cut_seen, "acked_before": before, "acked_during": during - before})
        time.sleep(max(0.0, RUN_SECONDS - (time.monotonic() - t0)))
    finally:
        net.heal()
        stop.set()
    healed_seen = reachable(broker.host, timeout=5)
    ends = w.finish()

    for c in cuts:  # requests that timed out and connections that failed, during or right after each cut
        lo, hi = t0 + c["at"], t0 + c["at"] + c["seconds"] + CLIENT_TIMEOUTS["socket.timeout.ms"] / 1000
        c["failed_requests"] = sum(1 for at, _ in failures.events if lo <= at <= hi)
    rep = check(h, sends_complete=True)
    rep.stats.update(seed=seed, cuts=cuts, ends=ends, client_failures=failures.events[:20], **w.stats())
    h.dump(tmp_path / "history.jsonl")
    (tmp_path / "report.json").write_text(rep.to_json())
    print(rep.summary(3))
    for w in writers:
        assert w.error is None, f"{w.name} crashed: {w.error!r}"
    # the faults happened: every cut was seen from the client, requests failed in them, and the network healed
    assert len(cuts) >= 4 and all(c["cut_seen"] for c in cuts) and healed_seen, cuts
    assert sum(1 for c in cuts if c["failed_requests"]) >= len(cuts) // 2, cuts
    if not idempotence:
        assert "duplicate" in rep.found(), f"the mutation went unnoticed (seed {seed}):\n{rep.summary()}"
        return
    assert rep.ok, f"anomalies (seed {seed}, history in {tmp_path}):\n{rep.summary()}"
    # the run must have meant something
    assert rep.stats["txns"][COMMIT] >= 10 and rep.stats["txns"][ABORT] >= 3, rep.stats
    assert rep.stats["acked"] >= 1000, rep.stats
    assert all(r.count > 0 for r in readers), rep.stats["live_polls"]
