"""``oncelog acl add|list|remove`` with kafka-acls.sh's options, against a broker with authorization on: what it adds
is what the broker enforces and lists, --producer/--consumer add what kafka-acls.sh adds, mistakes are one
``error:`` line."""

from __future__ import annotations

import os
import subprocess
import sys

from oncelog.client.admin import Admin
from oncelog.client.admin_acls import AclBindingFilter, delete_acls_sync, describe_acls_sync
from oncelog.testing.broker_process import BrokerProcess


def oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oncelog", "acl", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "300"})


def acls(bootstrap: str, **f: object) -> set[str]:
    admin = Admin({"bootstrap.servers": bootstrap})
    try:
        return {str(b) for b in describe_acls_sync(admin, AclBindingFilter(**f))}  # type: ignore[arg-type]
    finally:
        admin.close()


def test_add_list_remove_as_kafka_acls(super_broker: BrokerProcess) -> None:
    b = super_broker.bootstrap
    added = oncelog("add", "-b", b, "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                    "--operation", "Read", "--operation", "Describe", "--topic", "orders",
                    "--resource-pattern-type", "prefixed")
    assert added.returncode == 0, added.stderr
    assert acls(b, principal="User:alice") == {
        f"ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED): (principal=User:alice, host=*, "
        f"operation={op}, permissionType=ALLOW)" for op in ("READ", "DESCRIBE")}
    producer = oncelog("add", "-b", b, "--allow-principal", "User:carol", "--allow-host", "10.0.0.7", "--producer",
                       "--topic", "out", "--transactional-id", "copier", "--idempotent")
    consumer = oncelog("add", "-b", b, "--deny-principal", "User:mallory", "--consumer", "--topic", "in",
                       "--group", "g")
    assert producer.returncode == consumer.returncode == 0, producer.stderr + consumer.stderr
    carol = acls(b, principal="User:carol")
    assert len(carol) == 6 and all("host=10.0.0.7" in a for a in carol)  # WRITE DESCRIBE CREATE, WRITE DESCRIBE,
    assert any("resourceType=CLUSTER" in a and "IDEMPOTENT_WRITE" in a for a in carol)  # IDEMPOTENT_WRITE
    assert len(acls(b, principal="User:mallory", permission=2)) == 3  # READ DESCRIBE on in, READ on g: DENY

    listed = oncelog("list", "-b", b, "--topic", "orders-eu", "--resource-pattern-type", "match")
    assert listed.returncode == 0 and "name=orders, patternType=PREFIXED" in listed.stdout
    assert listed.stdout.count("principal=") == 4
    everything = oncelog("list", "-b", b, "--json")
    assert everything.returncode == 0 and everything.stdout.count('"principal"') == 13

    removed = oncelog("remove", "-b", b, "--allow-principal", "User:bob", "--operation", "Read", "--topic",
                      "orders", "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0 and removed.stdout.count("removed") == 1
    gone = oncelog("remove", "-b", b, "--topic", "orders", "--resource-pattern-type", "prefixed", "--force")
    assert gone.returncode == 0 and gone.stdout.count("removed") == 3
    admin = Admin({"bootstrap.servers": b})  # the native client deletes the rest
    try:
        assert len(delete_acls_sync(admin, [AclBindingFilter()])[0]) == 9
    finally:
        admin.close()
    assert acls(b) == set()


def test_mistakes_are_one_error_line(super_broker: BrokerProcess, broker: BrokerProcess) -> None:
    bad_op = oncelog("add", "-b", super_broker.bootstrap, "--allow-principal", "User:a", "--operation", "Fly",
                     "--topic", "t")
    assert bad_op.returncode == 2 and bad_op.stderr.startswith("error: unknown AclOperation 'Fly'")
    bad_principal = oncelog("add", "-b", super_broker.bootstrap, "--allow-principal", "alice", "--operation",
                            "Read", "--topic", "t")
    assert bad_principal.returncode == 1 and "TYPE:NAME" in bad_principal.stderr
    assert "Traceback" not in bad_principal.stderr
    off = oncelog("list", "-b", broker.bootstrap)  # a broker without an authorizer
    assert off.returncode == 1 and off.stderr.startswith("error: cannot list the ACLs")
    assert "authorizer.class.name" in off.stderr
