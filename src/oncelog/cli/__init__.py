"""oncelog.cli: the ``oncelog`` command (:mod:`.main`).

:func:`run` is the console script's entry point: it loads the command line (click and the root group, ~50 ms; a
command's module, the client and rich load when that command runs) inside its own ``try``, so a Ctrl-C that comes
while they load ends the command as one during its work does: "interrupted", exit 130, no traceback."""

import sys


def run() -> int:
    try:
        from .main import main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    return main()
