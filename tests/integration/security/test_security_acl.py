"""Authentication gives the authorizer its principals: a SASL user, a SCRAM user and a client certificate's mapped
subject are the principals ACLs name (``User:alice``, ``User:carol``, ``User:alice`` from ``CN=alice,...``); a user
without an ACL is refused with Kafka's TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from secure_helpers import JAAS_PLAIN, Certs
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def authz(kafka_module_broker_factory: Callable[..., KafkaBroker],
          certs: Certs) -> Iterator[tuple[KafkaBroker, dict[str, int]]]:
    ports = {n: free_port() for n in ("SASL_PLAINTEXT", "SSL")}
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca, "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
        "authorizer.class.name": AUTHORIZER, "super.users": "User:admin",
    }
    proc = kafka_module_broker_factory(settings, port=ports["SASL_PLAINTEXT"], in_process=False)
    yield proc, ports
    assert proc.stop() == 0, proc.log_tail()


def _sasl(ports: dict[str, int], user: str, password: str, mechanism: str = "PLAIN") -> dict[str, object]:
    return {"bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def _delivered(conf: dict[str, object], topic: str) -> KafkaError | None:
    """The delivery result of one record (None: written)."""
    results: list[KafkaError | None] = []
    p = Producer({**conf, "message.timeout.ms": 5000})
    p.produce(topic, b"x", on_delivery=lambda err, _m: results.append(err))
    p.flush(15)
    return results[0] if results else KafkaError(KafkaError._TIMED_OUT)


def test_acls_name_the_authenticated_principals(authz: tuple[KafkaBroker, dict[str, int]], certs: Certs) -> None:
    _, ports = authz
    topic = f"authz-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_sasl(ports, "admin", "admin-secret"))  # a super user
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-pw")])["carol"].result(15)
    acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op,
                       AclPermissionType.ALLOW)
            for principal in ("User:alice", "User:carol") for op in (AclOperation.WRITE, AclOperation.CREATE,
                                                                     AclOperation.DESCRIBE)]
    for f in admin.create_acls(acls).values():
        f.result(15)
    time.sleep(0.2)
    assert _delivered(_sasl(ports, "alice", "alice-secret"), topic) is None  # PLAIN user alice
    assert _delivered(_sasl(ports, "carol", "carol-pw", "SCRAM-SHA-512"), topic) is None  # SCRAM user carol
    mtls = {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key)}
    assert _delivered(mtls, topic) is None  # CN=alice,OU=eng,O=Acme mapped to alice
    err = _delivered(_sasl(ports, "alice", "wrong"), topic)  # not authenticated at all
    assert err is not None
    user = f"u{uuid.uuid4().hex[:6]}"
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw")])[user].result(15)
    err = _delivered(_sasl(ports, user, "pw", "SCRAM-SHA-512"), topic)  # authenticated, but no ACL
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
