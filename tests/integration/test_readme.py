"""The README as a new user follows it: the broker ``make serve`` starts (its command, on another port and
data folder), the command-line tour, the confluent-kafka producer and consumer, and the Python copier of
docs/client.md run as written against it (issue 17 finding 8)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest

from oncelog.testing.broker_process import free_port

from doc_blocks import ROOT, block, serve_command

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def make_serve(tmp_path: Path) -> Iterator[str]:
    """``make serve``'s broker, moved to a free port and a temporary data folder (later flags win)."""
    port = free_port()
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen([*serve_command(), "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "data")],
                            stdout=log, stderr=subprocess.STDOUT)
    bs = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "broker.log").read_text()
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    yield bs
    proc.terminate()
    assert proc.wait(30) == 0
    log.close()


def test_make_serve_enables_two_phase_commit() -> None:
    assert "transaction.two.phase.commit.enable=true" in serve_command()


def test_cli_tour_runs_as_written(make_serve: str, tmp_path: Path) -> None:
    script = tmp_path / "tour.sh"
    script.write_text("set -euo pipefail\n" + block("cli-tour"))
    r = subprocess.run(["bash", str(script)], cwd=ROOT, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "ONCELOG_BOOTSTRAP_SERVER": make_serve, "COLUMNS": "200"})
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    lines = r.stdout.splitlines()
    assert sorted(x for x in lines if x.startswith("u")) == ["u1\t/checkout", "u1\t/home", "u2\t/cart"]
    assert sorted(x for x in lines if x.startswith("/")) == ["/cart", "/checkout", "/home"]  # the group's read
    assert sorted(x.split("@")[1].split(" ", 1)[1] for x in lines if x.startswith("clicks[")) == [
        "u1 /checkout", "u1 /home", "u2 /cart"]  # -o -3 -f: the three records, kcat's format
    assert "Traceback" not in r.stderr and "error:" not in r.stderr


def test_confluent_quickstart_runs_as_written(make_serve: str, tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    text = block("confluent-quickstart")
    assert '"127.0.0.1:9092"' in text
    script.write_text(text.replace("127.0.0.1:9092", make_serve))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"user-{i % 3} hello {i}" for i in range(10)]  # one partition: in order
    again = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout == r.stdout  # the group's committed offsets: a second run reads only its own records


@pytest.mark.parametrize("client", ["oncelog.client", "confluent_kafka"])
def test_python_copier_runs_as_written(make_serve: str, tmp_path: Path, client: str) -> None:
    """As written, and with confluent-kafka's imports instead (the drop-in claim of docs/client.md)."""
    script = tmp_path / "copier.py"
    text = block("python-copier").replace("127.0.0.1:9092", make_serve)
    assert "from oncelog.client import " in text and "from oncelog.client.admin import " in text
    script.write_text(text.replace("oncelog.client", client))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert sum(int(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("copied ")) == 1000
    c = ck.Consumer({"bootstrap.servers": make_serve, "group.id": f"check-{uuid.uuid4().hex}",
                     "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.subscribe(["output"])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < 1000 and time.monotonic() < deadline:
        out += [m.value() for m in c.consume(500, 0.5) if m.error() is None]
    c.close()
    assert sorted(out) == sorted(f"RECORD {i}".encode() for i in range(1000))


def test_secured_broker_runs_as_written(tmp_path: Path) -> None:
    """The README's secured single node: the first SCRAM user before the first start, ACLs on, a topic, a user and
    its ACLs made through the broker by the admin; then alice may write to orders and to nothing else."""
    port = free_port()
    text = block("secured-broker").replace("9095", str(port))
    script = tmp_path / "secure.sh"
    script.write_text("set -euo pipefail\n" + text + '\necho "broker pid: $!"\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ONCELOG_BOOTSTRAP_SERVER", None)
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as o, err.open("w") as e:  # files, not pipes: the broker started with & keeps them open
        rc = subprocess.run(["bash", str(script)], cwd=tmp_path, stdout=o, stderr=e, timeout=240, env=env).returncode
    stdout, stderr = out.read_text(), err.read_text()
    pids = [int(line.split(": ")[1]) for line in stdout.splitlines() if line.startswith("broker pid: ")]
    try:
        assert rc == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
        assert "Traceback" not in stderr and "error:" not in stderr
        alice = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret"}
        reports: list[ck.KafkaError | None] = []
        p = ck.Producer({**alice, "message.timeout.ms": 10000})
        p.produce("orders", b"paid", on_delivery=lambda err, msg: reports.append(err))
        p.produce("other", b"not allowed", on_delivery=lambda err, msg: reports.append(err))
        assert p.flush(30) == 0
        assert sorted(str(e.name()) if e else "ok" for e in reports) == ["TOPIC_AUTHORIZATION_FAILED", "ok"]
    finally:
        for pid in pids:
            os.kill(pid, 15)
        for pid in pids:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
