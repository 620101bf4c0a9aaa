"""The repository's own files, for the tests that check the repository as a whole."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "oncelog"
GENERATED = SRC / "protocol" / "messages"  # tools/gen_protocol.py writes it from schemas/

# outside a git checkout (an unpacked source tree) the tests walk these instead of the tracked files
_TREES = ("src", "tests", "tools", "bench", "examples", "schemas", "docs", ".ci")
_FILES = ("README.md", "Makefile", "pyproject.toml")


def tracked_files() -> list[Path]:
    """Every file git tracks (or, without git, every file of the source trees), as absolute paths."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        found = [ROOT / f for f in _FILES]
        for tree in _TREES:
            found.extend(p for p in (ROOT / tree).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        return sorted(p for p in found if p.exists())
    return sorted(ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file())


def hand_written_modules() -> list[Path]:
    """The Python modules of ``src/oncelog`` that people write (not the generated codecs)."""
    return sorted(p for p in SRC.rglob("*.py") if not p.is_relative_to(GENERATED))
