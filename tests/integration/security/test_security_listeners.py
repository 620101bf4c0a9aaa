"""Several listeners with TLS and SASL PLAIN, with confluent-kafka (librdkafka): each listener answers Metadata with
its own address; produce, consume and a transaction over SASL_SSL (PLAIN) and over SSL with a client certificate; a
wrong password is refused with Kafka's error while the broker goes on serving everyone else."""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from types import ModuleType

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from secure_helpers import Certs, SecureBroker
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def roundtrip(conf: dict[str, object], topic: str, n: int = 20, transactional: bool = False,
              ck: ModuleType = confluent_kafka) -> list[bytes]:
    """Produce ``n`` records (in one committed transaction when asked), then read them back read_committed, with
    confluent-kafka or (``ck=oncelog.client``) the native client."""
    p = ck.Producer({**conf, "enable.idempotence": True,
                  **({"transactional.id": f"tx-{topic}"} if transactional else {})})
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    for i in range(n):
        p.produce(topic, key=str(i % 3), value=f"v{i}")
    if transactional:
        p.commit_transaction(30)
    assert p.flush(30) == 0
    c = ck.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
            elif m is not None and m.error().code() != ck.KafkaError._PARTITION_EOF:
                raise AssertionError(f"consuming {topic}: {m.error()}")
        c.commit(asynchronous=False)
    finally:
        c.close()
    return sorted(out)


def expected(n: int = 20) -> list[bytes]:
    return sorted(f"v{i}".encode() for i in range(n))


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_metadata_answers_with_the_address_of_the_listener_the_client_came_in_on(secure: SecureBroker,
                                                                                 listener: str) -> None:
    user = ("alice", "alice-secret") if listener.startswith("SASL") else (None, None)
    admin = AdminClient(secure.confluent(listener, *user))
    md = admin.list_topics(timeout=15)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", secure.ports[listener])]


def test_produce_consume_and_a_transaction_over_sasl_ssl_with_plain(secure: SecureBroker) -> None:
    conf = secure.confluent("SASL_SSL", "alice", "alice-secret")
    assert roundtrip(conf, _topic(), transactional=True) == expected()


def test_produce_and_consume_over_ssl_with_a_client_certificate(secure: SecureBroker) -> None:
    conf = secure.confluent("SSL", client_cert=True)
    assert roundtrip(conf, _topic(), transactional=True) == expected()


def test_sasl_plaintext_with_plain(secure: SecureBroker) -> None:
    assert roundtrip(secure.confluent("SASL_PLAINTEXT", "admin", "admin-secret"), _topic()) == expected()


def test_a_wrong_password_is_refused_with_kafkas_error_and_the_broker_serves_others(secure: SecureBroker) -> None:
    for user, password in (("alice", "wrong"), ("nobody", "x")):
        errors: list[KafkaError] = []
        p = Producer({**secure.confluent("SASL_SSL", user, password), "error_cb": errors.append})
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            p.poll(0.2)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
        assert "Authentication failed: Invalid username or password" in errors[0].str()
        del p
    assert roundtrip(secure.confluent("PLAINTEXT"), _topic(), n=3) == expected(3)
    assert secure.proc.alive()


def test_a_plaintext_client_on_a_tls_listener_and_a_tls_client_on_a_plaintext_one(secure: SecureBroker) -> None:
    # Kafka's ApiVersions v0 request, in plaintext, to the TLS listener: the handshake fails, the connection closes
    api_versions = bytes.fromhex("0000000e" "0012" "0000" "00000001" "0004") + b"abcd"
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as s:
        s.sendall(api_versions)
        received = b""
        while chunk := s.recv(4096):
            received += chunk
        assert not received or received[0] == 0x15, received  # nothing, or a TLS alert record: never an answer
    # a TLS client on the PLAINTEXT listener: its ClientHello is not a Kafka frame; the broker closes
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    with socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    # a client that opens a TLS connection and never says anything does not stop others
    with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10):
        assert roundtrip(secure.confluent("SSL", client_cert=True), _topic(), n=3) == expected(3)
    assert "the client speaks TLS to a plaintext listener?" in secure.proc.log_path.read_text()
    assert secure.proc.alive()


def test_a_renewed_certificate_is_taken_without_a_restart(
        tmp_path: Path, certs: Certs, kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    import trustme

    keystore = tmp_path / "broker.pem"
    keystore.write_bytes(certs.server.read_bytes())
    port = free_port()
    settings = {"listeners": f"SSL://127.0.0.1:{port}", "ssl.keystore.type": "PEM", "ssl.keystore.location": keystore}
    kafka_broker_factory(settings, port=port, in_process=False)
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL"}
    assert roundtrip({**conf, "ssl.ca.location": str(certs.ca)}, _topic(), n=2) == expected(2)
    new_ca = trustme.CA()  # the renewed certificate comes from another CA: clients that trust it only
    new_ca.cert_pem.write_to_path(str(tmp_path / "new-ca.pem"))
    renewed = tmp_path / "renewed.pem"
    new_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(renewed))
    renewed.replace(keystore)  # as a certificate manager renews it: a new file in place
    deadline = time.monotonic() + 15
    while True:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            ctx = ssl.create_default_context(cafile=str(tmp_path / "new-ca.pem"))
            try:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                    break
            except ssl.SSLCertVerificationError:
                assert time.monotonic() < deadline, "the renewed certificate was not taken"
                time.sleep(0.5)
    assert roundtrip({**conf, "ssl.ca.location": str(tmp_path / "new-ca.pem")}, _topic(), n=2) == expected(2)
