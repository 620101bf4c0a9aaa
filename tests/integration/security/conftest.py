"""A broker with every kind of listener, and the certificates and users of the security tests.

One CA (trustme) signs the broker's certificate (for 127.0.0.1 and localhost) and a client certificate for alice
(``CN=alice,OU=eng,O=Acme``). The module-scoped ``secure`` broker listens on PLAINTEXT, SSL (client certificates
requested), SASL_SSL (PLAIN, SCRAM-SHA-256/512) and SASL_PLAINTEXT (PLAIN) at once; PLAIN users come from the JAAS
config, SCRAM users are created by the tests through the PLAINTEXT listener.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from oncelog.testing.broker_process import BrokerProcess, free_port

PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}
JAAS_PLAIN = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path  # PEM CA certificate
    server: Path  # PEM key + chain of the broker
    client_cert: Path  # alice's certificate
    client_key: Path


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    import trustme

    d = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    alice = ca.issue_cert("alice@example.com", common_name="alice", organization_name="Acme",
                          organization_unit_name="eng")
    alice.cert_chain_pems[0].write_to_path(str(d / "alice.crt"))
    alice.private_key_pem.write_to_path(str(d / "alice.key"))
    return Certs(d, d / "ca.pem", d / "server.pem", d / "alice.crt", d / "alice.key")


@dataclass(frozen=True)
class SecureBroker:
    proc: BrokerProcess
    ports: dict[str, int]  # listener name -> port
    certs: Certs

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def confluent(self, listener: str, user: str | None = None, password: str | None = None,
                  mechanism: str = "PLAIN", client_cert: bool = False) -> dict[str, object]:
        """confluent-kafka settings for ``listener``."""
        conf: dict[str, object] = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": listener}
        if listener in ("SSL", "SASL_SSL"):
            conf["ssl.ca.location"] = str(self.certs.ca)
        if client_cert:
            conf.update({"ssl.certificate.location": str(self.certs.client_cert),
                         "ssl.key.location": str(self.certs.client_key)})
        if user is not None:
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
        return conf


def secure_settings(certs: Certs, ports: dict[str, int]) -> dict[str, object]:
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca,
        "listener.name.ssl.ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS_PLAIN,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
        "transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
    }


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureBroker]:
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    proc = BrokerProcess(tmp_path_factory.mktemp("secure") / "data", port=ports["PLAINTEXT"],
                         settings=secure_settings(certs, ports))
    proc.start()
    yield SecureBroker(proc, ports, certs)
    rc = proc.stop()
    assert rc == 0, f"secure broker did not stop cleanly (exit {rc}); log:\n{proc.log_tail()}"
