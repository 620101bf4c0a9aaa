"""The cluster's metadata in etcd: the only code that talks to etcd (through its private ``_etcd`` wrapper).

:class:`EtcdMetadata` implements :class:`~oncelog.cluster.store.MetadataStore` and the lifecycle a broker needs:

- ``connect``: etcd reachable or one clear error (:class:`EtcdUnreachableError`); the cluster id created once
  (compare-and-swap) and read by everyone; the whole prefix read at one revision R, then watched from R + 1.
- The view: every watch response (whole revisions) becomes a new immutable :class:`ClusterView`
  (``cluster._etcd_watch``, ``cluster._etcd_view``); subscribers get what changed. A broken watch is resumed where it
  stopped while the last view is served, marked ``stale``; after a compaction everything is read again.
- The session: the broker's registration under a lease (Kafka's ``broker.session.timeout.ms``, refreshed every
  ``broker.heartbeat.interval.ms``); broker epoch = the registration's create_revision (KIP-380). When no refresh
  has reached etcd for a whole TTL (etcd unreachable, or this process paused) the session is reported lost at once,
  from this process's own clock (the lease cannot have expired earlier in etcd). If etcd still has the lease when it
  answers again (etcd restarted: it renews every lease), the same registration continues; if not (the lease
  expired: a stall of etcd expires every lease when it resumes), the broker registers again with a new broker epoch
  and the same incarnation (``BrokerInfo.incarnation``: the same process, its log intact). Either way the view is
  read again at etcd's current revision before the session is reported back, so the broker never acts on a view
  older than what etcd held then.
- The controller: the broker holding the controller key under its lease; controller epoch = the key's
  create_revision; every controller write compares it in the same transaction, so a deposed controller (paused
  past its lease) cannot write (Kafka's controller epoch / ``controllerEpochZkVersion``).
- Writes: compare-and-swap transactions; topics bigger than one transaction under a claim (``cluster._topics``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace

from ._etcd import KV, Cmp, Delete, Etcd, EtcdUnavailable, Get, Put, TxnResult, stop_task
from ._etcd_watch import ViewWatch
from ._topics import TopicWrites
from .changes import ViewSubscription
from .model import BrokerInfo, ClusterView, ControllerInfo, Keys, MetadataFormatError, PartitionState, \
    TopicMeta, encode_configs
from .store import DuplicateBrokerError, MetadataStore, MetadataUnavailableError, PartitionChange, \
    PartitionWriteResult

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "EtcdMetadata",
    "EtcdUnreachableError",
    "ProducerIdsExhaustedError",
    "Session",
    "parse_endpoints",
]

log = logging.getLogger("oncelog.cluster.metadata")

DEFAULT_SESSION_TIMEOUT_MS = 9000  # Kafka's broker.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # Kafka's broker.heartbeat.interval.ms
ETCD_MAX_TXN_OPS = 128  # etcd's --max-txn-ops default
_TXNS_IN_FLIGHT = 8  # apply_partition_changes: transactions in flight at once (etcd batches them in raft)
_MAX_PRODUCER_ID = (1 << 63) - 1


class EtcdUnreachableError(MetadataUnavailableError):
    """etcd did not answer at start-up; the message names the endpoints and what to do."""


class ProducerIdsExhaustedError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Session:
    """This broker's registration as this process knows it. ``alive`` False: act as if not registered
    (lead nothing) until a later Session says otherwise; ``broker.epoch`` is the broker epoch."""

    alive: bool
    broker: BrokerInfo | None
    reason: str = ""


def parse_endpoints(spec: str | Sequence[str]) -> list[str]:
    """``etcd://h1:2379,h2:2379`` (or ``http://``, or bare ``host[:port]``, or a list of those) -> ``host:port``s."""
    items = [spec] if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            for scheme in ("etcd://", "http://"):
                if part.startswith(scheme):
                    part = part[len(scheme):]
            part = part.rstrip("/")
            if not part:
                continue
            host, sep, port = part.rpartition(":")
            if not sep or host.endswith(":") or (host.startswith("[") is not host.endswith("]")):
                host, port = part, "2379"  # no port (a bare IPv6 address in brackets included)
            if not host or not port.isdigit():
                raise ValueError(f"bad etcd endpoint {part!r}: expected HOST:PORT, e.g. etcd://127.0.0.1:2379")
            out.append(f"{host}:{port}")
    if not out:
        raise ValueError("no etcd endpoint given: expected etcd://HOST:PORT")
    return out


