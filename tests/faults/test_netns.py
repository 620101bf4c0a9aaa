"""oncelog.testing.netns: hosts in network namespaces talk over TCP and UDP; partitions, one-way drops and heals
do what they say; nothing is left behind, not even by a killed test process."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing.netns import (
    CLIENT,
    PREFIX,
    Network,
    bridge,
    complete_grudge,
    halves,
    isolated,
    majorities_ring,
    require_netns,
    sweep_stale,
)

PEER = str(Path(__file__).with_name("peer.py"))
PORT = 7000


# --------------------------------------------------------------------------- shapes (pure, no namespaces)
def test_complete_grudge_drops_every_packet_across_groups_and_none_within() -> None:
    drops = complete_grudge([[1], [2, 3]])
    assert drops == {(1, 2), (1, 3), (2, 1), (3, 1)}
    assert complete_grudge([[1], [2]]) == {(1, 2), (2, 1)}  # a node in no group (3) keeps talking to both
    with pytest.raises(ValueError, match="two sides"):
        complete_grudge([[1, 2], [2, 3]])


def test_halves_isolated_and_bridge_shapes() -> None:
    rnd = random.Random(7)
    nodes = [1, 2, 3, 4, 5]
    small, big = halves(nodes, rnd)
    assert sorted(small + big) == nodes and len(small) == 2 and len(big) == 3
    assert isolated(3, nodes) == [[3], [1, 2, 4, 5]]
    drops = bridge(nodes, rnd)
    cut = {n for d in drops for n in d}
    (middle,) = set(nodes) - cut  # exactly one node is in no drop: it talks to both sides
    sides = [{d for s, d in drops if s == n} for n in cut]
    assert all(len(s) == 2 for s in sides), drops  # each of the 4 others is cut from the 2 across


def test_majorities_ring_every_node_hears_a_majority_but_no_two_the_same() -> None:
    for n in (3, 5, 7):
        nodes = list(range(1, n + 1))
        drops = majorities_ring(nodes, random.Random(n))
        heard = {me: {src for src in nodes if (src, me) not in drops} for me in nodes}
        assert all(len(h) == n // 2 + 1 and me in h for me, h in heard.items()), heard
        assert len({frozenset(h) for h in heard.values()}) == n, heard


# --------------------------------------------------------------------------- the network
@pytest.fixture
def net() -> Iterator[Network]:
    require_netns()
    with Network(hosts=3, rnd=random.Random()) as n:
        yield n


def start_peer(net: Network, node: int, mode: str) -> subprocess.Popen[bytes]:
    proc = net.popen(node, [sys.executable, PEER, mode, net.ip(node), str(PORT)])
    proc.stdout = None
    return proc


def wait_listening(net: Network, node: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((net.ip(node), PORT), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on host {node} ({net.ip(node)}:{PORT}) after {timeout} s")


CONNECT = textwrap.dedent("""
    import socket, sys
    try:
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as s:
            s.sendall(b"hello")
            s.settimeout(float(sys.argv[3]))
            print("echo" if s.recv(5) == b"hello" else "garbled")
    except TimeoutError:
        print("timeout")
    except OSError as e:
        print(type(e).__name__, e.errno)
