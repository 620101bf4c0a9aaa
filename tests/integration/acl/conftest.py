"""Brokers with authorization on for the ACL tests (the identities are in ``acl_helpers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from acl_helpers import AUTHORIZER, admin_acls, seed_acls
from oncelog.testing.pytest_plugin import KafkaBroker


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory,
                   kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    """Authorization on, nobody a super user, no default allow; the admin identity may do anything."""
    data = tmp_path_factory.mktemp("secured") / "data"
    seed_acls(data, *admin_acls())
    proc = kafka_module_broker_factory({"authorizer.class.name": AUTHORIZER, "num.partitions": 1},
                                       data_dir=data)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def super_broker(kafka_module_broker_factory: Callable[..., KafkaBroker]) -> Iterator[KafkaBroker]:
    """Authorization on; the tests' principal is a super user (as an operator's admin is)."""
    proc = kafka_module_broker_factory({"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"})
    yield proc
    proc.stop()
