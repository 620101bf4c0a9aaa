"""A broker with every kind of listener, and the certificates and users of the security tests.

One CA (trustme) signs the broker's certificate (for 127.0.0.1 and localhost) and a client certificate for alice
(``CN=alice,OU=eng,O=Acme``). The module-scoped ``secure`` broker listens on PLAINTEXT, SSL (client certificates
requested), SASL_SSL (PLAIN, SCRAM-SHA-256/512) and SASL_PLAINTEXT (PLAIN) at once; PLAIN users come from the JAAS
config, SCRAM users are created by the tests through the PLAINTEXT listener.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from secure_helpers import Certs, SecureBroker, secure_settings

from oncelog.testing.broker_process import free_port
from oncelog.testing.pytest_plugin import KafkaBroker


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


@pytest.fixture(scope="module")
def secure(kafka_module_broker_factory: Callable[..., KafkaBroker], certs: Certs) -> Iterator[SecureBroker]:
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    proc = kafka_module_broker_factory(secure_settings(certs, ports), port=ports["PLAINTEXT"], in_process=False)
    yield SecureBroker(proc, ports, certs)
    rc = proc.stop()
    assert rc == 0, f"secure broker did not stop cleanly (exit {rc}); log:\n{proc.log_tail()}"
