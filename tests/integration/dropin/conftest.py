"""The drop-in suite: the programs of ``_dropin_programs.py`` run once with confluent-kafka and once with
oncelog's client, against the shared oncelog broker (``bootstrap`` of tests/conftest.py)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

#: the two imports a program changes between: (the client module, its admin module)
CLIENTS = {"confluent_kafka": ("confluent_kafka", "confluent_kafka.admin"),
           "oncelog.client": ("oncelog.client", "oncelog.client.admin")}


@pytest.fixture(params=sorted(CLIENTS))
def client(request: pytest.FixtureRequest) -> tuple[str, ModuleType, ModuleType]:
    """(name, ``ck``, ``admin``) as ``import confluent_kafka as ck`` / ``import oncelog.client as ck`` give them."""
    mod, admin = CLIENTS[request.param]
    return request.param, importlib.import_module(mod), importlib.import_module(admin)
