"""oncelog.cli: the ``oncelog`` command (:mod:`.main`).

:func:`run` is the console script's entry point: it loads the command line (click and the root group, ~50 ms; a
command's module, the client and rich load when that command runs) inside its own ``try``, so a Ctrl-C that comes
while they load ends the command as one during its work does: "interrupted", exit 130, no traceback.

While the command line loads, a Ctrl-C is Python's KeyboardInterrupt except in the middle of an import: raised
there, it can land in a weak reference callback of the import machinery (Python prints "Exception ignored" and drops
it: the command went on as if nothing happened) or inside a class's ``__set_name__`` (Python 3.11 turns it into a
RuntimeError with a traceback). Such a Ctrl-C is delivered again every 10 ms (SIGALRM) until no import is in
progress. Once loaded, the command runs with Python's own Ctrl-C handling."""

import signal
import sys
from types import FrameType

_pending = False  # a Ctrl-C deferred to the end of an import
_guarding = False  # the command line is loading


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _pending
    if _guarding and _importing(frame):
        _pending = True
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        return
    raise KeyboardInterrupt


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if _guarding and _pending:
        _on_sigint(signal.SIGINT, frame)


def _unguard() -> None:
    global _guarding
    _guarding = False  # first: an alarm from here on does nothing (its handler stays, a no-op)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run() -> int:
    global _guarding
    guard = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not when started with Ctrl-C ignored
    try:
        if guard:
            _guarding = True
            signal.signal(signal.SIGALRM, _on_alarm)
            signal.signal(signal.SIGINT, _on_sigint)
        from .main import load, main

        load(sys.argv[1:])  # the command's own modules
        if guard:
            _unguard()
    except KeyboardInterrupt:
        if guard:
            _unguard()
        sys.stderr.write("interrupted\n")
        return 130
    if _pending:  # deferred to the end of the last import
        sys.stderr.write("interrupted\n")
        return 130
    return main()
