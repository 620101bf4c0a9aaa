"""pytest plugin: real Kafka brokers for the tests of Kafka code, from ``pip install oncelog`` (the ``pytest11`` entry
point loads it; nothing to configure). ``docs/testing-your-code.md`` is the guide.

Fixtures:

- ``kafka_broker``: the session's broker (one per pytest process; each pytest-xdist worker has its own), seen by
  each test with names of its own: ``kafka_broker.topic("orders")``, ``.group()``, ``.transactional_id()`` carry a
  prefix unique to the test. After the test, its faults are cleared and a broker it paused, stopped or killed is
  running again. A test marked ``@pytest.mark.kafka_settings(...)`` gets a fresh broker of its own with those
  settings (as ``kafka_broker_factory`` makes them).
- ``kafka_bootstrap``: ``kafka_broker.bootstrap`` (``host:port`` for ``bootstrap.servers``).
- ``kafka_broker_factory``: ``make(settings=None, **options)`` starts a fresh broker for the test (in this process
  by default: ~10 ms) and stops it after.
- ``kafka_module_broker_factory``: the same for a module-scoped fixture: its brokers stop after the module.
- ``kafka_cluster``: etcd and three broker processes (session); skipped with the reason when etcd is not on PATH.

The session broker is a child process (its own interpreter, so it neither shares the GIL with the tests nor dies
with them); ``--kafka-in-process`` (or ``kafka_in_process = true`` in the ini file) runs it in the test process
instead. Importing this module imports nothing of the broker: a pytest run that uses none of these fixtures pays
nothing for them.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import pytest

if TYPE_CHECKING:
    from .broker_process import BrokerProcess
    from .cluster import ClusterProcess
    from .inprocess import InProcessBroker

    Handle = Union[BrokerProcess, InProcessBroker]

__all__ = ["KafkaBroker", "KafkaCluster"]

MARKER = "kafka_settings"
#: settings every broker of the plugin starts with (the ini file, the marker and the factory's arguments win):
#: groups form at once, as Kafka's own config/server.properties sets it for development and tests (Kafka's
#: default, 3 s, waits for more members before the first assignment)
DEFAULTS: dict[str, object] = {"group.initial.rebalance.delay.ms": 0}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("oncelog", "Kafka brokers for tests (oncelog)")
    group.addoption("--kafka-in-process", action="store_true", default=None,
                    help="run the session's Kafka broker (kafka_broker) in the test process, not as a child process")
    parser.addini("kafka_in_process", type="bool", default=False,
                  help="run the session's Kafka broker (kafka_broker) in the test process")
    parser.addini("kafka_settings", type="linelist", default=[],
                  help="broker settings KEY=VALUE (Kafka's names) for every broker the oncelog fixtures start")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(settings=None, /, **settings): the test gets a Kafka broker of "
                            "its own with these settings (Kafka's names; in keywords '_' stands for '.', "
                            "e.g. num_partitions=3); kafka_broker_factory takes them as defaults")


def _settings_of(marker: pytest.Mark | None) -> dict[str, object]:
    if marker is None:
        return {}
    out: dict[str, object] = {}
    for arg in marker.args:
        out.update(dict(arg))
    out.update({k.replace("_", "."): v for k, v in marker.kwargs.items()})
    return out


def _ini_settings(config: pytest.Config) -> dict[str, object]:
    out: dict[str, object] = {}
    for line in config.getini("kafka_settings"):
        key, sep, value = str(line).partition("=")
        if not sep:
            raise pytest.UsageError(f"kafka_settings: expected KEY=VALUE, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def _in_process(config: pytest.Config) -> bool:
    option = config.getoption("kafka_in_process", default=None)
    return bool(option) if option is not None else bool(config.getini("kafka_in_process"))


def _prefix(node: pytest.Item | pytest.Collector) -> str:
    """A name prefix of one test: its name made legal for Kafka (letters, digits, '.', '_', '-') and a random tag
    (the same test may run twice on a broker: reruns, --count)."""
    name = re.sub(r"[^a-zA-Z0-9._-]+", "-", node.name).strip("-")[:60]
    return f"{name}-{uuid.uuid4().hex[:6]}"


class KafkaBroker:
    """A test's view of a broker: the broker's handle (everything it offers, e.g. ``kill()``, ``fail_next()``) and
    names of the test's own."""

    def __init__(self, handle: Handle, prefix: str) -> None:
        self.handle = handle
        self.prefix = prefix

    def __getattr__(self, name: str) -> Any:  # kill, restart, pause, delay, fail_next, ... of the handle
        return getattr(self.handle, name)

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    def topic(self, name: str = "topic") -> str:
        """``name`` with the test's prefix: a topic no other test uses."""
        return f"{self.prefix}.{name}"

    def group(self, name: str = "group") -> str:
        return f"{self.prefix}.{name}"

    def transactional_id(self, name: str = "txn") -> str:
        return f"{self.prefix}.{name}"

    def create_topic(self, name: str = "topic", partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        """Create the test's topic ``name`` (see :meth:`topic`) and return its full name."""
        from oncelog.client.admin import Admin

        full = self.topic(name)
        admin = Admin({"bootstrap.servers": self.bootstrap})
        try:
            admin.create_topics(full, partitions, dict(config or {}))
        finally:
            admin.close()
        return full

    # the checks of oncelog.testing.assertions, against this broker
    def read_committed(self, topic: str, timeout: float = 30.0) -> list[Any]:
        from .assertions import read_committed

        return read_committed(self.bootstrap, topic, timeout)

    def assert_exactly_once(self, topic: str, expected: Any, **kwargs: Any) -> list[Any]:
        from .assertions import assert_exactly_once

        return assert_exactly_once(self.bootstrap, topic, expected, **kwargs)

    def wait_for_lag_zero(self, group: str, topic: str | None = None, timeout: float = 30.0) -> None:
        from .assertions import wait_for_lag_zero

        wait_for_lag_zero(self.bootstrap, group, topic, timeout)

    def open_transactions(self) -> list[dict[str, Any]]:
        from .assertions import open_transactions

        return open_transactions(self.bootstrap)

    def log_tail(self, n: int = 60) -> str:
        """The last ``n`` lines of a broker process's log (for a failure's message); an in-process broker logs
        through this process's ``logging``, which pytest shows with a failure."""
        tail = getattr(self.handle, "log_tail", None)
        return str(tail(n)) if tail is not None else "(an in-process broker: its log is in the test's log output)"

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap}, prefix={self.prefix!r})"


