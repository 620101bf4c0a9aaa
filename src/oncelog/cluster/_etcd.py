"""A typed, minimal etcd v3 client over the gRPC stubs that ``aetcd`` ships (private to ``cluster.metadata``).

Why the stubs and not aetcd's high-level calls: its ``transaction()`` drops the response header (the revision a
write was applied at, which is the broker epoch, the controller epoch and what read-your-writes waits for), and its
watch hands events over one at a time without the response they came in, so a transaction's events could not be
applied as one step. Here every call has its own deadline, and every gRPC or protobuf object stays inside this
module: callers see the frozen values below.

Edge cases of etcd's API this module encodes (etcd v3 API reference):

- A compare on a missing key compares a zero key-value: ``mod == 0`` / ``create == 0`` / ``version == 0`` mean
  "absent"; a compare with ``range_end`` holds for every key of the range (and for an empty range).
- A txn may not put a key twice, nor put a key inside a range it deletes ("duplicate key given in txn request");
  compares, success ops and failure ops are each limited by ``--max-txn-ops`` (default 128).
- A watch created at a compacted revision is answered "created" and then "canceled" with ``compact_revision``.
  Requested progress notifications are not used: before etcd 3.4.25 / 3.5.8 one can overtake the events it claims
  were delivered (etcd-io/etcd#15220; Debian's 3.4.23 has it), and later versions may not answer a quiet new watch
  at all (etcd-io/etcd#17507). Progress is what the events show; liveness is a read.
- Lease TTLs below etcd's minimum (1.5 x the election timeout, 2 s by default) are raised to it: use the granted TTL.
- A member cut off from a majority of the others has no leader, and without more it leaves every request waiting
  until its deadline (a watch on it just stays silent). Every call here requires a leader (the ``hasleader``
  metadata, etcd's ``clientv3.WithRequireLeader``): such a member answers UNAVAILABLE "etcdserver: no leader" at
  once, and cancels a watch or lease stream when it loses its leader.
- With several endpoints (the members of one etcd cluster), a call that finds its member unavailable moves the
  channel on to the next member, for every caller at once: any member with a leader serves the same linearizable
  reads and writes, so one that does not answer is left at the first failure rather than retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aetcd import rpc

from .store import MetadataUnavailableError

__all__ = [
    "KV",
    "Cmp",
    "Delete",
    "Etcd",
    "EtcdCompacted",
    "EtcdRequestError",
    "EtcdUnavailable",
    "Get",
    "Put",
    "TxnResult",
    "WatchBatch",
    "WatchEvent",
    "WatchStream",
    "prefix_end",
    "stop_task",
]

log = logging.getLogger("oncelog.cluster.metadata")

#: etcd's rpctypes.MetadataRequireLeaderKey / MetadataHasLeader: fail at once on a member without a leader
_REQUIRE_LEADER = (("hasleader", "true"),)

# gRPC channel settings: reconnect quickly after etcd restarts (gRPC's own backoff grows to 2 minutes), notice a
# silent peer through HTTP/2 pings no more often than etcd's --grpc-keepalive-min-time (5 s) allows, and accept
# big responses (a range page, a watch catching up with many revisions).
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 5000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
)


class EtcdUnavailable(MetadataUnavailableError):
    """etcd did not answer (down, unreachable, no leader, deadline passed). A write may or may not have applied."""


class EtcdCompacted(Exception):
    """The revision asked for was compacted away."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"etcd compacted its history up to revision {compact_revision}")
        self.compact_revision = compact_revision


