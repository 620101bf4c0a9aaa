"""A 3-broker cluster whose only listener is SASL_SSL (SCRAM-SHA-512 between brokers and for clients): replication,
transaction markers across brokers and transaction-coordinator failover work over it; a SCRAM user created through
one broker is enforced by every broker within a second; a broker with wrong inter-broker credentials cannot join."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from cluster_helpers import etcd_or_skip
from oncelog.coordinator.transaction.partitioner import partition_for
from oncelog.testing.broker_process import free_port
from oncelog.testing.cluster import ClusterProcess

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{}";'
TXN_PARTITIONS = 3


class Secure:
    def __init__(self, cluster: ClusterProcess, ports: dict[int, int], ca: Path) -> None:
        self.cluster, self.ports, self.ca = cluster, ports, ca

    def conf(self, *nodes: int, user: str = "admin", password: str = "admin-pw") -> dict[str, Any]:
        return {"bootstrap.servers": ",".join(f"127.0.0.1:{self.ports[n]}" for n in nodes or self.ports),
                "security.protocol": "SASL_SSL", "ssl.ca.location": str(self.ca), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user, "sasl.password": password}


def _user_add(endpoint: str, cluster_name: str, name: str, password: str) -> None:
    r = subprocess.run([sys.executable, "-m", "oncelog", "user", "add", name, "--metadata", f"etcd://{endpoint}",
                        "--cluster-name", cluster_name, "--password-file", "-"], input=password, text=True,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    import trustme

    etcd_or_skip()
    base = tmp_path_factory.mktemp("secure-cluster")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(base / "broker.pem"))
    ports = {n: free_port() for n in (1, 2, 3)}
    settings = {
        "security.inter.broker.protocol": "SASL_SSL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS.format("broker-pw"),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": base / "broker.pem",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": base / "ca.pem",
        "default.replication.factor": 3, "transaction.state.log.num.partitions": TXN_PARTITIONS,
        "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
    }
    name = f"secure-{uuid.uuid4().hex[:6]}"
    cluster = ClusterProcess(base, 3, settings=settings, ports=list(ports.values()), cluster_name=name,
                             broker_settings={n: {"listeners": f"SASL_SSL://127.0.0.1:{p}"} for n, p in ports.items()})
    cluster.etcd.start()
    _user_add(cluster.etcd.endpoint, name, "broker", "broker-pw")  # before the first start: kafka-storage --add-scram
    _user_add(cluster.etcd.endpoint, name, "admin", "admin-pw")
    cluster.start()
    yield Secure(cluster, ports, base / "ca.pem")
    codes = cluster.stop()
    assert all(rc == 0 for rc in codes.values()), codes


def _produce_txn(conf: dict[str, Any], topic: str, txn_id: str, n: int) -> None:
    p = Producer({**conf, "transactional.id": txn_id})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, key=str(i), value=f"{txn_id}-{i}")
    p.commit_transaction(60)


def _read_committed(conf: dict[str, Any], topic: str, n: int) -> list[str]:
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})
    c.subscribe([topic])
    out: list[str] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m.value().decode())
    c.close()
    return sorted(out)


def test_replication_and_transaction_markers_over_sasl_ssl(secure: Secure) -> None:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secure.conf())
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    secure.cluster.wait_for_topic(topic, 3)
    assert len(set(secure.cluster.leaders(topic).values())) > 1  # markers go to several brokers
    _produce_txn(secure.conf(), topic, f"tx-{topic}", 30)
    assert _read_committed(secure.conf(), topic, 30) == sorted(f"tx-{topic}-{i}" for i in range(30))
    secure.cluster.wait_for_topic(topic, 3)  # every follower fetched it (over SASL_SSL) back into the ISR


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_librdkafka_alters_a_kerberos_setting_of_a_broker_as_its_admin_test_does(secure: Secure) -> None:
    admin = AdminClient(secure.conf())
    resource = ConfigResource(ConfigResource.Type.BROKER, "1",
                              set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([resource])[resource].result(15)  # a known Kafka name, dynamic in Kafka: accepted
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
    entries = next(iter(described.values())).result(15)
    assert entries["sasl.kerberos.min.time.before.relogin"].value == "58000"
    jaas = entries["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert jaas.value is None and jaas.is_sensitive  # a password is never shown


def test_a_scram_user_created_through_one_broker_is_enforced_by_every_broker_within_a_second(secure: Secure) -> None:
    admin = AdminClient(secure.conf(1))
    user = f"u{uuid.uuid4().hex[:6]}"
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw")])[user].result(15)
    created = time.monotonic()
    for node in (2, 3):
        while True:
            if AdminClient(secure.conf(node, user=user, password="pw")).list_topics(timeout=2).brokers:
                break
        assert time.monotonic() - created < 1.0, f"broker {node} took {time.monotonic() - created:.2f} s"
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])[
        user].result(15)
    time.sleep(1.0)
    for node in (2, 3):
        errors: list[KafkaError] = []
        p = Producer({**secure.conf(node, user=user, password="pw"), "error_cb": errors.append})
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            p.poll(0.2)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors


def test_transaction_coordinator_failover(secure: Secure) -> None:
    cluster = secure.cluster
    topic = f"fo-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secure.conf())
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    cluster.wait_for_topic(topic, 3)
    txn_id = f"tx-{topic}"
    _produce_txn(secure.conf(), topic, txn_id, 5)
    coordinator = cluster.leaders("__transaction_state")[partition_for(txn_id, TXN_PARTITIONS)]
    cluster.kill(coordinator)
    try:
        others = [n for n in secure.ports if n != coordinator]
        _produce_txn(secure.conf(*others), topic, txn_id, 5)  # the new coordinator elsewhere fences and goes on
        assert len(_read_committed(secure.conf(*others), topic, 10)) == 10
    finally:
        cluster.start_broker(coordinator)
    cluster.wait_for_topic(topic, 3)


def test_a_broker_with_wrong_inter_broker_credentials_cannot_join(secure: Secure) -> None:
    cluster = secure.cluster
    port = free_port()
    proc = cluster.add_broker(4, {"listeners": f"SASL_SSL://127.0.0.1:{port}",
                                  "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS.format("wrong")},
                              port=port, start=False)
    try:
        with pytest.raises(RuntimeError, match="exited with 1"):
            proc.start(30)
        assert "cannot join cluster" in proc.log_path.read_text()
        assert 4 not in cluster.view().brokers
    finally:
        proc.stop()
        del cluster.brokers[4]
