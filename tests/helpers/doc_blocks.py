"""The runnable blocks of the README and of docs/ (each follows a ``<!-- doc-test: NAME ... -->`` line) and
the broker command of ``make serve``, for the tests that run them as written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documents() -> list[Path]:
    """The README and every page under docs/: where runnable blocks may be."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def marked_blocks() -> dict[str, list[tuple[Path, str]]]:
    """Every marked block by name: (document, code) of each place that marks it (a name marks one block)."""
    found: dict[str, list[tuple[Path, str]]] = {}
    for doc in documents():
        for m in re.finditer(r"<!-- doc-test: ([\w-]+)\b[^>]*-->\n```\w*\n(.*?)\n```", doc.read_text(), re.S):
            found.setdefault(m.group(1), []).append((doc, m.group(2) + "\n"))
    return found


def block(name: str) -> str:
    """The fenced code block right after the ``doc-test: NAME`` marker, wherever in the documents it is."""
    places = marked_blocks().get(name, [])
    where = ", ".join(str(doc.relative_to(ROOT)) for doc, _ in places)
    assert len(places) == 1, f"doc-test: {name} marks {len(places)} blocks, not one ({where or 'none found'})"
    return places[0][1]


def serve_command() -> list[str]:
    """The ``oncelog serve ...`` command ``make serve`` runs (``make -n``: printed, not run)."""
    out = subprocess.run(["make", "-n", "serve"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(x for x in reversed(out.splitlines()) if " serve " in x)
    cmd = shlex.split(line)
    cmd[0] = str(ROOT / cmd[0])
    return cmd
