"""A virtual network of hosts on one machine, with Jepsen's network faults (partitions, one-way drops, heal).

Layout of one :class:`Network` (one run; ``S`` is the run's number, 1-254, also the third octet of its subnet)::

    root namespace (the test process, "client", node 0)      10.77.S.254 on veth oltSc
        |
    switch namespace oltS-sw: a router, one port per node (IP forwarding, static ARP)
        |            |            |
    oltS-h1       oltS-h2       oltS-h3   host namespaces, eth0 = 10.77.S.1, .2, .3 ...

Every node sits on 10.77.S.0/24 as if on one LAN, but its packets to any other node go through the switch
namespace, which routes them (static ARP entries point every node at its switch port). A fault is a set of
*drops*, ordered pairs (src, dst) meaning "packets from src to dst are lost"; each drop is one policy-routing rule
in the switch, ``ip rule add from SRC to DST blackhole``. The kernel discards a forwarded packet that meets a blackhole rule
silently (no ICMP), so a node sees exactly what it would see on a real network cut: a new connection's SYN goes
unanswered until the connect times out, an established connection's segments are retransmitted into the void and
resume where they were once the rule is gone. That is Jepsen's ``iptables -A INPUT -s <peer> -j DROP`` nemesis,
including one-directional drops, with nothing but iproute2.

Why not the alternatives: a Linux bridge forwards at layer 2, where routing rules never see the traffic; a
``blackhole`` route inside the sending host fails the host's own packets at once (connect() returns EINVAL)
instead of losing them, which no real partition does; iptables/nftables need a Debian package this project does
not otherwise need; and ``tc`` drop filters need act_gact / cls_flower, which the CI machine's kernel does not have
(nor sch_netem: latency, loss and reordering cannot be injected with tc there, see ``docs/testing.md``).

Clean-up: :meth:`Network.close` kills every process left in the run's host namespaces, deletes the links, the
namespaces and the root namespace's routes, and checks that nothing is left. A run whose test process was killed
leaves its namespaces behind; the next :class:`Network` sweeps them first (:func:`sweep_stale`): each run records
its owner (pid and start time) in the alias of its root-namespace link, and a run whose owner is gone is removed,
processes included. Setup and sweep serialize on a lock file, so parallel test processes never sweep each other.

One thing stays on purpose: a guard route ``blackhole 10.77.0.0/16 metric 4000`` in the root namespace, added by
the first network and never removed. A run's own routes are more specific and win while it lives; once it is
gone, a client object the test still holds (a producer kept alive by a failed test's traceback keeps reconnecting)
must not reach out to the default gateway with test addresses: with the guard its packets go nowhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["CLIENT", "Drop", "Host", "Network", "NetnsUnavailable", "bridge", "complete_grudge", "halves",
           "isolated", "majorities_ring", "netns_unavailable_reason", "require_netns", "sweep_stale"]

CLIENT = 0  # the node number of the root namespace (the test process)
SUBNET = "10.77"  # runs use 10.77.S.0/24, S = the run number
GUARD = f"{SUBNET}.0.0/16"  # blackholed in the root namespace, see above
PREFIX = "olt"  # oncelog test: every name a run creates starts with it
ROUTE_PROTO = 177  # tags the routes a run adds to the root namespace
RULE_PREF = 1000  # first priority of the partition rules in a switch namespace
CLIENT_HOST = 254  # last octet of the client's address
SWITCH_HOST = 253
MAX_HOSTS = 200
LOCK_FILE = Path("/run/lock/oncelog-netns.lock") if Path("/run/lock").is_dir() else Path("/tmp/oncelog-netns.lock")

Drop = tuple[int, int]  # (src node, dst node): packets from src to dst are lost


class NetnsUnavailable(RuntimeError):
    """The machine cannot host a virtual network (not root, no iproute2, no network namespaces)."""


def _ip(*args: str, ns: str | None = None, check: bool = True, stdin: str | None = None) -> str:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout


def _sysctl(ns: str, *settings: str) -> None:
    """Set ``key=value`` kernel settings of namespace ``ns`` (written to /proc/sys, which shows the writer's
    namespace: no need for procps' sysctl)."""
    script = "; ".join(f"echo {v} > /proc/sys/{k.replace('.', '/')}" for k, _, v in (x.partition("=") for x in settings))
    r = subprocess.run(["ip", "netns", "exec", ns, "sh", "-ec", script], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"setting {' '.join(settings)} in namespace {ns} failed: {r.stderr.strip()}")


def netns_unavailable_reason() -> str | None:
    """Why this process cannot build a :class:`Network`, or None if it can (it tries to create a namespace)."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the tests as root, as CI does)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not on PATH (Debian package iproute2)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def require_netns() -> None:
    """For tests: skip when the machine cannot host a :class:`Network`; in CI (``CI`` set) fail instead, so the
    network fault tests can never silently stop running there."""
    import pytest

    reason = netns_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the network fault tests, but {reason}")
    pytest.skip(reason)


# --------------------------------------------------------------------------- Jepsen's partition shapes (pure)
def complete_grudge(groups: Sequence[Iterable[int]]) -> set[Drop]:
    """Every packet between nodes of two different groups is lost, both ways. Nodes in no group keep talking
    to everyone (``[[1], [2]]`` on nodes 1-3 leaves 3 as a bridge between 1 and 2)."""
    sets = [set(g) for g in groups]
    for a, b in itertools.combinations(sets, 2):
        if a & b:
            raise ValueError(f"a node cannot be on two sides of a partition: {sorted(a & b)}")
    return {(s, d) for a, b in itertools.permutations(sets, 2) for s in a for d in b}


def halves(nodes: Sequence[int], rnd: random.Random) -> list[list[int]]:
    """Two random halves (the smaller one first), as Jepsen's ``partition-random-halves``."""
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    cut = len(shuffled) // 2
    return [sorted(shuffled[:cut]), sorted(shuffled[cut:])]


def isolated(node: int, nodes: Sequence[int]) -> list[list[int]]:
    """``node`` alone against every other node (Jepsen's ``partition-random-node`` for a given node)."""
    return [[node], [n for n in nodes if n != node]]


def bridge(nodes: Sequence[int], rnd: random.Random) -> set[Drop]:
    """Two halves that cannot talk to each other, and one node that talks to both (Jepsen's ``bridge``)."""
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    middle = len(shuffled) // 2
    return complete_grudge([shuffled[:middle], shuffled[middle + 1:]])


def majorities_ring(nodes: Sequence[int], rnd: random.Random) -> set[Drop]:
    """Every node sees a majority, but no two nodes the same one (Jepsen's ``majorities-ring``): the nodes are put
    on a ring in random order; each takes the majority-sized window of the ring it sits in the middle of and drops
    packets from every node outside it. The drops are one-directional: a may hear b while b does not hear a."""
    ring = list(nodes)
    rnd.shuffle(ring)
    n = len(ring)
    m = n // 2 + 1
    drops: set[Drop] = set()
    for i in range(n):
        window = [ring[(i + k) % n] for k in range(m)]
        me = window[m // 2]
        drops |= {(src, me) for src in ring if src not in window}
    return drops


# --------------------------------------------------------------------------- ownership and sweeping
def _owner_tag(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    start = stat[stat.rindex(")") + 2:].split()[19]  # field 22, the start time in clock ticks after boot
    return f"oncelog-netns owner={pid}:{start}"


def _owner_alive(alias: str) -> bool:
    m = re.search(r"owner=(\d+):(\d+)", alias)
    return m is not None and _owner_tag(int(m.group(1))) == alias


def _runs_present() -> dict[int, list[str]]:
    """Run number -> the names of what it left: namespaces, the client link, routes (the guard is no run's)."""
    found: dict[int, list[str]] = {}
    for line in _ip("netns", "list").splitlines():
        m = re.match(rf"({PREFIX}(\d+)-\S+)", line)
        if m:
            found.setdefault(int(m.group(2)), []).append(f"netns {m.group(1)}")
    for line in _ip("-o", "link", "show").splitlines():
        m = re.match(rf"\d+: ({PREFIX}(\d+)c)[@:]", line)
        if m:
            found.setdefault(int(m.group(2)), []).append(f"link {m.group(1)}")
    for line in _ip("route", "show", "proto", str(ROUTE_PROTO)).splitlines():
        m = re.search(rf"{re.escape(SUBNET)}\.(\d+)\.", line)
        if m and m.group(1) != "0":
            found.setdefault(int(m.group(1)), []).append(f"route {line.strip()}")
    return found


def _client_alias(run: int) -> str | None:
    out = _ip("-o", "link", "show", f"{PREFIX}{run}c", check=False)
    m = re.search(r"alias (.*?)(\\|$)", out)
    return m.group(1).strip() if m else None


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sweep_stale() -> list[str]:
    """Remove every run whose owner process is gone (a test process killed before its teardown); returns what
    was removed. Runs of live processes are left alone."""
    with _locked():
        return _sweep_stale_locked()


def _sweep_stale_locked() -> list[str]:
    removed: list[str] = []
    for run, what in sorted(_runs_present().items()):
        alias = _client_alias(run)
        if alias is not None and _owner_alive(alias):
            continue
        _destroy(run)
        removed += what
    return removed


def _netns_names(run: int) -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines()
            if line.startswith(f"{PREFIX}{run}-")]


def _kill_inside(ns: str) -> list[int]:
    """SIGKILL every process running in namespace ``ns`` (started there by this run, or by a killed one)."""
    pids = [int(p) for p in _ip("netns", "pids", ns, check=False).split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _destroy(run: int) -> None:
    names = _netns_names(run)
    for ns in names:
        _kill_inside(ns)
    _ip("link", "del", f"{PREFIX}{run}c", check=False)
    for ns in names:
        _ip("netns", "del", ns, check=False)
    for line in _ip("route", "show", "proto", str(ROUTE_PROTO)).splitlines():
        if f"{SUBNET}.{run}." in line:
            _ip("route", "del", *line.split(), check=False)


# --------------------------------------------------------------------------- the network
@dataclass(frozen=True)
class Host:
    """One host: a network namespace with one interface (eth0) at ``ip``."""

    node: int
    ns: str
    ip: str

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` run inside this host (``ip netns exec`` execs the program: its pid is the program's)."""
        return ["ip", "netns", "exec", self.ns, *args]

    def popen(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.command(args), **kwargs)

    def run(self, args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.command(args), **kwargs)


class Network:
    """``hosts`` hosts (nodes 1..hosts) and the client (node 0, the root namespace) on one routed LAN whose
    links can be cut. Use as a context manager, or call :meth:`start` and :meth:`close`."""

    def __init__(self, hosts: int = 3, rnd: random.Random | None = None) -> None:
        if not 1 <= hosts <= MAX_HOSTS:
            raise ValueError(f"a Network has 1 to {MAX_HOSTS} hosts, not {hosts}")
        self.size = hosts
        self.rnd = rnd or random.Random()
        self.run = 0
        self.hosts: list[Host] = []
        self.swept: list[str] = []  # what the sweep at start removed (left by killed runs)
        self._drops: dict[Drop, int] = {}  # drop -> rule priority
        self._prefs = itertools.count(RULE_PREF)
        self.history: list[tuple[float, frozenset[Drop]]] = []  # (monotonic time, drops in force from then on)

    # ------------------------------------------------------------------ addresses
    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.run}-sw"

    @property
    def client_link(self) -> str:
        return f"{PREFIX}{self.run}c"

    @property
    def subnet(self) -> str:
        return f"{SUBNET}.{self.run}.0/24"

    @property
    def client_ip(self) -> str:
        return self.ip(CLIENT)

    @property
    def nodes(self) -> list[int]:
        """Every node, the client (0) included."""
        return [CLIENT, *range(1, self.size + 1)]

    def ip(self, node: int) -> str:
        if node == CLIENT:
            return f"{SUBNET}.{self.run}.{CLIENT_HOST}"
        if not 1 <= node <= self.size:
            raise ValueError(f"no node {node}: this network has the client (0) and hosts 1..{self.size}")
        return f"{SUBNET}.{self.run}.{node}"

    def host(self, node: int) -> Host:
        if not 1 <= node <= self.size:
            raise ValueError(f"no host {node}: this network has hosts 1..{self.size}")
        return self.hosts[node - 1]

    # ------------------------------------------------------------------ life
    def start(self) -> Network:
        reason = netns_unavailable_reason()
        if reason is not None:
            raise NetnsUnavailable(reason)
        with _locked():
            self.swept = _sweep_stale_locked()
            self.run = self._pick_run()
            try:
                self._build()
            except BaseException:
                _destroy(self.run)
                raise
        self.history.append((time.monotonic(), frozenset()))
        return self

    def _pick_run(self) -> int:
        taken = set(_runs_present())
        routes = _ip("-o", "route", "show", "table", "all") + _ip("-o", "addr", "show")
        free = [s for s in range(1, 255) if s not in taken and f"{SUBNET}.{s}." not in routes]
        if not free:
            raise RuntimeError(f"no free {SUBNET}.S.0/24 subnet for a test network: every one is in use")
        return self.rnd.choice(free)

    def _build(self) -> None:
        run, sw = self.run, self.switch
        tag = _owner_tag(os.getpid())
        assert tag is not None
        # the guard first (see the module's docstring). Setup holds the lock, so a sweep never sees a run half
        # built; a run killed half built has no owner on its client link and is swept.
        if GUARD not in _ip("route", "show", "proto", str(ROUTE_PROTO)):
            _ip("route", "add", "blackhole", GUARD, "metric", "4000", "proto", str(ROUTE_PROTO))
        _ip("netns", "add", sw)
        _sysctl(sw, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
        _ip("link", "set", "lo", "up", ns=sw)
        _ip("addr", "add", f"{SUBNET}.{run}.{SWITCH_HOST}/32", "dev", "lo", ns=sw)
        _ip("link", "add", self.client_link, "address", self._mac(CLIENT, 0), "type", "veth", "peer", "name",
            self._port(CLIENT), "address", self._mac(CLIENT, 1), "netns", sw)
        _ip("link", "set", self.client_link, "alias", tag)
        self._switch_port(CLIENT)
        _ip("addr", "add", f"{self.client_ip}/24", "dev", self.client_link)
        _ip("link", "set", self.client_link, "up")
        self._neighbours(None, self.client_link, CLIENT)
        for node in range(1, self.size + 1):
            ns = f"{PREFIX}{run}-h{node}"
            _ip("netns", "add", ns)
            _ip("link", "set", "lo", "up", ns=ns)
            _ip("link", "add", "eth0", "address", self._mac(node, 0), "netns", ns, "type", "veth", "peer", "name",
                self._port(node), "address", self._mac(node, 1), "netns", sw)
            _ip("addr", "add", f"{self.ip(node)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            self._switch_port(node)
            self._neighbours(ns, "eth0", node)
            self.hosts.append(Host(node, ns, self.ip(node)))

    def _mac(self, node: int, switch_side: int) -> str:
        return f"02:6f:{self.run:02x}:{switch_side:02x}:00:{node:02x}"

    @staticmethod
    def _port(node: int) -> str:
        return f"p{node}"

    def _switch_port(self, node: int) -> None:
        port = self._port(node)
        _sysctl(self.switch, f"net.ipv4.conf.{port}.rp_filter=0")
        _ip("link", "set", port, "up", ns=self.switch)
        _ip("route", "add", f"{self.ip(node)}/32", "dev", port, ns=self.switch)
        _ip("neigh", "replace", self.ip(node), "lladdr", self._mac(node, 0), "dev", port, "nud", "permanent",
            ns=self.switch)

    def _neighbours(self, ns: str | None, dev: str, node: int) -> None:
        """Static ARP: ``node`` reaches every other node through its switch port's address. No ARP ever runs,
        so a partition cuts IP only, as Jepsen's iptables rules do (with ARP, the switch would stop answering for a
        cut peer, and the sender's failed neighbour entry would delay the heal by seconds)."""
        lines = [f"neigh replace {self.ip(other)} lladdr {self._mac(node, 1)} dev {dev} nud permanent"
                 for other in self.nodes if other != node]
        _ip("-batch", "-", ns=ns, stdin="\n".join(lines) + "\n")

    def close(self) -> None:
        """Kill what runs in the hosts, remove everything this run created, and check that nothing is left."""
        if not self.run:
            return
        with _locked():
            _destroy(self.run)
            left = _runs_present().get(self.run)
        self.hosts.clear()
        self._drops.clear()
        if left:
            raise RuntimeError(f"test network {self.run} could not be removed completely: {left}")
        self.run = 0

    def __enter__(self) -> Network:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ faults
    @property
    def drops(self) -> frozenset[Drop]:
        """The drops in force now."""
        return frozenset(self._drops)

    def set_drops(self, drops: Iterable[Drop]) -> None:
        """Make ``drops`` exactly the drops in force (one batch of rule changes in the switch)."""
        want = set(drops)
        for src, dst in want:
            self.ip(src), self.ip(dst)  # validates the node numbers
            if src == dst:
                raise ValueError(f"a node cannot be cut from itself: ({src}, {dst})")
        gone = [d for d in self._drops if d not in want]
        new = [d for d in want if d not in self._drops]
        lines = [f"rule del pref {self._drops[d]}" for d in gone]
        for d in new:
            self._drops[d] = next(self._prefs)
            lines.append(f"rule add from {self.ip(d[0])}/32 to {self.ip(d[1])}/32 blackhole pref {self._drops[d]}")
        for d in gone:
            del self._drops[d]
        if lines:
            _ip("-batch", "-", ns=self.switch, stdin="\n".join(lines) + "\n")
        self.history.append((time.monotonic(), self.drops))

    def drop(self, src: int, dst: int) -> None:
        """Lose the packets from ``src`` to ``dst`` (one direction), on top of the drops in force."""
        self.set_drops(self.drops | {(src, dst)})

    def partition(self, groups: Sequence[Iterable[int]]) -> set[Drop]:
        """Replace the drops in force with a partition into ``groups`` (see :func:`complete_grudge`); returns
        the drops."""
        drops = complete_grudge(groups)
        self.set_drops(drops)
        return drops

    def isolate(self, node: int) -> set[Drop]:
        """Cut ``node`` from every other node, the client included."""
        return self.partition(isolated(node, self.nodes))

    def heal(self) -> None:
        """Remove every drop: all nodes talk to each other again."""
        self.set_drops(())

    def rules(self) -> str:
        """The switch's policy rules as the kernel has them (for checks and post-mortems)."""
        return _ip("rule", "show", ns=self.switch)

    # ------------------------------------------------------------------ processes
    def popen(self, node: int, args: Sequence[str], log: IO[bytes] | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``args`` on host ``node`` (killed by :meth:`close` at the latest)."""
        return self.host(node).popen(args, stdout=log, stderr=subprocess.STDOUT if log else None, env=env)
