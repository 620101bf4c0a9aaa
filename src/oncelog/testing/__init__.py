"""Test helpers that may import anything: a mock clock, and more as tests need them."""

from __future__ import annotations

__all__ = ["MockClock"]


class MockClock:
    """A clock that moves only when told to."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: int = 0) -> None:
        self._wall = wall_ms
        self._mono = monotonic_ms

    def wall_ms(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._wall += ms
        self._mono += ms