""")


def talk(net: Network, src: int, dst: int, timeout: float = 1.5) -> str:
    """Connect from node ``src`` to the echo peer on ``dst`` and exchange one message: 'echo', 'timeout' or the
    OS error."""
    args = [sys.executable, "-c", CONNECT, net.ip(dst), str(PORT), str(timeout)]
    if src == CLIENT:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout * 3 + 10)
    else:
        out = net.host(src).run(args, capture_output=True, text=True, timeout=timeout * 3 + 10)
    return out.stdout.strip() or out.stderr.strip()


def test_hosts_talk_over_tcp_and_a_partition_cuts_exactly_the_links_across_it(net: Network) -> None:
    for node in (1, 2, 3):
        start_peer(net, node, "tcp-echo")
        wait_listening(net, node)
    assert talk(net, 1, 2) == "echo" and talk(net, 2, 1) == "echo" and talk(net, CLIENT, 3) == "echo"

    net.partition([[1], [2, 3]])
    assert talk(net, 1, 2) == "timeout"  # the SYN is lost: no refusal, no error, just silence
    assert talk(net, 3, 1) == "timeout"
    assert talk(net, 2, 3) == "echo"  # same side
    assert talk(net, CLIENT, 1) == "echo" and talk(net, CLIENT, 2) == "echo"  # the client is in no group
    rules = net.rules()
    assert rules.count("blackhole") == 4, rules

    net.heal()
    assert "blackhole" not in net.rules()
    assert talk(net, 1, 2) == "echo" and talk(net, 3, 1) == "echo"


def test_an_established_connection_stalls_during_a_partition_and_resumes_after_heal(net: Network) -> None:
    start_peer(net, 2, "tcp-echo")
    wait_listening(net, 2)
    with socket.create_connection((net.ip(2), PORT), timeout=5) as s:
        s.sendall(b"one")
        assert s.recv(3) == b"one"
        net.isolate(2)  # cut host 2 from everyone, the client (this process) included
        s.sendall(b"two")  # accepted by the kernel's send buffer, lost on the wire
        s.settimeout(2.0)
        with pytest.raises(TimeoutError):
            s.recv(3)
        assert talk(net, 1, 2) == "timeout" and talk(net, CLIENT, 2) == "timeout"
        net.heal()
        s.settimeout(15.0)  # TCP retransmits with back-off: the next retry after the heal gets through
        assert s.recv(3) == b"two"
    assert talk(net, CLIENT, 2) == "echo"


def test_a_one_way_drop_loses_one_direction_only(net: Network, tmp_path: Path) -> None:
    logs = {n: start_udp_logger(net, n, tmp_path / f"udp-{n}.log") for n in (1, 2)}
    net.drop(1, 2)  # packets from 1 to 2 are lost; 2 -> 1 still flows
    assert net.drops == {(1, 2)}
    send_udp(net, 1, 2, "from-1")
    send_udp(net, 2, 1, "from-2")
    time.sleep(0.5)
    got = {n: read_lines(p) for n, p in logs.items()}
    assert f"{net.ip(2)} from-2" in got[1], got
    assert not any("from-1" in line for line in got[2]), got
    assert talk(net, 2, 1) == "timeout"  # TCP needs both directions: 1's SYN-ACK never reaches 2
    net.heal()
    send_udp(net, 1, 2, "after-heal")  # at once: the heal leaves no state behind (no ARP to redo)
    time.sleep(0.5)
    assert f"{net.ip(1)} after-heal" in read_lines(logs[2])


def start_udp_logger(net: Network, node: int, path: Path) -> Path:
    with open(path, "wb") as log:
        net.popen(node, [sys.executable, PEER, "udp-log", net.ip(node), str(PORT)], log=log)
    deadline = time.monotonic() + 10
    while "ready" not in path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def send_udp(net: Network, src: int, dst: int, text: str) -> None:
    code = f"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); " \
           f"[s.sendto({text!r}.encode(), ({net.ip(dst)!r}, {PORT})) for _ in range(3)]"
    net.host(src).run([sys.executable, "-c", code], check=True, timeout=30)


def test_bridge_partition_leaves_one_host_talking_to_both_sides(net: Network) -> None:
    for node in (1, 2, 3):
        start_peer(net, node, "tcp-echo")
        wait_listening(net, node)
    net.partition([[1], [2]])  # 3 is in no group: Jepsen's bridge on three nodes
    assert talk(net, 1, 2) == "timeout" and talk(net, 2, 1) == "timeout"
    assert talk(net, 3, 1) == "echo" and talk(net, 3, 2) == "echo"
    assert talk(net, 1, 3) == "echo" and talk(net, 2, 3) == "echo"


def state() -> tuple[str, str, str]:
    """What the machine has of test networks: namespaces, links, routes (oncelog's names and subnet only)."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    return netns, links, routes


def leftovers_of(run: int) -> list[str]:
    netns, links, routes = state()
    return ([line for line in netns.splitlines() if line.startswith(f"{PREFIX}{run}-")]
            + [line for line in links.splitlines() if f" {PREFIX}{run}c" in line]
            + [line for line in routes.splitlines() if f"10.77.{run}." in line])


def test_close_leaves_no_namespace_link_route_or_process() -> None:
    require_netns()
    net = Network(hosts=2).start()
    run = net.run
    netns, links, routes = state()
    assert sum(line.startswith(f"{PREFIX}{run}-") for line in netns.splitlines()) == 3, netns  # switch + 2 hosts
    assert f" {PREFIX}{run}c@" in links and f"10.77.{run}.0/24 dev {PREFIX}{run}c" in routes
    proc = start_peer(net, 1, "tcp-echo")
    wait_listening(net, 1)
    net.partition([[1], [2]])
    net.close()
    assert proc.wait(10) == -signal.SIGKILL  # what ran in a host is killed with it
    assert leftovers_of(run) == []
    # what stays: the guard, so that a client the test still holds cannot reach out with the test's addresses
    assert "blackhole 10.77.0.0/16" in state()[2]
    probe = socket.socket()
    probe.settimeout(2)
    with pytest.raises(OSError) as err, probe:
        probe.connect((f"10.77.{run}.1", 7000))
    assert not isinstance(err.value, TimeoutError), "the packet left the machine instead of being blackholed"


OWNER = textwrap.dedent("""
    import subprocess, sys, time
    from oncelog.testing.netns import Network
    net = Network(hosts=2).start()
    net.popen(1, ["sleep", "600"])
    net.partition([[1], [2]])
    print(net.run, flush=True)
    time.sleep(600)
""")


def test_a_killed_test_process_leftovers_are_swept_by_the_next_network() -> None:
    require_netns()
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        run = int(owner.stdout.readline())
        sleeper = [p for p in subprocess.run(["ip", "netns", "pids", f"{PREFIX}{run}-h1"], capture_output=True,
                                             text=True).stdout.split()]
        assert sleeper, "the owner's process in host 1 is not running"
        removed = sweep_stale()  # its owner is alive: untouched
        assert not any(f"{PREFIX}{run}-" in w or f"{PREFIX}{run}c" in w for w in removed), removed
        assert leftovers_of(run)
    finally:
        owner.send_signal(signal.SIGKILL)  # no teardown runs
        owner.wait()
    assert leftovers_of(run), "a killed owner leaves its network behind"
    with Network(hosts=1):  # its start sweeps (unless a network started by a parallel test process did it first)
        assert leftovers_of(run) == []
        assert not Path(f"/proc/{sleeper[0]}").exists() or "Z" in Path(f"/proc/{sleeper[0]}/stat").read_text()
