"""How fast a fresh broker is there: start to the first Metadata answer, as a child process and in the test's own
process; a pytest run of 200 tests that each start a broker of their own; a CLI command.

    python bench/startup_bench.py                      # this working tree
    python bench/startup_bench.py --rev 4461cdf        # and a git revision's src/ next to it (before/after)

Each measurement runs the working tree's ``src/`` and, with ``--rev``, the ``src/`` of that revision extracted from
git into a temporary folder; both are byte-compiled first (an installed package has its .pyc files; a
``PYTHONDONTWRITEBYTECODE`` environment would otherwise compile every module at every start). Runs alternate between
the two, so both see the same load on a shared machine. The table is markdown (docs/testing-your-code.md keeps the
last one); numbers are wall-clock seconds.

- *subprocess*: ``python -m oncelog serve`` on a fresh data folder, from ``Popen`` until a raw Metadata v1 request
  on a new connection is answered (20 starts: p50 and max).
- *in-process*: one interpreter starts 20 brokers one after the other (``oncelog.testing.InProcessBroker``; for a
  revision without it, the same: ``Broker`` on an event loop in a thread), from the call until the first Metadata
  answer; the first start pays the imports (it is the max), the p50 is what each further broker of a test run costs.
  On a fresh folder on disk, and on ``/dev/shm`` (``memory=True``).
- *200 tests*: ``pytest`` of 200 tests that each get a fresh broker and ask it for Metadata (the plugin's
  ``kafka_broker_factory``; for a revision without the plugin, a fixture starting ``BrokerProcess``, the way this
  repository's tests started their own brokers), the whole run's wall time.
- *CLI*: ``oncelog topic list`` against a running broker (20 runs, alternating between the trees: p50 and max).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from _startup_probe import first_metadata  # noqa: E402 - bench/ is on the path as the script's folder
from oncelog.testing.broker_process import free_port  # noqa: E402 - after the path: outside the ephemeral range


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def subprocess_start(src: Path, work: Path) -> float:
    port, data = free_port(), Path(tempfile.mkdtemp(dir=work))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "oncelog", "serve", "--data-dir", str(data), "--listen",
                             f"127.0.0.1:{port}"], env=_env(src), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        first_metadata(port, started + 60)
        return time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(30)


IN_PROCESS = r'''
import asyncio, json, sys, tempfile, threading, time
sys.path.insert(0, sys.argv[1])
from _startup_probe import first_metadata
from oncelog.testing.broker_process import free_port

n, memory, work = int(sys.argv[2]), sys.argv[3] == "memory", sys.argv[4]


def start(port):
    try:
        from oncelog.testing.inprocess import InProcessBroker
    except ImportError:  # a revision before it: the same, by hand
        return start_by_hand(port)
    broker = InProcessBroker(port=port, memory=memory, data_dir=None if memory else tempfile.mkdtemp(dir=work))
    broker.start()
    return broker.stop


def start_by_hand(port):
    from oncelog.broker.settings.config import BrokerConfig
    from oncelog.broker.server import Broker

    folder = tempfile.mkdtemp(dir="/dev/shm" if memory else work)
    ready, state = threading.Event(), {}

    def run():
        loop = asyncio.new_event_loop()
        state["loop"] = loop

        async def main():
            broker = Broker(BrokerConfig.load(None, {"log.dirs": folder, "listeners": f"127.0.0.1:{port}"}))
            await broker.start()
            state["done"] = loop.create_future()
            ready.set()
            await state["done"]
            await broker.stop()

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(60)

    def stop():
        state["loop"].call_soon_threadsafe(state["done"].set_result, None)
        thread.join(60)

    return stop


times = []
for _ in range(n):
    port = free_port()
    t0 = time.monotonic()
    stop = start(port)
    first_metadata(port, t0 + 60)
    times.append(time.monotonic() - t0)
    stop()
print(json.dumps(times))
'''


def in_process_starts(src: Path, work: Path, n: int, memory: bool) -> list[float]:
    out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(REPO / "bench"), str(n),
                          "memory" if memory else "disk", str(work)], env=_env(src), capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"in-process starts failed:\n{out.stderr[-3000:]}")
    import json

    times: list[float] = json.loads(out.stdout.strip().splitlines()[-1])
    return times


PLUGIN_TESTS = '''
import pytest
from _startup_probe import first_metadata

@pytest.mark.parametrize("n", range({n}))
def test_own_broker(kafka_broker_factory, n):
    broker = kafka_broker_factory()
    import time
    first_metadata(broker.port, time.monotonic() + 60)
'''

PROCESS_TESTS = '''
import time
import pytest
from oncelog.testing.broker_process import BrokerProcess
from _startup_probe import first_metadata

@pytest.fixture
def own_broker(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    yield broker
    broker.stop()

@pytest.mark.parametrize("n", range({n}))
def test_own_broker(own_broker, n):
    first_metadata(own_broker.port, time.monotonic() + 60)
'''


CONFTEST = """
def pytest_configure(config):
    if not config.pluginmanager.has_plugin("oncelog"):
        import oncelog.testing.pytest_plugin as plugin

        config.pluginmanager.register(plugin, "oncelog")
