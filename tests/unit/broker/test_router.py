"""The router's table of handlers (read without importing them) against the handler modules themselves, and the
first request of an API importing its module."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import oncelog.broker.handlers as handlers
from oncelog.broker.handlers import HANDLERS
from oncelog.broker.router import Router
from oncelog.testing.connection import broker_context


def _modules() -> dict[str, tuple[int, int, int]]:
    out = {}
    for info in pkgutil.iter_modules(handlers.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"oncelog.broker.handlers.{info.name}")
        if hasattr(module, "API_KEY"):
            out[info.name] = (module.API_KEY, module.MIN_VERSION, module.MAX_VERSION)
    return out


def test_table_equals_the_handler_modules() -> None:
    table = {name: (key, lo, hi) for key, name, lo, hi in HANDLERS}
    modules = _modules()
    missing = {n: v for n, v in modules.items() if n not in table}
    assert not missing, ("handler modules missing from HANDLERS in oncelog/broker/handlers/__init__.py; add: "
                         + ", ".join(f"({k}, {n!r}, {lo}, {hi})" for n, (k, lo, hi) in sorted(missing.items())))
    differ = {n: (table[n], modules.get(n)) for n in table if table[n] != modules.get(n)}
    assert not differ, f"HANDLERS rows that differ from their module (table, module): {differ}"
    assert [row[0] for row in HANDLERS] == sorted(row[0] for row in HANDLERS), "HANDLERS is kept by api key"


def test_router_answers_api_versions_from_the_table() -> None:
    router = Router.with_all_handlers()
    assert router.api_versions() == tuple((k, lo, hi) for k, _, lo, hi in HANDLERS)
    assert router.get(18, 4) is not None and router.get(18, 5) is None and router.get(4, 0) is None


def test_router_imports_no_handler_until_its_first_request() -> None:
    code = ("import sys; from oncelog.broker.router import Router; Router.with_all_handlers(); "
            "print(sorted(m for m in sys.modules if m.startswith('oncelog.broker.handlers.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_first_request_loads_the_handler_and_is_served(tmp_path: Path) -> None:
    from oncelog.broker.request import RequestContext
    from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest

    router = Router.with_all_handlers()
    stand_in = router.routes[18]
    ctx = broker_context(tmp_path, router=router)
    try:
        response = stand_in.handle(ctx, RequestContext(1, "127.0.0.1:1", "t", 18, 3, 7), ApiVersionsRequest())
    finally:
        ctx.topics.logs.close()
    assert response.error_code == 0 and {a.api_key for a in response.api_keys} == {k for k, *_ in HANDLERS}
    assert router.routes[18] is not stand_in and router.routes[18].name == "api_versions"
    assert router.routes[18].handle.__module__ == "oncelog.broker.handlers.api_versions"