def _start(settings: Mapping[str, object], *, in_process: bool, memory: bool, data_dir: Path | None = None,
           port: int | None = None, log_dir: Path | None = None) -> Handle:
    settings = {**DEFAULTS, **settings}
    if in_process:
        from .inprocess import InProcessBroker

        return InProcessBroker(data_dir, port, settings, memory=memory).start()
    from .broker_process import BrokerProcess
    from .inprocess import memory_dir

    folder = data_dir if data_dir is not None else (memory_dir() if memory else
                                                    Path(tempfile.mkdtemp(prefix="oncelog-")))
    log_path = (log_dir or folder.parent) / f"oncelog-broker-{os.getpid()}-{uuid.uuid4().hex[:6]}.log"
    return BrokerProcess(folder, port, dict(settings), log_path=log_path, new_session=True).start()


def _stop(handle: Handle, remove: Path | None = None) -> None:
    handle.resume()
    handle.stop()
    if remove is not None:
        shutil.rmtree(remove, ignore_errors=True)


def _heal(handle: Handle) -> None:
    """The shared broker as the next test expects it: no faults, running, not paused."""
    if handle.paused:
        handle.resume()
    if not handle.alive():
        handle.start()
    else:
        handle.clear_faults()


@pytest.fixture(scope="session")
def kafka_session_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[Handle]:
    """The broker every test of the session shares (one per pytest-xdist worker)."""
    base = tmp_path_factory.mktemp("kafka")
    handle = _start(_ini_settings(request.config), in_process=_in_process(request.config), memory=False,
                    data_dir=base / "data", log_dir=base)
    yield handle
    _stop(handle)


class _Factory:
    """``make(settings=None, *, in_process=True, memory=True, data_dir=None, port=None)`` of the factory fixtures:
    each broker it makes is stopped at :meth:`close` (and its data folder removed, unless given)."""

    def __init__(self, defaults: Mapping[str, object], prefix: str) -> None:
        self.defaults = dict(defaults)
        self.prefix = prefix
        self.made: list[tuple[Handle, Path | None]] = []

    def __call__(self, settings: Mapping[str, object] | None = None, *, in_process: bool = True,
                 memory: bool = True, data_dir: Path | str | None = None, port: int | None = None) -> KafkaBroker:
        handle = _start({**self.defaults, **dict(settings or {})}, in_process=in_process, memory=memory,
                        data_dir=Path(data_dir) if data_dir is not None else None, port=port)
        self.made.append((handle, None if data_dir is not None else handle.data_dir))
        return KafkaBroker(handle, self.prefix)

    def close(self) -> None:
        for handle, remove in reversed(self.made):
            _stop(handle, remove)
        self.made.clear()


