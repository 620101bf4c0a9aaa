"""API key -> handler. ApiVersions is answered from exactly what is registered here.

Each handler module under ``oncelog.broker.handlers`` serves one API and exposes ``API_KEY``, ``MIN_VERSION``,
``MAX_VERSION`` and ``handle(broker, ctx, request)``, where ``broker`` is the typed
:class:`~oncelog.broker.context.BrokerContext`. A handler returns the response message, or an awaitable of
it when it has to wait (fsync for acks=all, long-poll fetch), or ``NO_RESPONSE`` (acks=0 produce). Work done before
a handler's first ``await`` happens in request order, so appends from one connection keep their order.
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

    @classmethod
    def with_all_handlers(cls) -> "Router":
        from . import handlers

        router = cls()
        for info in sorted(pkgutil.iter_modules(handlers.__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{handlers.__name__}.{info.name}")
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
