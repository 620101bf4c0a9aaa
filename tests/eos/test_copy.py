"""Exactly-once copy (consume-transform-produce) under SIGKILLs, after Kafka's system test transactions_test.

20k integers are seeded into an input topic. Two transactional copier processes (copier.py, one consumer group,
a transactional id each) copy them to an output topic, aborting ~10% of their transactions on purpose after
producing (and seeking back to the group's committed offsets). While they run the test SIGKILLs a random copier
every few seconds and restarts it (same transactional id: the new instance fences the old one), and SIGKILLs
the broker once, restarting it on the same data dir and port. Then the copiers run undisturbed until the
group's committed offsets reach the end of the input, are stopped, and fresh read_committed / read_uncommitted
readers read the output to its end.

Verdict by the history checker over the seeding acks, every copier's recorded polls, sends, seeks and
transaction outcomes, and the final reads: every input exactly once in the read_committed output, and no
aborted read, duplicate, non-monotonic poll or inconsistent offset. With 1 input and 1 output partition the
output must also be in input order; with 2 -> 3 the outputs of one input partition keep their order within each
output partition.

Three clients: confluent-kafka (librdkafka), kafka-python 3 (``send_offsets_to_transaction`` with
``KafkaConsumer.group_metadata()``) and oncelog's own client (``oncelog.client`` Consumer + transactional
Producer). The whole module is skipped while the broker does not serve consumer
groups (probed: ApiVersions lists JoinGroup/SyncGroup/Heartbeat/OffsetCommit/OffsetFetch/TxnOffsetCommit and
FindCoordinator for a group answers).
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncelog.testing.broker_process import BrokerProcess
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.checker import History
from helpers.copiers import CONSUMER_GROUP_SETTINGS, Copiers, group_committed, run_copy, seed_input, stop_and_check

GROUP_APIS = {8: "OffsetCommit", 9: "OffsetFetch", 11: "JoinGroup", 12: "Heartbeat", 14: "SyncGroup",
              28: "TxnOffsetCommit"}


@functools.lru_cache(maxsize=1)
def groups_served() -> tuple[bool, str]:
    """Start a broker, ask ApiVersions for the group APIs and FindCoordinator for a group coordinator."""
    from helpers.txn_raw import TxnClient

    tmp = Path(tempfile.mkdtemp(prefix="oncelog-groups-probe-"))
    proc = BrokerProcess(tmp / "data")
    try:
        proc.start()
        with TxnClient(proc.bootstrap) as c:
            keys = {int(k.api_key) for k in c.api_versions().api_keys}
            missing = [name for key, name in GROUP_APIS.items() if key not in keys]
            if missing:
                return False, f"the broker does not advertise {', '.join(missing)} (consumer groups not wired yet)"
            deadline = time.monotonic() + 2
            while True:
                r = c.find_coordinator("oncelog-probe", key_type=0)
                err = int(getattr(r, "error_code", 0) or 0)
                if hasattr(r, "coordinators") and r.coordinators:
                    err = int(r.coordinators[0].error_code)
                if err == 0:
                    return True, ""
                if time.monotonic() > deadline:
                    return False, f"FindCoordinator(group) answers error {err}: no group coordinator running"
                time.sleep(0.2)
    except Exception as e:  # noqa: BLE001
        return False, f"group probe failed: {e!r}"
    finally:
        proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


pytestmark = [
    pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.skipif(not groups_served()[0], reason=groups_served()[1] or "consumer groups served"),
]


@pytest.fixture
def cbroker(kafka_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process on a disk folder: the kill-burst test SIGKILLs it and the copiers' load runs apart from it
    proc = kafka_broker_factory({
        "num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500, **CONSUMER_GROUP_SETTINGS},
        in_process=False, memory=False)
    yield proc
    proc.kill()


#: each client with one shape in `make test` (with the consumer group protocol test below, every client copies
#: 2 -> 3 or 1 -> 1 and each shape runs with both group protocols); ONCELOG_EOS_FULL_MATRIX=1 runs all six pairs
_SHAPES = {"2in-3out": (2, 3), "1in-1out-ordered": (1, 1)}
_PAIRS = [(c, shape) for c in ("confluent", "kafka-python", "oncelog") for shape in _SHAPES] \
    if os.environ.get("ONCELOG_EOS_FULL_MATRIX") == "1" \
    else [("confluent", "1in-1out-ordered"), ("kafka-python", "2in-3out"), ("oncelog", "1in-1out-ordered")]


@pytest.mark.parametrize("client,shape", _PAIRS, ids=[f"{shape}-{c}" for c, shape in _PAIRS])
def test_exactly_once_copy(cbroker: KafkaBroker, tmp_path: Path, client: str, shape: str) -> None:
    run_copy(cbroker, tmp_path, client, *_SHAPES[shape])


@pytest.mark.parametrize("client", ["confluent", "oncelog"])
def test_exactly_once_copy_with_the_consumer_group_protocol(cbroker: KafkaBroker, tmp_path: Path,
                                                            client: str) -> None:
    """The same copy with copiers in a KIP-848 consumer group (group.protocol=consumer; librdkafka's or oncelog's
    client): their transactional offset commits carry member epochs, and members SIGKILLed and restarted rejoin."""
    run_copy(cbroker, tmp_path, client, 2, 3, extra=("--group-protocol", "consumer"))


# ------------------------------------------------------------------------------------------------ kill burst
# Hardening issue, defect 1: transactional librdkafka copiers (session.timeout.ms=6000, the default
# max.poll.interval.ms of 5 minutes as rebalance timeout) whose members are SIGKILLed and restarted in quick
# succession while the broker also restarts. A restarted copier joins as a new member; killed while its JoinGroup is
# parked, its request task was cancelled with its connection, which cancelled the group's own future: the member
# stopped counting as joined while its 5-minute new-member timeout kept it in the group, and the live members'
# JoinGroup waited minutes (the group sat in PreparingRebalance with dead members). Now a parked request belongs to
# the group whatever happens to the connection (as in Kafka): the copy must finish within LIVENESS_S of the last
# fault, and the checker must find every input exactly once.
BURST_RECORDS = 6_000
BURST_COPIERS = 4
LIVENESS_S = 60  # after the last fault: a few session timeouts (6 s) and rebalances, and the rest of the copy


def run_copy_kill_burst(broker: KafkaBroker, tmp: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    seed = int(os.environ.get("EOS_SEED", int.from_bytes(os.urandom(4), "big")))
    rnd = random.Random(seed)
    in_parts, out_parts = 4, 2
    run = "burst"
    in_topic, out_topic = f"{run}-in", f"{run}-out"
    boot = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    for f in admin.create_topics([NewTopic(in_topic, in_parts, 1), NewTopic(out_topic, out_parts, 1)]).values():
        f.result(20)
    h = History()
    inputs = seed_input(h, boot, in_topic, in_parts, BURST_RECORDS)
    copiers = Copiers(tmp, "confluent", boot, in_topic, out_topic, out_parts, run,
                      extra=("--max-poll-interval-ms", "300000", "--batch", "100"))
    names = [f"copier-{i}" for i in range(BURST_COPIERS)]
    t0 = time.monotonic()
    events: list[str] = []

    def note(what: str) -> None:
        events.append(f"{time.monotonic() - t0:.1f}s {what}")

    def pause(lo: float, hi: float) -> None:
        end = time.monotonic() + rnd.uniform(lo, hi)
        while time.monotonic() < end:
            copiers.revive()
            time.sleep(0.05)

    def burst(victims: list[str], lo: float = 0.2, hi: float = 0.8) -> None:
        """SIGKILL the victims one after the other (each restarted at once: a new member joins)."""
        for v in victims:
            copiers.kill(v)
            note(f"{v} killed")
            pause(lo, hi)

    for n in names:
        copiers.start(n)
    ends = {q: len(v) for q, v in inputs.items()}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(group_committed(boot, f"{run}-group", in_topic, in_parts)
                                                  .get(q, -1) > 0 for q in ends):
        copiers.revive()
        time.sleep(0.5)
    note("copying")
    # wave 1: three members die in quick succession; their restarts join while the group rebalances
    burst(rnd.sample(names, 3))
    # wave 2: kill restarted instances again, about when their JoinGroup is parked
    pause(0.5, 2.0)
    burst(rnd.sample(names, 2))
    # the broker dies and comes back while that rebalance is in progress
    broker.kill()
    note("broker killed")
    time.sleep(rnd.uniform(0.2, 1.0))
    broker.start()
    note("broker restarted")
    # wave 3: members die again while the group recovers from the restart
    pause(1.0, 3.0)
    burst(rnd.sample(names, 2), 0.1, 0.5)
    faults_end = time.monotonic()
    committed: dict[int, int] = {}
    while time.monotonic() < faults_end + LIVENESS_S:
        copiers.revive()
        committed = group_committed(boot, f"{run}-group", in_topic, in_parts)
        if committed == ends:
            break
        time.sleep(0.5)
    finished_s = round(time.monotonic() - faults_end, 1)
    note(f"copy finished {finished_s}s after the last fault" if committed == ends else "copy NOT finished")
    if committed != ends:
        copiers.dump_stacks()
    rep = stop_and_check(copiers, names, h, boot, out_topic, out_parts, inputs)
    rep.stats.update(seed=seed, events=events, committed=committed, input_ends=ends, copier_kills=copiers.kills,
                     copier_restarts=copiers.restarts, copier_exits=copiers.exits[:10], finished_s=finished_s)
    h.dump(tmp / "history.jsonl")
    (tmp / "report.json").write_text(rep.to_json())
    print(rep.summary(3))
    assert committed == ends, (f"the copy did not finish within {LIVENESS_S} s of the last fault: committed "
                               f"{committed}, input ends {ends} (seed {seed}); events {events}; broker log:\n"
                               f"{broker.log_tail()}\ncopier logs:\n{copiers.log_tail()}")
    assert rep.ok, f"anomalies (seed {seed}, history in {tmp}):\n{rep.summary()}"
    # 7 SIGKILLs are sent; one may find its copier already gone (a fenced instance exits by itself)
    assert copiers.kills >= 4 and any(e.endswith("broker restarted") for e in events), events


@pytest.mark.timeout(240)
def test_exactly_once_copy_members_killed_during_rebalance_and_broker_restart(cbroker: KafkaBroker,
                                                                              tmp_path: Path) -> None:
    run_copy_kill_burst(cbroker, tmp_path)
