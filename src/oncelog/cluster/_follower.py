"""Following the cluster's keys in etcd: one consistent read, then a watch (private to ``cluster.metadata``).

The whole prefix is read at one revision R (in pages, every page at R) and watched from R + 1; each watch response
becomes one new view (``cluster._viewstate``). The watch proves itself alive: when it is quiet it is asked for
progress every second, and etcd's answer (sent only once every event up to its revision was delivered) moves
``progress`` forward; no answer within the timeout counts as a broken watch. A broken watch (etcd restarted,
unreachable, paused) is resumed from ``progress`` + 1 while the last view keeps being served, marked ``stale``; a
watch whose revision was compacted away reads everything again and publishes the difference.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ._etcd import KV, Etcd, EtcdCompacted, EtcdUnavailable, WatchBatch, WatchStream, prefix_end
from ._viewstate import ViewState
from .changes import ViewChange, ViewSubscription
from .model import ClusterView, Keys

__all__ = ["ViewFollower"]

log = logging.getLogger("oncelog.cluster.metadata")

_RANGE_PAGE = 2000  # keys per page of a full read (one response stays far below gRPC's message limit)
_QUIET_CHECK_S = 1.0  # a watch quiet for this long is asked for progress


class ViewFollower:
    def __init__(self, etcd: Etcd, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self._state = ViewState(keys)
        self.progress = 0  # every event of the prefix up to this revision is in the view
        self.stale = True
        self._tick = asyncio.Event()  # set and replaced whenever anything here (or the owner) moves
        self._subs: list[ViewSubscription] = []
        self._stream: WatchStream | None = None
        self._asked: float | None = None  # loop time of an unanswered progress request
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def view(self) -> ClusterView:
        return self._state.view

    async def start(self) -> None:
        """Read everything, then follow in a background task."""
        revision, kvs = await self._read_all()
        self._publish(self._state.load(kvs, revision))
        self.progress = revision
        self._task = asyncio.create_task(self._run(), name=f"etcd-watch {self._keys.root}")

    async def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for sub in list(self._subs):
            sub.close()
        self.poke()

    def subscribe(self) -> ViewSubscription:
        sub = ViewSubscription(self.view, self._subs.remove)
        self._subs.append(sub)
        return sub

    # ------------------------------------------------------------------ waiting
    def poke(self) -> None:
        """Wake every ``wait_until`` to check its condition again."""
        self._tick.set()
        self._tick = asyncio.Event()

    async def wait_until(self, cond: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``cond()`` (checked whenever something moved); False after ``timeout`` or once closed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not cond():
            if self.closed:
                return False
            tick = self._tick
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            try:
                await asyncio.wait_for(tick.wait(), left)
            except asyncio.TimeoutError:
                return cond()
        return True

    async def seen(self, revision: int, timeout: float) -> bool:
        """Wait until the view holds every change up to ``revision`` (read-your-writes)."""
        if self.progress >= revision:
            return True
        # a write of ours comes on the watch by itself; a revision without an event of ours needs a progress answer
        if await self.wait_until(lambda: self.progress >= revision, 0.05):
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await self._ask_progress()
            if await self.wait_until(lambda: self.progress >= revision, min(0.5, deadline - loop.time())):
                return True
        return self.progress >= revision

    # ------------------------------------------------------------------ reading and watching
    def _publish(self, change: ViewChange | None) -> None:
        if change is not None:
            for sub in list(self._subs):
                sub.publish(change)
        self.poke()

    async def _read_all(self) -> tuple[int, list[KV]]:
        """Every key of the cluster at one revision, in pages."""
        while True:
            revision = 0
            out: list[KV] = []
            start, end = self._keys.prefix, prefix_end(self._keys.prefix)
            try:
                while True:
                    rev, kvs, more = await self._etcd.range(start, end, revision=revision, limit=_RANGE_PAGE)
                    revision = revision or rev
                    out.extend(kvs)
                    if not more or not kvs:
                        return revision, out
                    start = kvs[-1].key + b"\0"
            except EtcdCompacted:
                continue  # compacted between two pages: read again at the newest revision

    async def _run(self) -> None:
        delay = 0.1
        reload = False
        failures = 0
        while not self.closed:
            try:
                if reload:
                    revision, kvs = await self._read_all()
                    change = self._state.load(kvs, revision)
                    self.progress = max(self.progress, revision)
                    self._publish(change)
                    reload = False
                stream = self._etcd.watch(self._keys.prefix, self.progress + 1)
                await stream.start()
                self._stream = stream
                try:
                    await self._follow(stream)
                finally:
                    self._stream = None
                    self._asked = None
                    stream.cancel()
            except EtcdCompacted as e:
                log.info("etcd compacted the metadata history past revision %d (%s): reading everything again",
                         self.progress + 1, e)
                reload = True
            except EtcdUnavailable as e:
                if not self.stale:
                    log.warning("lost the metadata watch (%s): serving the last view (revision %d) until etcd "
                                "answers again", e, self.view.revision)
                self._set_stale(True)
                failures += 1
                if failures % 3 == 0:
                    await self._etcd.rotate()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay, failures = 0.1, 0

    async def _follow(self, stream: WatchStream) -> None:
        loop = asyncio.get_running_loop()
        await self._ask_progress()
        read: asyncio.Future[WatchBatch] | None = None
        try:
            while True:
                if read is None:
                    read = asyncio.ensure_future(stream.next())
                done, _ = await asyncio.wait({read}, timeout=_QUIET_CHECK_S)
                if not done:
                    if self._asked is None:
                        await self._ask_progress()
                    elif loop.time() - self._asked > self._etcd.timeout:
                        raise EtcdUnavailable(f"etcd at {self._etcd.endpoint}: no answer on the watch for "
                                              f"{self._etcd.timeout:g} s")
                    continue
                batch = read.result()
                read = None
                self._asked = None  # any answer shows the stream alive
                self._apply(batch)
        finally:
            if read is not None:
                read.cancel()

    def _apply(self, batch: WatchBatch) -> None:
        change = None
        if batch.events:
            revision = batch.events[-1].kv.mod_revision
            change = self._state.apply(batch.events, revision)
            self.progress = max(self.progress, revision)
        if batch.progress:
            self.progress = max(self.progress, batch.revision)
            self._set_stale(False)
        self._publish(change)

    async def _ask_progress(self) -> None:
        stream = self._stream
        if stream is None or self._asked is not None:
            return
        self._asked = asyncio.get_running_loop().time()
        try:
            await stream.request_progress()
        except EtcdUnavailable:
            pass  # the watch task finds out by itself

    def _set_stale(self, stale: bool) -> None:
        if stale != self.stale:
            self.stale = stale
            if not stale:
                log.info("the metadata watch is caught up with etcd at %s (revision %d)", self._etcd.endpoint,
                         self.progress)
            self.poke()
