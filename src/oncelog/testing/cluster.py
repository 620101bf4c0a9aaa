"""A real cluster as child processes: one etcd and N brokers on 127.0.0.1 (cluster tests, ``make cluster``, bench).

:class:`ClusterProcess` starts etcd (:class:`~oncelog.testing.etcd_process.EtcdProcess`) and the brokers
(:class:`~oncelog.testing.broker_process.BrokerProcess` with ``node.id``, ``metadata`` and ``cluster.name``), and
gives the fault tests their handles: stop / kill / pause / resume / restart / wipe one broker, the etcd process, and
waiting for a condition on the cluster's view as etcd holds it (read through etcd's JSON gateway, so the test's own
process holds no etcd client: the view is what the brokers are told, not what one of them believes).

``python -m oncelog.testing.cluster`` runs one in the foreground with every process's log on the terminal, until
Ctrl-C stops the brokers one after the other (each a controlled shutdown), then etcd, and exits 0: that is
``make cluster``. A process that exits meanwhile (a broker killed to try a failover) is reported at once with its
exit code, its log and the command that restarts it (``kill -USR1 <pid of this process>``: it restarts every
process that is down, as a child of this one, so the next Ctrl-C stops it too).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from oncelog.cluster._etcd import KV, prefix_end
from oncelog.cluster._etcd_view import ViewState
from oncelog.cluster.model import ClusterView, Keys

from .broker_process import BrokerProcess, free_port
from .etcd_process import EtcdProcess, EtcdUnavailable
from .netns import Network
from .tcp_proxy import TcpProxy

__all__ = ["NET_BROKER_PORT", "NET_ETCD_PORT", "ClusterProcess", "topic_ready"]

NET_BROKER_PORT = 9092  # each broker's port on its network host (ClusterProcess(net=...))
NET_ETCD_PORT = 2379


def topic_ready(view: ClusterView, topic: str, replication_factor: int | None = None) -> bool:
    """Every partition of ``topic`` has a live leader and its whole assignment in the ISR (and, if given, that many
    replicas)."""
    meta = view.topics.get(topic)
    if meta is None or meta.deleting:
        return False
    for i in range(meta.num_partitions):
        state = view.partition(topic, i)
        if state is None or state.leader not in view.brokers or set(state.isr) != set(state.replicas):
            return False
        if replication_factor is not None and len(state.replicas) != replication_factor:
            return False
    return True


class ClusterProcess:
    """etcd + ``size`` brokers (node ids 1..size unless ``node_ids``) under ``base_dir``.

    ``settings`` go to every broker, ``broker_settings[node]`` to one (and ``broker_env[node]`` to its environment:
    fault hooks such as the power-cut trace); ``ports`` / ``etcd_port`` fix the ports
    (free ones otherwise). Data: ``base_dir/etcd``, ``base_dir/broker-<id>``; logs next to them (``*.log``).
    """

    def __init__(self, base_dir: Path, size: int = 3, *, settings: Mapping[str, object] | None = None,
                 broker_settings: Mapping[int, Mapping[str, object]] | None = None,
                 node_ids: Sequence[int] | None = None, ports: Sequence[int] | None = None,
                 etcd_port: int | None = None, cluster_name: str = "oncelog", new_session: bool = False,
                 broker_env: Mapping[int, Mapping[str, str]] | None = None, net: Network | None = None,
                 etcd_proxies: bool = False) -> None:
        """``net``: run every process on a host of its own of that ``oncelog.testing.netns`` network, the brokers
        on hosts 1..size (port 9092 each) and etcd on host size + 1 (:meth:`host_of` gives a broker's host,
        :attr:`etcd_host` etcd's), so that partitions can cut any of them from any other, the test process (the
        network's client) included. ``etcd_proxies`` (on 127.0.0.1, without ``net``): each broker reaches etcd
        through a proxy of its own (:meth:`partition` cuts it)."""
        self.base_dir = Path(base_dir)
        self.cluster_name = cluster_name
        self.keys = Keys(cluster_name)
        self.net = net
        ids = list(node_ids) if node_ids is not None else list(range(1, size + 1))
        if ports is not None and len(ports) != len(ids):
            raise ValueError(f"{len(ports)} ports for {len(ids)} brokers")
        self._hosts = {node: i + 1 for i, node in enumerate(ids)}
        self.etcd_host = len(ids) + 1
        where: dict[str, Any] = {}
        if net is not None:
            if net.size < len(ids) + 1:
                raise ValueError(f"a network of {net.size} hosts cannot hold {len(ids)} brokers and etcd")
            where = {"host": net.ip(self.etcd_host), "wrap": net.host(self.etcd_host).command([]),
                     "client_port": NET_ETCD_PORT, "peer_port": NET_ETCD_PORT + 1}
        self.etcd = EtcdProcess(self.base_dir / "etcd", **{"client_port": etcd_port, **where},
                                log_path=self.base_dir / "etcd.log")
        self.settings = dict(settings or {})
        self.new_session = new_session
        self.brokers: dict[int, BrokerProcess] = {}
        #: with ``etcd_proxies``: each broker reaches etcd through a proxy of its own, which partition() cuts
        self.etcd_proxies: dict[int, TcpProxy] = {}
        for i, node in enumerate(ids):
            etcd = self.etcd.endpoint
            if etcd_proxies:
                target_host, _, target_port = etcd.rpartition(":")
                proxy = self.etcd_proxies[node] = TcpProxy((target_host, int(target_port)))
                etcd = proxy.endpoint
            own = {**self.settings, **dict((broker_settings or {}).get(node, {})),
                   "node.id": node, "metadata": f"etcd://{etcd}", "cluster.name": cluster_name}
            port = ports[i] if ports is not None else NET_BROKER_PORT if net is not None else free_port()
            self.brokers[node] = BrokerProcess(self.base_dir / f"broker-{node}", port=port, settings=own,
                                               log_path=self.base_dir / f"broker-{node}.log",
                                               env=dict((broker_env or {}).get(node, {})),
                                               new_session=new_session, **self._placed(node))

    def _placed(self, node: int) -> dict[str, Any]:
        if self.net is None:
            return {}
        host = self._hosts[node]
        return {"host": self.net.ip(host), "wrap": self.net.host(host).command([])}

    def host_of(self, node: int) -> int:
        """The network host a broker runs on (with ``net``)."""
        return self._hosts[node]

    # ----------------------------------------------------------------------------------------- whole cluster
    @property
    def bootstrap(self) -> str:
        """Every broker's ``host:port``, comma-separated (a client's ``bootstrap.servers``)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def node_ids(self) -> list[int]:
        return list(self.brokers)

    def start(self, timeout: float = 60.0) -> ClusterProcess:
        """etcd, then every broker at once; returns when each is registered and a controller is elected."""
        if not self.etcd.alive():
            self.etcd.start()
        for b in self.brokers.values():
            if not b.alive():
                b.launch()
        deadline = time.monotonic() + timeout
        for b in self.brokers.values():
            b.wait_ready(max(1.0, deadline - time.monotonic()))
        self.wait_for(lambda v: set(self.brokers) <= set(v.brokers) and v.controller is not None,
                      max(1.0, deadline - time.monotonic()), "every broker registered and a controller elected")
        return self

    def stop(self, timeout: float = 60.0) -> dict[int, int]:
        """Stop every broker (SIGTERM: a controlled shutdown each, one after the other), then etcd; the brokers'
        exit codes."""
        codes = {}
        for node, b in self.brokers.items():
            if b.proc is not None:
                codes[node] = b.stop(timeout)
        self.etcd.stop()
        return codes

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------------------------------- one broker
    def broker(self, node: int) -> BrokerProcess:
        return self.brokers[node]

    def stop_broker(self, node: int, timeout: float = 60.0) -> int:
        """SIGTERM: a controlled shutdown; the exit code."""
        return self.brokers[node].stop(timeout)

    def kill(self, node: int) -> None:
        """SIGKILL."""
        self.brokers[node].kill()

    def pause(self, node: int) -> None:
        """SIGSTOP: its connections stay open, nothing answers; its lease expires after the session timeout."""
        self.brokers[node].pause()

    def resume(self, node: int) -> None:
        self.brokers[node].resume()

    def partition(self, node: int) -> None:
        """Cut one broker from the rest (needs ``etcd_proxies=True``): its etcd proxy drops everything (its lease
        expires after ``broker.session.timeout.ms``, the controller moves its leaderships) and it answers no
        request (``isolate``: clients and the other brokers time out on it). What it sends to the other brokers
        still arrives: a one-way cut, as ``netns``'s ``drop(others, node)`` with etcd cut both ways."""
        if node not in self.etcd_proxies:
            raise RuntimeError("partition() needs ClusterProcess(etcd_proxies=True)")
        self.etcd_proxies[node].cut()
        self.brokers[node].isolate()

    def heal(self, node: int) -> None:
        """Undo :meth:`partition`: etcd reachable again (the broker re-registers), requests answered."""
        proxy = self.etcd_proxies.get(node)
        if proxy is not None:
            proxy.heal()
        if self.brokers[node].alive():
            self.brokers[node].clear_faults()

    def start_broker(self, node: int, timeout: float = 60.0, wait_registered: bool = True) -> BrokerProcess:
        b = self.brokers[node]
        b.start(timeout)
        if wait_registered:
            self.wait_for(lambda v: node in v.brokers, timeout, f"node {node} registered")
        return b

    def add_broker(self, node: int, settings: Mapping[str, object] | None = None, *, port: int | None = None,
                   start: bool = True, timeout: float = 60.0) -> BrokerProcess:
        """A new broker joining the cluster (scale out): the cluster's settings plus ``settings``, its data under
        ``base_dir/broker-<node>``; started and registered unless ``start=False``."""
        if node in self.brokers:
            raise ValueError(f"node {node} is already a broker of this cluster")
        own = {**self.settings, **dict(settings or {}), "node.id": node, "metadata": f"etcd://{self.etcd.endpoint}",
               "cluster.name": self.cluster_name}
        if self.net is not None:
            self._hosts[node] = max(*self._hosts.values(), self.etcd_host) + 1
        self.brokers[node] = BrokerProcess(self.base_dir / f"broker-{node}", port=port or free_port(), settings=own,
                                           log_path=self.base_dir / f"broker-{node}.log",
                                           new_session=self.new_session, **self._placed(node))
        return self.start_broker(node, timeout) if start else self.brokers[node]

    def restart(self, node: int, timeout: float = 60.0) -> BrokerProcess:
        self.brokers[node].stop()
        return self.start_broker(node, timeout)

    def wipe(self, node: int) -> None:
        """Delete a stopped broker's data folder (it comes back as an empty replica)."""
        b = self.brokers[node]
        if b.alive():
            raise RuntimeError(f"stop or kill broker {node} before wiping its data")
        shutil.rmtree(b.data_dir, ignore_errors=True)

    def log_tail(self, node: int, n: int = 60) -> str:
        return self.brokers[node].log_tail(n)

    # ----------------------------------------------------------------------------------------- the view
    def view(self, revision: int = 0, timeout: float = 5.0) -> ClusterView:
        """The cluster's metadata as etcd holds it now (one linearizable read of the cluster's keys), or as it was
        at an earlier ``revision`` (etcd keeps the history until it is compacted)."""
        prefix = self.keys.prefix
        query = {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}
        if revision:
            query["revision"] = str(revision)
        body = json.dumps(query).encode()
        req = urllib.request.Request(f"http://{self.etcd.endpoint}/v3/kv/range", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            got = json.loads(resp.read())
        kvs = [KV(base64.b64decode(kv["key"]), base64.b64decode(kv.get("value", "")),
                  int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)), int(kv.get("version", 0)),
                  int(kv.get("lease", 0))) for kv in got.get("kvs", [])]
        state = ViewState(self.keys)
        return state.load(kvs, revision or int(got["header"]["revision"])).view

    def wait_for(self, cond: Callable[[ClusterView], bool], timeout: float = 30.0,
                 what: str = "the condition") -> ClusterView:
        """Poll the view until ``cond(view)``; AssertionError (with the last view's brokers, controller and
        the brokers' log tails) after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        view: ClusterView | None = None
        while True:
            try:
                view = self.view()
                if cond(view):
                    return view
            except (urllib.error.URLError, OSError, ValueError, KeyError):
                pass  # etcd restarting or paused: try again
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: not within {timeout:g} s; {self._describe(view)}")
            time.sleep(0.05)

    def wait_for_topic(self, topic: str, replication_factor: int | None = None,
                       timeout: float = 30.0) -> ClusterView:
        """Until every partition of ``topic`` has a live leader and a full ISR."""
        return self.wait_for(lambda v: topic_ready(v, topic, replication_factor), timeout,
                             f"topic {topic} with a leader and a full ISR on every partition")

    def controller(self) -> int | None:
        c = self.view().controller
        return None if c is None else c.node_id

    def leaders(self, topic: str, view: ClusterView | None = None) -> dict[int, int]:
        """Partition -> leader of ``topic``."""
        v = view or self.view()
        return {i: state.leader for i, state in v.topic_partitions(topic)}

    def _describe(self, view: ClusterView | None) -> str:
        if view is None:
            return "etcd did not answer"
        brokers = {n: ("shutting down" if b.shutting_down else "alive") for n, b in sorted(view.brokers.items())}
        ctl = view.controller.node_id if view.controller else None
        tails = "".join(f"\n--- broker {n} ---\n{b.log_tail(15)}" for n, b in self.brokers.items())
        return f"brokers {brokers}, controller {ctl}{tails}"


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


# --------------------------------------------------------------------------------------------- make cluster
class _Tail(threading.Thread):
    """Copies the lines appended to some files to stdout, each prefixed with its process's name."""

    def __init__(self, files: Iterable[tuple[str, Path]]) -> None:
        super().__init__(daemon=True, name="cluster-logs")
        self.files = list(files)
        self.stopping = threading.Event()

    def run(self) -> None:
        width = max(len(n) for n, _ in self.files)
        offsets = {p: (p.stat().st_size if p.exists() else 0) for _, p in self.files}
        while not self.stopping.is_set():
            for name, path in self.files:
                try:
                    with open(path, "rb") as f:
                        f.seek(offsets[path])
                        data = f.read()
                except FileNotFoundError:
                    continue
                if not data:
                    continue
                complete = data.rfind(b"\n") + 1
                offsets[path] += complete
                for line in data[:complete].decode("utf-8", "replace").splitlines():
                    sys.stdout.write(f"{name:<{width}} | {line}\n")
            sys.stdout.flush()
            self.stopping.wait(0.2)


