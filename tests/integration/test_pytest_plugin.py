"""The pytest plugin as a user meets it: a project's tests run by pytest in a folder of their own, with the plugin's
fixtures and nothing else of this repository (``examples/pytest-kafka`` is the fuller one, run from the wheel); the
first test of docs/testing-your-code.md among them."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from helpers.doc_blocks import block

USER_TESTS = '''
import asyncio
import os
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer

OUT = Path(os.environ["PLUGIN_TEST_OUT"])


def _note(kind: str, value: str) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(OUT / f"{worker}-{kind}", "a") as f:
        f.write(value + "\\n")


@pytest.mark.parametrize("n", range(3))
def test_shared_broker_and_names_of_its_own(kafka_broker, kafka_bootstrap, n):
    topic = kafka_broker.topic("orders")
    _note("bootstrap", kafka_bootstrap)
    _note("topic", topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, f"order-{n}".encode())
    assert producer.flush(10) == 0
    kafka_broker.assert_exactly_once(topic, [f"order-{n}".encode()])


@pytest.mark.kafka_settings(num_partitions=4)
def test_marked_test_gets_its_settings(kafka_broker):
    from oncelog.client.admin import Admin

    topic = kafka_broker.create_topic("auto", partitions=-1)
    admin = Admin({"bootstrap.servers": kafka_broker.bootstrap})
    try:
        assert len(admin.describe_topic(topic).partitions) == 4
    finally:
        admin.close()


def test_factory_brokers_are_fresh_and_apart(kafka_broker_factory):
    a = kafka_broker_factory({"num.partitions": 2})
    b = kafka_broker_factory()
    assert a.bootstrap != b.bootstrap
    topic = a.create_topic("t")
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g"})
    assert topic not in consumer.list_topics(timeout=10).topics
    consumer.close()
    assert "in-process" in a.log_tail()  # its log is this process's logging


@pytest.fixture(scope="module")
def shared(kafka_module_broker_factory):
    return kafka_module_broker_factory({"num.partitions": 2}, in_process=False)


@pytest.mark.parametrize("n", range(2))
def test_module_broker_is_shared_and_keeps_its_data_across_stop_and_start(shared, n):
    _note("module", shared.bootstrap)
    topic = shared.topic(f"kept-{n}")
    producer = Producer({"bootstrap.servers": shared.bootstrap})
    producer.produce(topic, b"kept")
    assert producer.flush(10) == 0
    assert shared.stop() == 0
    shared.start()
    shared.assert_exactly_once(topic, [b"kept"])
    assert "stopped cleanly" in shared.log_tail()


@pytest.mark.asyncio
async def test_asyncio_clients(kafka_broker):
    topic = kafka_broker.topic()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"async")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                                group_id=kafka_broker.group())
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 20)
    finally:
        await consumer.stop()
    assert record.value == b"async"


def test_cluster(kafka_cluster):
    raise AssertionError("not reached: etcd is hidden from this run")
'''


def _pytest(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest in ``folder`` as a project of its own runs it: its own ini file, no conftest of this repository."""
    plugin = [] if any(ep.name == "oncelog" for ep in entry_points(group="pytest11")) \
        else ["-p", "oncelog.testing.pytest_plugin"]  # a venv installed before the entry point existed
    return subprocess.run([sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q", "-rs", *args],
                          cwd=folder, capture_output=True, text=True, timeout=240, env={**os.environ, **(env or {})})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = "
                                         "function\n")
    (tmp_path / "test_app.py").write_text(USER_TESTS)
    (tmp_path / "test_doc.py").write_text(block("plugin-first-test"))  # docs/testing-your-code.md, as written
    (tmp_path / "out").mkdir()
    return tmp_path


def test_the_readme_shows_the_guides_first_test() -> None:
    """The README's example is the guide's first test, which the fixture above writes and the tests run."""
    assert block("readme-plugin-first-test") == block("plugin-first-test")


def test_fixtures_under_xdist_each_worker_its_own_broker(project: Path) -> None:
    r = _pytest(project, "-n", "2", env={"PLUGIN_TEST_OUT": str(project / "out"),
                                         "ONCELOG_ETCD_BIN": str(project / "no-etcd")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "9 passed, 1 skipped" in r.stdout, r.stdout
    assert "kafka_cluster needs etcd:" in r.stdout  # the one-line reason of the skip
    seen = {f.name.split("-")[0]: set(f.read_text().split()) for f in (project / "out").glob("*-bootstrap")}
    topics = [line for f in (project / "out").glob("*-topic") for line in f.read_text().split()]
    assert len(topics) == len(set(topics)) == 3  # every test its own topic name
    bootstraps = [b for bs in seen.values() for b in bs]
    assert all(len(bs) == 1 for bs in seen.values()), seen  # one session broker per worker ...
    assert len(bootstraps) == len(set(bootstraps)), seen  # ... and never another worker's
    shared = {f.name: set(f.read_text().split()) for f in (project / "out").glob("*-module")}
    assert shared and all(len(bs) == 1 for bs in shared.values()), shared  # a module's tests share its broker


def test_plugin_import_loads_no_broker(project: Path) -> None:
    code = ("import sys, oncelog.testing.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith(('oncelog.broker', 'oncelog.client'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