class EtcdRequestError(ValueError):
    """etcd refused the request itself (too many txn ops, request too large, duplicate key): a bug, not a fault."""


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes ``[prefix, end)`` every key starting with ``prefix``."""
    b = bytearray(prefix)
    for i in reversed(range(len(b))):
        if b[i] < 0xFF:
            b[i] += 1
            return bytes(b[: i + 1])
    return b"\0"


@dataclass(frozen=True, slots=True)
class KV:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


def _kv(pb: Any) -> KV:
    return KV(bytes(pb.key), bytes(pb.value), int(pb.create_revision), int(pb.mod_revision), int(pb.version),
              int(pb.lease))


@dataclass(frozen=True, slots=True)
class Cmp:
    """A txn compare: ``target`` of ``key`` (or of every key in ``[key, range_end)``) ``op`` ``value``."""

    key: bytes
    target: str  # "version" | "create" | "mod" | "lease"
    op: str  # "==" | "!=" | "<" | ">"
    value: int
    range_end: bytes = b""

    @staticmethod
    def absent(key: bytes) -> Cmp:
        return Cmp(key, "create", "==", 0)

    @staticmethod
    def mod_is(key: bytes, revision: int) -> Cmp:
        return Cmp(key, "mod", "==", revision)

    @staticmethod
    def created_at(key: bytes, revision: int) -> Cmp:
        return Cmp(key, "create", "==", revision)

    @staticmethod
    def none_under(prefix: bytes) -> Cmp:
        return Cmp(prefix, "version", "==", 0, prefix_end(prefix))


_TARGETS = {"version": (rpc.Compare.VERSION, "version"), "create": (rpc.Compare.CREATE, "create_revision"),
            "mod": (rpc.Compare.MOD, "mod_revision"), "lease": (rpc.Compare.LEASE, "lease")}
_OPS = {"==": rpc.Compare.EQUAL, "!=": rpc.Compare.NOT_EQUAL, "<": rpc.Compare.LESS, ">": rpc.Compare.GREATER}


def _compare(c: Cmp) -> Any:
    target, field = _TARGETS[c.target]
    pb = rpc.Compare(result=_OPS[c.op], target=target, key=c.key, range_end=c.range_end)
    setattr(pb, field, c.value)
    return pb


@dataclass(frozen=True, slots=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: bytes
    range_end: bytes = b""


@dataclass(frozen=True, slots=True)
class Get:
    key: bytes
    range_end: bytes = b""
    keys_only: bool = False


Op = Put | Delete | Get


def _op(op: Op) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(request_put=rpc.PutRequest(key=op.key, value=op.value, lease=op.lease))
    if isinstance(op, Delete):
        return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=op.key, range_end=op.range_end))
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=op.key, range_end=op.range_end,
                                                        keys_only=op.keys_only))


@dataclass(frozen=True, slots=True)
class TxnResult:
    """``revision``: the store's revision after the txn (the revision of its writes when it succeeded).
    ``gets``: the key-values of each Get op of the branch that ran, in order."""

    succeeded: bool
    revision: int
    gets: tuple[tuple[KV, ...], ...]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    put: bool  # False: a delete (``kv.mod_revision`` is the deletion's revision)
    kv: KV


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """One watch response: the events of whole revisions (never a part of one; possibly none)."""

    events: tuple[WatchEvent, ...]


def _map_error(e: BaseException, what: str, endpoint: str) -> Exception:
    if isinstance(e, rpc.AioRpcError):
        code, details = e.code(), e.details() or ""
        if code == rpc.StatusCode.OUT_OF_RANGE and "compacted" in details:
            return EtcdCompacted(0)
        if code in (rpc.StatusCode.INVALID_ARGUMENT, rpc.StatusCode.FAILED_PRECONDITION) \
                and "lease" not in details:
            return EtcdRequestError(f"etcd at {endpoint} refused the {what}: {details}")
        reason = details or code.name
    elif isinstance(e, asyncio.TimeoutError):
        reason = "no answer in time"
    elif isinstance(e, asyncio.CancelledError):
        reason = "the channel was closed (moved to another member)"
    else:
        reason = repr(e)
    return EtcdUnavailable(f"etcd at {endpoint}: {what}: {reason}")


#: what a call may fail with; a CancelledError too, see _own_cancellation
_FAILURES = (rpc.AioRpcError, asyncio.TimeoutError, asyncio.CancelledError)


def _own_cancellation(e: BaseException) -> bool:
    """A CancelledError meant for the calling task (re-raise it), not one of a gRPC call whose channel was closed
    under it: grpc.aio cancels every call of a channel it closes, and its awaiters see CancelledError."""
    if not isinstance(e, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for it to end, cancelling again if a cancellation was lost (``asyncio.wait_for``
    before Python 3.12 can swallow one, CPython gh-86296; so can a gRPC call that completes at the same moment)."""
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)


