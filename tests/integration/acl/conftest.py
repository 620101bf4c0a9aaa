"""Brokers with authorization on for the ACL tests (the identities are in ``acl_helpers``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from acl_helpers import AUTHORIZER, admin_acls, seed_acls
from oncelog.testing.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Authorization on, nobody a super user, no default allow; the admin identity may do anything."""
    data = tmp_path_factory.mktemp("secured") / "data"
    seed_acls(data, *admin_acls())
    proc = BrokerProcess(data, settings={"authorizer.class.name": AUTHORIZER, "num.partitions": 1})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def super_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Authorization on; the tests' principal is a super user (as an operator's admin is)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("acl-admin") / "data",
                         settings={"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"})
    proc.start()
    yield proc
    proc.stop()
