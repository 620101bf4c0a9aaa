"""SCRAM users: KIP-554 with confluent-kafka's AdminClient (describe/alter_user_scram_credentials, as against Kafka),
``oncelog user``, a first user written before the first start of a broker whose only listener is SASL_SSL, and
SCRAM-SHA-512 / SSL client certificates / PLAIN with kafka-python and aiokafka (produce, consume, a transaction)."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from secure_helpers import SecureBroker, secure_settings
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker
from test_security_listeners import expected, roundtrip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _topic() -> str:
    return f"scram-{uuid.uuid4().hex[:10]}"


def oncelog(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oncelog", *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_confluent_admin_alters_and_describes_scram_users_as_against_kafka(secure: SecureBroker) -> None:
    admin = AdminClient({"bootstrap.servers": secure.bootstrap()})
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", sha512, b"carol-secret"),
        UserScramCredentialUpsertion("dan", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dan-pw")])
    for f in futures.values():
        f.result(15)
    described = admin.describe_user_scram_credentials(["carol", "dan"])
    carol = described["carol"].result(15)
    assert [(i.mechanism, i.iterations) for i in carol.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512,
                                                                                   8192)]
    everyone = admin.describe_user_scram_credentials().result(15)
    assert {"carol", "dan"} <= set(everyone)
    with pytest.raises(KafkaException) as e:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException) as e:  # Kafka refuses fewer than 4096 iterations
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"x")])["eve"].result(15)
    assert e.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL

    conf = secure.confluent("SASL_SSL", "carol", "carol-secret", "SCRAM-SHA-512")
    assert roundtrip(conf, _topic(), transactional=True) == expected()
    assert roundtrip(secure.confluent("SASL_SSL", "dan", "dan-pw", "SCRAM-SHA-256"), _topic(), n=3) == expected(3)

    admin.alter_user_scram_credentials([UserScramCredentialDeletion("dan", ScramMechanism.SCRAM_SHA_256)])[
        "dan"].result(15)
    errors: list[KafkaError] = []
    p = Producer({**secure.confluent("SASL_SSL", "dan", "dan-pw", "SCRAM-SHA-256"), "error_cb": errors.append})
    while not errors:
        p.poll(0.2)
    assert errors[0].code() == KafkaError._AUTHENTICATION and "SCRAM-SHA-256" in errors[0].str()


def test_oncelog_user_adds_lists_and_removes_through_a_broker(secure: SecureBroker) -> None:
    b = secure.bootstrap()
    r = oncelog("user", "add", "frank", "-b", b, "--password-file", "-", stdin="frank-pw\n")
    assert r.returncode == 0, r.stderr
    listed = json.loads(oncelog("user", "list", "frank", "-b", b, "--json").stdout)
    assert listed == {"frank": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
    assert roundtrip(secure.confluent("SASL_SSL", "frank", "frank-pw", "SCRAM-SHA-512"), _topic(), n=3) == \
        expected(3)
    assert oncelog("user", "remove", "frank", "-b", b).returncode == 0
    r = oncelog("user", "remove", "frank", "-b", b)
    assert r.returncode == 1 and r.stderr.startswith("error: cannot remove user 'frank': RESOURCE_NOT_FOUND")
    r = oncelog("user", "add", "x", "-b", b)  # no password and no terminal
    assert r.returncode == 2 and "no password given" in r.stderr


def test_a_first_user_written_before_the_first_start_logs_in_to_a_sasl_only_broker(
        tmp_path: object, certs: object, kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    from pathlib import Path

    from secure_helpers import Certs

    assert isinstance(certs, Certs)
    data = Path(str(tmp_path)) / "data"
    r = oncelog("user", "add", "admin", "--data-dir", str(data), "--password-file", "-", stdin="admin-pw")
    assert r.returncode == 0, r.stderr
    port = free_port()
    settings = {**secure_settings(certs, {"SASL_SSL": port}), "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    proc = kafka_broker_factory(settings, data_dir=data, port=port, in_process=False)
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
            "sasl.password": "admin-pw"}
    assert roundtrip(conf, _topic(), n=3) == expected(3)
    r = oncelog("user", "add", "late", "--data-dir", str(data), "--password-file", "-", stdin="pw")
    assert r.returncode == 1 and "a broker is running on" in r.stderr
    assert proc.alive()


def _kafka_python_roundtrip(conf: dict[str, object], topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    p = KafkaProducer(**conf, transactional_id=f"kp-{topic}")  # type: ignore[arg-type]
    p.init_transactions()
    p.begin_transaction()
    for i in range(20):
        p.send(topic, value=f"v{i}".encode())
    p.commit_transaction()
    p.close()
    from kafka import TopicPartition

    c = KafkaConsumer(**conf, auto_offset_reset="earliest", isolation_level="read_committed",  # type: ignore[arg-type]
                      consumer_timeout_ms=15000)
    c.assign([TopicPartition(topic, 0)])  # the topic was auto-created with one partition (num.partitions)
    out = sorted(m.value for _, m in zip(range(20), c))  # range first: zip stops before a 21st (blocking) read
    c.close()
    return out


async def _aiokafka_roundtrip(conf: dict[str, object], topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    p = AIOKafkaProducer(**conf, transactional_id=f"ak-{topic}")  # type: ignore[arg-type]
    await p.start()
    try:
        async with p.transaction():
            for i in range(20):
                await p.send(topic, value=f"v{i}".encode())
    finally:
        await p.stop()
    c = AIOKafkaConsumer(topic, **conf, group_id=f"g-{topic}", auto_offset_reset="earliest",  # type: ignore[arg-type]
                         isolation_level="read_committed")
    await c.start()
    out: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            async for m in c:
                out.append(m.value)
                if len(out) == 20:
                    break
    finally:
        await c.stop()
    return sorted(out)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
@pytest.mark.parametrize("how", ["SCRAM-SHA-512", "SSL client certificate", "PLAIN"])
def test_kafka_python_and_aiokafka(secure: SecureBroker, client: str, how: str) -> None:
    admin = AdminClient({"bootstrap.servers": secure.bootstrap()})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "grace", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"grace-pw")])["grace"].result(15)
    certs = secure.certs
    listener = {"SCRAM-SHA-512": "SASL_SSL", "SSL client certificate": "SSL", "PLAIN": "SASL_PLAINTEXT"}[how]
    conf: dict[str, object] = {"bootstrap_servers": secure.bootstrap(listener), "security_protocol": listener}
    if how != "SSL client certificate":
        user, password = ("grace", "grace-pw") if how.startswith("SCRAM") else ("alice", "alice-secret")
        conf.update(sasl_mechanism=how, sasl_plain_username=user, sasl_plain_password=password)
    topic = _topic()
    if client == "kafka-python":
        if listener != "SASL_PLAINTEXT":
            conf["ssl_cafile"] = str(certs.ca)
        if how == "SSL client certificate":
            conf.update(ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
        assert _kafka_python_roundtrip(conf, topic) == expected()
    else:
        if listener != "SASL_PLAINTEXT":
            ctx = ssl.create_default_context(cafile=str(certs.ca))
            if how == "SSL client certificate":
                ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
            conf["ssl_context"] = ctx
        assert asyncio.run(_aiokafka_roundtrip(conf, topic)) == expected()
