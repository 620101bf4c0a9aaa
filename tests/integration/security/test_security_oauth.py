"""SASL/OAUTHBEARER: confluent-kafka with ``oauth_cb`` and the native client against a broker that checks signed JWTs
with a JWKS file (issuer, audience, expiry); an expired, wrongly signed or wrong-audience token is refused; a token
that expires mid-connection cannot re-authenticate and the connection is closed; a rotated key in the JWKS file is
taken at once; unsigned tokens only on a listener that allows them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import KafkaError, Producer
from cryptography.hazmat.primitives.asymmetric import rsa

import oncelog.client as ck
from _raw_sasl import METADATA, Raw
from secure_helpers import Certs
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.metadata_request import MetadataRequest
from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker
from test_security_listeners import expected, roundtrip

ISSUER, AUDIENCE = "https://idp.example.test", "kafka-cluster"


@dataclass
class Idp:
    """A stand-in identity provider: RSA keys, their JWKS file, tokens signed by them."""

    jwks_path: Path
    keys: dict[str, Any]

    def publish(self, *kids: str) -> None:
        jwks = []
        for kid in kids:
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
            jwks.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        tmp = self.jwks_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keys": jwks}))
        tmp.replace(self.jwks_path)

    def token(self, sub: str = "svc-orders", kid: str = "k1", life_s: float = 300, aud: str = AUDIENCE,
              iss: str = ISSUER, key: Any = None, **claims: Any) -> tuple[str, float]:
        now = time.time()
        exp = now + life_s
        body = {"sub": sub, "iat": int(now) - (0 if life_s > 0 else 600), "exp": int(exp), "aud": aud, "iss": iss,
                "scope": "kafka.produce kafka.consume", **claims}
        return jwt.encode(body, key or self.keys[kid], algorithm="RS256", headers={"kid": kid}), exp


@dataclass
class OAuthBroker:
    proc: KafkaBroker
    ports: dict[str, int]
    idp: Idp
    certs: Certs

    def conf(self, token: tuple[str, float] | None = None, listener: str = "SASL_SSL",
             cb: Any = None) -> dict[str, Any]:
        return {"bootstrap.servers": f"127.0.0.1:{self.ports[listener]}", "security.protocol": listener,
                "ssl.ca.location": str(self.certs.ca), "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": cb or (lambda _config: token)}


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory, kafka_module_broker_factory: Callable[..., KafkaBroker],
          certs: Certs) -> Iterator[OAuthBroker]:
    base = tmp_path_factory.mktemp("oauth")
    idp = Idp(base / "jwks.json", {k: rsa.generate_private_key(public_exponent=65537, key_size=2048)
                                   for k in ("k1", "k2", "rogue")})
    idp.publish("k1")
    ports = {n: free_port() for n in ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT")}
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_ssl.sasl.oauthbearer.jwks.endpoint.url": idp.jwks_path.as_uri(),
        "sasl.oauthbearer.expected.issuer": ISSUER, "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.clock.skew.seconds": 1,  # Kafka's 30 s would keep a just-expired token good
        "sasl.oauthbearer.unsecured.enable": "true",  # only where no JWKS is set: the SASL_PLAINTEXT listener
        "transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
    }
    proc = kafka_module_broker_factory(settings, port=ports["PLAINTEXT"], in_process=False)
    yield OAuthBroker(proc, ports, idp, certs)
    assert proc.stop() == 0, proc.log_tail()


def _topic() -> str:
    return f"oauth-{uuid.uuid4().hex[:10]}"


def _refused(conf: dict[str, Any]) -> KafkaError:
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        p.poll(0.2)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    return auth[0]


def test_confluent_kafka_with_a_signed_token(oauth: OAuthBroker) -> None:
    assert roundtrip(oauth.conf(oauth.idp.token()), _topic(), transactional=True) == expected()


@pytest.mark.parametrize("case", ["expired", "wrongly signed", "wrong audience", "wrong issuer", "unknown key",
                                  "unsigned"])
def test_bad_tokens_are_refused(oauth: OAuthBroker, case: str) -> None:
    idp = oauth.idp
    token = {
        # librdkafka itself refuses a token it is told has expired: it is told a later expiry than the JWT's exp
        "expired": lambda: (idp.token(life_s=-120)[0], time.time() + 60),
        "wrongly signed": lambda: idp.token(key=idp.keys["rogue"]),  # kid k1, signed by another key
        "wrong audience": lambda: idp.token(aud="another-service"),
        "wrong issuer": lambda: idp.token(iss="https://evil.example.test"),
        "unknown key": lambda: idp.token(kid="rogue"),
        "unsigned": lambda: (jwt.encode({"sub": "x", "iat": int(time.time()), "exp": int(time.time()) + 60},
                                        None, algorithm="none"), time.time() + 60),
    }[case]()
    err = _refused(oauth.conf(token))
    assert "invalid_token" in err.str(), err.str()
    assert oauth.proc.alive()


def test_native_client_with_oauth_cb_and_unsigned_tokens_where_allowed(oauth: OAuthBroker) -> None:
    assert roundtrip(oauth.conf(oauth.idp.token()), _topic(), n=3, transactional=True, ck=ck) == expected(3)
    unsecured = {"bootstrap.servers": f"127.0.0.1:{oauth.ports['SASL_PLAINTEXT']}",
                 "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                 "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=tester"}
    assert roundtrip(unsecured, _topic(), n=3, ck=ck) == expected(3)
    assert roundtrip(unsecured, _topic(), n=3) == expected(3)  # librdkafka's own unsecured tokens


def test_a_token_that_expires_mid_connection_cannot_reauthenticate(oauth: OAuthBroker) -> None:
    token, _ = oauth.idp.token(life_s=3)
    message = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    with Raw(oauth.ports["SASL_SSL"], _tls(oauth.certs)) as raw:
        raw.api_versions()
        raw.handshake("OAUTHBEARER")
        resp = raw.authenticate(message)
        assert resp.error_code == 0 and 1000 < resp.session_lifetime_ms <= 3000  # the session ends with the token
        raw.request(METADATA, 12, MetadataRequest(topics=[]))
        time.sleep(resp.session_lifetime_ms / 1000 + 1.5)
        raw.handshake("OAUTHBEARER")  # re-authentication (KIP-368) with the token it has, now expired
        challenge = raw.authenticate(message)
        assert challenge.error_code == 0 and json.loads(challenge.auth_bytes) == {"status": "invalid_token"}
        final = raw.authenticate(b"\x01")
        assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert raw.closed_within(5)


def test_native_client_refreshes_its_token_and_a_rotated_key_is_taken(oauth: OAuthBroker) -> None:
    idp = oauth.idp
    calls: list[float] = []

    def cb(_config: str) -> tuple[str, float]:
        calls.append(time.time())
        return idp.token(life_s=3)  # short-lived: the connection re-authenticates with a new token

    p = ck.Producer({**oauth.conf(cb=cb), "linger.ms": 0})
    topic = _topic()
    end = time.monotonic() + 5
    while time.monotonic() < end:
        p.produce(topic, b"x")
        p.poll(0.1)
    assert p.flush(15) == 0
    p.close()
    assert len(calls) >= 2  # a new token at each re-authentication
    assert "SASL session expired" not in oauth.proc.log_path.read_text()
    idp.publish("k1", "k2")  # the provider adds a key: tokens signed with it are accepted at once
    assert roundtrip(oauth.conf(idp.token(kid="k2")), _topic(), n=2) == expected(2)


def _tls(certs: Certs) -> Any:
    import ssl

    return ssl.create_default_context(cafile=str(certs.ca))
