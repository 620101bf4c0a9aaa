"""Small helpers for the authorization lines of handlers (what each API checks is
``broker/security/authorization.py``'s)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

__all__ = ["then"]

T = TypeVar("T")


def then(result: T | Awaitable[T], fn: Callable[[T], T]) -> T | Awaitable[T]:
    """``fn(result)`` once ``result`` is there: a handler's answer (a response or an awaitable of one), completed
    with the parts the authorizer refused."""
    if hasattr(type(result), "__await__"):
        waiting = cast("Awaitable[T]", result)

        async def run() -> T:
            return fn(await waiting)
        return run()
    return fn(cast(T, result))
