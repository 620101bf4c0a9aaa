"""Run a real oncelog broker as a child process (tests, crash tests, benchmarks)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .faults import BrokerFaults, FaultError, control_command

__all__ = ["BrokerProcess", "free_port"]

#: the broker's environment variable naming its faults' control channel (``oncelog.broker.faults.CONTROL_ENV``)
CONTROL_ENV = "ONCELOG_TEST_CONTROL"


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


class BrokerProcess(BrokerFaults):
    """``python -m oncelog serve`` on 127.0.0.1 with its own data folder; start, stop (SIGTERM), kill (SIGKILL),
    pause (SIGSTOP) and resume (SIGCONT). ``new_session``: the broker does not get the terminal's Ctrl-C (its owner
    stops it).

    Faults on demand (``delay``, ``drop``, ``fail_next``, ``close_connections``: :class:`BrokerFaults`) go over the
    broker's control channel, a unix socket this handle names in the broker's environment (``ONCELOG_TEST_CONTROL``;
    ``control=False``: none). A broker started otherwise has no such channel.

    Fault injection: ``host`` and ``wrap`` run it elsewhere, e.g. on a host of an ``oncelog.testing.netns``
    network (``host=net.ip(1), wrap=net.host(1).command([])``: ``ip netns exec`` execs the broker, so ``proc.pid``
    is the broker's and SIGKILL/SIGSTOP reach it); ``clock_control`` runs it with skewable clocks
    (``oncelog.testing.clock_skew``)."""

    def __init__(self, data_dir: Path, port: int | None = None, settings: dict[str, object] | None = None,
                 log_path: Path | None = None, env: dict[str, str] | None = None, host: str = "127.0.0.1",
                 wrap: list[str] | None = None, clock_control: Path | None = None, new_session: bool = False,
                 control: bool = True) -> None:
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
        self._resume_timer: threading.Timer | None = None
        # a unix socket's path is limited to 107 bytes: a short folder of its own, not the data folder
        self.control_path = Path(tempfile.mkdtemp(prefix="oncelog-ctl-")) / "control.sock" if control else None

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
        if self.control_path is not None:
            self.control_path.parent.mkdir(exist_ok=True)
            self.control_path.unlink(missing_ok=True)  # a killed broker's: wait_ready waits for the new one
            env[CONTROL_ENV] = str(self.control_path)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=self.new_session)
        log.close()
        self._paused = False

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the broker accepts connections (in a cluster: once it has registered) and, with a control channel,
        until that answers too."""
        deadline = time.monotonic() + timeout
        pause = 0.002
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    if self.control_path is None or self.control_path.exists():
                        return
            except OSError:
                pass
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
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
        self._cancel_resume_timer()
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
        self._remove_control()
        return rc

    def kill(self) -> None:
        """SIGKILL: no flush, no clean-shutdown marker."""
        self._cancel_resume_timer()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self._paused = False
        self._remove_control()

    def pause(self, seconds: float | None = None) -> None:
        """SIGSTOP: the process stops; its connections stay open and the kernel still accepts new ones. With
        ``seconds``, SIGCONT follows that much later (this call returns at once); else at :meth:`resume`."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"broker at {self.bootstrap} is not running")
        self._cancel_resume_timer()
        self.proc.send_signal(signal.SIGSTOP)
        self._paused = True
        if seconds is not None:
            self._resume_timer = threading.Timer(seconds, self.resume)
            self._resume_timer.daemon = True
            self._resume_timer.start()

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if threading.current_thread() is not self._resume_timer:
            self._cancel_resume_timer()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self._paused = False

    def _cancel_resume_timer(self) -> None:
        timer, self._resume_timer = self._resume_timer, None
        if timer is not None:
            timer.cancel()

    def _fault_command(self, command: dict[str, Any]) -> dict[str, Any]:
        if self.control_path is None:
            raise FaultError(f"broker at {self.bootstrap} was started without a control channel (control=False)")
        if not self.alive():
            raise FaultError(f"broker at {self.bootstrap} is not running")
        if self._paused:
            raise FaultError(f"broker at {self.bootstrap} is paused: resume() it first")
        return control_command(self.control_path, command)

    def _remove_control(self) -> None:
        if self.control_path is not None:
            shutil.rmtree(self.control_path.parent, ignore_errors=True)

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
