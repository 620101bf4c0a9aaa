"""Fast dead-broker detection against real sockets: a listener that closes its connections and then refuses new ones
is a dead process (its registration is revoked, that epoch only); one that keeps its connections, or was never
reached, is not."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import MappingProxyType

from oncelog.broker.cluster.liveness import Liveness
from oncelog.cluster.model import BrokerInfo, ClusterView, ControllerInfo
from oncelog.testing.broker_process import free_port


class Store:
    def __init__(self) -> None:
        self.revoked: list[tuple[int, int]] = []

    async def revoke_registration(self, node_id: int, broker_epoch: int) -> bool:
        self.revoked.append((node_id, broker_epoch))
        return True


class Peer:
    """A broker's listener: accepts and holds connections; ``die()`` closes them all and stops listening."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> Peer:
        async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)

        self.server = await asyncio.start_server(hold, "127.0.0.1", self.port)
        return self

    async def die(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()

    async def connected(self, n: int = 1) -> None:
        await until(lambda: len(self.writers) >= n, "the watcher connected")


def view(*brokers: tuple[int, int, int], controller: int = 1) -> ClusterView:
    infos = {n: BrokerInfo(n, "127.0.0.1", port, epoch=epoch) for n, port, epoch in brokers}
    return ClusterView(revision=10, brokers=MappingProxyType(infos), controller=ControllerInfo(controller, 2))


async def until(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_controller_revokes_a_broker_whose_listener_closes_and_refuses() -> None:
    async def main() -> None:
        store = Store()
        peer = await Peer(free_port()).start()
        live = Liveness(1, store, lambda: True)
        live.update(view((1, free_port(), 3), (2, peer.port, 7)))
        await peer.connected()
        t0 = asyncio.get_running_loop().time()
        await peer.die()
        await until(lambda: store.revoked == [(2, 7)], "revoked")
        assert asyncio.get_running_loop().time() - t0 < 0.5
        await live.close()

    run(main)


def test_a_broker_that_keeps_its_connections_is_left_alone() -> None:
    """A paused process's kernel keeps its connections open: nothing is revoked (its lease decides)."""

    async def main() -> None:
        store = Store()
        peer = await Peer(free_port()).start()
        live = Liveness(1, store, lambda: True)
        live.update(view((1, free_port(), 3), (2, peer.port, 7)))
        await peer.connected()
        await asyncio.sleep(0.3)
        assert store.revoked == []
        await live.close()
        await peer.die()

    run(main)


def test_a_listener_never_reached_proves_nothing() -> None:
    """A broker registers before it listens (and a firewall may refuse us): refusals without an earlier
    connection revoke nothing."""

    async def main() -> None:
        store = Store()
        live = Liveness(1, store, lambda: True)
        live.update(view((1, free_port(), 3), (2, free_port(), 7)))
        await asyncio.sleep(0.5)
        assert store.revoked == []
        await live.close()

    run(main)


def test_a_restarted_listener_on_the_same_port_is_not_revoked() -> None:
    """The old process closes its connections and a new one listens at once (a restart): not dead."""

    async def main() -> None:
        store = Store()
        port = free_port()
        peer = await Peer(port).start()
        live = Liveness(1, store, lambda: True)
        live.update(view((1, free_port(), 3), (2, port, 7)))
        await peer.connected()
        server = peer.server
        assert server is not None
        for w in peer.writers:  # the connections close while the listener stays: a reconnect succeeds
            w.close()
        again = len(peer.writers) + 1
        await peer.connected(again)
        await asyncio.sleep(0.2)
        assert store.revoked == []
        await live.close()
        await peer.die()

    run(main)


def test_a_broker_watches_only_the_controller_and_follows_its_moves() -> None:
    async def main() -> None:
        store = Store()
        a, b = await Peer(free_port()).start(), await Peer(free_port()).start()
        live = Liveness(3, store, lambda: False)
        live.update(view((1, a.port, 4), (2, b.port, 5), (3, free_port(), 6), controller=1))
        await a.connected()
        assert b.writers == []
        live.update(view((1, a.port, 4), (2, b.port, 5), (3, free_port(), 6), controller=2))
        await b.connected()
        await a.die()  # no longer watched: not revoked
        await asyncio.sleep(0.2)
        assert store.revoked == []
        await b.die()
        await until(lambda: store.revoked == [(2, 5)], "controller revoked")
        await live.close()

    run(main)


def test_a_dying_listener_that_takes_one_more_connection_is_still_noticed_at_once() -> None:
    """SIGKILL closes a process's connections before its listener: one more connection may be accepted and reset
    while the kernel tears the process down. That must not delay the verdict by a whole retry period."""

    async def main() -> None:
        store = Store()
        peer = await Peer(free_port()).start()
        live = Liveness(1, store, lambda: True)
        live.update(view((1, free_port(), 3), (2, peer.port, 7)))
        await peer.connected()
        server = peer.server
        assert server is not None
        t0 = asyncio.get_running_loop().time()
        for w in peer.writers:  # the connections go first ...
            w.close()
        seen = len(peer.writers)
        await until(lambda: len(peer.writers) > seen, "one more connection accepted")
        await peer.die()  # ... which is reset with the listener
        await until(lambda: store.revoked == [(2, 7)], "revoked")
        took = asyncio.get_running_loop().time() - t0
        assert took < 0.3, f"revoked {took:.2f} s after the close"
        await live.close()

    run(main)
