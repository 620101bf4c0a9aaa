"""API key -> handler. ApiVersions is answered from exactly what is registered here.

Each handler module under ``oncelog.broker.handlers`` serves one API and exposes ``API_KEY``, ``MIN_VERSION``,
``MAX_VERSION`` and ``handle(broker, ctx, request)``, where ``broker`` is the typed
:class:`~oncelog.broker.context.BrokerContext`. A handler returns the response message, or an awaitable of
it when it has to wait (fsync for acks=all, long-poll fetch), or ``NO_RESPONSE`` (acks=0 produce). Work done before
a handler's first ``await`` happens in request order, so appends from one connection keep their order.

:meth:`Router.with_all_handlers` registers every API from the table ``handlers.HANDLERS`` without importing its
module: the route's ``handle`` is a stand-in that imports the module on the API's first request (the request is
served in the same call) and puts the real handler in its place. A broker therefore listens without loading the
handlers and their generated codecs (~0.1 s of CPU), and loads each as clients use it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from .request import HandlerResult, RequestContext

if TYPE_CHECKING:
    from .context import BrokerContext

__all__ = ["Route", "Router"]

_HANDLERS_PACKAGE = "oncelog.broker.handlers"


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[["BrokerContext", RequestContext, Any], HandlerResult]


class Router:
    def __init__(self) -> None:
        self.routes: dict[int, Route] = {}

    def add_module(self, module: ModuleType) -> None:
        key = int(module.API_KEY)
        if key in self.routes:
            raise RuntimeError(f"API key {key} is served twice ({module.__name__})")
        self.routes[key] = Route(key, module.__name__.rsplit(".", 1)[-1], int(module.MIN_VERSION),
                                 int(module.MAX_VERSION), module.handle)

    def add_lazy(self, api_key: int, name: str, min_version: int, max_version: int) -> None:
        """Serve ``api_key`` from the handler module ``name``, imported on the API's first request."""
        if api_key in self.routes:
            raise RuntimeError(f"API key {api_key} is served twice ({name})")

        def first_request(broker: BrokerContext, ctx: RequestContext, request: Any) -> HandlerResult:
            return self.load(api_key).handle(broker, ctx, request)

        self.routes[api_key] = Route(api_key, name, min_version, max_version, first_request)

    def load(self, api_key: int) -> Route:
        """The route of ``api_key`` with its handler module imported (the stand-in replaced where it still is)."""
        route = self.routes[api_key]
        module = importlib.import_module(f"{_HANDLERS_PACKAGE}.{route.name}")
        loaded = Route(api_key, route.name, route.min_version, route.max_version, module.handle)
        if self.routes.get(api_key) is route:  # a wrapper put there since (fault injection) stays in place
            self.routes[api_key] = loaded
        return loaded

    def load_all(self) -> None:
        """Import every handler module now (what the first requests would do)."""
        for key in list(self.routes):
            self.load(key)

    @classmethod
    def with_all_handlers(cls) -> "Router":
        """Every API of ``handlers.HANDLERS``, each module imported on first use; a handler module missing from
        the table is imported now (served all the same; ``tests/unit/broker/test_router.py`` asks for its row)."""
        from .handlers import HANDLERS

        router = cls()
        listed = set()
        for key, name, lo, hi in HANDLERS:
            router.add_lazy(key, name, lo, hi)
            listed.add(name)
        from . import handlers

        for info in sorted(pkgutil.iter_modules(handlers.__path__), key=lambda i: i.name):
            if info.name.startswith("_") or info.name in listed:
                continue
            module = importlib.import_module(f"{_HANDLERS_PACKAGE}.{info.name}")
            if hasattr(module, "API_KEY"):
                router.add_module(module)
        return router

    def api_versions(self) -> tuple[tuple[int, int, int], ...]:
        """(api key, min version, max version) of every API served, by key: what ApiVersions answers."""
        return tuple((r.api_key, r.min_version, r.max_version) for r in sorted(self.routes.values(),
                                                                               key=lambda r: r.api_key))

    def get(self, api_key: int, api_version: int) -> Route | None:
        route = self.routes.get(api_key)
        if route is None or not (route.min_version <= api_version <= route.max_version):
            return None
        return route