class Etcd:
    """A gRPC channel to one of ``endpoints`` (``host:port``), moved on to the next one when a call finds its member
    unavailable. Safe to use from many tasks of one event loop; every call has a deadline (``timeout`` seconds
    unless given)."""

    def __init__(self, endpoints: Sequence[str], timeout: float, index: int = 0) -> None:
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._index = index % len(self.endpoints)
        self._closing: set[asyncio.Task[None]] = set()
        self._open()

    def _open(self) -> None:
        self.endpoint = self.endpoints[self._index]
        self._channel: Any = rpc.insecure_channel(self.endpoint, options=_CHANNEL_OPTIONS)
        self._kv: Any = rpc.KVStub(self._channel)
        self._lease: Any = rpc.LeaseStub(self._channel)
        self._watch: Any = rpc.WatchStub(self._channel)

    def _unavailable(self, channel: Any, error: Exception) -> Exception:
        """A call on ``channel`` failed with ``error``: if its member is unavailable and ``channel`` is still the
        one in use, move on to the next endpoint; the old channel is closed, so the calls still in flight on it
        fail with EtcdUnavailable at once (and do not move it again). Returns ``error``."""
        if isinstance(error, EtcdUnavailable) and channel is self._channel and len(self.endpoints) > 1:
            self._index = (self._index + 1) % len(self.endpoints)
            self._open()
            log.warning("%s; using etcd at %s from now on", error, self.endpoint)
            task = asyncio.ensure_future(channel.close(grace=None))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return error

    async def close(self) -> None:
        await self._channel.close(grace=None)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _call(self, what: str, method: Any, request: Any, timeout: float | None,
                    wait_for_ready: bool = False) -> Any:
        channel = self._channel
        try:
            return await method(request, timeout=self.timeout if timeout is None else timeout,
                                wait_for_ready=wait_for_ready, metadata=_REQUIRE_LEADER)
        except _FAILURES as e:
            if _own_cancellation(e):
                raise
            raise self._unavailable(channel, _map_error(e, what, self.endpoint)) from None

    async def range(self, key: bytes, range_end: bytes = b"", *, revision: int = 0, limit: int = 0,
                    timeout: float | None = None, wait_for_ready: bool = False
                    ) -> tuple[int, tuple[KV, ...], bool]:
        """(header revision, key-values in key order, more) — linearizable."""
        req = rpc.RangeRequest(key=key, range_end=range_end, revision=revision, limit=limit)
        try:
            resp = await self._call("range read", self._kv.Range, req, timeout, wait_for_ready)
        except EtcdCompacted:
            raise EtcdCompacted(revision) from None
        return int(resp.header.revision), tuple(_kv(kv) for kv in resp.kvs), bool(resp.more)

    async def txn(self, compare: Sequence[Cmp], success: Sequence[Op], failure: Sequence[Op] = (),
                  timeout: float | None = None) -> TxnResult:
        req = rpc.TxnRequest(compare=[_compare(c) for c in compare], success=[_op(o) for o in success],
                             failure=[_op(o) for o in failure])
        resp = await self._call("transaction", self._kv.Txn, req, timeout)
        gets = tuple(tuple(_kv(kv) for kv in r.response_range.kvs) for r in resp.responses
                     if r.WhichOneof("response") == "response_range")
        return TxnResult(bool(resp.succeeded), int(resp.header.revision), gets)

    async def compact(self, revision: int) -> None:
        await self._call("compaction", self._kv.Compact, rpc.CompactionRequest(revision=revision, physical=True),
                         None)

    async def grant(self, ttl: int, timeout: float | None = None) -> tuple[int, int]:
        """A new lease: (id, granted TTL in seconds)."""
        resp = await self._call("lease grant", self._lease.LeaseGrant, rpc.LeaseGrantRequest(TTL=ttl), timeout)
        if getattr(resp, "error", ""):
            raise EtcdUnavailable(f"etcd at {self.endpoint}: lease grant: {resp.error}")
        return int(resp.ID), int(resp.TTL)

    async def revoke(self, lease_id: int, timeout: float | None = None) -> None:
        """Revoke a lease (its keys are deleted); a lease that is already gone is not an error."""
        channel = self._channel
        try:
            await self._lease.LeaseRevoke(rpc.LeaseRevokeRequest(ID=lease_id),
                                          timeout=self.timeout if timeout is None else timeout,
                                          metadata=_REQUIRE_LEADER)
        except _FAILURES as e:
            if isinstance(e, rpc.AioRpcError) and e.code() == rpc.StatusCode.NOT_FOUND:
                return
            if _own_cancellation(e):
                raise
            raise self._unavailable(channel, _map_error(e, "lease revoke", self.endpoint)) from None

    async def keepalive(self, lease_id: int, timeout: float | None = None) -> int:
        """Refresh a lease once; its TTL from now, 0 when the lease no longer exists."""
        channel = self._channel
        deadline = self.timeout if timeout is None else timeout
        call = self._lease.LeaseKeepAlive(timeout=deadline, metadata=_REQUIRE_LEADER)
        try:
            # bounded here too: a stream whose channel is closed before it starts never completes its first write,
            # whatever its gRPC deadline (grpc.aio), and another caller may close the channel at any time
            async with asyncio.timeout(deadline):
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease_id))
                resp = await call.read()
            if not isinstance(resp, rpc.LeaseKeepAliveResponse):  # grpc.aio.EOF: the stream ended
                raise self._unavailable(channel, EtcdUnavailable(
                    f"etcd at {self.endpoint}: lease keep-alive: the stream ended"))
            return max(0, int(resp.TTL))
        except _FAILURES as e:
            if _own_cancellation(e):
                raise
            raise self._unavailable(channel, _map_error(e, "lease keep-alive", self.endpoint)) from None
        finally:
            call.cancel()

    def watch(self, prefix: bytes, start_revision: int) -> WatchStream:
        return WatchStream(self, prefix, start_revision)


