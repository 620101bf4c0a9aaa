"""Run a real etcd as a child process (cluster tests, ``make cluster``, benchmarks).

etcd comes from the Debian package ``etcd-server`` or any etcd >= 3.4 on PATH (``ONCELOG_ETCD_BIN`` overrides).
One member on two free 127.0.0.1 ports with its own data folder; ``stop`` (SIGTERM), ``kill`` (SIGKILL),
``pause``/``resume`` (SIGSTOP/SIGCONT) and ``start`` again on the same ports and data, as the fault tests need.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from .broker_process import free_port

__all__ = ["EtcdProcess", "EtcdUnavailable", "find_etcd"]


class EtcdUnavailable(RuntimeError):
    """No etcd binary on this machine, or it would not start."""


def find_etcd(explicit: str | None = None) -> str:
    """The etcd binary: ``explicit``, else ``$ONCELOG_ETCD_BIN``, else ``etcd`` on PATH (or Debian's path)."""
    for cand in (explicit, os.environ.get("ONCELOG_ETCD_BIN")):
        if cand:
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
            raise EtcdUnavailable(f"{cand!r} is not an executable etcd binary")
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if found is None:
        raise EtcdUnavailable("no etcd on PATH: install the Debian package etcd-server (apt-get install "
                              "etcd-server) or any etcd >= 3.4, or set ONCELOG_ETCD_BIN")
    return found


class EtcdProcess:
    """A one-member etcd cluster on 127.0.0.1 with its own data folder."""

    def __init__(self, data_dir: Path, client_port: int | None = None, peer_port: int | None = None,
                 log_path: Path | None = None, binary: str | None = None,
                 extra_args: tuple[str, ...] = (), host: str = "127.0.0.1", wrap: list[str] | None = None) -> None:
        """``host`` and ``wrap`` run it elsewhere, e.g. on a host of an ``oncelog.testing.netns`` network
        (``host=net.ip(4), wrap=net.host(4).command([])``: its pid is etcd's, so kill and pause reach it)."""
        self.binary = find_etcd(binary)
        self.host = host
        self.wrap = list(wrap or [])
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        while self.peer_port == self.client_port:
            self.peer_port = free_port()
        self.log_path = log_path or self.data_dir.parent / f"etcd-{self.client_port}.log"
        self.extra_args = tuple(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def endpoint(self) -> str:
        """``host:port`` of the client URL (what ``--metadata etcd://...`` names)."""
        return f"{self.host}:{self.client_port}"

    def start(self, timeout: float = 30.0) -> EtcdProcess:
        if self.alive():
            raise RuntimeError(f"etcd at {self.endpoint} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client = f"http://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        name = f"oncelog-test-{self.client_port}"
        cmd = [*self.wrap, self.binary, "--name", name, "--data-dir", str(self.data_dir),
               "--listen-client-urls", client, "--advertise-client-urls", client,
               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"{name}={peer}", "--initial-cluster-state", "new",
               "--logger", "zap", "--log-level", "warn", *self.extra_args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # its own session: a Ctrl-C of the test run does not reach etcd before the fixture stops it
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self._paused = False
        self._wait_healthy(timeout)
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://{self.endpoint}/health"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise EtcdUnavailable(f"etcd exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if b'"health":"true"' in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.kill()
        raise EtcdUnavailable(f"etcd at {self.endpoint} not healthy after {timeout:g} s; log:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """Clean shutdown (SIGTERM); returns the exit code."""
        p = self.proc
        if p is None:
            return 0
        if p.poll() is None:
            if self._paused:
                p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.proc = None
        self._paused = False
        return p.returncode

    def kill(self) -> None:
        """SIGKILL: etcd's WAL makes every acknowledged write survive it."""
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
        self.proc = None
        self._paused = False

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers (a hung etcd, not a dead one)."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"etcd at {self.endpoint} is not running")
        self.proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self._paused = False

    def restart(self, timeout: float = 30.0) -> EtcdProcess:
        self.stop()
        return self.start(timeout)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def __enter__(self) -> EtcdProcess:
        return self if self.alive() else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