@pytest.fixture
def kafka_broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., KafkaBroker]]:
    """``make(settings=None, *, in_process=True, memory=True, data_dir=None, port=None)``: a fresh broker for this
    test, stopped (and its data folder removed, unless given) after it. ``settings`` (Kafka's names) go over the
    ini file's ``kafka_settings`` and the test's ``kafka_settings`` marker."""
    factory = _Factory({**_ini_settings(request.config), **_settings_of(request.node.get_closest_marker(MARKER))},
                       _prefix(request.node))
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def kafka_module_broker_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., KafkaBroker]]:
    """``kafka_broker_factory`` for a module-scoped fixture: a broker the tests of one module share, stopped after
    the module's last test. ``settings`` go over the ini file's ``kafka_settings`` (a test's marker does not apply);
    the names' prefix is the module's."""
    factory = _Factory(_ini_settings(request.config), _prefix(request.node))
    yield factory
    factory.close()


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """The session's broker with this test's names; a broker of its own for a test marked ``kafka_settings``."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        yield request.getfixturevalue("kafka_broker_factory")()  # the marker's settings are its defaults
        return
    shared = request.getfixturevalue("kafka_session_broker")
    _heal(shared)
    yield KafkaBroker(shared, _prefix(request.node))
    _heal(shared)


@pytest.fixture
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    """``host:port`` of the test's broker, for ``bootstrap.servers``."""
    return kafka_broker.bootstrap


class KafkaCluster:
    """A test's view of the session's cluster: etcd and three brokers (node ids 1-3), each a child process.

    ``kill(node)`` SIGKILLs one broker (its partitions' leadership moves to the others once etcd's lease of it
    expires, ``broker.session.timeout.ms``); ``restart(node)`` starts it again on its data folder; ``stop(node)``
    shuts it down cleanly (a controlled shutdown moves leadership first); ``pause(node, seconds)`` SIGSTOPs it;
    ``partition(node)`` cuts it from etcd and makes it answer nobody (``ClusterProcess.partition``), ``heal(node)``
    undoes that.
    ``broker(node)`` is its :class:`~oncelog.testing.broker_process.BrokerProcess` (faults on demand, as on a single
    broker). After the test every broker runs again, unpaused and without faults."""

    def __init__(self, cluster: ClusterProcess, prefix: str) -> None:
        self.cluster = cluster
        self.prefix = prefix

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def node_ids(self) -> list[int]:
        return self.cluster.node_ids

    def broker(self, node: int) -> BrokerProcess:
        return self.cluster.brokers[node]

    def kill(self, node: int) -> None:
        self.cluster.kill(node)

    def stop(self, node: int) -> int:
        return self.cluster.stop_broker(node)

    def restart(self, node: int) -> None:
        self.cluster.start_broker(node)

    def pause(self, node: int, seconds: float | None = None) -> None:
        self.cluster.brokers[node].pause(seconds)

    def resume(self, node: int) -> None:
        self.cluster.brokers[node].resume()

    def partition(self, node: int) -> None:
        self.cluster.partition(node)

    def heal(self, node: int | None = None) -> None:
        """Undo the partition of ``node``; with None: every broker running, unpaused, unpartitioned, no faults."""
        if node is not None:
            self.cluster.heal(node)
            return
        for n, b in self.cluster.brokers.items():
            if b.paused:
                b.resume()
            if not b.alive():
                self.cluster.start_broker(n)
            self.cluster.heal(n)
        nodes = set(self.cluster.brokers)
        self.cluster.wait_for(lambda v: nodes <= set(v.brokers), 60, "every broker registered again")

    def assert_exactly_once(self, topic: str, expected: Any, **kwargs: Any) -> list[Any]:
        from .assertions import assert_exactly_once

        return assert_exactly_once(self.bootstrap, topic, expected, **kwargs)

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> the node leading it, as the cluster's metadata in etcd says."""
        return self.cluster.leaders(topic)

    def wait_for_topic(self, topic: str, timeout: float = 30.0) -> None:
        """Until every partition of ``topic`` has a live leader and all its replicas in sync."""
        self.cluster.wait_for_topic(topic, timeout=timeout)

    def topic(self, name: str = "topic") -> str:
        return f"{self.prefix}.{name}"

    def group(self, name: str = "group") -> str:
        return f"{self.prefix}.{name}"

    def transactional_id(self, name: str = "txn") -> str:
        return f"{self.prefix}.{name}"


@pytest.fixture(scope="session")
def kafka_session_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                          ) -> Iterator[ClusterProcess]:
    from .cluster import ClusterProcess
    from .etcd_process import EtcdUnavailable, find_etcd

    try:
        find_etcd()
    except EtcdUnavailable as e:
        pytest.skip(f"kafka_cluster needs etcd: {e}")
    cluster = ClusterProcess(tmp_path_factory.mktemp("kafka-cluster"), 3,
                             settings={**DEFAULTS, **_ini_settings(request.config)},
                             cluster_name=f"test-{uuid.uuid4().hex[:6]}", new_session=True, etcd_proxies=True)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """The session's cluster (etcd + 3 brokers) with this test's names; skipped when etcd is not on PATH."""
    view = KafkaCluster(request.getfixturevalue("kafka_session_cluster"), _prefix(request.node))
    view.heal()
    yield view
    view.heal()
