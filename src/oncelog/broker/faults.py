"""Faults on demand, for tests of client code: delay or drop one API's requests or responses, answer the next N
requests of an API with a chosen Kafka error, close every client connection.

Nothing here runs unless a test asks: the broker's routes are the handlers themselves until a rule is added; then
every route goes through :meth:`FaultInjector.dispatch` (one dictionary look-up per request) until the rules are
cleared. A rule acts where the broker meets the request, so a client sees what it would see from a Kafka broker
that is slow, loses an answer or answers with that error:

- ``delay(api, s)``: the request reaches the handler ``s`` seconds late (``on="response"``: the handler runs at
  once, its answer leaves ``s`` seconds late). A held request holds the requests after it on the same connection,
  as Kafka serves one request of a connection at a time (``SocketServer`` mutes the channel until it has answered),
  so a connection's order is kept.
- ``drop(api)``: the request is never served, or (``on="response"``) served and never answered; the client times
  out (``request.timeout.ms``) and closes the connection, which ends what is held.
- ``fail(api, error, times)``: the next ``times`` requests are answered with ``error`` without being served, in the
  places Kafka puts a request's error (each partition of a Produce or Fetch, the top level of an EndTxn), as
  Kafka's ``AbstractRequest.getErrorResponse`` builds it.

``times`` counts the requests a rule applies to (None: until cleared). The same commands come as JSON from a test
process over a unix socket (:func:`serve_control`), only when the broker is started with
``ONCELOG_TEST_CONTROL=PATH`` in its environment (``oncelog.testing`` sets it for the brokers it starts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.protocol import api as kapi
from oncelog.protocol.errors import ErrorCode

from .request import HandlerResult, RequestContext
from .router import Route, Router

if TYPE_CHECKING:
    from .context import BrokerContext

__all__ = ["CONTROL_ENV", "FaultError", "FaultInjector", "Rule", "api_key_of", "error_code_of", "error_response",
           "serve_control"]

log = logging.getLogger("oncelog.broker.faults")

#: the environment variable naming the unix socket of a test process's control channel
CONTROL_ENV = "ONCELOG_TEST_CONTROL"
REQUEST, RESPONSE = "request", "response"


class FaultError(ValueError):
    """A fault command that cannot be applied (unknown API or error, an API ``fail`` cannot answer)."""


def api_key_of(api: str | int) -> int:
    """The API key of ``api``: Kafka's name (``"EndTxn"``), the snake-case one (``"end_txn"``) or the key."""
    if isinstance(api, int) and api in kapi.API_KEYS:
        return api
    if isinstance(api, str):
        wanted = api.replace("_", "").lower()
        for key, spec in kapi.API_KEYS.items():
            if spec.name.lower() == wanted:
                return key
    raise FaultError(f"unknown Kafka API {api!r}; use Kafka's name, e.g. 'Produce', 'EndTxn', 'FindCoordinator'")


def error_code_of(error: str | int) -> int:
    """The error code of ``error``: Kafka's name (``"NOT_LEADER_OR_FOLLOWER"``) or the code."""
    try:
        return int(ErrorCode[error.upper()] if isinstance(error, str) else ErrorCode(error))
    except (KeyError, ValueError):
        raise FaultError(f"unknown Kafka error {error!r}; use Kafka's name, e.g. 'NOT_LEADER_OR_FOLLOWER'") from None


def _api_name(key: int) -> str:
    return kapi.API_KEYS[key].name if key in kapi.API_KEYS else str(key)


# ------------------------------------------------------------------------------------------------ error responses
def _classes(api_key: int, *names: str) -> list[Any]:
    """Classes of the response codec of ``api_key`` (imported with it)."""
    module = sys.modules[kapi.response_class(api_key).__module__]
    return [getattr(module, n) for n in names]


def _produce(req: Any, code: int, version: int) -> Any:
    resp, topic, part = _classes(0, "ProduceResponse", "TopicProduceResponse", "PartitionProduceResponse")
    return resp(responses=[topic(name=t.name, partition_responses=[
        part(index=p.index, error_code=code, base_offset=-1) for p in t.partition_data]) for t in req.topic_data])


def _fetch(req: Any, code: int, version: int) -> Any:
    resp, topic, part = _classes(1, "FetchResponse", "FetchableTopicResponse", "PartitionData")
    return resp(responses=[topic(topic=t.topic, topic_id=t.topic_id, partitions=[
        part(partition_index=p.partition, error_code=code, high_watermark=-1) for p in t.partitions])
        for t in req.topics])