"""


def pytest_run(src: Path, work: Path, n: int) -> float:
    folder = Path(tempfile.mkdtemp(dir=work))
    plugin = (src / "oncelog" / "testing" / "pytest_plugin.py").exists()
    (folder / "test_brokers.py").write_text((PLUGIN_TESTS if plugin else PROCESS_TESTS).replace("{n}", str(n)))
    (folder / "pytest.ini").write_text("[pytest]\n")
    if plugin:  # loaded by its entry point once installed; from a source tree, by hand
        (folder / "conftest.py").write_text(CONFTEST)
    env = _env(src)
    env["PYTHONPATH"] += os.pathsep + str(REPO / "bench")
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x"], cwd=folder,
                       env=env, capture_output=True, text=True, timeout=3600)
    took = time.monotonic() - started
    if r.returncode != 0 or f"{n} passed" not in r.stdout:
        raise RuntimeError(f"pytest run failed:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    return took


def cli_runs(trees: dict[str, Path], work: Path, n: int) -> dict[str, list[float]]:
    """``oncelog topic list`` of each tree against a broker of the same tree, the trees' runs alternating."""
    brokers, ports = [], {}
    try:
        for name, src in trees.items():
            port = ports[name] = free_port()
            brokers.append(subprocess.Popen([sys.executable, "-m", "oncelog", "serve", "--data-dir",
                                             tempfile.mkdtemp(dir=work), "--listen", f"127.0.0.1:{port}"],
                                            env=_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            first_metadata(port, time.monotonic() + 60)
        times: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(n):
            for name, src in trees.items():
                started = time.monotonic()
                subprocess.run([sys.executable, "-m", "oncelog", "topic", "list", "--bootstrap-server",
                                f"127.0.0.1:{ports[name]}"], env=_env(src), check=True, capture_output=True,
                               timeout=60)
                times[name].append(time.monotonic() - started)
        return times
    finally:
        for proc in brokers:
            proc.terminate()
            proc.wait(30)


def checkout(rev: str, work: Path) -> Path:
    dest = work / f"rev-{rev}"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "src"


def compile_tree(src: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, capture_output=True,
                   env=_env(src))


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} / {max(values):.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", help="also measure the src/ of this git revision (the 'before' column)")
    ap.add_argument("--starts", type=int, default=20, help="broker starts per measurement (default 20)")
    ap.add_argument("--tests", type=int, default=200, help="tests in the pytest run (default 200)")
    ap.add_argument("--cli-runs", type=int, default=20)
    ap.add_argument("--skip", default="", help="comma-separated: subprocess,in-process,pytest,cli")
    a = ap.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    work = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    try:
        trees = {"now": REPO / "src"}
        if a.rev:
            trees = {f"before ({a.rev})": checkout(a.rev, work), **trees}
        for src in trees.values():
            compile_tree(src)
        rows: dict[str, dict[str, str]] = {}

        def row(label: str, name: str, value: str) -> None:
            rows.setdefault(label, {})[name] = value
            print(f"  {label} [{name}]: {value}", file=sys.stderr, flush=True)

        load = os.getloadavg()
        if "subprocess" not in skip:
            sub: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(a.starts):  # alternating: both trees see the same load
                for name, src in trees.items():
                    sub[name].append(subprocess_start(src, work))
            for name in trees:
                row("subprocess: start to first Metadata, p50 / max (s)", name, fmt(sub[name]))
        if "in-process" not in skip:
            for memory in (False, True):
                for name, src in trees.items():
                    where = "memory folder" if memory else "folder on disk"
                    row(f"in-process ({where}): start to first Metadata, p50 / max (s)", name,
                        fmt(in_process_starts(src, work, a.starts, memory)))
        if "pytest" not in skip:
            for name, src in trees.items():
                row(f"{a.tests} tests, each its own broker: pytest wall time (s)", name,
                    f"{pytest_run(src, work, a.tests):.1f}")
        if "cli" not in skip:
            for name, times in cli_runs(trees, work, a.cli_runs).items():
                row("`oncelog topic list`, p50 / max (s)", name, fmt(times))
        names = list(trees)
        print("| measurement | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for label, cells in rows.items():
            print(f"| {label} | " + " | ".join(cells.get(n, "—") for n in names) + " |")
        print()
        print(f"`{' '.join(['python', 'bench/startup_bench.py', *(argv if argv is not None else sys.argv[1:])])}`; "
              f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average at the start "
              f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
