"""The ``scale`` section of ``cluster_bench.py``: what a 3-broker cluster costs with many partitions (issue 26).

One topic of ``--partitions`` partitions at replication factor 3 on the bench's cluster (default settings), then:

- **create**: CreateTopics of ``CHUNK`` partitions at a time (topics ``bench-scale-<i>``), each until every
  partition has a leader and a full ISR;
- **idle CPU / RSS per broker**: nothing produced or consumed; CPU seconds (user + system, from ``/proc``) each
  broker used over ``--idle-seconds``, as a share of one core, and its resident set size;
- **Metadata**: an all-topics Metadata request (v12, the version librdkafka 2.x sends) to one broker: the answer's
  size and the time from sending it to the last byte (median of 5);
- **failover**: a broker (not the controller, then the controller) is SIGKILLed; times from the kill until every
  partition it led has a new leader written in etcd (an etcd watch of the partition keys) and until a surviving
  broker's Metadata answer names a live leader for each of them (polled);
- **start-up**: the killed broker is started again: until it listens, until it is registered, and until it is back
  in the ISR of all its partitions;
- **controlled shutdown**: SIGTERM to a broker until its process exits (it first asks the controller to move its
  leaders away and waits for that).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oncelog.protocol.api import RequestHeader, decode_response, encode_request
from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.testing.cluster import ClusterProcess

TOPIC = "bench-scale"  # topics bench-scale-0, -1, ... of CHUNK partitions each
METADATA_VERSION = 12
#: partitions per topic: each broker opens a new partition's log on its event loop (with an fsync per file, before
#: new logs deferred them to their first flush: ~5-10 ms a partition here), so a topic of thousands would stall every
#: broker past its etcd session timeout
CHUNK = 250


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


_TICKS = float(os.sysconf("SC_CLK_TCK"))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pids(cluster: ClusterProcess) -> dict[int, int]:
    out = {}
    for node, b in cluster.brokers.items():
        assert b.proc is not None
        out[node] = b.proc.pid
    return out


def idle_cpu(cluster: ClusterProcess, seconds: float) -> dict[int, float]:
    """Share of one core each broker used over ``seconds`` of an idle cluster."""
    ps = pids(cluster)
    before = {n: cpu_seconds(p) for n, p in ps.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return {n: (cpu_seconds(p) - before[n]) / wall for n, p in ps.items()}


def metadata_once(host: str, port: int) -> tuple[int, float, Any]:
    """One all-topics Metadata request on a fresh socket: (answer bytes, seconds from send to last byte, answer)."""
    with socket.create_connection((host, port), timeout=60) as s:
        header = RequestHeader(3, METADATA_VERSION, 1, "cluster-bench")
        body = b"".join(encode_request(header, MetadataRequest(topics=None, allow_auto_topic_creation=False)))
        t0 = time.perf_counter()
        s.sendall(body)
        size = struct.unpack(">i", _read(s, 4))[0]
        frame = _read(s, size)
        secs = time.perf_counter() - t0
    _, message = decode_response(3, METADATA_VERSION, frame)
    return size + 4, secs, message


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def served_leaders(host: str, port: int) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader of every scale partition, as one broker's Metadata answer has them."""
    _, _, m = metadata_once(host, port)
    return {(t.name, p.partition_index): p.leader_id for t in m.topics if t.name.startswith(TOPIC)
            for p in t.partitions}


def scale_leaders(cluster: ClusterProcess) -> dict[tuple[str, int], int]:
    view = cluster.view()
    return {(t, i): s.leader for t in view.topics if t.startswith(TOPIC) for i, s in view.topic_partitions(t)}


