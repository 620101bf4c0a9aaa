"""The package as a user installs it: ``python -m build`` makes a wheel and an sdist; the wheel goes into a fresh
virtualenv with pytest and the example's clients (from PyPI; pip's cache makes a rerun quick) and nothing of this
repository; there ``examples/pytest-kafka``, copied out, passes with plain ``pytest`` (the plugin loads through its
pytest11 entry point), ``oncelog --version`` prints the one version, and the wheel carries py.typed and the Spark
extra."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import oncelog

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pytest-kafka"


def _run(*cmd: str | Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


@pytest.mark.timeout(900)
def test_wheel_installs_alone_and_the_example_passes(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, REPO, cwd=tmp_path, timeout=600)
    wheels, sdists = list(dist.glob("oncelog-*.whl")), list(dist.glob("oncelog-*.tar.gz"))
    assert len(wheels) == len(sdists) == 1, list(dist.iterdir())
    wheel = wheels[0]
    assert wheel.name == f"oncelog-{oncelog.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"oncelog-{oncelog.__version__}.dist-info/METADATA").decode()
        entry_points = z.read(f"oncelog-{oncelog.__version__}.dist-info/entry_points.txt").decode()
    assert "oncelog/py.typed" in names and "oncelog/spark/source.py" in names
    assert f"Version: {oncelog.__version__}" in meta and "Provides-Extra: spark" in meta
    assert 'Requires-Dist: pyspark==4.3.0; extra == "spark"' in meta
    assert "[pytest11]\noncelog = oncelog.testing.pytest_plugin" in entry_points

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    _run(py, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, "pytest", "confluent-kafka",
         "aiokafka", cwd=tmp_path, timeout=600)
    assert _run(env_dir / "bin" / "oncelog", "--version", cwd=tmp_path, timeout=60).stdout == \
        f"oncelog {oncelog.__version__}\n"
    example = tmp_path / "example"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    where = _run(py, "-c", "import oncelog; print(oncelog.__file__)", cwd=example, timeout=60).stdout
    assert where.startswith(str(env_dir)), where  # the installed wheel, not this repository
    r = _run(py, "-m", "pytest", "-p", "no:cacheprovider", "-q", cwd=example, timeout=600)
    assert "5 passed" in r.stdout, r.stdout
