"""Authentication sessions and bad input, as Kafka answers them: KIP-368 re-authentication with librdkafka, a session
that is not renewed closed at its next request, thousands of wrong passwords answered late at no CPU cost and
counted, garbage and truncated SASL frames, requests before authentication, a replayed SCRAM exchange, client
certificates required and mapped to principals; through all of it the broker serves everyone else."""

from __future__ import annotations

import re
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import scramp
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from _raw_sasl import METADATA, Closed, Raw
from secure_helpers import JAAS_PLAIN, Certs
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker
from test_security_listeners import expected, roundtrip

REAUTH_MS = 1500


class Sessions:
    def __init__(self, proc: KafkaBroker, ports: dict[str, int], metrics_port: int, certs: Certs) -> None:
        self.proc, self.ports, self.metrics_port, self.certs = proc, ports, metrics_port, certs

    def metric(self, name: str, **labels: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        total = 0.0
        for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def cpu_seconds(self) -> float:
        assert self.proc.proc is not None
        fields = Path(f"/proc/{self.proc.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


@pytest.fixture(scope="module")
def sessions(kafka_module_broker_factory: Callable[..., KafkaBroker], certs: Certs) -> Iterator[Sessions]:
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "STRICT")}
    mport = free_port()
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,STRICT:SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": REAUTH_MS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca, "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L",
        "listener.name.strict.ssl.principal.mapping.rules": "RULE:^CN=nobody,.*$/nobody/",
        "metrics.listen": f"127.0.0.1:{mport}",
        "transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
    }
    proc = kafka_module_broker_factory(settings, port=ports["PLAINTEXT"], in_process=False)
    yield Sessions(proc, ports, mport, certs)
    assert proc.stop() == 0, proc.log_tail()


def _topic() -> str:
    return f"sess-{uuid.uuid4().hex[:10]}"


def _plaintext_still_serves(s: Sessions) -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{s.ports['PLAINTEXT']}"}
    assert roundtrip(conf, _topic(), n=2) == expected(2)
    assert s.proc.alive()


def test_librdkafka_reauthenticates_within_the_session_and_keeps_its_connection(sessions: Sessions) -> None:
    before = sessions.metric("oncelog_authentication_total", listener="SASL_PLAINTEXT", reauth="true",
                             result="success")
    killed = sessions.metric("oncelog_expired_connections_killed_total")
    delivered: list[object] = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{sessions.ports['SASL_PLAINTEXT']}",
                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                  "sasl.password": "alice-secret", "linger.ms": 0})
    topic = _topic()
    end = time.monotonic() + 3 * REAUTH_MS / 1000 + 1
    while time.monotonic() < end:
        p.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
        p.poll(0.2)
    assert p.flush(15) == 0
    assert delivered and all(err is None for err in delivered)
    assert sessions.metric("oncelog_authentication_total", listener="SASL_PLAINTEXT", reauth="true",
                           result="success") >= before + 2
    assert sessions.metric("oncelog_expired_connections_killed_total") == killed


def test_a_session_not_renewed_closes_at_its_next_request(sessions: Sessions) -> None:
    killed = sessions.metric("oncelog_expired_connections_killed_total")
    with Raw(sessions.ports["SASL_PLAINTEXT"]) as raw:
        resp = raw.plain("alice", "alice-secret")
        assert resp.error_code == 0 and resp.session_lifetime_ms == REAUTH_MS
        raw.request(METADATA, 12, MetadataRequest(topics=[]))  # within the session: served
        time.sleep(REAUTH_MS / 1000 + 0.3)
        raw.send(METADATA, 12, MetadataRequest(topics=[]))
        assert raw.closed_within(5)
    assert sessions.metric("oncelog_expired_connections_killed_total") == killed + 1


