"""Run the real ``oncelog`` command (the console script of this environment) as a user does: a subprocess with
stdin, stdout and stderr, and its exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = Path(sys.executable).parent / "oncelog"
ONCELOG = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oncelog"]


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout_bytes: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")


def oncelog(*args: str, input: str | bytes | None = None, timeout: float = 120, **env: str) -> Result:
    """``oncelog ARGS`` with ``input`` on stdin; COLUMNS=300 so tables are not folded."""
    data = input.encode() if isinstance(input, str) else input
    r = subprocess.run([*ONCELOG, *args], input=data, capture_output=True, timeout=timeout,
                       env={**os.environ, "COLUMNS": "300", **env})
    return Result(r.returncode, r.stdout, r.stderr.decode("utf-8", "replace"))
