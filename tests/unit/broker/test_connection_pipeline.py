"""A broker connection's request pipeline without a socket (oncelog.testing.connection): requests are started as
they arrive, responses leave in request order, reading pauses when too many are in flight, and input that cannot be
understood closes this connection only."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.network.connection import MAX_PENDING
from oncelog.broker.context import BrokerContext
from oncelog.broker.request import NO_RESPONSE, RequestContext
from oncelog.broker.router import Route, Router
from oncelog.protocol import api as kapi
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from oncelog.protocol.messages.metadata_response import MetadataResponse
from oncelog.testing.connection import ConnectionHarness, broker_context

API_VERSIONS, METADATA, PRODUCE = 18, 3, 0


@pytest.fixture
def context(tmp_path: Path) -> Iterator[BrokerContext]:
    ctx = broker_context(tmp_path / "data")
    yield ctx
    ctx.topics.logs.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 5))


class Parked:
    """A Metadata route whose answers the test releases: records the order handlers were called in."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.waiting: dict[int, asyncio.Future[MetadataResponse]] = {}

    def handle(self, broker: BrokerContext, ctx: RequestContext, request: MetadataRequest) -> Any:
        self.calls.append(ctx.correlation_id)
        fut: asyncio.Future[MetadataResponse] = asyncio.get_running_loop().create_future()
        self.waiting[ctx.correlation_id] = fut
        return fut

    def release(self, corr: int) -> None:
        self.waiting[corr].set_result(MetadataResponse(cluster_id=f"answer-{corr}"))


def with_route(key: int, handle: Callable[..., Any]) -> Router:
    """The broker's router with the API ``key`` served by ``handle``."""
    router = Router.with_all_handlers()
    router.routes[key] = Route(key, "test", 0, 12, handle)
    return router


def metadata() -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name="t")])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_responses_leave_in_request_order_while_handlers_run_concurrently(context: BrokerContext) -> None:
    async def main() -> None:
        parked = Parked()
        h = ConnectionHarness(context, router=with_route(METADATA, parked.handle))
        first = h.send(METADATA, 12, metadata())
        second = h.send(METADATA, 12, metadata())
        ready = h.send(API_VERSIONS, 3, ApiVersionsRequest())  # answered at once by its handler
        assert parked.calls == [first, second]  # both started: pipelined, not one at a time
        await settle()
        assert h.responses() == []  # ApiVersions is ready but must wait for the two before it
        parked.release(second)
        await settle()
        assert h.responses() == []  # still behind the first
        parked.release(first)
        await settle()
        got = h.responses()
        assert [corr for corr, _ in got] == [first, second, ready]
        assert got[0][1].cluster_id == f"answer-{first}" and got[2][1].error_code == ErrorCode.NONE
    run(main)


def test_a_request_without_response_does_not_hold_back_the_next(context: BrokerContext) -> None:
    async def main() -> None:
        h = ConnectionHarness(context, router=with_route(METADATA, lambda broker, ctx, request: NO_RESPONSE))
        h.send(METADATA, 12, metadata())
        answered = h.send(API_VERSIONS, 3, ApiVersionsRequest())
        assert [corr for corr, _ in h.responses()] == [answered]
    run(main)


def test_reading_pauses_with_too_many_requests_in_flight_and_resumes(context: BrokerContext) -> None:
    async def main() -> None:
        parked = Parked()
        h = ConnectionHarness(context, router=with_route(METADATA, parked.handle))
        data = b"".join(h.request_bytes(METADATA, 12, metadata(), corr) for corr in range(1, MAX_PENDING + 1))
        h.send_raw(data)
        assert len(parked.calls) == MAX_PENDING and h.transport.reading_paused
        for corr in range(1, MAX_PENDING + 1):
            parked.release(corr)
        await settle()
        assert len(h.responses()) == MAX_PENDING and not h.transport.reading_paused
    run(main)


def test_a_request_split_across_reads_is_served_once_whole(context: BrokerContext) -> None:
    async def main() -> None:
        h = ConnectionHarness(context)
        data = h.request_bytes(API_VERSIONS, 3, ApiVersionsRequest(client_software_name="x",
                                                                   client_software_version="1"), 9)
        for i in range(len(data)):
            h.send_raw(data[i:i + 1])
        assert [corr for corr, _ in h.responses()] == [9]
    run(main)


def test_unsupported_api_versions_version_gets_a_v0_answer(context: BrokerContext) -> None:
    async def main() -> None:
        h = ConnectionHarness(context)
        # ApiVersions v99 (KIP-511): the header is readable, the body is not; the answer is v0 with our versions
        frame = struct.pack(">hhi", API_VERSIONS, 99, 5) + struct.pack(">h", 1) + b"c" + b"\x00" * 3
        h.send_raw(struct.pack(">i", len(frame)) + frame)
        corr, resp = kapi.decode_response(API_VERSIONS, 0, h.frames()[0])
        assert corr == 5 and resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert any(k.api_key == PRODUCE for k in resp.api_keys) and not h.closed
    run(main)


@pytest.mark.parametrize("what", ["garbage header", "unknown api", "undecodable body", "too large",
                                  "handler raises", "handler fails later"])
def test_input_that_cannot_be_understood_closes_this_connection_only(context: BrokerContext, what: str) -> None:
    async def main() -> None:
        async def fails_later(broker: BrokerContext, ctx: RequestContext, request: Any) -> Any:
            await asyncio.sleep(0)
            raise RuntimeError("handler bug")

        def raises(broker: BrokerContext, ctx: RequestContext, request: Any) -> Any:
            raise RuntimeError("handler bug")

        router = Router.with_all_handlers()
        if what in ("handler raises", "handler fails later"):
            router = with_route(METADATA, raises if what == "handler raises" else fails_later)
        context.config.socket_request_max_bytes = 1000
        h, other = ConnectionHarness(context, router=router), ConnectionHarness(context, router=router)
        answered = h.send(API_VERSIONS, 3, ApiVersionsRequest())  # served before the bad input
        if what == "garbage header":
            h.send_raw(struct.pack(">i", 2) + b"\xff\xff")
        elif what == "unknown api":
            frame = struct.pack(">hhi", 9999, 0, 2) + struct.pack(">h", -1)
            h.send_raw(struct.pack(">i", len(frame)) + frame)
        elif what == "undecodable body":
            frame = struct.pack(">hhi", METADATA, 1, 2) + struct.pack(">h", -1) + b"\x00\x00\x00\x05"
            h.send_raw(struct.pack(">i", len(frame)) + frame)
        elif what == "too large":
            h.send_raw(struct.pack(">i", 5000) + b"\x00" * 10)
        else:
            h.send(METADATA, 12, metadata())
        await settle()
        assert h.closed
        assert [corr for corr, _ in h.responses()] == [answered]
        assert h.connection not in h.registry  # connection_lost was delivered
        # the broker and its other connections go on
        assert not other.closed and [c for c, _ in other.responses()] == []
        corr = other.send(API_VERSIONS, 3, ApiVersionsRequest())
        assert [c for c, _ in other.responses()] == [corr]
    run(main)


def test_real_handlers_answer_through_the_context(context: BrokerContext) -> None:
    async def main() -> None:
        context.topics.create("orders", 2)
        h = ConnectionHarness(context)
        h.send(METADATA, 12, MetadataRequest(topics=[MetadataRequestTopic(name="orders")],
                                             allow_auto_topic_creation=False))
        (_, resp), = h.responses()
        assert [t.name for t in resp.topics] == ["orders"] and len(resp.topics[0].partitions) == 2
        assert resp.cluster_id == context.cluster_id
    run(main)
