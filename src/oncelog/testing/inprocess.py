"""A real broker inside the test process: :class:`oncelog.broker.server.Broker` on its own event loop (uvloop when
installed) in a background thread, listening on 127.0.0.1 like a broker process.

It starts in a few milliseconds once oncelog is imported (no interpreter to start, no imports to redo), so a test
can have a broker of its own. It serves real clients over TCP, as a broker process does; what it shares with the
test is the process: the GIL (a test that computes hard slows it down) and a crash of the interpreter.

The broker handle's operations, the same as :class:`~oncelog.testing.broker_process.BrokerProcess`'s:

- :meth:`stop` shuts the broker down cleanly; :meth:`start` again (or :meth:`restart`) opens the same data folder.
- :meth:`kill` crashes it as far as a process can do that to a thread: every client connection is reset, the port
  closes, background work is cancelled and the data folder's files are closed without a flush, checkpoint or
  clean-shutdown marker, so the next start recovers the logs as after a SIGKILL (what was written survives, as the
  page cache keeps it through a SIGKILL; unlike a SIGKILL, coordinators' in-memory state is dropped by their
  ``close()``, which writes nothing).
- :meth:`pause` blocks the broker's event loop for ``seconds`` (or until :meth:`resume`): requests are not read or
  answered, the kernel still accepts connections, as under SIGSTOP.
- faults on demand (:class:`~oncelog.testing.faults.BrokerFaults`): ``delay``, ``drop``, ``fail_next``,
  ``close_connections``.

``memory=True`` puts the data folder on a memory file system (``/dev/shm``, Linux's tmpfs) unless ``data_dir``
is given: fsync costs nothing, so an ``acks=all`` write is answered without waiting for a disk. What it gives up:
the data does not survive the machine (a reboot or power cut; a broker kill or restart keeps it), it takes RAM
(tmpfs is bounded by half the RAM by default), and on a system without ``/dev/shm`` it is an ordinary temporary
folder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .broker_process import free_port
from .faults import BrokerFaults, FaultError

if TYPE_CHECKING:
    from oncelog.broker.server import Broker

__all__ = ["InProcessBroker", "StartError", "memory_dir"]

MEMORY_ROOT = Path("/dev/shm")


class StartError(RuntimeError):
    """The broker could not start: the message is the broker's own (port, data folder, settings)."""


def memory_dir(prefix: str = "oncelog-") -> Path:
    """A new folder on the memory file system (``/dev/shm``), or in the temporary folder where there is none."""
    root = MEMORY_ROOT if MEMORY_ROOT.is_dir() and os.access(MEMORY_ROOT, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it installs
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class InProcessBroker(BrokerFaults):
    """One broker on 127.0.0.1:``port`` (a free one by default) over ``data_dir`` (a new temporary folder by default,
    removed by :meth:`close`), with ``settings`` as ``--set`` takes them (Kafka's names)."""

    def __init__(self, data_dir: Path | str | None = None, port: int | None = None,
                 settings: Mapping[str, object] | None = None, *, host: str = "127.0.0.1",
                 memory: bool = False) -> None:
        self.owns_data_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else \
            (memory_dir() if memory else Path(tempfile.mkdtemp(prefix="oncelog-")))
        self.host = host
        self.port = port or free_port()
        self.settings = dict(settings or {})
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broker: Broker | None = None
        self._done: asyncio.Future[str] | None = None  # set to "stop" or "kill" from the test's thread
        self._resume: threading.Event | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def broker(self) -> Broker:
        """The broker object (its topics, metrics, coordinators): for tests of oncelog itself."""
        if self._broker is None:
            raise RuntimeError(f"broker at {self.bootstrap} is not running")
        return self._broker

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        return self._resume is not None

    # -- life cycle ---------------------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> InProcessBroker:
        """Start and return once the broker listens. Raises :class:`StartError` with the broker's reason."""
        if self.alive():
            return self
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"oncelog-broker-{self.port}",
                                        daemon=True)
        self._thread.start()
        try:
            ready.result(timeout)
        except TimeoutError:
            raise StartError(f"broker at {self.bootstrap} did not start within {timeout} s") from None
        return self

    def _run(self, ready: Future[None]) -> None:
        loop = self._loop = _new_loop()
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as e:  # noqa: BLE001 - reported to start()
            if not ready.done():
                ready.set_exception(e)
        finally:
            loop.close()
            self._loop = None

    async def _serve(self, ready: Future[None]) -> None:
        from oncelog.broker.settings.config import BrokerConfig, ConfigError
        from oncelog.broker.server import Broker, StartupError

        try:
            config = BrokerConfig.load(None, {**self.settings, "log.dirs": str(self.data_dir),
                                              "listeners": f"{self.host}:{self.port}"})
        except ConfigError as e:
            ready.set_exception(StartError(str(e)))
            return
        broker = self._broker = Broker(config)
        self._done = asyncio.get_running_loop().create_future()
        try:
            await broker.start()
        except StartupError as e:
            await broker.stop()
            self._broker = None
            ready.set_exception(StartError(str(e)))
            return
        except BaseException:
            await broker.stop()
            self._broker = None
            raise
        ready.set_result(None)
        how = await self._done
        if how == "kill":
            for acceptor in broker._acceptors:  # the ports close at once
                acceptor.close()
            for conn in list(broker.connections):
                if conn.transport is not None:
                    conn.transport.abort()  # a reset, as the kernel sends for a killed process
        await broker.stop(clean=how != "kill")
        self._broker = None

    def _end(self, how: str, timeout: float) -> None:
        if not self.alive():
            return
        self.resume()
        loop, done, thread = self._loop, self._done, self._thread
        assert loop is not None and done is not None and thread is not None
        def end() -> None:
            if not done.done():
                done.set_result(how)

        loop.call_soon_threadsafe(end)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"broker at {self.bootstrap} did not stop within {timeout} s")
        self._thread = None

    def stop(self, timeout: float = 30.0) -> int:
        """Clean shutdown (as SIGTERM); 0, as a broker process's exit code."""
        self._end("stop", timeout)
        return 0

    def kill(self) -> None:
        """Crash the broker (see the module's doc): connections reset, no clean shutdown; the data folder stays."""
        self._end("kill", 30.0)

    def restart(self, timeout: float = 30.0) -> InProcessBroker:
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        """Stop, and remove the data folder if this handle made it."""
        self.stop()
        if self.owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def pause(self, seconds: float | None = None) -> None:
        """Block the broker's event loop for ``seconds`` (None: until :meth:`resume`); returns at once."""
        if not self.alive() or self._loop is None:
            raise RuntimeError(f"broker at {self.bootstrap} is not running")
        if self._resume is not None:
            return
        resume = self._resume = threading.Event()

        def block() -> None:
            resume.wait(seconds)
            if self._resume is resume:
                self._resume = None

        self._loop.call_soon_threadsafe(block)

    def resume(self) -> None:
        resume, self._resume = self._resume, None
        if resume is not None:
            resume.set()

    def __enter__(self) -> InProcessBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults ---------------------------------------------------------------------------------------------------
    def _fault_command(self, command: dict[str, Any]) -> dict[str, Any]:
        if self._broker is None or self._loop is None:
            raise FaultError(f"broker at {self.bootstrap} is not running")
        if self.paused:
            raise FaultError(f"broker at {self.bootstrap} is paused: resume() it first")
        broker = self._broker

        async def apply() -> dict[str, Any]:
            return broker.faults.apply(command)

        return asyncio.run_coroutine_threadsafe(apply(), self._loop).result(10)
