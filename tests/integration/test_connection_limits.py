"""Connection limits against a real broker, with floods of raw connections: past ``max.connections.per.ip`` a
connection is closed at once while another address (127.0.0.2, also on the loopback) keeps being served; at
``max.connections`` new connections wait to be accepted until one closes; past ``max.connection.creation.rate``
they are accepted late, and past an ip's ``connection_creation_rate`` quota closed (Kafka's ConnectionQuotas,
KIP-612)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from oncelog.protocol import api as kapi
from oncelog.protocol.api import RequestHeader
from oncelog.protocol.messages.alter_client_quotas_request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.rawclient import ConnectionClosed, RawClient, read_frame

API_VERSIONS, ALTER_CLIENT_QUOTAS = 18, 49
PER_IP, MAX = 4, 8


def connect(broker: KafkaBroker, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect((broker.host, broker.port))
    return sock


def answers(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the broker answers an ApiVersions request on ``sock`` within ``timeout`` (False: closed, or no
    answer yet)."""
    sock.settimeout(timeout)
    try:
        sock.sendall(b"".join(bytes(b) for b in kapi.encode_request(
            RequestHeader(API_VERSIONS, 3, 1, "flood"), ApiVersionsRequest(client_software_name="flood",
                                                                            client_software_version="1"))))
        read_frame(sock)
    except (ConnectionClosed, ConnectionResetError, BrokenPipeError, socket.timeout):
        return False
    return True


@pytest.fixture(scope="module")
def limited(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process: a connection flood must not take it down, and the teardown sees whether it did
    proc = kafka_module_broker_factory({
        "max.connections.per.ip": PER_IP, "max.connections.per.ip.overrides": "127.0.0.2:100",
        "max.connections": MAX}, in_process=False)
    time.sleep(0.2)  # the readiness probe's connection is released
    yield proc
    assert proc.alive(), f"the broker died under a connection flood; log:\n{proc.log_tail()}"
    rc = proc.stop()
    assert rc == 0, f"broker did not shut down cleanly (exit {rc}):\n{proc.log_tail()}"


def test_a_flood_past_max_connections_per_ip_is_closed_and_another_address_is_served(
        limited: KafkaBroker) -> None:
    with contextlib.ExitStack() as stack:
        flood = [stack.enter_context(connect(limited)) for _ in range(3 * PER_IP)]
        served = [answers(s) for s in flood]
        assert served.count(True) == PER_IP, served  # the rest were closed at once
        other = stack.enter_context(connect(limited, "127.0.0.2"))
        assert answers(other)
        assert "already has the configured maximum of 4 connections" in limited.log_tail(200)
    time.sleep(0.3)
    with connect(limited) as again:  # the address's connections closed: it may connect again
        assert answers(again)


def test_past_max_connections_a_new_connection_waits_until_another_closes(limited: KafkaBroker) -> None:
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(connect(limited, "127.0.0.2")) for _ in range(MAX)]
        assert all(answers(s) for s in held)
        waiting = stack.enter_context(connect(limited, "127.0.0.2"))  # in the listen backlog: not accepted yet
        assert not answers(waiting, timeout=0.5)
        held.pop().close()
        start = time.monotonic()
        waiting.settimeout(5)
        read_frame(waiting)  # the request sent meanwhile is answered once the broker has a free slot
        assert time.monotonic() - start < 3


@pytest.fixture(scope="module")
def rated(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    # a process: connections the creation rate accepts late are timed on the broker, apart from the test
    proc = kafka_module_broker_factory({"max.connection.creation.rate": 10, "quota.window.num": 2},
                                       in_process=False)
    yield proc
    rc = proc.stop()
    assert rc == 0, f"broker did not shut down cleanly (exit {rc}):\n{proc.log_tail()}"


def test_an_ip_past_its_quota_is_closed_and_connections_past_the_creation_rate_are_accepted_late(
        rated: KafkaBroker) -> None:
    with RawClient(rated.bootstrap) as admin:
        resp = admin.request(ALTER_CLIENT_QUOTAS, 1, AlterClientQuotasRequest(entries=[EntryData(
            entity=[EntityData(entity_type="ip", entity_name="127.0.0.2")],
            ops=[OpData(key="connection_creation_rate", value=2.0)])]))
        assert resp.entries[0].error_code == 0
    with contextlib.ExitStack() as stack:
        attempts = [answers(stack.enter_context(connect(rated, "127.0.0.2")), timeout=3) for _ in range(3)]
        # 2 a second: the third is closed after its throttle time; 127.0.0.1 is still served
        assert attempts == [True, True, False]
        with connect(rated) as sock:
            assert answers(sock)
    start = time.monotonic()
    for _ in range(20):
        with connect(rated) as sock:
            assert answers(sock)
    # 10 a second: the first second's 10 at once, the others about 1 s later at the earliest
    assert time.monotonic() - start >= 0.8
