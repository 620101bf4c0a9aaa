"""Fixtures of the independent-client suite: the pinned JavaScript clients installed once (``npm ci`` into
``js/``, skipped while ``node_modules`` matches the lock file), kcat, and one broker every client shares."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing.broker_process import BrokerProcess

from _independent import JS_DIR

STAMP = JS_DIR / "node_modules" / ".oncelog-installed"
NODE_HEADERS = Path("/usr/include/node/node.h")
NPM_CI_TIMEOUT = 900  # builds librdkafka from source: ~3 min on 2 cores


def _missing_tool(tool: str, what: str, in_ci: str) -> None:
    """A tool the suite needs is not on PATH: CI fails (it must have it), a developer's run skips."""
    msg = f"{tool} is not on PATH: {what}"
    if os.environ.get("CI"):
        pytest.fail(f"{msg} ({in_ci})", pytrace=False)
    pytest.skip(msg)


def _install_key(node: str) -> str:
    """What the installed node_modules depend on: package.json and its lock file, the Node.js ABI of the native
    modules, and whether librdkafka could be built with zstd (Debian's libzstd-dev)."""
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    h = hashlib.sha256((JS_DIR / "package.json").read_bytes() + (JS_DIR / "package-lock.json").read_bytes())
    h.update(version.encode())
    h.update(b"zstd" if Path("/usr/include/zstd.h").exists() else b"no-zstd")
    return h.hexdigest()


@pytest.fixture(scope="session")
def js_clients() -> Path:
    """``js/`` with its pinned clients installed. ``npm ci`` runs only when the lock file, Node.js or the zstd
    headers changed since the last install, so a second run needs no network.

    Native parts are built from the sources inside the npm packages, never downloaded: node-pre-gyp and
    prebuild-install are told to build from source (``npm_config_build_from_source``), and
    @confluentinc/kafka-javascript builds its bundled librdkafka linked against the system's OpenSSL, zlib and
    zstd (``CKJS_LINKING=dynamic``: its default static build downloads those libraries' sources itself)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _missing_tool("node" if node is None else "npm", "the JavaScript client checks need Node.js 20+ and npm",
                      "CI machines come with them")
    assert node is not None and npm is not None
    key = _install_key(node)
    with open(JS_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs in one checkout install once
        if STAMP.exists() and STAMP.read_text().strip() == key:
            return JS_DIR
        env = dict(os.environ, npm_config_build_from_source="true", CKJS_LINKING="dynamic",
                   npm_config_audit="false", npm_config_fund="false", npm_config_update_notifier="false")
        if "npm_config_nodedir" not in env and NODE_HEADERS.exists():
            env["npm_config_nodedir"] = str(NODE_HEADERS.parent.parent.parent)  # node-gyp: no header download
        t0 = time.monotonic()
        done = subprocess.run([npm, "ci", "--foreground-scripts"], cwd=JS_DIR, env=env, capture_output=True,
                              text=True, timeout=NPM_CI_TIMEOUT)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-60:])
            pytest.fail(f"npm ci in {JS_DIR.name}/ failed (exit {done.returncode}):\n{tail}", pytrace=False)
        STAMP.write_text(key + "\n")
        print(f"npm ci installed the JavaScript clients in {time.monotonic() - t0:.0f} s")
    return JS_DIR


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        _missing_tool("kcat", "the kcat checks need Debian's kcat package", ".ci/run installs it")
    assert path is not None
    return path


@pytest.fixture(scope="session")
def indie_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The broker every independent client is checked against; the idempotence checks SIGKILL and restart it.

    Topics are never created implicitly (the error-path checks need an unknown topic to stay unknown, and every
    test names its topics), and groups form without Kafka's 3 s initial rebalance delay (the usual test setting:
    each client opens several groups), and timed-out transactions are aborted within a second of their timeout
    (Kafka checks every 10 s; the EOS copy of a client that cannot reclaim its transactional id waits for it)."""
    base = tmp_path_factory.mktemp("independent-broker")
    proc = BrokerProcess(base / "data", settings={"auto.create.topics.enable": "false",
                                                  "group.initial.rebalance.delay.ms": 0,
                                                  "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
                                                  "log.retention.check.interval.ms": 86_400_000})
    proc.start()
    yield proc
    rc = proc.stop()
    assert rc == 0, f"independent-client broker did not shut down cleanly (exit {rc}); log:\n{proc.log_tail()}"


@pytest.fixture
def driver_logs(tmp_path: Path) -> Path:
    return tmp_path
