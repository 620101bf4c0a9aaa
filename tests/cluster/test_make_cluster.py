"""``make cluster`` (``python -m oncelog.testing.cluster``): etcd and three brokers in the foreground, their logs on
the terminal, two-phase commit on; a broker that dies is reported at once with the command that restarts it, and
Ctrl-C, even twice, stops every process it started (the restarted broker too) and exits 0."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource

from oncelog.testing.broker_process import free_port

from helpers.cluster import etcd_or_skip


def _wait_for(out: Path, proc: subprocess.Popen[bytes], cond: Callable[[str], bool], what: str,
              timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = out.read_text()
        if cond(text):
            return text
        assert proc.poll() is None and time.monotonic() < deadline, f"{what}:\n{text}"
        time.sleep(0.2)


def test_make_cluster_reports_a_dead_broker_restarts_it_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    etcd_or_skip()
    ports = [free_port() for _ in range(3)]
    data = tmp_path / "cluster"
    out_path = tmp_path / "out.txt"
    out = open(out_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", "oncelog.testing.cluster", "--data-dir", str(data), "--ports",
                             ",".join(map(str, ports)), "--etcd-port", str(free_port())],
                            stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    restarted_pid = None
    try:
        text = _wait_for(out_path, proc, lambda t: "Ctrl-C stops it" in t, "the cluster did not come up")
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[0]}"})
        md = admin.list_topics(timeout=30)
        assert sorted(b.port for b in md.brokers.values()) == sorted(ports)
        # two-phase commit on every broker, as `make serve` (the Spark sink refuses brokers without it)
        for node in (1, 2, 3):  # librdkafka asks one broker resource per call
            res = ConfigResource("broker", str(node))
            got = admin.describe_configs([res])[res].result(30)
            assert got["transaction.two.phase.commit.enable"].value == "true", node

        found = re.search(r"2: pid (\d+)", text)
        assert found, text
        os.kill(int(found.group(1)), signal.SIGKILL)  # a newcomer trying a failover
        text = _wait_for(out_path, proc, lambda t: "*** restart it with:" in t, "the dead broker was not reported",
                         timeout=30)
        report = text[text.index("*** broker 2"):]
        assert "exited with exit code -9 (killed by SIGKILL)" in report, report
        assert str((data / "broker-2.log").resolve()) in report, report
        command = re.search(r"restart it with: (kill -USR1 \d+)", report)
        assert command and command.group(1) == f"kill -USR1 {proc.pid}", report
        subprocess.run(command.group(1), shell=True, check=True)  # the exact command it printed
        text = _wait_for(out_path, proc, lambda t: "*** broker 2 is back" in t, "broker 2 did not come back")
        back = re.search(r"broker 2 is back on \S+ \(pid (\d+)", text)
        assert back, text
        restarted_pid = int(back.group(1))
        deadline = time.monotonic() + 60
        while sorted(b.port for b in admin.list_topics(timeout=30).brokers.values()) != sorted(ports):
            assert time.monotonic() < deadline, "broker 2 did not register again"
            time.sleep(0.5)

        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)  # a second Ctrl-C must not leave anything behind
        assert proc.wait(90) == 0, out_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out_path.read_text()
    for name in ("etcd", "broker 1", "broker 2", "broker 3"):
        assert any(line.startswith(f"{name} ") for line in text.splitlines()), name  # every process's log, prefixed
    assert text.count("oncelog broker stopped cleanly") == 3, text  # the restarted broker stopped cleanly too
    assert "Traceback" not in text and "exited with {" not in text and "error:" not in text, text
    # a cluster to use, not a test's: no broker opens the faults' control channel (ONCELOG_TEST_CONTROL), and etcd
    # finds its data directory private (it warns at every start otherwise)
    assert "test control channel" not in text and "permission" not in text, text
    for port in ports:  # nothing left running: nobody listens on the ports any more
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    assert restarted_pid is not None
    try:
        os.kill(restarted_pid, 0)
        raise AssertionError(f"the restarted broker (pid {restarted_pid}) still runs")
    except ProcessLookupError:
        pass