class LeaderWatch(threading.Thread):
    """An etcd watch of the scale topics' partition keys: the monotonic time at which none of ``partitions`` is led
    by ``victim`` any more (each has another leader)."""

    def __init__(self, cluster: ClusterProcess, partitions: set[tuple[str, int]], victim: int) -> None:
        super().__init__(daemon=True)
        self.root = cluster.keys.partitions_of(TOPIC)[:-len(TOPIC) - 1]  # .../partitions/
        self.prefix = self.root + TOPIC.encode()
        self.endpoint = cluster.etcd.endpoint
        self.pending = set(partitions)
        self.victim = victim
        self.done_at: float | None = None
        self.ready = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # reported by the caller
            self.error = e
            self.ready.set()

    def _run(self) -> None:
        host, port = self.endpoint.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        end = self.prefix[:-1] + bytes([self.prefix[-1] + 1])
        body = json.dumps({"create_request": {"key": base64.b64encode(self.prefix).decode(),
                                              "range_end": base64.b64encode(end).decode()}})
        conn.request("POST", "/v3/watch", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        n = len(self.root)
        while self.pending:
            line = resp.readline()
            if not line:
                raise ConnectionError("etcd closed the watch")
            result = json.loads(line).get("result", {})
            if result.get("created"):
                self.ready.set()
            for ev in result.get("events", []):
                kv = ev.get("kv", {})
                topic, index = base64.b64decode(kv["key"])[n:].decode().rsplit("/", 1)
                leader = json.loads(base64.b64decode(kv.get("value", "")) or b"{}").get("leader", -1)
                if leader >= 0 and leader != self.victim:
                    self.pending.discard((topic, int(index)))
        self.done_at = time.monotonic()
        conn.close()


def failover(cluster: ClusterProcess, victim: int, survivor: int, wait_isr: Callable[[float], None],
             log: Callable[[str], None], timeout: float = 120) -> dict[str, float]:
    """SIGKILL ``victim``: seconds until its partitions' new leaders are in etcd and served by ``survivor``; then
    its restart: seconds until it listens, is registered, and is in sync on every partition again."""
    led = {tp for tp, leader in scale_leaders(cluster).items() if leader == victim}
    watch = LeaderWatch(cluster, led, victim)
    watch.start()
    if not watch.ready.wait(30):
        raise RuntimeError(f"etcd watch did not start: {watch.error}")
    host, port = cluster.brokers[survivor].bootstrap.rsplit(":", 1)
    killed = time.monotonic()
    cluster.kill(victim)
    served: float | None = None
    deadline = killed + timeout
    while time.monotonic() < deadline:
        try:
            now = served_leaders(host, int(port))
        except OSError:
            time.sleep(0.05)
            continue
        stamp = time.monotonic()
        if all(now.get(i, -1) not in (-1, victim) for i in led):
            served = stamp
            break
        # not more often: an all-topics Metadata answer at 10,000 partitions costs the polled broker 35-60 ms, and
        # polling every 20 ms kept the survivor being measured busy answering it
        time.sleep(0.25)
    watch.join(max(1.0, deadline - time.monotonic()))
    if watch.done_at is None:
        raise RuntimeError(f"the {len(led)} partitions node {victim} led had no new leaders within {timeout:g} s "
                           f"({len(watch.pending)} left in etcd; {watch.error or ''})")
    # nan: node `survivor` did not serve every new leader within the timeout
    out = {"led": float(len(led)), "elected_s": watch.done_at - killed,
           "served_s": float("nan") if served is None else served - killed}
    log(f"scale: SIGKILL of node {victim} (leader of {len(led)}): new leaders in etcd after {out['elected_s']:.2f} s, "
        f"served after {out['served_s']:.2f} s")
    b = cluster.brokers[victim]
    t0 = time.monotonic()
    b.launch()
    b.wait_ready(timeout)
    out["startup_listening_s"] = time.monotonic() - t0
    cluster.wait_for(lambda v: victim in v.brokers, timeout, f"node {victim} registered")
    out["startup_registered_s"] = time.monotonic() - t0
    wait_isr(timeout * 3)
    out["startup_in_sync_s"] = time.monotonic() - t0
    return out


def run(cluster: ClusterProcess, partitions: int, idle_seconds: float, create: Callable[[str, int, int], None],
        wait_isr: Callable[[str, float], None], log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"partitions": partitions}
    topics = [f"{TOPIC}-{i}" for i in range((partitions + CHUNK - 1) // CHUNK)]

    def all_in_sync(timeout: float) -> None:
        cluster.wait_for(lambda v: all(len(s.isr) == len(s.replicas) and s.leader in v.brokers
                                       for t in topics for _, s in v.topic_partitions(t)),
                         timeout, f"{partitions} partitions fully in sync")

    t0 = time.monotonic()
    for i, t in enumerate(topics):
        for attempt in range(5):
            try:
                create(t, min(CHUNK, partitions - i * CHUNK), 3)
                break
            except Exception as e:  # a busy box: CreateTopics timed out; it may have been created all the same
                log(f"scale: creating {t} (attempt {attempt + 1}): {e}")
                time.sleep(2.0)
                if t in cluster.view().topics:
                    break
        wait_isr(t, 120)
    out["create_in_sync_s"] = time.monotonic() - t0
    log(f"scale: {partitions} partitions (RF=3) in {len(topics)} topics created and in sync in "
        f"{out['create_in_sync_s']:.1f} s")
    time.sleep(5.0)
    out["idle_cpu"] = idle_cpu(cluster, idle_seconds)
    out["rss_mb"] = {n: rss_mb(p) for n, p in pids(cluster).items()}
    log(f"scale: idle CPU (share of a core) {out['idle_cpu']}, RSS MB {out['rss_mb']}")
    any_node = min(cluster.brokers)
    host, port = cluster.brokers[any_node].bootstrap.rsplit(":", 1)
    sizes, times = [], []
    for _ in range(5):
        size, secs, _m = metadata_once(host, int(port))
        sizes.append(size)
        times.append(secs)
    out["metadata_bytes"] = sizes[-1]
    out["metadata_s"] = statistics.median(times)
    log(f"scale: Metadata (all topics, v{METADATA_VERSION}) {sizes[-1]:,} B in {statistics.median(times) * 1000:.0f} "
        f"ms (median of 5)")
    controller = cluster.controller()
    others = [n for n in cluster.brokers if n != controller]
    for kind, victim in (("broker", others[0]), ("controller", controller)):
        if victim is None:
            continue
        survivor = next(n for n in cluster.brokers if n != victim)
        got = failover(cluster, victim, survivor, all_in_sync, log)
        out[f"failover_{kind}"] = got
        log(f"scale: the {kind}'s restart: listening {got['startup_listening_s']:.1f} s, registered "
            f"{got['startup_registered_s']:.1f} s, in sync {got['startup_in_sync_s']:.1f} s")
    controller = cluster.controller()
    victim = next(n for n in cluster.brokers if n != controller)
    t0 = time.monotonic()
    cluster.stop_broker(victim, timeout=300)
    out["controlled_shutdown_s"] = time.monotonic() - t0
    log(f"scale: controlled shutdown of node {victim}: {out['controlled_shutdown_s']:.1f} s")
    cluster.start_broker(victim, timeout=300)
    all_in_sync(300)
    return out


def rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    n = f"{s['partitions']:,} partitions"

    def per_broker(d: dict[int, float], fmt: str) -> str:
        return " / ".join(format(v, fmt) for _, v in sorted(d.items()))

    out = [
        (f"create {n} (RF=3, topics of {CHUNK}) until every ISR is full, s", f"{s['create_in_sync_s']:.1f}"),
        (f"idle CPU per broker, {n}, % of a core", per_broker({k: v * 100 for k, v in s["idle_cpu"].items()}, ".1f")),
        (f"RSS per broker, {n}, MB", per_broker(s["rss_mb"], ".0f")),
        (f"Metadata v{METADATA_VERSION} all topics, {n}: bytes / ms",
         f"{s['metadata_bytes']:,} / {s['metadata_s'] * 1000:.0f}"),
    ]
    for kind in ("broker", "controller"):
        f = s.get(f"failover_{kind}")
        if f:
            out += [
                (f"SIGKILL of a {kind} leading {f['led']:.0f}: new leaders in etcd / served, s",
                 f"{f['elected_s']:.2f} / {f['served_s']:.2f}"),
                ("its restart: listening / registered / in sync on every partition, s",
                 f"{f['startup_listening_s']:.1f} / {f['startup_registered_s']:.1f} / {f['startup_in_sync_s']:.1f}"),
            ]
    out.append(("controlled shutdown (SIGTERM -> exit), s", f"{s['controlled_shutdown_s']:.1f}"))
    return out