def _list_offsets(req: Any, code: int, version: int) -> Any:
    resp, topic, part = _classes(2, "ListOffsetsResponse", "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse")
    return resp(topics=[topic(name=t.name, partitions=[part(partition_index=p.partition_index, error_code=code)
                                                       for p in t.partitions]) for t in req.topics])


def _offset_commit(req: Any, code: int, version: int, api_key: int = 8) -> Any:
    prefix = "OffsetCommit" if api_key == 8 else "TxnOffsetCommit"
    resp, topic, part = _classes(api_key, f"{prefix}Response", f"{prefix}ResponseTopic", f"{prefix}ResponsePartition")
    return resp(topics=[topic(name=t.name, partitions=[part(partition_index=p.partition_index, error_code=code)
                                                       for p in t.partitions]) for t in req.topics])


def _add_partitions(req: Any, code: int, version: int) -> Any:
    resp, result, topic, part = _classes(24, "AddPartitionsToTxnResponse", "AddPartitionsToTxnResult",
                                         "AddPartitionsToTxnTopicResult", "AddPartitionsToTxnPartitionResult")

    def topics(ts: list[Any]) -> list[Any]:
        return [topic(name=t.name, results_by_partition=[part(partition_index=p, partition_error_code=code)
                                                         for p in t.partitions]) for t in ts]
    if version <= 3:
        return resp(results_by_topic_v3_and_below=topics(req.v3_and_below_topics))
    return resp(results_by_transaction=[result(transactional_id=t.transactional_id, topic_results=topics(t.topics))
                                        for t in req.transactions])


def _find_coordinator(req: Any, code: int, version: int) -> Any:
    resp, coordinator = _classes(10, "FindCoordinatorResponse", "Coordinator")
    if version >= 4:
        return resp(coordinators=[coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                                  for k in req.coordinator_keys])
    return resp(error_code=code, node_id=-1, host="", port=-1)


def _offset_fetch(req: Any, code: int, version: int) -> Any:
    resp, group, topic, part = _classes(9, "OffsetFetchResponse", "OffsetFetchResponseGroup",
                                        "OffsetFetchResponseTopic", "OffsetFetchResponsePartition")
    if version >= 8:
        return resp(groups=[group(group_id=g.group_id, error_code=code) for g in req.groups])
    topics = [topic(name=t.name, partitions=[part(partition_index=p, committed_offset=-1, error_code=code)
                                             for p in t.partition_indexes]) for t in req.topics or ()]
    return resp(error_code=code, topics=topics)  # the top-level error from v2, each partition's before


def _create_topics(req: Any, code: int, version: int) -> Any:
    resp, result = _classes(19, "CreateTopicsResponse", "CreatableTopicResult")
    return resp(topics=[result(name=t.name, error_code=code) for t in req.topics])


def _delete_topics(req: Any, code: int, version: int) -> Any:
    resp, result = _classes(20, "DeleteTopicsResponse", "DeletableTopicResult")
    names = [t.name for t in req.topics] if version >= 6 else list(req.topic_names)
    return resp(responses=[result(name=n, error_code=code) for n in names])


#: APIs whose errors are per partition, topic, group or key: how Kafka answers each with one error
_BUILDERS: dict[int, Callable[[Any, int, int], Any]] = {
    0: _produce, 1: _fetch, 2: _list_offsets, 8: _offset_commit, 9: _offset_fetch, 10: _find_coordinator,
    19: _create_topics, 20: _delete_topics, 24: _add_partitions,
    28: lambda req, code, version: _offset_commit(req, code, version, api_key=28),
}
#: APIs whose response carries the request's error in one top-level ``error_code`` at every version the broker
#: serves (tests/unit/broker/test_fault_responses.py round-trips each)
_TOP_LEVEL = frozenset({11, 12, 13, 14, 16, 18, 22, 25, 26, 45, 46, 47, 48, 60, 66})


def error_response(api_key: int, version: int, request: Any, code: int) -> Any:
    """The response Kafka gives to ``request`` when it fails as a whole with ``code``."""
    builder = _BUILDERS.get(api_key)
    if builder is not None:
        return builder(request, code, version)
    if api_key not in _TOP_LEVEL:
        raise FaultError(f"cannot answer {_api_name(api_key)} with an error; fail() answers "
                         f"{', '.join(sorted(failable()))}")
    response: Any = kapi.response_class(api_key)()
    response.error_code = code
    return response