def test_thousands_of_wrong_passwords_are_answered_late_cost_little_cpu_and_are_counted(sessions: Sessions) -> None:
    n, workers = 1000, 50
    failures = sessions.metric("oncelog_authentication_total", listener="SASL_PLAINTEXT", result="failure")
    audited = sessions.metric("oncelog_failed_authentications_total", listener="SASL_PLAINTEXT", mechanism="PLAIN")
    cpu = sessions.cpu_seconds()
    slowest_fast = []
    errors: list[BaseException] = []

    def attempt(count: int) -> None:
        try:
            for _ in range(count):
                with Raw(sessions.ports["SASL_PLAINTEXT"]) as raw:
                    raw.api_versions()
                    raw.handshake("PLAIN")
                    started = time.monotonic()
                    resp = raw.authenticate(b"\0alice\0guess")
                    slowest_fast.append(time.monotonic() - started)
                    assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
                    assert resp.error_message == "Authentication failed: Invalid username or password"
                    assert raw.closed_within(5)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=attempt, args=(n // workers,)) for _ in range(workers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    _plaintext_still_serves(sessions)  # while the guessing goes on
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    assert not errors, errors[:3]
    assert min(slowest_fast) >= 0.095  # connection.failed.authentication.delay.ms (100) before each answer
    assert sessions.metric("oncelog_authentication_total", listener="SASL_PLAINTEXT",
                           result="failure") == failures + n
    assert sessions.metric("oncelog_failed_authentications_total", listener="SASL_PLAINTEXT",
                           mechanism="PLAIN") == audited + n  # and each in the audit log, with the user given
    assert "Failed authentication of principal = User:alice from host = 127.0.0.1 on listener SASL_PLAINTEXT " \
           "with PLAIN" in sessions.proc.log_path.read_text()
    used = sessions.cpu_seconds() - cpu
    # the delay is a timer, not work: the broker's CPU stays a fraction of the time the guessing took
    assert used < 0.8 * elapsed, f"{used:.1f} s of CPU for {n} failed logins in {elapsed:.1f} s"


@pytest.mark.parametrize("case", ["metadata first", "authenticate before handshake", "unknown mechanism",
                                  "garbage header", "truncated frame", "huge frame", "garbage scram",
                                  "second handshake", "bare garbage after a v0 handshake"])
def test_bad_sasl_input_closes_that_connection_only(sessions: Sessions, case: str) -> None:
    with Raw(sessions.ports["SASL_PLAINTEXT"]) as raw:
        if case == "metadata first":
            raw.send(METADATA, 12, MetadataRequest(topics=[]))  # Kafka: closed, no answer
        elif case == "authenticate before handshake":
            raw.api_versions()
            raw.send(36, 2, _auth(b"\0alice\0alice-secret"))
        elif case == "unknown mechanism":
            resp = raw.handshake("GSSAPI")
            assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
            assert resp.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
        elif case == "garbage header":
            raw.send_bytes(b"\x00\x00\x00\x06\xff\xff\x00\x00\x00\x01")
        elif case == "truncated frame":
            raw.send_bytes(b"\x00\x00\x00\x40\x00\x11\x00\x01")  # 64 bytes announced, 4 sent, then nothing
            raw.sock.shutdown(1)
        elif case == "huge frame":
            raw.send_bytes(b"\x7f\x00\x00\x00" + b"x" * 100)  # above sasl.server.max.receive.size
        elif case == "garbage scram":
            raw.handshake("SCRAM-SHA-512")
            resp = raw.authenticate(b"\x00\xff not a client-first message")
            assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        elif case == "second handshake":
            raw.handshake("PLAIN")
            raw.send(17, 1, _handshake("PLAIN"))
        else:
            raw.handshake("PLAIN", version=0)
            raw.send_bytes(b"\x00\x00\x00\x03abc")  # a bare PLAIN token with no NULs
        assert raw.closed_within(5)
    _plaintext_still_serves(sessions)


def test_a_replayed_scram_exchange_is_refused(sessions: Sessions) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{sessions.ports['PLAINTEXT']}"})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "henry", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"henry-pw")])["henry"].result(15)
    client = scramp.ScramClient(["SCRAM-SHA-512"], "henry", "henry-pw")
    first = client.get_client_first().encode()
    with Raw(sessions.ports["SASL_PLAINTEXT"]) as raw:
        raw.handshake("SCRAM-SHA-512")
        client.set_server_first(raw.authenticate(first).auth_bytes.decode())
        final = client.get_client_final().encode()
        assert raw.authenticate(final).error_code == 0
    with Raw(sessions.ports["SASL_PLAINTEXT"]) as raw:  # an eavesdropper sends the same messages again
        raw.handshake("SCRAM-SHA-512")
        assert raw.authenticate(first).error_code == 0  # a new server nonce...
        resp = raw.authenticate(final)  # ...which the recorded proof does not cover
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert raw.closed_within(5)


def test_client_certificates_are_required_and_mapped(sessions: Sessions) -> None:
    certs = sessions.certs
    with_cert = ssl.create_default_context(cafile=str(certs.ca))
    with_cert.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    with Raw(sessions.ports["SSL"], with_cert) as raw:  # CN=alice maps to alice: served
        assert raw.api_versions().error_code == 0
    without = ssl.create_default_context(cafile=str(certs.ca))
    with pytest.raises((ssl.SSLError, Closed, ConnectionError, OSError)):
        with Raw(sessions.ports["SSL"], without) as raw:  # TLS 1.3: the refusal comes with the first read
            raw.api_versions()
    with Raw(sessions.ports["STRICT"], with_cert) as raw:  # no rule of this listener maps CN=alice
        with pytest.raises(Closed):
            raw.api_versions()
    assert "its certificate gives no principal: no rule of ssl.principal.mapping.rules" in \
        sessions.proc.log_path.read_text()
    conf = {"bootstrap.servers": f"127.0.0.1:{sessions.ports['SSL']}", "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key)}
    assert roundtrip(conf, _topic(), n=2, transactional=True) == expected(2)
    _plaintext_still_serves(sessions)


def _auth(token: bytes) -> object:
    from oncelog.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest

    return SaslAuthenticateRequest(auth_bytes=token)


def _handshake(mechanism: str) -> object:
    from oncelog.protocol.messages.sasl_handshake_request import SaslHandshakeRequest

    return SaslHandshakeRequest(mechanism=mechanism)
