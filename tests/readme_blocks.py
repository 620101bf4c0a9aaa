"""The README's runnable blocks (each follows a ``<!-- readme-test: NAME ... -->`` line) and the broker command of
``make serve``, for the tests that run them as written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def block(name: str) -> str:
    """The fenced code block right after the ``readme-test: NAME`` marker."""
    m = re.search(r"<!-- readme-test: " + re.escape(name) + r"\b[^>]*-->\n```\w*\n(.*?)\n```", README.read_text(),
                  re.S)
    assert m is not None, f"README.md has no block marked readme-test: {name}"
    return m.group(1) + "\n"


def serve_command() -> list[str]:
    """The ``oncelog serve ...`` command ``make serve`` runs (``make -n``: printed, not run)."""
    out = subprocess.run(["make", "-n", "serve"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(x for x in reversed(out.splitlines()) if " serve " in x)
    cmd = shlex.split(line)
    cmd[0] = str(ROOT / cmd[0])
    return cmd
