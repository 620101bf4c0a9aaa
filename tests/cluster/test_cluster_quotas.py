"""Client quotas in a cluster: set through one broker, they are in etcd, every broker describes them and enforces
them on its own traffic (as in Kafka, each broker measures what it serves)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from oncelog.testing.cluster import ClusterProcess


def _send(admin: KafkaAdminClient, request: Any, node: int) -> Any:
    return admin._manager.run(admin._manager.send, request, node)


def _set(admin: KafkaAdminClient, client_id: str, value: float | None) -> None:
    E = AlterClientQuotasRequest.EntryData
    resp = _send(admin, AlterClientQuotasRequest(validate_only=False, entries=[E(
        entity=[E.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[E.OpData(key="request_percentage", value=value or 0.0, remove=value is None)])]), 1)
    assert resp.entries[0].error_code == 0, resp.entries[0].error_message


def test_a_quota_set_through_one_broker_is_described_and_enforced_by_every_broker(
        cluster: ClusterProcess, caplog: pytest.LogCaptureFixture) -> None:
    busy = f"busy-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[1].bootstrap, client_id="quota-admin")
    try:
        _set(admin, busy, 0.0001)  # a tiny share of a broker's time
        C = DescribeClientQuotasRequest.ComponentData
        describe = DescribeClientQuotasRequest(strict=True, components=[C(entity_type="client-id", match_type=0,
                                                                          match=busy)])
        deadline = time.monotonic() + 15
        while not _send(admin, describe, 2).entries:
            assert time.monotonic() < deadline, "broker 2 never saw the quota set through broker 1"
            time.sleep(0.1)
        # kafka-python logs each response with throttle_time_ms (and honours it, KIP-219)
        caplog.set_level(logging.WARNING, logger="kafka.net.connection")
        KafkaAdminClient(bootstrap_servers=cluster.brokers[3].bootstrap, client_id=busy).close()
        assert any("bootstrap-0" in r.getMessage() and "throttled by broker" in r.getMessage()  # broker 3
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
    finally:
        _set(admin, busy, None)
        admin.close()
