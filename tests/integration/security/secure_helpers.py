"""The certificates, users and broker settings of the security tests (their fixtures are in ``conftest.py``).

One CA (trustme) signs the broker's certificate (for 127.0.0.1 and localhost) and a client certificate for alice
(``CN=alice,OU=eng,O=Acme``); PLAIN users come from the JAAS config, SCRAM users are created by the tests through the
PLAINTEXT listener.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oncelog.testing.pytest_plugin import KafkaBroker

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


@dataclass(frozen=True)
class SecureBroker:
    proc: KafkaBroker
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
        "num.partitions": 1,  # Kafka's default (the ini file's kafka_settings give the plugin's brokers 3)
    }
