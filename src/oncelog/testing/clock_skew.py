"""Skew a broker's clocks at run time: Jepsen's clock nemesis (bumps, strobes) for one process.

The broker reads time only through :class:`oncelog.clock.Clock` (core code never calls ``time.time()``): the wall
clock for record timestamps (LogAppendTime), retention, segment rolls, transaction timeouts and producer-id
expiry; the monotonic clock for group session and rebalance deadlines and delayed file deletion. A broker started
as ``python -m oncelog.testing.clock_skew CONTROL serve ...`` (``BrokerProcess(clock_control=...)``) runs with
those two clocks offset by what the control file says, re-read within milliseconds of every change:
:class:`SkewControl` writes it from the test.

- The wall offset may move either way at any time (an NTP step, an operator's ``date -s``, a VM restored from a
  snapshot). :meth:`SkewControl.strobe` flips it back and forth, as Jepsen's strobe does.
- The monotonic offset only grows (a clock that goes back is not monotonic): a jump forward makes the broker
  believe time passed that did not, as after a VM's clock source misbehaved, so its deadlines fire early.

Not covered, on purpose: the event loop's timers (``asyncio.sleep``, ``call_later``, the fetch long-poll wait),
which the kernel measures with CLOCK_MONOTONIC; no real fault steps that clock (NTP only slews it, by at most
500 ppm), and only the waits themselves, not a decision, rest on it. Debian's libfaketime was measured for the
same job and rejected: faking CLOCK_MONOTONIC hangs every Python thread that waits with a timeout
(``threading.Event().wait(0.3)`` never returns under Python 3.11: it waits with ``sem_clockwait`` against a faked
deadline), and with the monotonic clock left alone it does what this module does, one second late (its cache),
for a Debian package more. See ``docs/testing.md``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oncelog.storage.files import write_atomic

__all__ = ["SkewControl", "Skew", "install"]

POLL_S = 0.005  # how often the broker looks at the control file


@dataclass(frozen=True)
class Skew:
    wall_offset_ms: int = 0
    monotonic_offset_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps({"wall_offset_ms": self.wall_offset_ms,
                           "monotonic_offset_ms": self.monotonic_offset_ms}).encode()

    @staticmethod
    def decode(data: bytes) -> Skew:
        d = json.loads(data)
        return Skew(int(d["wall_offset_ms"]), int(d["monotonic_offset_ms"]))


class SkewControl:
    """The test's side: writes the skew a broker started with ``clock_control=path`` runs with. Safe to use from
    several threads (a strobe runs in one of its own while the test jumps the monotonic clock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.skew = Skew()
        self.changes: list[tuple[float, Skew]] = []  # (monotonic time, skew from then on), for post-mortems
        self._strobe: threading.Thread | None = None
        self._stop_strobe = threading.Event()
        self._lock = threading.Lock()  # one change at a time: each reads the skew it changes, and shares a tmp file
        self._change(lambda _: Skew())

    def _change(self, new: Callable[[Skew], Skew]) -> None:
        with self._lock:
            skew = new(self.skew)
            write_atomic(self.path, skew.encode(), durable=False)  # the broker never reads half a file
            self.skew = skew
            self.changes.append((time.monotonic(), skew))

    def set_wall(self, offset_ms: int) -> None:
        """The broker's wall clock is ``offset_ms`` ahead of the real one (behind if negative) from now on."""
        self._change(lambda s: Skew(offset_ms, s.monotonic_offset_ms))

    def bump_wall(self, delta_ms: int) -> None:
        """Step the broker's wall clock by ``delta_ms`` (Jepsen's bump)."""
        self._change(lambda s: Skew(s.wall_offset_ms + delta_ms, s.monotonic_offset_ms))

    def jump_monotonic(self, delta_ms: int) -> None:
        """Make the broker's monotonic clock jump forward by ``delta_ms``."""
        if delta_ms < 0:
            raise ValueError(f"a monotonic clock only moves forward; cannot jump by {delta_ms} ms")
        self._change(lambda s: Skew(s.wall_offset_ms, s.monotonic_offset_ms + delta_ms))

    def reset_wall(self) -> None:
        self.set_wall(0)

    def strobe(self, delta_ms: int, period_ms: int, duration_s: float) -> None:
        """For ``duration_s``, flip the wall clock between its offset now and ``delta_ms`` more, every
        ``period_ms`` (Jepsen's strobe), in a background thread; it ends at the offset it started from."""
        self.stop_strobe()
        base = self.skew.wall_offset_ms
        self._stop_strobe.clear()

        def run() -> None:
            end = time.monotonic() + duration_s
            high = False
            while time.monotonic() < end and not self._stop_strobe.is_set():
                high = not high
                self.set_wall(base + delta_ms if high else base)
                self._stop_strobe.wait(period_ms / 1000)
            self.set_wall(base)

        self._strobe = threading.Thread(target=run, daemon=True, name="clock-strobe")
        self._strobe.start()

    def stop_strobe(self) -> None:
        if self._strobe is not None:
            self._stop_strobe.set()
            self._strobe.join()
            self._strobe = None


# --------------------------------------------------------------------------- the broker's side
_skew = Skew()


def _poll(path: Path) -> None:
    global _skew
    seen: tuple[int, int] | None = None
    while True:
        try:
            st = path.stat()
            key = (st.st_ino, st.st_mtime_ns)
            if key != seen:
                new = Skew.decode(path.read_bytes())
                seen = key
                # never let the monotonic clock go back, whatever the file says
                _skew = Skew(new.wall_offset_ms, max(new.monotonic_offset_ms, _skew.monotonic_offset_ms))
        except (OSError, ValueError, KeyError):
            pass  # replaced under us, or not written yet: read it on the next round
        time.sleep(POLL_S)


def install(path: Path) -> None:
    """In this process, make :data:`oncelog.clock.SYSTEM_CLOCK` (what the broker uses) follow the control file
    at ``path``; must run before the broker starts."""
    global _skew
    from oncelog import clock

    if path.exists():
        _skew = Skew.decode(path.read_bytes())
    cls = type(clock.SYSTEM_CLOCK)

    def wall_ms(self: object) -> int:
        return time.time_ns() // 1_000_000 + _skew.wall_offset_ms

    def monotonic_ms(self: object) -> int:
        return time.monotonic_ns() // 1_000_000 + _skew.monotonic_offset_ms

    setattr(cls, "wall_ms", wall_ms)
    setattr(cls, "monotonic_ms", monotonic_ms)
    threading.Thread(target=_poll, args=(path,), daemon=True, name="clock-skew-control").start()


def main(argv: list[str]) -> None:
    """``python -m oncelog.testing.clock_skew CONTROL_FILE <oncelog arguments>``"""
    if len(argv) < 2:
        sys.exit("usage: python -m oncelog.testing.clock_skew CONTROL_FILE serve [oncelog serve options]")
    install(Path(argv[0]))
    from oncelog.cli.main import main as cli

    sys.exit(cli(argv[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