class WatchStream:
    """One watch of every key under ``prefix`` from ``start_revision``, on its own gRPC stream."""

    def __init__(self, etcd: Etcd, prefix: bytes, start_revision: int) -> None:
        self._etcd = etcd
        self._prefix = prefix
        self._start = start_revision
        self._call: Any = None
        self._channel: Any = None

    def _unavailable(self, error: Exception) -> Exception:
        return self._etcd._unavailable(self._channel, error)

    async def start(self) -> None:
        """Create the watch; raises EtcdCompacted if ``start_revision`` is compacted, EtcdUnavailable."""
        self._channel = self._etcd._channel
        self._call = self._etcd._watch.Watch(metadata=_REQUIRE_LEADER)
        req = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
            key=self._prefix, range_end=prefix_end(self._prefix), start_revision=self._start))
        try:
            await asyncio.wait_for(self._call.write(req), self._etcd.timeout)
            resp = await asyncio.wait_for(self._call.read(), self._etcd.timeout)
        except _FAILURES as e:
            self.cancel()
            if _own_cancellation(e):
                raise
            if isinstance(e, rpc.AioRpcError) and e.code() == rpc.StatusCode.INTERNAL:
                await self._why_refused()
            raise self._unavailable(_map_error(e, "watch", self._etcd.endpoint)) from None
        if not isinstance(resp, rpc.WatchResponse) or not resp.created:
            self.cancel()
            raise self._unavailable(EtcdUnavailable(f"etcd at {self._etcd.endpoint}: watch: not created"))
        if resp.compact_revision:
            self.cancel()
            raise EtcdCompacted(int(resp.compact_revision))

    async def _why_refused(self) -> None:
        """The member ended the stream as it opened (a member without a leader refuses it at once) before the
        create request was written: gRPC's core then reports only "Internal error from Core" for the write, not the
        member's status. A one-key read, which requires a leader too, raises the member's own reason
        (EtcdUnavailable "no leader"); if it answers, the caller reports the write's failure."""
        if self._channel is not self._etcd._channel:
            return
        endpoint = self._etcd.endpoint
        try:
            await self._etcd.range(self._prefix, limit=1, timeout=min(self._etcd.timeout, 1.0))
        except EtcdUnavailable as e:
            reason = str(e).split(": ", 2)[-1]
            raise EtcdUnavailable(f"etcd at {endpoint}: watch: refused as it opened; a read says: "
                                  f"{reason}") from None

    async def next(self) -> WatchBatch:
        """The next response; raises EtcdCompacted when etcd cancels the watch for compaction, EtcdUnavailable
        when the stream breaks."""
        try:
            resp = await self._call.read()
        except _FAILURES as e:
            if _own_cancellation(e):
                raise
            raise self._unavailable(_map_error(e, "watch", self._etcd.endpoint)) from None
        if not isinstance(resp, rpc.WatchResponse):  # grpc.aio.EOF
            raise self._unavailable(EtcdUnavailable(f"etcd at {self._etcd.endpoint}: watch: the stream ended"))
        if resp.compact_revision:
            raise EtcdCompacted(int(resp.compact_revision))
        if resp.canceled:
            raise self._unavailable(EtcdUnavailable(f"etcd at {self._etcd.endpoint}: watch canceled: "
                                                    f"{resp.cancel_reason or 'no reason given'}"))
        return WatchBatch(tuple(WatchEvent(e.type == rpc.Event.PUT, _kv(e.kv)) for e in resp.events))

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()
