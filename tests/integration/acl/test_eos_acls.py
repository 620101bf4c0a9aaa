"""An exactly-once copier (confluent-kafka: a read_committed consumer in a group, a transactional producer sending
the consumer's offsets to its transactions) runs with exactly the ACLs Kafka's documentation asks of such an
application — READ on its input topic and its group, WRITE on its output topic and its transactional id — and
nothing else (no super user, no default allow). Removing each ACL in turn gives the client the documented error.
A principal without WRITE on the transactional id cannot fence the copier's producer: the copier goes on.

Who is who comes from ``acl_helpers.identities`` (today: one principal told apart by host)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from acl_helpers import Identity, identities, request
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from oncelog.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from oncelog.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from oncelog.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from oncelog.protocol.messages.init_producer_id_request import InitProducerIdRequest
from oncelog.protocol.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from oncelog.protocol.records import RecordBatchBuilder
from oncelog.security.acl import AclBinding, AclOperation, ResourceType
from oncelog.testing.broker_process import BrokerProcess

RECORDS = 20
WHO = identities()


@dataclass(frozen=True)
class App:
    input: str
    output: str
    group: str
    txn_id: str

    def acls(self) -> dict[str, AclBinding]:
        """What Kafka's documentation asks of a transactional consume-transform-produce application."""
        app = WHO["app"]
        return {"READ input": app.acl(ResourceType.TOPIC, self.input, AclOperation.READ),
                "READ group": app.acl(ResourceType.GROUP, self.group, AclOperation.READ),
                "WRITE output": app.acl(ResourceType.TOPIC, self.output, AclOperation.WRITE),
                "WRITE transactional id": app.acl(ResourceType.TRANSACTIONAL_ID, self.txn_id, AclOperation.WRITE)}


# ---------------------------------------------------------------------------------------------- the admin's side
def as_admin(bootstrap: str, message: object, version: int) -> object:
    return request(bootstrap, message, version, WHO["admin"])


def create_acls(bootstrap: str, *bindings: AclBinding) -> None:
    got = as_admin(bootstrap, CreateAclsRequest(creations=[AclCreation(
        resource_type=b.resource_type, resource_name=b.name, resource_pattern_type=b.pattern_type,
        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
        for b in bindings]), 3)
    assert [r.error_code for r in got.results] == [0] * len(bindings)  # type: ignore[attr-defined]


def delete_acl(bootstrap: str, b: AclBinding) -> None:
    got = as_admin(bootstrap, DeleteAclsRequest(filters=[DeleteAclsFilter(
        resource_type_filter=b.resource_type, resource_name_filter=b.name, pattern_type_filter=b.pattern_type,
        principal_filter=b.principal, host_filter=b.host, operation=b.operation, permission_type=b.permission)]), 3)
    assert len(got.filter_results[0].matching_acls) == 1  # type: ignore[attr-defined]


def seed(bootstrap: str, topic: str, values: range) -> None:
    b = RecordBatchBuilder()
    for v in values:
        b.append(int(time.time() * 1000), None, str(v).encode(), ())
    got = as_admin(bootstrap, ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=b.build())])]), 9)
    assert got.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]


@pytest.fixture
def app(secured_broker: BrokerProcess) -> Iterator[App]:
    tag = uuid.uuid4().hex[:8]
    a = App(f"in-{tag}", f"out-{tag}", f"copier-{tag}", f"copier-{tag}")
    got = as_admin(secured_broker.bootstrap, CreateTopicsRequest(timeout_ms=10_000, topics=[
        CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in (a.input, a.output)]), 5)
    assert [t.error_code for t in got.topics] == [0, 0]  # type: ignore[attr-defined]
    seed(secured_broker.bootstrap, a.input, range(RECORDS))
    create_acls(secured_broker.bootstrap, *a.acls().values())
    yield a


