"""Fast dead-broker detection: a killed broker process is noticed in milliseconds instead of at its lease expiry.

A broker's registration lives as long as its etcd lease (``broker.session.timeout.ms``, 9 s by default). A process
that died can be told from one that is only slow: its kernel closed its connections and its listener is gone, so a
new connection is *refused*. So the controller keeps a connection open to every broker's listener, and every broker
one to the controller's; when one closes and a new connection to the same listener is refused at once, the
registration (that very broker epoch, nothing newer) is revoked, and the controller reacts as to an expired lease.

A paused process (SIGSTOP) or one behind a network partition still has its listener (the kernel accepts connections
for it) or does not answer at all: neither closes nor refuses, so only its lease expiry removes it. A connection that
was never established proves nothing (the broker may register before it listens). This is speed only: safety never
rests on it; the epochs fence whatever a wrongly revoked broker would do (and it registers again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from oncelog.cluster.model import ClusterView
from oncelog.cluster.store import MetadataUnavailableError

__all__ = ["Liveness", "RevokesRegistrations"]

log = logging.getLogger("oncelog.broker.cluster.liveness")

RETRY_S = 0.5  # longest pause between two attempts to connect
FIRST_PAUSE_S = 0.02  # first pause (a dying process's listener may accept, and reset, one more connection)
SHORT_LIVED_S = 1.0  # a connection closed sooner than this is reopened after a pause
CONNECT_TIMEOUT_S = 2.0


class RevokesRegistrations(Protocol):
    async def revoke_registration(self, node_id: int, broker_epoch: int) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    epoch: int


class Liveness:
    """Keeps the connections this broker watches: every other broker's while it is the controller, else the
    controller's. Call :meth:`update` with every new view (and when the controller role changes)."""

    def __init__(self, node_id: int, store: RevokesRegistrations, is_controller: Callable[[], bool]) -> None:
        self.node_id = node_id
        self._store = store
        self._is_controller = is_controller
        self._watches: dict[int, tuple[_Target, asyncio.Task[None]]] = {}
        self._closed = False
        self.revoked: list[tuple[int, int]] = []  # (node id, broker epoch) revoked by this broker

    def targets(self, view: ClusterView) -> dict[int, _Target]:
        if self._is_controller():
            nodes = [n for n in view.brokers if n != self.node_id]
        elif view.controller is not None and view.controller.node_id != self.node_id:
            nodes = [view.controller.node_id] if view.controller.node_id in view.brokers else []
        else:
            nodes = []
        return {n: _Target(view.brokers[n].host, view.brokers[n].port, view.brokers[n].epoch) for n in nodes}

    def update(self, view: ClusterView) -> None:
        if self._closed:
            return
        want = self.targets(view)
        for node, (target, task) in list(self._watches.items()):
            if want.get(node) != target or task.done():
                task.cancel()
                del self._watches[node]
        loop = asyncio.get_running_loop()
        for node, target in want.items():
            if node not in self._watches:
                task = loop.create_task(self._watch(node, target), name=f"liveness-{node}")
                self._watches[node] = (target, task)

    async def close(self) -> None:
        self._closed = True
        tasks = [task for _, task in self._watches.values()]
        self._watches.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, node: int, target: _Target) -> None:
        loop = asyncio.get_running_loop()
        connected_once = False
        pause = FIRST_PAUSE_S  # doubles up to RETRY_S while connections fail or close at once
        while True:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(target.host, target.port),
                                                        CONNECT_TIMEOUT_S)
            except ConnectionRefusedError:
                if connected_once:  # shielded: the view that shows the revocation cancels this watch
                    await asyncio.shield(self._gone(node, target))
                    return
                await asyncio.sleep(pause)  # registered before listening: not yet, or never reachable from here
                pause = min(pause * 2, RETRY_S)
                continue
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(pause)  # unreachable or slow: proves nothing
                pause = min(pause * 2, RETRY_S)
                continue
            connected_once = True
            opened = loop.time()
            try:
                while await reader.read(4096):  # a broker sends nothing unasked: this returns at the close
                    pass
            except OSError:
                pass
            finally:
                writer.close()
            if loop.time() - opened < SHORT_LIVED_S:
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_S)
            else:
                pause = FIRST_PAUSE_S

    async def _gone(self, node: int, target: _Target) -> None:
        log.warning("node %d at %s:%d closed its connection and refuses new ones: the process is gone; revoking "
                    "its registration (broker epoch %d) instead of waiting for its lease to expire", node,
                    target.host, target.port, target.epoch)
        try:
            if await self._store.revoke_registration(node, target.epoch):
                self.revoked.append((node, target.epoch))
        except MetadataUnavailableError as e:
            log.warning("could not revoke the registration of node %d (%s): its lease expires on its own", node, e)
