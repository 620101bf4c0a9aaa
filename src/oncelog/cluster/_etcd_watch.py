"""The etcd watch of the cluster's keys: one consistent read, then a watch (private to ``cluster.metadata``).

The whole prefix is read at one revision R (in pages, every page at R) and watched from R + 1; each watch response
becomes one new view (``cluster._etcd_view``). ``progress`` is the newest revision whose events were applied (only
events count: see ``cluster._etcd`` on progress notifications), so waiting for a write means waiting for its own
event. A quiet watch is checked every second with a linearizable read; a read that fails within the timeout counts
as a broken watch. A broken watch (etcd restarted, unreachable, paused) is resumed from ``progress`` + 1 while the
last view keeps being served, marked ``stale``; a watch whose revision was compacted away reads everything again
and publishes the difference. An etcd whose revision went back (wiped, or restored from a backup) has another
history: it is reported and not followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ._etcd import KV, Etcd, EtcdCompacted, EtcdUnavailable, WatchBatch, WatchStream, prefix_end, stop_task
from ._etcd_view import ViewState
from .changes import ViewChange, ViewSubscription
from .model import ClusterView, Keys

__all__ = ["ViewWatch"]

log = logging.getLogger("oncelog.cluster.metadata")

_RANGE_PAGE = 2000  # keys per page of a full read (one response stays far below gRPC's message limit)
_QUIET_CHECK_S = 1.0  # a watch quiet for this long is checked with a read


class ViewWatch:
    """The cluster view kept current by an etcd watch of the cluster's prefix (nothing to do with replica
    followers): ``view``, ``progress`` (revision), ``stale``, and subscriptions to what changed."""

    def __init__(self, etcd: Etcd, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self._state = ViewState(keys)
        self.progress = 0  # every event of the prefix up to this revision is in the view (nothing later is)
        self.stale = True
        self.recovered_at: float | None = None  # loop time the view was last fresh again after being stale
        self._fresh_once = False
        self._retry_now = asyncio.Event()  # a broken watch is resumed at once (etcd answered a resync)
        self._delay = 0.1  # before resuming a broken watch; doubles up to 1 s, back to 0.1 s once it works
        self._tick = asyncio.Event()  # set and replaced whenever anything here (or the owner) moves
        self._subs: list[ViewSubscription] = []
        self._task: asyncio.Task[None] | None = None
        self._went_back = False
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
        await stop_task(self._task)
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
            waiter = asyncio.ensure_future(tick.wait())
            try:  # asyncio.wait, not wait_for: a cancellation of the caller is never swallowed (gh-86296)
                done, _ = await asyncio.wait({waiter}, timeout=left)
            finally:
                waiter.cancel()
            if not done:
                return cond()
        return True

    async def seen(self, revision: int, timeout: float) -> bool:
        """Wait until the view holds every change up to ``revision``, which must be the revision of an event of
        the cluster's keys (a write's own revision, or a key's mod_revision): read-your-writes."""
        return await self.wait_until(lambda: self.progress >= revision, timeout)

    async def resync(self) -> None:
        """Read everything at etcd's current revision and publish what differs, whatever the watch has delivered:
        once this returns the view is at least as new as etcd was when it was called (the watch may be stuck on a
        connection that died while etcd was unreachable, and catch up much later). Raises EtcdUnavailable."""
        revision, kvs = await self._read_all()
        if revision > self.progress:
            self._publish(self._state.load(kvs, revision))
            self.progress = revision
        self._retry_now.set()  # etcd answers: a broken watch need not wait out its back-off

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

    async def _pause(self) -> None:
        """The back-off before resuming a broken watch (cut short by a resync)."""
        self._retry_now.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._retry_now.wait(), self._delay)
        self._delay = min(self._delay * 2, 1.0)

    async def _run(self) -> None:
        reload = False
        failures = 0
        while not self.closed:
            if self._went_back:  # another history: nothing of it is followed (the error is logged)
                self._set_stale(True)
                await asyncio.sleep(1.0)
                continue
            try:
                if reload:
                    await self.resync()
                    reload = False
                stream = self._etcd.watch(self._keys.prefix, self.progress + 1)
                await stream.start()
                try:
                    await self._follow(stream)
                finally:
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
                await self._pause()
                continue
            except Exception:  # a bug must not freeze the view for good: say so, read everything, go on
                log.exception("the metadata watch failed; reading everything from etcd again")
                self._set_stale(True)
                reload = True
                await asyncio.sleep(1.0)
                continue
            failures = 0

    async def _follow(self, stream: WatchStream) -> None:
        await self._probe()
        read: asyncio.Future[WatchBatch] | None = None
        try:
            while not self.closed:
                if read is None:
                    read = asyncio.ensure_future(stream.next())
                done, _ = await asyncio.wait({read}, timeout=_QUIET_CHECK_S)
                if not done:
                    await self._probe()
                    continue
                batch, read = read.result(), None
                # a resync may have read past what the watch delivers now: those events are in the view already
                events = [e for e in batch.events if e.kv.mod_revision > self.progress]
                if events:
                    revision = events[-1].kv.mod_revision
                    change = self._state.apply(events, revision)
                    self.progress = revision
                    self._publish(change)
        finally:
            if read is not None:
                read.cancel()

    async def _probe(self) -> None:
        """A linearizable read (etcd has a leader and answers in time), or EtcdUnavailable."""
        revision, _, _ = await self._etcd.range(self._keys.cluster_id)
        if revision < self.progress:  # revisions never go back, unless etcd was wiped or restored from a backup
            if not self._went_back:
                self._went_back = True
                log.error("etcd at %s is at revision %d, before revision %d this broker has seen: etcd was "
                          "replaced or restored from a backup; the metadata is not followed until the broker "
                          "restarts",
                          self._etcd.endpoint, revision, self.progress)
            raise EtcdUnavailable(f"etcd at {self._etcd.endpoint} went back to revision {revision}")
        self._delay = 0.1  # the watch works: the next break is resumed quickly again
        self._set_stale(False)

    def _set_stale(self, stale: bool) -> None:
        if stale != self.stale:
            self.stale = stale
            if not stale:
                log.info("following the cluster metadata in etcd at %s (revision %d)", self._etcd.endpoint,
                         self.progress)
                if self._fresh_once:
                    self.recovered_at = asyncio.get_running_loop().time()
                self._fresh_once = True
            self.poke()
