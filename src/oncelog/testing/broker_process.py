"""Run a real oncelog broker as a child process (tests, crash tests, benchmarks)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["BrokerProcess", "free_port"]


def _ephemeral_ports() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A free 127.0.0.1 port outside the kernel's ephemeral range. A test broker that is killed and started again on
    its port must find it free: an ephemeral port can meanwhile be taken by any outgoing connection, including a
    client's TCP self-connect while it retries that very port with nobody listening."""
    lo, hi = _ephemeral_ports()
    span = range(10_000, lo) if lo > 11_000 else range(hi + 1, 65_536)
    for _ in range(500):
        port = random.choice(span)  # random, so parallel test runs rarely pick the same one
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything there is taken: any port the kernel gives
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """``python -m oncelog serve`` on 127.0.0.1 with its own data folder; start, stop (SIGTERM), kill (SIGKILL),
    pause (SIGSTOP) and resume (SIGCONT). ``new_session``: the broker does not get the terminal's Ctrl-C (its owner
    stops it).

    Fault injection: ``host`` and ``wrap`` run it elsewhere, e.g. on a host of an ``oncelog.testing.netns``
    network (``host=net.ip(1), wrap=net.host(1).command([])``: ``ip netns exec`` execs the broker, so ``proc.pid``
    is the broker's and SIGKILL/SIGSTOP reach it); ``clock_control`` runs it with skewable clocks
    (``oncelog.testing.clock_skew``)."""

    def __init__(self, data_dir: Path, port: int | None = None, settings: dict[str, object] | None = None,
                 log_path: Path | None = None, env: dict[str, str] | None = None, host: str = "127.0.0.1",
                 wrap: list[str] | None = None, clock_control: Path | None = None, new_session: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.env = dict(env or {})  # extra environment of the broker process (fault injection hooks)
        self.host = host
        self.wrap = list(wrap or [])
        self.clock_control = clock_control
        self.port = port or free_port()
        self.settings = dict(settings or {})
        self.log_path = log_path or self.data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.new_session = new_session
        self._paused = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to listen (``wait_ready`` does)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        main = ["oncelog"] if self.clock_control is None else ["oncelog.testing.clock_skew", str(self.clock_control)]
        cmd = [*self.wrap, sys.executable, "-m", *main, "serve", "--data-dir", str(self.data_dir)]
        if "listeners" not in self.settings:  # several listeners: ``port`` is the one wait_ready() connects to
            cmd += ["--listen", f"{self.host}:{self.port}"]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=self.new_session)
        log.close()
        self._paused = False

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the broker accepts connections (in a cluster: once it has registered)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker not listening on {self.bootstrap} after {timeout} s; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """Clean shutdown (SIGTERM); returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            if self._paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)  # the broker logs where each of its tasks waits
                time.sleep(1.0)
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        self._paused = False
        return rc

    def kill(self) -> None:
        """SIGKILL: no flush, no clean-shutdown marker."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self._paused = False

    def pause(self) -> None:
        """SIGSTOP: the process stops; its connections stay open and the kernel still accepts new ones."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"broker at {self.bootstrap} is not running")
        self.proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def restart(self, timeout: float = 30.0) -> "BrokerProcess":
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "BrokerProcess":
        # ``with BrokerProcess(...).start() as b`` must not start a second process: that one fails to bind the
        # port while the first, no longer referenced, outlives the test
        return self if self.alive() else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