# ---------------------------------------------------------------------------------------------- the copier
class Copier:
    """Copies input to output in transactions until stopped; records every error it meets."""

    def __init__(self, bootstrap: str, a: App, who: Identity) -> None:
        common = {"bootstrap.servers": bootstrap, **who.client_config}
        self.consumer = Consumer({**common, "group.id": a.group, "isolation.level": "read_committed",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.producer = Producer({**common, "transactional.id": a.txn_id, "linger.ms": 5,
                                  "transaction.timeout.ms": 20_000})
        self.a = a
        self.copied = 0
        self.errors: list[int] = []
        self.stop = threading.Event()

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.errors.append(err.code())

    def run(self, until: int, timeout: float) -> None:
        """Copy until ``until`` records were committed, an error, ``stop`` or the timeout."""
        deadline = time.monotonic() + timeout
        try:
            self.producer.init_transactions(10)
            self.consumer.subscribe([self.a.input])
            while self.copied < until and not self.stop.is_set() and time.monotonic() < deadline:
                msgs = self.consumer.consume(50, 0.2)
                errors = [m.error().code() for m in msgs if m.error() is not None]
                if errors:
                    self.errors += errors
                    return
                if not msgs:
                    continue
                self.producer.begin_transaction()
                for m in msgs:
                    self.producer.produce(self.a.output, m.value(), on_delivery=self._delivered)
                positions = [TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in msgs]
                self.producer.send_offsets_to_transaction(positions, self.consumer.consumer_group_metadata(), 10)
                self.producer.commit_transaction(10)
                self.copied += len(msgs)
        except KafkaException as e:
            self.errors.append(e.args[0].code())
        finally:
            self.consumer.close()


def test_a_copier_runs_with_exactly_the_documented_acls(secured_broker: BrokerProcess, app: App) -> None:
    copier = Copier(secured_broker.bootstrap, app, WHO["app"])
    copier.run(until=RECORDS, timeout=60)
    assert copier.errors == [] and copier.copied == RECORDS


@pytest.mark.parametrize("removed, documented", [
    ("WRITE transactional id", KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ("READ group", KafkaError.GROUP_AUTHORIZATION_FAILED),
    ("READ input", KafkaError.TOPIC_AUTHORIZATION_FAILED),
    ("WRITE output", KafkaError.TOPIC_AUTHORIZATION_FAILED),
])
def test_without_each_acl_the_client_gets_the_documented_error(secured_broker: BrokerProcess, app: App,
                                                               removed: str, documented: int) -> None:
    delete_acl(secured_broker.bootstrap, app.acls()[removed])
    copier = Copier(secured_broker.bootstrap, app, WHO["app"])
    copier.run(until=RECORDS, timeout=30)
    assert copier.copied == 0 and documented in copier.errors, copier.errors


def test_a_principal_without_write_on_the_transactional_id_cannot_fence_the_copier(
        secured_broker: BrokerProcess, app: App) -> None:
    copier = Copier(secured_broker.bootstrap, app, WHO["app"])
    running = threading.Thread(target=copier.run, kwargs={"until": 2 * RECORDS, "timeout": 90}, daemon=True)
    running.start()
    deadline = time.monotonic() + 30
    while copier.copied < RECORDS and time.monotonic() < deadline:
        time.sleep(0.1)
    assert copier.copied == RECORDS, copier.errors
    intruder = WHO["intruder"]
    found = request(secured_broker.bootstrap, FindCoordinatorRequest(key_type=1, coordinator_keys=[app.txn_id]), 4,
                    intruder)
    assert found.coordinators[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    fenced = request(secured_broker.bootstrap, InitProducerIdRequest(transactional_id=app.txn_id,
                                                                     transaction_timeout_ms=10_000), 4, intruder)
    assert fenced.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    seed(secured_broker.bootstrap, app.input, range(RECORDS, 2 * RECORDS))  # the copier goes on, unfenced
    running.join(60)
    assert copier.errors == [] and copier.copied == 2 * RECORDS