def _new_cluster_id() -> str:
    """Kafka's cluster id format: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass(slots=True)
class _Lease:
    id: int
    ttl: float
    deadline: float  # loop time before which etcd surely still has the lease (refresh sent + TTL)


class EtcdMetadata:
    """The metadata store of one broker (or tool) process: ``await EtcdMetadata.connect(...)``, ``close()``."""

    def __init__(self, etcd: Etcd, keys: Keys, *, session_timeout_ms: int, heartbeat_interval_ms: int,
                 max_txn_ops: int) -> None:
        self._etcd = etcd
        self._keys = keys
        self._ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        self._heartbeat_s = heartbeat_interval_ms / 1000
        # one refresh waits at most this long: a member that does not answer (cut off, paused) is left in time for
        # a refresh through the next one to reach etcd within the TTL (TTL / 3 leaves 2/3 of it, less a heartbeat)
        self._refresh_timeout_s = min(etcd.timeout, max(self._heartbeat_s, self._ttl_s / 3))
        self._max_ops = max_txn_ops
        self._watch = ViewWatch(etcd, keys)
        self._topics = TopicWrites(etcd, keys, max_txn_ops, self._ttl_s, self._written)
        self._info: BrokerInfo | None = None
        self._lease: _Lease | None = None
        self._session = Session(False, None, "not registered")
        self._session_task: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._session_listeners: list[Callable[[Session], None]] = []
        self._controller_epoch = 0
        self._closed = False
        self._restored_at: float | None = None

    # ================================================================== lifecycle
    @classmethod
    async def connect(cls, endpoints: str | Sequence[str], cluster_name: str, timeout: float = 5.0, *,
                      session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                      heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                      max_txn_ops: int = ETCD_MAX_TXN_OPS) -> EtcdMetadata:
        """Reach etcd (waiting up to ``timeout`` s for one of the endpoints to answer), create or read the
        cluster id, load the view and follow it. ``timeout`` is also every later call's deadline.
        Raises EtcdUnreachableError, ValueError (a bad endpoint or cluster name)."""
        eps = parse_endpoints(endpoints)
        keys = Keys(cluster_name)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        problem = ""
        etcd: Etcd | None = None
        while etcd is None:
            for i in range(len(eps)):
                cand = Etcd(eps, timeout, index=i)
                try:  # wait_for_ready: an etcd that is starting right now is waited for
                    await cand.range(keys.cluster_id, timeout=max(0.05, (deadline - loop.time()) / len(eps)),
                                     wait_for_ready=True)
                    etcd = cand
                    break
                except EtcdUnavailable as e:
                    problem = str(e)
                    await cand.close()
            if etcd is None and loop.time() >= deadline:
                raise EtcdUnreachableError(
                    f"cannot reach etcd at {', '.join(eps)} within {timeout:g} s ({problem}): start etcd there "
                    f"(Debian package etcd-server) or point --metadata at a running one (etcd://HOST:PORT)")
        store = cls(etcd, keys, session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                    max_txn_ops=max_txn_ops)
        try:
            cid = _new_cluster_id().encode()
            res = await etcd.txn([Cmp.absent(keys.cluster_id)], [Put(keys.cluster_id, cid)], [Get(keys.cluster_id)])
            if res.succeeded:
                log.info("created cluster %s (id %s) in etcd at %s", cluster_name, cid.decode(), etcd.endpoint)
            await store._watch.start()
        except BaseException:
            await etcd.close()
            raise
        return store

    async def close(self) -> None:
        """Deregister (revoke the lease: the registration and a controller key go at once) and disconnect."""
        if self._closed:
            return
        self._closed = True
        await self.deregister()
        await self._watch.close()
        await self._etcd.close()

    async def __aenter__(self) -> EtcdMetadata:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ================================================================== the view
    @property
    def view(self) -> ClusterView:
        return self._watch.view

    @property
    def cluster_id(self) -> str:
        return self._watch.view.cluster_id

    @property
    def stale(self) -> bool:
        """True while the view is not known to be caught up with etcd (etcd unreachable, reconnecting)."""
        return self._watch.stale

    @property
    def endpoint(self) -> str:
        return self._etcd.endpoint

    @property
    def outage_ended_at(self) -> float | None:
        """Loop time this process last saw etcd answer again after an outage (its watch had broken, or its session
        had been lost); None if it never saw one. A stall of etcd expires every lease at once when etcd resumes:
        the brokers are running all the same and register again at once."""
        times = [t for t in (self._watch.recovered_at, self._restored_at) if t is not None]
        return max(times) if times else None

    def subscribe(self) -> ViewSubscription:
        return self._watch.subscribe()

    async def wait_for_change(self, after_revision: int, timeout: float | None = None) -> ClusterView:
        await self._watch.wait_until(lambda: self.view.revision > after_revision, timeout)
        return self.view

    async def _written(self, res: TxnResult) -> None:
        """After a successful write: return once the view shows it (the store's read-your-writes rule)."""
        if not await self._watch.seen(res.revision, self._etcd.timeout):
            raise EtcdUnavailable(f"etcd at {self._etcd.endpoint}: written at revision {res.revision}, but the "
                                  f"watch did not deliver it within {self._etcd.timeout:g} s")

    async def _get(self, key: bytes) -> KV | None:
        _, kvs, _ = await self._etcd.range(key)
        return kvs[0] if kvs else None

    # ================================================================== session (broker registration)
    @property
    def session(self) -> Session:
        return self._session

    def session_valid(self) -> bool:
        """Cheap check for hot paths: registered, and etcd surely still holds the lease (by this process's clock)."""
        lease = self._lease
        return (self._session.alive and lease is not None
                and asyncio.get_running_loop().time() < lease.deadline)

    def add_session_listener(self, callback: Callable[[Session], None]) -> None:
        """``callback(session)`` on every change of the session (lost, restored, registered again)."""
        self._session_listeners.append(callback)

    def _set_session(self, session: Session) -> None:
        before, self._session = self._session, session
        if (session.alive, session.broker) == (before.alive, before.broker):
            return  # only the reason changed: listeners hear of changes of the role, not of the story
        for cb in list(self._session_listeners):
            try:
                cb(session)
            except Exception:
                log.exception("a session listener failed")
        self._watch.poke()

    async def register(self, info: BrokerInfo) -> BrokerInfo:
        """Register this broker under a new lease; the returned BrokerInfo carries its broker epoch.

        Call it once this broker holds its listener: a registration of the same node id with the same host:port
        is then a dead predecessor (this process holds that listener now), whose lease is revoked; any other
        holder of the node id is a live broker: DuplicateBrokerError. Raises MetadataUnavailableError.
        """
        if self._info is not None:
            raise RuntimeError("this store has registered a broker already")
        broker = await self._register_once(info, take_over=True)
        self._info = replace(info, incarnation=broker.epoch)  # what this process registers again with
        self._session_task = asyncio.create_task(self._keepalive_loop(), name=f"etcd-lease-{info.node_id}")
        return broker

    async def _register_once(self, info: BrokerInfo, take_over: bool) -> BrokerInfo:
        loop = asyncio.get_running_loop()
        key = self._keys.broker(info.node_id)
        sent = loop.time()
        lease_id, ttl = await self._etcd.grant(self._ttl_s)
        epoch = 0
        try:
            for _ in range(5):
                res = await self._etcd.txn([Cmp.absent(key)], [Put(key, info.encode(), lease_id)], [Get(key)])
                if res.succeeded:
                    epoch = res.revision
                    break
                if not res.gets[0]:
                    continue  # gone meanwhile
                other = res.gets[0][0]
                if other.lease == lease_id:  # an earlier attempt of ours went through
                    epoch = other.create_revision
                    break
                try:
                    theirs: BrokerInfo | None = BrokerInfo.decode(other.value)
                except MetadataFormatError:
                    theirs = None
                if take_over and theirs is not None and (theirs.host, theirs.port) == (info.host, info.port):
                    log.info("node id %d is still registered for %s:%d (lease %x) by an earlier process of this "
                             "broker, which is gone (this one holds that listener): revoking its lease",
                             info.node_id, info.host, info.port, other.lease)
                    await self._etcd.revoke(other.lease)
                    continue
                where = f"{theirs.host}:{theirs.port}" if theirs is not None else "an unreadable registration"
                raise DuplicateBrokerError(
                    f"node id {info.node_id} is already registered by a live broker at {where} (cluster "
                    f"{self._keys.root.split('/')[2]}, etcd {self._etcd.endpoint}): give this broker another "
                    f"node.id, or stop that broker first")
            else:
                raise MetadataUnavailableError(f"could not register node id {info.node_id}: its key kept changing")
        except BaseException:
            try:
                await asyncio.shield(self._etcd.revoke(lease_id, timeout=min(self._etcd.timeout, 2.0)))
            except (EtcdUnavailable, asyncio.CancelledError):
                pass
            raise
        self._arm(_Lease(lease_id, ttl, sent + ttl))
        broker = replace(info, epoch=epoch)
        if not take_over:  # registered again after the lease expired: catch up with etcd first (if that fails,
            # the keep-alive does it again before it confirms the session)
            self._session = Session(False, broker, "registered again, catching up with etcd")  # (no news yet)
            await self._resync()
        self._set_session(Session(True, broker, "registered" if take_over else "registered again"))
        await self._watch.seen(epoch, self._etcd.timeout)
        return broker

    async def _resync(self) -> None:
        """Before the session is back: the view at least as new as etcd's current revision, so this broker acts on
        nothing older than what etcd holds (a watch may deliver what it missed many seconds later)."""
        await self._watch.resync()
        self._restored_at = asyncio.get_running_loop().time()

    def _arm(self, lease: _Lease | None) -> None:
        """Hold ``lease`` and fire the local expiry at its deadline."""
        self._lease = lease
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if lease is not None:
            self._expiry = asyncio.get_running_loop().call_at(lease.deadline, self._local_expiry)

    def _local_expiry(self) -> None:
        lease = self._lease
        if lease is None or not self._session.alive:
            return
        if asyncio.get_running_loop().time() >= lease.deadline:
            log.error("no lease refresh reached etcd at %s for %g s (etcd unreachable, or this process was "
                      "paused): acting as unregistered until etcd confirms the lease", self._etcd.endpoint,
                      lease.ttl)
            self._set_session(Session(False, self._session.broker, "lease not refreshed in time"))

    def _keeping_alive(self) -> bool:
        """The keep-alive goes on (a lost cancellation must not keep it alive after deregister())."""
        return not self._closed and self._session_task is asyncio.current_task()

    async def _keepalive_loop(self) -> None:
        while self._keeping_alive():
            try:
                await self._keep_alive()
            except Exception:  # a bug must not silently end the session: the lease would expire unnoticed
                log.exception("the lease keep-alive of this broker failed; restarting it")
                await asyncio.sleep(1.0)

    async def _keep_alive(self) -> None:
        loop = asyncio.get_running_loop()
        info = self._info
        if info is None:
            return
        retry = 0.25
        next_refresh = loop.time() + self._heartbeat_s
        while self._keeping_alive():
            lease = self._lease
            if lease is None:  # expired in etcd: register again (a new broker epoch)
                try:
                    broker = await self._register_once(info, take_over=False)
                    log.warning("registered again as node %d with broker epoch %d", broker.node_id, broker.epoch)
                    next_refresh = loop.time() + self._heartbeat_s
                    retry = 0.25
                except DuplicateBrokerError as e:
                    log.error("cannot register again: %s; retrying in %d s", e, self._ttl_s)
                    await asyncio.sleep(self._ttl_s)
                except MetadataUnavailableError:
                    await asyncio.sleep(retry)
                    retry = min(retry * 2, 1.0)
                continue
            await asyncio.sleep(max(0.0, next_refresh - loop.time()))
            sent = loop.time()
            try:
                ttl = await self._etcd.keepalive(lease.id, timeout=self._refresh_timeout_s)
            except EtcdUnavailable as e:
                log.debug("lease refresh failed: %s", e)
                next_refresh = loop.time() + min(retry, self._heartbeat_s)
                retry = min(retry * 2, 1.0)
                continue
            retry = 0.25
            next_refresh = sent + self._heartbeat_s
            if self._lease is not lease:
                continue
            if ttl <= 0:
                log.error("the etcd lease of node %d expired (no refresh reached etcd in time): registering "
                          "again", info.node_id)
                self._arm(None)
                self._controller_epoch = 0
                self._set_session(Session(False, self._session.broker, "lease expired"))
                continue
            lease.deadline = sent + ttl
            self._arm(lease)
            if not self._session.alive:
                try:
                    await self._resync()
                except EtcdUnavailable as e:
                    log.debug("catching up with etcd failed: %s", e)
                    next_refresh = loop.time() + min(retry, self._heartbeat_s)
                    continue
                if self._lease is not lease:
                    continue
                log.warning("etcd confirmed the lease of node %d: registered again with the same broker epoch",
                            info.node_id)
                self._set_session(Session(True, self._session.broker, "lease confirmed"))

    async def deregister(self) -> None:
        """Clean shutdown: revoke the lease (the registration and a controller key go at once)."""
        task, self._session_task = self._session_task, None
        await stop_task(task)
        lease = self._lease
        self._arm(None)
        self._controller_epoch = 0
        self._info = None
        if lease is not None:
            try:
                await self._etcd.revoke(lease.id, timeout=min(self._etcd.timeout, 2.0))
            except EtcdUnavailable as e:
                log.warning("could not revoke the lease on shutdown (%s): the registration expires in %g s",
                            e, lease.ttl)
        if self._session.broker is not None:
            self._set_session(Session(False, self._session.broker, "deregistered"))

    async def begin_controlled_shutdown(self) -> bool:
        """Re-put this broker's registration with ``shutting_down`` set (same key and lease: the same broker
        epoch), Kafka's controlled shutdown request: the controller moves every leadership away and drops this
        broker from every ISR. Returns once the view shows it; False if this registration is not the live one
        (the session was lost). A registration made again later keeps the flag. Raises MetadataUnavailableError."""
        info, lease, broker = self._info, self._lease, self._session.broker
        if info is None or lease is None or broker is None or not self._session.alive:
            return False
        leaving = replace(info, shutting_down=True)
        key = self._keys.broker(info.node_id)
        res = await self._etcd.txn([Cmp.created_at(key, broker.epoch)], [Put(key, leaving.encode(), lease.id)])
        if not res.succeeded:
            return False
        self._info = leaving
        await self._written(res)
        return True

    async def revoke_registration(self, node_id: int, broker_epoch: int) -> bool:
        """Remove a broker known to be dead (its listener refuses connections) without waiting for its lease.
        Only the registration with that broker epoch is touched; False if it is not there any more."""
        kv = await self._get(self._keys.broker(node_id))
        if kv is None or kv.create_revision != broker_epoch:
            return False
        await self._etcd.revoke(kv.lease)
        return True

    # ================================================================== controller election
    @property
    def controller_epoch(self) -> int:
        """The epoch this broker won the controller election with; 0 when it did not (or lost it)."""
        return self._controller_epoch

    def is_controller(self) -> bool:
        c = self.view.controller
        return (self._controller_epoch > 0 and self.session_valid() and c is not None
                and c.epoch == self._controller_epoch)

    async def campaign(self) -> ControllerInfo:
        """Become the active controller: returns once this broker holds the controller key (and the view shows
        it), waiting while another broker holds it. Needs a registration; retries while etcd is unreachable."""
        if self._info is None:
            raise RuntimeError("register the broker before campaigning")
        key = self._keys.controller
        while True:
            await self._watch.wait_until(lambda: self.session_valid() or self._closed, None)
            if self._closed:
                raise MetadataUnavailableError("the metadata store was closed while campaigning")
            lease = self._lease
            if lease is None:
                continue
            try:
                res = await self._etcd.txn([Cmp.absent(key)],
                                           [Put(key, ControllerInfo(self._info.node_id, 0).encode(), lease.id)],
                                           [Get(key)])
            except MetadataUnavailableError:
                await asyncio.sleep(0.25)
                continue
            held = res.gets[0][0] if not res.succeeded and res.gets[0] else None
            if res.succeeded or (held is not None and held.lease == lease.id):
                epoch = res.revision if held is None else held.create_revision
                self._controller_epoch = epoch
                await self._watch.seen(epoch, self._etcd.timeout)
                log.info("node %d is the controller (epoch %d)", self._info.node_id, epoch)
                return ControllerInfo(self._info.node_id, epoch)
            holder = held.create_revision if held is not None else 0
            seen_at = held.mod_revision if held is not None else 0

            def vacant() -> bool:
                c = self.view.controller
                return self._watch.progress >= seen_at and (c is None or c.epoch != holder)

            await self._watch.wait_until(lambda: vacant() or self._closed, None)

    async def resign(self) -> None:
        """Give up the controller role (delete the key if it is still this election's)."""
        epoch, self._controller_epoch = self._controller_epoch, 0
        if epoch:
            res = await self._etcd.txn([Cmp.created_at(self._keys.controller, epoch)], [Delete(self._keys.controller)])
            if res.succeeded:
                await self._written(res)

    # ================================================================== partition writes
    def _fence(self, controller_epoch: int | None) -> list[Cmp]:
        return [] if controller_epoch is None else [Cmp.created_at(self._keys.controller, controller_epoch)]

    async def update_partitions(self, changes: Sequence[PartitionChange], *,
                                controller_epoch: int | None = None) -> bool:
        _unique(changes)
        limit = self._max_ops - (controller_epoch is not None)
        if len(changes) > limit:
            raise ValueError(
                f"{len(changes)} partition changes do not fit in one etcd transaction (at most {limit} with "
                f"--max-txn-ops={self._max_ops}): use apply_partition_changes for changes independent of each other")
        if not changes:
            return True
        key = self._keys.partition
        fence = self._fence(controller_epoch)
        res = await self._etcd.txn(
            [Cmp.mod_is(key(*c.tp), c.expected_mod_revision) for c in changes] + fence,
            [Put(key(*c.tp), c.state.encode()) for c in changes],
            [Get(key(*c.tp), keys_only=True) for c in changes] + [Get(self._keys.controller, keys_only=True)] * len(fence))
        if res.succeeded:
            await self._written(res)
        else:  # the caller decides again from a view that has what beat it
            await self._watch.seen(_newest(res), self._etcd.timeout)
        return res.succeeded

    async def apply_partition_changes(self, changes: Sequence[PartitionChange], *,
                                      controller_epoch: int | None = None) -> PartitionWriteResult:
        """Each change applied or not, in transactions of up to ``--max-txn-ops`` changes, up to
        ``_TXNS_IN_FLIGHT`` of them at once (etcd commits concurrent proposals in one raft round and fsync: after a
        broker loss 10,000 changes go out in ~80 transactions), started in the order of ``changes``: a transaction
        that fails reads the keys it compared in the same step, drops the changes that lost their race, and is
        retried with the others; a fenced one stops the write (no transaction is started after it, and those in
        flight fail on the same fence). MetadataUnavailableError midway: some changes may have been applied (each is
        visible in the view once the watch delivers it); decide again from a newer view."""
        _unique(changes)
        key = self._keys.partition
        fence = self._fence(controller_epoch)
        size = self._max_ops - len(fence)
        applied: set[tuple[str, int]] = set()
        conflicts: set[tuple[str, int]] = set()
        last = 0
        fenced = False

        async def write(todo: list[PartitionChange]) -> None:
            nonlocal last, fenced
            while todo and not fenced:
                res = await self._etcd.txn(
                    [Cmp.mod_is(key(*c.tp), c.expected_mod_revision) for c in todo] + fence,
                    [Put(key(*c.tp), c.state.encode()) for c in todo],
                    [Get(key(*c.tp), keys_only=True) for c in todo]
                    + [Get(self._keys.controller, keys_only=True)] * len(fence))
                if res.succeeded:
                    last = max(last, res.revision)
                    applied.update(c.tp for c in todo)
                    return
                last = max(last, _newest(res))
                if fence and (not res.gets[-1] or res.gets[-1][0].create_revision != controller_epoch):
                    fenced = True
                    return
                lost = {c.tp for c, got in zip(todo, res.gets)
                        if (got[0].mod_revision if got else 0) != c.expected_mod_revision}
                conflicts.update(lost or {c.tp for c in todo})  # (lost is never empty when the fence held)
                todo = [c for c in todo if c.tp not in lost]

        chunks = iter([list(changes[start:start + size]) for start in range(0, len(changes), size)])

        async def sender() -> None:
            for todo in chunks:  # one iterator shared by the senders: transactions start in order
                if fenced:
                    return
                await write(todo)

        await _all_or_first_error([sender() for _ in range(min(_TXNS_IN_FLIGHT, -(-len(changes) // size)))])
        if last:
            await self._watch.seen(last, self._etcd.timeout)
        return PartitionWriteResult(frozenset(applied), frozenset(conflicts), fenced)

    # ================================================================== topics (cluster._topics)
    async def create_topic(self, meta: TopicMeta, states: Sequence[PartitionState]) -> None:
        await self._topics.create(meta, states)

    async def add_partitions(self, name: str, expected_count: int, states: Sequence[PartitionState]) -> bool:
        return await self._topics.add_partitions(name, expected_count, states)

    async def mark_topic_deleting(self, name: str) -> bool:
        return await self._topics.mark_deleting(name)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> bool:
        return await self._topics.set_configs(name, configs)

    async def remove_topic(self, name: str) -> None:
        await self._topics.remove(name)

    # ================================================================== configs, producer ids
    async def set_broker_configs(self, node_id: int | None, configs: Mapping[str, str]) -> None:
        key = self._keys.broker_config(node_id)
        if configs:
            await self._written(await self._etcd.txn([], [Put(key, encode_configs(configs))]))
            return
        res = await self._etcd.txn([Cmp(key, "version", ">", 0)], [Delete(key)])  # no event when already absent
        if res.succeeded:
            await self._written(res)

    async def write_security(self, kind: str, puts: Mapping[str, bytes], deletes: Sequence[str] = ()) -> None:
        ops: list[Put | Delete] = [Delete(self._keys.security(kind, key)) for key in deletes if key not in puts]
        ops += [Put(self._keys.security(kind, key), value) for key, value in puts.items()]
        if not ops:
            return
        if len(ops) > ETCD_MAX_TXN_OPS:
            raise ValueError(f"{len(ops)} security records in one write; at most {ETCD_MAX_TXN_OPS} (etcd's "
                             f"--max-txn-ops) are written together")
        await self._written(await self._etcd.txn([], ops))

    async def allocate_producer_ids(self, block_size: int) -> int:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        key = self._keys.producer_id_block
        while True:
            kv = await self._get(key)
            raw = kv.value if kv is not None else b"0"
            try:
                start = int(raw.decode("ascii"))
            except ValueError:
                raise MetadataFormatError(f"the producer id block counter in etcd is not a number: "
                                          f"{raw[:40]!r}") from None
            if start + block_size > _MAX_PRODUCER_ID:
                raise ProducerIdsExhaustedError(f"no block of {block_size} producer ids left (next is {start})")
            cmp = Cmp.mod_is(key, kv.mod_revision) if kv is not None else Cmp.absent(key)
            res = await self._etcd.txn([cmp], [Put(key, str(start + block_size).encode("ascii"))])
            if res.succeeded:
                return start


async def _all_or_first_error(coros: Sequence[Coroutine[object, object, None]]) -> None:
    """Run ``coros`` at once; the first exception cancels the others (and waits for them) and is raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    if not tasks:
        return
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            exc = None if t.cancelled() else t.exception()
            if exc is not None:
                raise exc
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _newest(res: TxnResult) -> int:
    """The newest mod_revision among the keys a failed transaction read: what beat it (an event to wait for)."""
    return max((kv.mod_revision for kvs in res.gets for kv in kvs), default=0)


def _unique(changes: Sequence[PartitionChange]) -> None:
    if len({c.tp for c in changes}) != len(changes):
        raise ValueError("two changes of the same partition in one write")


def _implements_the_contract(store: EtcdMetadata) -> MetadataStore:
    return store  # mypy checks here that EtcdMetadata is a MetadataStore
