"""``make cluster`` (``python -m oncelog.testing.cluster``): etcd and three brokers in the foreground, their logs on
the terminal; Ctrl-C, even twice, stops every process cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from oncelog.testing.broker_process import free_port

from cluster_helpers import etcd_or_skip


def test_make_cluster_runs_in_the_foreground_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    etcd_or_skip()
    ports = [free_port() for _ in range(3)]
    data = tmp_path / "cluster"
    out = open(tmp_path / "out.txt", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "oncelog.testing.cluster", "--data-dir", str(data), "--ports",
                             ",".join(map(str, ports)), "--etcd-port", str(free_port())],
                            stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        deadline = time.monotonic() + 90
        while "Ctrl-C stops it" not in (tmp_path / "out.txt").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
            time.sleep(0.2)
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports[0]}"}).list_topics(timeout=30)
        assert sorted(b.port for b in md.brokers.values()) == sorted(ports)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)  # a second Ctrl-C must not leave anything behind
        assert proc.wait(90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (tmp_path / "out.txt").read_text()
    for name in ("etcd", "broker 1", "broker 2", "broker 3"):
        assert f"\n{name}" in text  # every process's log, prefixed
    assert text.count("oncelog broker stopped cleanly") == 3
    assert "Traceback" not in text
    for port in ports:  # nothing left running: nobody listens on the ports any more
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