def _exit_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"exit code {rc} (killed by {signal.Signals(-rc).name})"
        except ValueError:
            return f"exit code {rc}"
    return f"exit code {rc}" + (" (stopped)" if rc == 0 else "")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class _Supervisor:
    """Watches the processes of ``make cluster``: says at once when one exits (which, its exit code, its log, the
    command that restarts it), restarts the ones that are down when asked (SIGUSR1: ``kill -USR1 <pid>``, so a
    restarted broker is this process's child again and Ctrl-C stops it with the others)."""

    def __init__(self, cluster: ClusterProcess) -> None:
        self.cluster = cluster
        self.restart = threading.Event()
        self.down: set[int | str] = set()  # node ids and "etcd", reported as exited
        self.starting: dict[int, float] = {}  # node -> when it was relaunched

    def restart_command(self) -> str:
        return f"kill -USR1 {os.getpid()}"

    def _report(self, name: str, rc: int, log: Path, address: str) -> None:
        print(f"\n*** {name} ({address}) exited with {_exit_text(rc)}; its log: {log.resolve()}\n"
              f"*** restart it with: {self.restart_command()}   (restarts every process of this cluster that is "
              f"down; Ctrl-C still stops them all)\n", flush=True)

    def check(self) -> None:
        etcd = self.cluster.etcd
        if etcd.proc is not None and etcd.proc.poll() is not None and "etcd" not in self.down:
            self.down.add("etcd")
            self._report("etcd", etcd.proc.returncode, etcd.log_path, etcd.endpoint)
        for node, b in self.cluster.brokers.items():
            if b.proc is not None and b.proc.poll() is not None and node not in self.down:
                self.down.add(node)
                self.starting.pop(node, None)
                self._report(f"broker {node}", b.proc.returncode, b.log_path, b.bootstrap)
        for node, since in list(self.starting.items()):
            b = self.cluster.brokers[node]
            if b.alive() and _listening(b.port):
                del self.starting[node]
                print(f"\n*** broker {node} is back on {b.bootstrap} (pid {b.proc.pid if b.proc else '?'}, "
                      f"{time.monotonic() - since:.1f} s)\n", flush=True)
        if self.restart.is_set():
            self.restart.clear()
            self._restart_down()

    def _restart_down(self) -> None:
        if not self.down:
            print("\n*** nothing to restart: every process of this cluster is running\n", flush=True)
            return
        if "etcd" in self.down:
            print("\n*** restarting etcd", flush=True)
            try:
                self.cluster.etcd.start()
                self.down.discard("etcd")
            except Exception as e:  # one line; its log says the rest
                print(f"*** etcd did not start: {str(e).splitlines()[0]}", flush=True)
        for node in sorted(n for n in self.down if isinstance(n, int)):
            b = self.cluster.brokers[node]
            print(f"\n*** restarting broker {node} on {b.bootstrap}", flush=True)
            b.launch()
            self.down.discard(node)
            self.starting[node] = time.monotonic()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m oncelog.testing.cluster",
                                 description="etcd and a cluster of oncelog brokers on 127.0.0.1, in the foreground; "
                                             "a process that exits is reported at once and restarted on "
                                             "SIGUSR1; Ctrl-C stops them all (the brokers one by one, each a "
                                             "controlled shutdown).")
    ap.add_argument("--data-dir", type=Path, default=Path("./data/cluster"), help="[default: ./data/cluster]")
    ap.add_argument("--ports", default="9092,9093,9094", help="the brokers' ports, one per broker "
                                                              "[default: 9092,9093,9094]")
    ap.add_argument("--etcd-port", type=int, default=2379, help="[default: 2379]")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every broker (repeatable); the defaults: "
                         "default.replication.factor=min(3, brokers), transaction.two.phase.commit.enable=true "
                         "(as make serve: the Spark sink needs it)")
    args = ap.parse_args(argv)
    ports = [int(p) for p in args.ports.split(",") if p.strip()]
    settings: dict[str, object] = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set expects KEY=VALUE, got {item!r}")
        settings[key.strip()] = value.strip()
    settings.setdefault("default.replication.factor", min(3, len(ports)))
    settings.setdefault("transaction.two.phase.commit.enable", "true")  # KIP-939, as `make serve`
    base = args.data_dir
    base.mkdir(parents=True, exist_ok=True)
    try:
        cluster = ClusterProcess(base, len(ports), ports=ports, etcd_port=args.etcd_port, settings=settings,
                                 new_session=True)
    except EtcdUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tail = _Tail([("etcd", cluster.etcd.log_path)]
                 + [(f"broker {n}", b.log_path) for n, b in cluster.brokers.items()])
    tail.start()
    stop = threading.Event()
    supervisor = _Supervisor(cluster)
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C (again and again) only asks to stop: nothing is left behind
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: supervisor.restart.set())
    code = 0
    try:
        cluster.start()
        if not stop.is_set():
            pids = ", ".join(f"{n}: pid {b.proc.pid}" for n, b in cluster.brokers.items() if b.proc is not None)
            print(f"\ncluster {cluster.cluster_name} up: {len(ports)} broker(s) ({pids}), bootstrap "
                  f"{cluster.bootstrap}, etcd at {cluster.etcd.endpoint}, data and logs in {base.resolve()}; "
                  f"{supervisor.restart_command()} restarts a process that is down; Ctrl-C stops it\n", flush=True)
        while not stop.wait(0.2):
            supervisor.check()
    except Exception as e:  # one line, then the logs above say the rest
        print(f"error: the cluster did not start: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
        code = 1
    finally:
        print("\nstopping the brokers one by one (controlled shutdown), then etcd", flush=True)
        running = {n for n, b in cluster.brokers.items() if b.alive()}  # not those that exited (reported above)
        codes = cluster.stop()
        time.sleep(0.3)
        tail.stopping.set()
        tail.join()
        bad = {n: rc for n, rc in codes.items() if n in running and rc != 0}
        if bad:
            print("error: " + "; ".join(f"broker {n} did not stop cleanly ({_exit_text(rc)}), see "
                                        f"{cluster.brokers[n].log_path.resolve()}" for n, rc in sorted(bad.items())),
                  file=sys.stderr)
            code = code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
