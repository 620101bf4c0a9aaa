"""Injectable time. Core code never calls time.time(); it is handed a Clock.

Tests use :class:`oncelog.testing.MockClock` and advance it to fire timeouts deterministically.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK"]


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch (record timestamps, retention)."""
        ...

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds (timeouts, expiry)."""
        ...


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()
