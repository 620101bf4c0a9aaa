"""The native client (``oncelog.client``) with confluent-kafka's security keys: produce, consume and a transaction
over SASL_SSL with SCRAM-SHA-512, over SSL with a client certificate, with SASL PLAIN; Java's keys from a
``--command-config`` properties file; clear errors for a wrong password, a wrong CA and a TLS/plaintext mismatch;
KIP-368 re-authentication of its connections; the Spark connector's ``kafka.*`` pass-through."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

import oncelog.client as ck
import oncelog.client.admin  # noqa: F401  (ck.admin, as confluent_kafka.admin: a submodule imported by name)
from secure_helpers import JAAS_PLAIN, Certs, SecureBroker
from oncelog.client.config import parse_producer_config
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker
from test_security_listeners import expected, roundtrip


def _topic() -> str:
    return f"native-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def scram_user(secure: SecureBroker) -> tuple[str, str]:
    admin = AdminClient({"bootstrap.servers": secure.bootstrap()})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "ivan", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"ivan-pw")])["ivan"].result(15)
    return "ivan", "ivan-pw"


def test_native_client_over_sasl_ssl_with_scram_sha_512(secure: SecureBroker, scram_user: tuple[str, str]) -> None:
    conf = secure.confluent("SASL_SSL", *scram_user, mechanism="SCRAM-SHA-512")
    assert roundtrip(conf, _topic(), transactional=True, ck=ck) == expected()


def test_native_client_over_ssl_with_a_client_certificate(secure: SecureBroker) -> None:
    conf = secure.confluent("SSL", client_cert=True)
    assert roundtrip(conf, _topic(), transactional=True, ck=ck) == expected()


def test_native_client_with_sasl_plain(secure: SecureBroker) -> None:
    conf = secure.confluent("SASL_PLAINTEXT", "alice", "alice-secret")
    assert roundtrip(conf, _topic(), transactional=True, ck=ck) == expected()


def test_java_keys_of_a_command_config_file(secure: SecureBroker, scram_user: tuple[str, str]) -> None:
    """What a Kafka tools' client.properties holds: sasl.jaas.config, PEM truststore."""
    user, password = scram_user
    conf = {"bootstrap.servers": secure.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secure.certs.ca),
            "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                f'username="{user}" password="{password}";'}
    assert roundtrip(conf, _topic(), n=3, ck=ck) == expected(3)


def _admin_error(conf: dict[str, object]) -> ck.KafkaError:
    with ck.admin.AdminClient({**conf, "request.timeout.ms": 5000}) as admin:
        with pytest.raises(ck.KafkaException) as e:
            admin.list_topics(timeout=5)
    err = e.value.args[0]
    assert isinstance(err, ck.KafkaError)
    return err


def test_clear_errors(secure: SecureBroker, certs: Certs) -> None:
    err = _admin_error(secure.confluent("SASL_SSL", "alice", "wrong"))
    assert err.code() == ErrorCode.SASL_AUTHENTICATION_FAILED and not err.retriable()
    assert "Authentication failed: Invalid username or password" in err.str()
    other_ca = certs.dir / "other-ca.pem"
    import trustme

    trustme.CA().cert_pem.write_to_path(str(other_ca))
    err = _admin_error({**secure.confluent("SSL"), "ssl.ca.location": str(other_ca)})
    assert err.code() == ck.KafkaError._SSL and "self-signed certificate in certificate chain" in err.str()
    err = _admin_error({**secure.confluent("SSL"), "bootstrap.servers": secure.bootstrap("PLAINTEXT")})
    assert err.retriable() and "TLS handshake" in err.str()
    with pytest.raises(ck.ConfigError, match="needs sasl.username and sasl.password"):
        ck.Producer({"bootstrap.servers": secure.bootstrap(), "security.protocol": "SASL_SSL",
                     "sasl.mechanism": "PLAIN"})
    with pytest.raises(ck.ConfigError, match="security.protocol must be one of"):
        ck.Producer({"bootstrap.servers": secure.bootstrap(), "security.protocol": "TLS"})


def test_native_connections_reauthenticate_before_the_broker_closes_them(
        kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    port = free_port()
    settings = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
                "connections.max.reauth.ms": 1000}
    proc = kafka_broker_factory(settings, port=port, in_process=False)
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
    p = ck.Producer({**conf, "linger.ms": 0})
    topic = _topic()
    end = time.monotonic() + 4
    n = 0
    while time.monotonic() < end:
        p.produce(topic, b"x")
        p.poll(0.1)
        n += 1
    assert p.flush(15) == 0
    p.close()
    log = proc.log_path.read_text()
    assert "SASL session expired" not in log  # the broker never had to close one of its connections
    assert "failed re-authentication" not in log


def test_spark_passes_kafka_security_options_through() -> None:
    from oncelog.spark.options import role_conf

    options = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.security.protocol": "SASL_PLAINTEXT",
               "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "u", "kafka.sasl.password": "p"}
    conf = role_conf(options, "producer")
    assert parse_producer_config(conf).security.mechanism == "SCRAM-SHA-512"