def failable() -> list[str]:
    """Kafka names of the APIs :meth:`FaultInjector.fail` can answer with an error."""
    return [_api_name(key) for key in sorted({*_BUILDERS, *_TOP_LEVEL})]


# ------------------------------------------------------------------------------------------------------ rules
@dataclass(eq=False)
class Rule:
    kind: str  # "delay", "drop" or "fail"
    api: str  # Kafka's name of the API
    api_key: int
    on: str = REQUEST  # REQUEST or RESPONSE
    seconds: float = 0.0  # delay
    error: int = 0  # fail: the error code
    times: int | None = None  # requests left to apply to; None: until cleared
    cleared: bool = False  # removed by clear(): what it holds is released


class FaultInjector:
    """The fault rules of one broker, applied to the routes of ``router``. Runs on the broker's event loop (the
    control channel and the in-process test handle call it there)."""

    def __init__(self, router: Router, close_connections: Callable[[], int] | None = None) -> None:
        self.router = router
        self._close_connections = close_connections
        self.rules: list[Rule] = []
        self._originals: dict[int, Route] = {}  # api key -> route as it was before the injector wrapped it
        self._held: dict[int, asyncio.Future[None]] = {}  # connection id -> its last held request's release
        self._waiting: dict[Rule, list[asyncio.Future[None]]] = {}  # waits a rule holds (released when cleared)

    # -- commands ---------------------------------------------------------------------------------------------
    def delay(self, api: str | int, seconds: float, *, on: str = REQUEST, times: int | None = None) -> Rule:
        if seconds < 0:
            raise FaultError(f"delay must be at least 0 s, got {seconds}")
        return self._add(Rule("delay", "", api_key_of(api), self._side(on), seconds=float(seconds), times=times))

    def drop(self, api: str | int, *, on: str = REQUEST, times: int | None = None) -> Rule:
        return self._add(Rule("drop", "", api_key_of(api), self._side(on), times=times))

    def fail(self, api: str | int, error: str | int, times: int | None = 1) -> Rule:
        key, code = api_key_of(api), error_code_of(error)
        if key not in _BUILDERS and key not in _TOP_LEVEL:
            error_response(key, 0, None, code)  # raises the FaultError that says which APIs can fail
        return self._add(Rule("fail", "", key, REQUEST, error=code, times=times))

    def clear(self, api: str | int | None = None) -> int:
        """Remove the rules of ``api`` (every rule when None); what they hold is released. Returns how many."""
        key = None if api is None else api_key_of(api)
        gone = [r for r in self.rules if key is None or r.api_key == key]
        self.rules = [r for r in self.rules if r not in gone]
        for rule in [r for r in self._waiting if key is None or r.api_key == key] + gone:
            rule.cleared = True
            for waiter in self._waiting.pop(rule, []):
                if not waiter.done():
                    waiter.set_result(None)
        self._rewire()
        return len(gone)

    def close_connections(self) -> int:
        """Close every client connection (what a broker's restart does to them, without the restart)."""
        return self._close_connections() if self._close_connections is not None else 0

    def apply(self, command: dict[str, Any]) -> dict[str, Any]:
        """One command as the control channel sends it: ``{"op": "delay", "api": "EndTxn", "seconds": 2}``, ...;
        the answer as it returns."""
        op = command.get("op")
        args = {k: v for k, v in command.items() if k != "op"}
        try:
            if op == "delay":
                rule = self.delay(args.pop("api"), float(args.pop("seconds")), **args)
            elif op == "drop":
                rule = self.drop(args.pop("api"), **args)
            elif op == "fail":
                rule = self.fail(args.pop("api"), args.pop("error"), **args)
            elif op == "clear":
                return {"ok": True, "cleared": self.clear(args.get("api"))}
            elif op == "isolate":
                return {"ok": True, "rules": len([self.drop(key) for key in sorted(self.router.routes)])}
            elif op == "close_connections":
                return {"ok": True, "closed": self.close_connections()}
            elif op == "rules":
                return {"ok": True, "rules": [asdict(r) for r in self.rules]}
            elif op == "held":
                return {"ok": True, "held": sum(len(w) for w in self._waiting.values())}
            else:
                raise FaultError(f"unknown fault command {op!r}")
        except (KeyError, TypeError) as e:
            return {"error": f"{op}: missing or unexpected argument ({e})"}
        except FaultError as e:
            return {"error": str(e)}
        return {"ok": True, "rule": asdict(rule)}

    @staticmethod
    def _side(on: str) -> str:
        if on not in (REQUEST, RESPONSE):
            raise FaultError(f"on must be {REQUEST!r} or {RESPONSE!r}, got {on!r}")
        return on

    def _add(self, rule: Rule) -> Rule:
        if rule.times is not None and rule.times < 1:
            raise FaultError(f"times must be at least 1 (or None: until cleared), got {rule.times}")
        rule.api = _api_name(rule.api_key)
        self.rules.append(rule)
        self._rewire()
        log.info("fault injected: %s", rule)
        return rule

    # -- dispatch ---------------------------------------------------------------------------------------------
    def _rewire(self) -> None:
        """Every route through :meth:`dispatch` while there are rules or held requests, the routes as they were
        otherwise."""
        routes = self.router.routes
        if self.rules or self._held:
            for key, route in list(routes.items()):
                if key not in self._originals:
                    self._originals[key] = route
                    routes[key] = replace(route, handle=self._wrap(key))
        else:
            routes.update(self._originals)
            self._originals.clear()

    def _wrap(self, key: int) -> Callable[[BrokerContext, RequestContext, Any], HandlerResult]:
        def dispatch(broker: BrokerContext, ctx: RequestContext, request: Any) -> HandlerResult:
            return self.dispatch(key, broker, ctx, request)
        return dispatch

    def _take(self, key: int, on: str) -> Rule | None:
        for rule in self.rules:
            if rule.api_key == key and rule.on == on:
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self.rules.remove(rule)  # what it holds is held to the end
                return rule
        return None

    def dispatch(self, key: int, broker: BrokerContext, ctx: RequestContext, request: Any) -> HandlerResult:
        """Serve one request under the rules (the wrapped route's ``handle``)."""
        route = self._originals.get(key) or self.router.routes[key]
        before = self._held.get(ctx.connection_id)
        rule = self._take(key, REQUEST)
        late = self._take(key, RESPONSE)
        if before is None and (rule is None or rule.kind == "fail"):
            result = route.handle(broker, ctx, request) if rule is None else \
                error_response(key, ctx.api_version, request, rule.error)
            return result if late is None else self._answer_late(result, late)
        release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held[ctx.connection_id] = release
        return self._held_request(route, broker, ctx, request, before, release, rule, late)

    async def _held_request(self, route: Route, broker: BrokerContext, ctx: RequestContext, request: Any,
                            before: asyncio.Future[None] | None, release: asyncio.Future[None], rule: Rule | None,
                            late: Rule | None) -> Any:
        """A request behind a held one of its connection, or held itself: served once what is before it is, and
        before the ones after it start (their synchronous parts keep the connection's order)."""
        try:
            if before is not None:
                await asyncio.shield(before)
            if rule is not None and rule.kind == "fail":
                result = error_response(route.api_key, ctx.api_version, request, rule.error)
            else:
                if rule is not None:
                    await self._hold(rule, rule.seconds if rule.kind == "delay" else None)
                result = route.handle(broker, ctx, request)
        finally:
            if not release.done():
                release.set_result(None)  # the next request of this connection may start
            if self._held.get(ctx.connection_id) is release:
                del self._held[ctx.connection_id]
                if not self.rules and not self._held:
                    self._rewire()
        if late is not None:
            return await self._answer_late(result, late)
        return await result if hasattr(type(result), "__await__") else result

    async def _answer_late(self, result: Any, rule: Rule) -> Any:
        if hasattr(type(result), "__await__"):
            result = await result
        await self._hold(rule, rule.seconds if rule.kind == "delay" else None)
        return result

    async def _hold(self, rule: Rule, seconds: float | None) -> None:
        """Wait ``seconds`` (None: for ever); until the rule is cleared at most. A connection that closes cancels
        the wait with its request."""
        if rule.cleared:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(rule, []).append(waiter)
        try:
            await asyncio.wait_for(waiter, seconds)
        except asyncio.TimeoutError:
            pass
        finally:
            waiters = self._waiting.get(rule)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[rule]


# ----------------------------------------------------------------------------------------------- control channel
async def serve_control(path: Path, injector: FaultInjector) -> asyncio.AbstractServer:
    """The test process's control channel: a unix socket at ``path`` taking one JSON command per line and answering
    one JSON line each (:meth:`FaultInjector.apply`)."""

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    command = json.loads(line)
                    answer = injector.apply(command) if isinstance(command, dict) else {"error": "not an object"}
                except ValueError as e:
                    answer = {"error": f"not JSON: {e}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(session, path=str(path))
    log.info("test control channel on %s (%s is set)", path, CONTROL_ENV)
    return server

