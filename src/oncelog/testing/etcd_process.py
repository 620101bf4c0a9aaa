"""Run a real etcd as child processes (cluster tests, ``make cluster``, benchmarks).

etcd comes from the Debian package ``etcd-server`` or any etcd >= 3.4 on PATH (``ONCELOG_ETCD_BIN`` overrides).
:class:`EtcdProcess` is one member on two free 127.0.0.1 ports with its own data folder; ``stop`` (SIGTERM),
``kill`` (SIGKILL), ``pause``/``resume`` (SIGSTOP/SIGCONT) and ``start`` again on the same ports and data, as the
fault tests need. :class:`EtcdCluster` is several members forming one etcd cluster (Raft over their peer URLs),
e.g. three on three hosts of an ``oncelog.testing.netns`` network, so that a test can lose one member or cut a
minority off; each member is an :class:`EtcdProcess` (``members``), and the cluster answers the same calls as one
member does (``endpoint`` names every member, as ``--metadata etcd://...`` takes them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from .broker_process import free_port

__all__ = ["EtcdCluster", "EtcdProcess", "EtcdUnavailable", "find_etcd"]


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
    """One etcd member with its own data folder: a one-member etcd cluster on 127.0.0.1 unless told otherwise."""

    def __init__(self, data_dir: Path, client_port: int | None = None, peer_port: int | None = None,
                 log_path: Path | None = None, binary: str | None = None,
                 extra_args: tuple[str, ...] = (), host: str = "127.0.0.1", wrap: list[str] | None = None,
                 name: str | None = None) -> None:
        """``host`` and ``wrap`` run it elsewhere, e.g. on a host of an ``oncelog.testing.netns`` network
        (``host=net.ip(4), wrap=net.host(4).command([])``: its pid is etcd's, so kill and pause reach it).
        ``name``: the member's name (``--name``); :class:`EtcdCluster` sets it and :attr:`initial_cluster`."""
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
        self.name = name or f"oncelog-test-{self.client_port}"
        self.initial_cluster = f"{self.name}={self.peer_url}"  # every member's name=peer URL (EtcdCluster's)
        self.proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def endpoint(self) -> str:
        """``host:port`` of the client URL (what ``--metadata etcd://...`` names)."""
        return f"{self.host}:{self.client_port}"

    @property
    def endpoints(self) -> list[str]:
        return [self.endpoint]

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    def start(self, timeout: float = 30.0) -> EtcdProcess:
        self.launch()
        self._wait_healthy(timeout)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it to be healthy (a member of several is healthy only once a
        quorum of them runs). Its data folder, if it holds one, decides its cluster; a new one is bootstrapped
        from :attr:`initial_cluster`."""
        if self.alive():
            raise RuntimeError(f"etcd at {self.endpoint} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)  # what etcd asks of its data directory (else a warning at every start)
        client = f"http://{self.host}:{self.client_port}"
        cmd = [*self.wrap, self.binary, "--name", self.name, "--data-dir", str(self.data_dir),
               "--listen-client-urls", client, "--advertise-client-urls", client,
               "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
               "--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new",
               "--logger", "zap", "--log-level", "warn", *self.extra_args]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # its own session: a Ctrl-C of the test run does not reach etcd before the fixture stops it
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self._paused = False

    def status(self, timeout: float = 1.0) -> dict[str, int]:
        """This member's view of the Raft group (etcd's Maintenance.Status through its JSON gateway):
        ``member_id``, ``leader`` (0 without one), ``raft_term``. Raises OSError when it does not answer."""
        req = urllib.request.Request(f"http://{self.endpoint}/v3/maintenance/status", data=b"{}",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            got = json.loads(resp.read())
        return {"member_id": int(got["header"]["member_id"]), "leader": int(got.get("leader", 0)),
                "raft_term": int(got.get("raftTerm", 0))}

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until the member answers a health check (it has a leader)."""
        self._wait_healthy(timeout)

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


class EtcdCluster:
    """``size`` etcd members forming one cluster, each an :class:`EtcdProcess` in ``base_dir/member-<i>`` (logs
    next to them): on 127.0.0.1 with free ports, or on ``hosts`` (with ``wraps`` to run there, as
    :class:`EtcdProcess`'s ``host`` and ``wrap``) on ``client_port`` / ``peer_port``. ``start`` / ``stop`` /
    ``kill`` / ``pause`` / ``resume`` act on every member; a test loses one with ``members[i].kill()`` and brings it
    back with ``members[i].start()`` (its data folder makes it rejoin)."""

    def __init__(self, base_dir: Path, size: int = 3, *, hosts: Sequence[str] | None = None,
                 wraps: Sequence[list[str]] | None = None, client_port: int | None = None,
                 peer_port: int | None = None, binary: str | None = None) -> None:
        if size < 1:
            raise ValueError(f"an etcd cluster has at least one member, not {size}")
        if hosts is not None and len(hosts) != size:
            raise ValueError(f"{len(hosts)} hosts for {size} etcd members")
        self.base_dir = Path(base_dir)
        self.members = [EtcdProcess(self.base_dir / f"member-{i}", client_port=client_port, peer_port=peer_port,
                                    log_path=self.base_dir / f"member-{i}.log", binary=binary,
                                    host=hosts[i - 1] if hosts is not None else "127.0.0.1",
                                    wrap=list(wraps[i - 1]) if wraps is not None else None, name=f"member-{i}")
                        for i in range(1, size + 1)]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.initial_cluster = initial

    @property
    def endpoint(self) -> str:
        """Every member's ``host:port``, comma-separated (what ``--metadata etcd://...`` takes)."""
        return ",".join(self.endpoints)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def log_path(self) -> Path:
        return self.members[0].log_path

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Every member that is not running, at once (none is healthy before a quorum runs), then until each is
        healthy."""
        for m in self.members:
            if not m.alive():
                m.launch()
        deadline = time.monotonic() + timeout
        for m in self.members:
            m.wait_healthy(max(1.0, deadline - time.monotonic()))
        return self

    def alive(self) -> bool:
        """Every member runs."""
        return all(m.alive() for m in self.members)

    def stop(self, timeout: float = 30.0) -> int:
        codes = [m.stop(timeout) for m in self.members]
        return next((c for c in codes if c), 0)

    def kill(self) -> None:
        for m in self.members:
            m.kill()

    def pause(self) -> None:
        for m in self.members:
            m.pause()

    def resume(self) -> None:
        for m in self.members:
            m.resume()

    def leader(self, timeout: float = 10.0) -> int:
        """The index in :attr:`members` of the Raft leader, as a majority of the running members reports it
        (waits up to ``timeout`` for one)."""
        deadline = time.monotonic() + timeout
        while True:
            ids: dict[int, int] = {}
            votes: dict[int, int] = {}
            for i, m in enumerate(self.members):
                if not m.alive():
                    continue
                try:
                    st = m.status(timeout=0.5)
                except (OSError, ValueError, KeyError):
                    continue
                ids[st["member_id"]] = i
                if st["leader"]:
                    votes[st["leader"]] = votes.get(st["leader"], 0) + 1
            for leader, n in votes.items():
                if n > len(self.members) // 2 and leader in ids:
                    return ids[leader]
            if time.monotonic() >= deadline:
                raise EtcdUnavailable(f"no etcd leader agreed by a majority within {timeout:g} s (members "
                                      f"answering: {sorted(ids.values())}, leaders named: {votes})")
            time.sleep(0.1)

    def move_leader(self, to: int, timeout: float = 10.0) -> None:
        """Make ``members[to]`` the Raft leader (etcd's MoveLeader, asked of the current leader)."""
        current = self.leader(timeout)
        if current == to:
            return
        target = self.members[to].status()["member_id"]
        body = json.dumps({"targetID": str(target)}).encode()
        req = urllib.request.Request(f"http://{self.members[current].endpoint}/v3/maintenance/transfer-leadership",
                                     data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
        deadline = time.monotonic() + timeout
        while self.leader(timeout) != to:
            if time.monotonic() >= deadline:
                raise EtcdUnavailable(f"etcd leadership did not move to member {to + 1} within {timeout:g} s")
            time.sleep(0.05)

    def log_tail(self, n: int = 4000) -> str:
        return "".join(f"--- {m.name} ---\n{m.log_tail(n // len(self.members))}\n" for m in self.members)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
