"""The real ``oncelog`` command against real brokers: topics, produce and consume (bytes as they are), errors that
say what to do, a broker that goes away, and the help a user reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer

import oncelog as oncelog_package
from oncelog.client.admin import Admin
from oncelog.testing.pytest_plugin import KafkaBroker

from helpers.cli import ONCELOG, oncelog


def test_topic_produce_consume_describe_delete(bootstrap: str, topic_name: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    r = oncelog("topic", "create", topic_name, "--partitions", "3", "--config", "retention.ms=7200000", "--json", *b)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"topic": topic_name, "created": True, "partitions": 3, "replication_factor": 1,
                                    "configs": {"retention.ms": "7200000"}}
    r = oncelog("topic", "create", topic_name, *b)
    assert r.exit_code == 1 and r.stderr.count("already exists") == 1 and "--if-not-exists" in r.stderr
    r = oncelog("topic", "create", topic_name, "--if-not-exists", *b)
    assert r.exit_code == 0 and "exists already" in r.stdout

    lines = "".join(f"key{i % 4}:value {i}\n" for i in range(40))
    r = oncelog("produce", topic_name, "--key-separator", ":", "--compression", "gzip", *b, input=lines)
    assert r.exit_code == 0, r.stderr
    assert "Produced 40 record(s)" in r.stderr
    r = oncelog("produce", topic_name, "--value", "solo", "--partition", "2", "--header", "src=cli", *b)
    assert r.exit_code == 0, r.stderr

    r = oncelog("consume", topic_name, "--from-beginning", "--json", "--max-messages", "41", "--timeout", "5", *b)
    assert r.exit_code == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(recs) == 41
    keyed = [x for x in recs if x["key"] is not None and x["key"].startswith("key")]
    assert sorted(int(x["value"].split()[1]) for x in keyed) == list(range(40))
    by_key: dict[str, set[int]] = {}
    for x in keyed:
        by_key.setdefault(x["key"], set()).add(x["partition"])
        assert x["key"] == f"key{int(x['value'].split()[1]) % 4}"
    assert all(len(ps) == 1 for ps in by_key.values())  # one partition per key
    solo = next(x for x in recs if x["value"] == "solo")
    assert solo["partition"] == 2 and solo["headers"] == [{"key": "src", "value": "cli"}] and solo["timestamp"] > 0

    r = oncelog("consume", topic_name, "--offset", "0", "--partition", "2", "--timeout", "1", *b)
    assert r.exit_code == 0 and "solo" in r.stdout.splitlines()

    r = oncelog("topic", "describe", topic_name, "--json", *b)
    assert r.exit_code == 0, r.stderr
    desc = json.loads(r.stdout)
    assert sum(p["high_watermark"] - p["log_start_offset"] for p in desc["partitions"]) == 41
    assert desc["configs"]["retention.ms"]["value"] == "7200000"
    r = oncelog("topic", "describe", topic_name, *b)
    flat = " ".join(r.stdout.split())
    assert r.exit_code == 0 and "retention.ms" in flat and "Start" in flat and "41 records" in flat

    r = oncelog("topic", "list", "--json", *b)
    assert topic_name in {t["name"] for t in json.loads(r.stdout)}

    r = oncelog("topic", "delete", topic_name, *b)
    assert r.exit_code == 0 and f"Deleted topic {topic_name}" in r.stdout
    r = oncelog("topic", "describe", topic_name, *b)
    assert r.exit_code == 1 and "does not exist" in r.stderr
    r = oncelog("topic", "delete", topic_name, "--if-exists", *b)
    assert r.exit_code == 0


def test_produce_sends_bytes_as_they_are_and_consume_prints_them(bootstrap: str, topic_name: str) -> None:
    """Finding 2: input that is not UTF-8 crashed produce (UnicodeEncodeError, the rest of stdin lost); consume
    printed it as U+FFFD and a null value as an empty line. Kafka's console tools pass bytes through and print null."""
    b = ["--bootstrap-server", bootstrap]
    assert oncelog("topic", "create", topic_name, "-p", "1", *b).exit_code == 0  # one partition: one order
    r = oncelog("produce", topic_name, *b, input=b"ok1\n\xff\xfebin\r\nok2\n")
    assert r.exit_code == 0, r.stderr
    assert "Produced 3 record(s)" in r.stderr
    p = Producer({"bootstrap.servers": bootstrap})  # a tombstone and a record without a key
    p.produce(topic_name, value=None, key=b"gone")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [b"ok1", b"\xff\xfebin", b"ok2", None]

    r = oncelog("consume", topic_name, "--from-beginning", "--print-key", "-n", "4", "--timeout", "5", *b)
    assert r.exit_code == 0, r.stderr
    assert r.stdout_bytes == b"null\tok1\nnull\t\xff\xfebin\nnull\tok2\ngone\tnull\n"
    r = oncelog("consume", topic_name, "--from-beginning", "--json", "-n", "4", "--timeout", "5", *b)
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert recs[1]["value"] == "//5iaW4=" and recs[1]["value_encoding"] == "base64"
    assert recs[3]["key"] == "gone" and recs[3]["value"] is None


def test_json_headers_keep_binary_values(bootstrap: str, topic_name: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic_name, value=b"v", headers=[("bin", b"\x00\xff"), ("txt", b"hello"), ("none", None)])
    assert p.flush(10) == 0
    r = oncelog("consume", topic_name, "--from-beginning", "--json", "-n", "1", "--timeout", "5",
                "--bootstrap-server", bootstrap)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["headers"] == [{"key": "bin", "value": "AP8=", "value_encoding": "base64"},
                                               {"key": "txt", "value": "hello"}, {"key": "none", "value": None}]


def test_produce_creates_a_topic_the_broker_would_auto_create(bootstrap: str, topic_name: str) -> None:
    """Finding 3: the CLI refused topics librdkafka and the native client auto-create on the same broker."""
    r = oncelog("produce", topic_name, "--value", "first", "--bootstrap-server", bootstrap)
    assert r.exit_code == 0, r.stderr
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert len(admin.describe_topic(topic_name).partitions) == 3  # the shared broker's num.partitions


def test_produce_without_auto_create_says_how_to_create(
        kafka_broker_factory: Callable[..., KafkaBroker]) -> None:
    broker = kafka_broker_factory({"auto.create.topics.enable": "false"})
    started = time.monotonic()
    r = oncelog("produce", "nope", "--value", "x", "--bootstrap-server", broker.bootstrap)
    assert r.exit_code == 1 and time.monotonic() - started < 30
    assert "'nope' does not exist" in r.stderr and "oncelog topic create nope" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 2


def test_errors_speak_to_the_user(bootstrap: str, topic_name: str) -> None:
    r = oncelog("topic", "list", "--bootstrap-server", "127.0.0.1:1")
    assert r.exit_code == 1 and "127.0.0.1:1" in r.stderr and "oncelog serve" in r.stderr
    r = oncelog("consume", topic_name, "--timeout", "1", "--bootstrap-server", bootstrap)
    assert r.exit_code == 1 and "does not exist" in r.stderr
    r = oncelog("produce", topic_name, "--value", "x", "--compression", "brotli", "--bootstrap-server", bootstrap)
    assert r.exit_code == 2 and "brotli" in r.stderr and "oncelog produce --help" in r.stderr
    r = oncelog("consume", topic_name, "--partition", "x")
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    r = oncelog("topic", "alter", topic_name, "--bootstrap-server", bootstrap)
    assert r.exit_code == 2 and "nothing to change" in r.stderr


def test_help_and_version_read_like_a_kafka_tool() -> None:
    """Finding 10: --help showed Python types (<bool>, <list[str]>), folded at 80 columns, and an invisible tab as a
    default; there was no --version."""
    r = oncelog("--version")
    assert r.exit_code == 0 and r.stdout == f"oncelog {oncelog_package.__version__}\n"  # the one version string
    for cmd in (["consume"], ["produce"], ["topic", "create"], ["group", "reset-offsets"], ["txn", "abort"],
                ["serve"]):
        r = oncelog(*cmd, "--help")
        assert r.exit_code == 0, r.stderr
        assert "<bool>" not in r.stdout and "list[" not in r.stdout and "<str>" not in r.stdout and "\t" not in r.stdout
    r = oncelog("consume", "--help")
    assert "[default: a tab]" in " ".join(r.stdout.split())
    assert "--group GROUP" in r.stdout and "-p, --partition N" in r.stdout


def test_topic_alter_add_partitions_and_delete_records(bootstrap: str, topic_name: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    assert oncelog("topic", "create", topic_name, "-p", "2", *b).exit_code == 0
    r = oncelog("topic", "alter", topic_name, "--config", "retention.ms=3600000", "--partitions", "4", *b)
    assert r.exit_code == 0, r.stderr
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert len(admin.describe_topic(topic_name).partitions) == 4
        assert admin.describe_configs(topic_name)["retention.ms"].value == "3600000"
    r = oncelog("topic", "alter", topic_name, "--delete-config", "retention.ms", *b)
    assert r.exit_code == 0, r.stderr
    r = oncelog("topic", "alter", topic_name, "--partitions", "2", *b)
    assert r.exit_code == 1 and "never removed" in r.stderr
    r = oncelog("topic", "alter", topic_name, "--config", "retention.ms=soon", *b)
    assert r.exit_code == 1 and "retention.ms" in r.stderr

    r = oncelog("produce", topic_name, "-p", "0", *b, input="".join(f"r{i}\n" for i in range(10)))
    assert r.exit_code == 0, r.stderr
    r = oncelog("topic", "delete-records", topic_name, "--partition", "0", "--before", "6", "--json", *b)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == [{"topic": topic_name, "partition": 0, "log_start_offset": 6}]
    r = oncelog("consume", topic_name, "-p", "0", "--from-beginning", "--timeout", "2", *b)
    assert r.stdout.split() == ["r6", "r7", "r8", "r9"]
    r = oncelog("topic", "delete-records", topic_name, "--before", "end", *b)
    assert r.exit_code == 0, r.stderr


def test_consume_as_a_group_commits_its_offsets(bootstrap: str, topic_name: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    group = f"cli-{uuid.uuid4().hex[:8]}"
    assert oncelog("produce", topic_name, *b, input="a\nb\nc\n").exit_code == 0
    r = oncelog("consume", topic_name, "--group", group, "--from-beginning", "-n", "3", "--timeout", "20", *b)
    assert r.exit_code == 0, r.stderr
    assert sorted(r.stdout.split()) == ["a", "b", "c"] and f"as group {group}" in r.stderr
    assert oncelog("produce", topic_name, "--value", "d", *b).exit_code == 0
    r = oncelog("consume", topic_name, "--group", group, "--from-beginning", "-n", "1", "--timeout", "20", *b)
    assert r.stdout.split() == ["d"], "the second run resumes at the group's committed offsets"
    r = oncelog("group", "describe", group, "--json", *b)
    assert r.exit_code == 0 and json.loads(r.stdout)["total_lag"] == 0


def _ctrl_c_as_from_a_terminal() -> None:
    """The command's SIGINT at its default disposition, as from a terminal: a test session started as a background
    job of a non-interactive shell has SIGINT ignored (POSIX, job control off), that is inherited across exec, and
    Python then never raises KeyboardInterrupt (the command hung until the test's timeout)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_produce_says_how_many_were_written(bootstrap: str, topic_name: str) -> None:
    """Finding 2: Ctrl-C mid-produce exited 130 silently."""
    proc = subprocess.Popen([*ONCELOG, "produce", topic_name, "--bootstrap-server", bootstrap],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ctrl_c_as_from_a_terminal)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"".join(b"line %d\n" % i for i in range(100)))
    proc.stdin.flush()
    # Ctrl-C once the lines are written and the command waits for more (not while it starts up: a loaded box can
    # take seconds to get there)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                tps = [(topic_name, p.partition) for p in admin.describe_topic(topic_name).partitions]
                if sum(o.offset for o in admin.list_offsets(dict.fromkeys(tps, "latest")).values()) >= 100:
                    break
            except Exception:  # noqa: BLE001 - the topic is created by the command's first record
                pass
            time.sleep(0.1)
        else:
            proc.kill()
            raise AssertionError(f"the 100 lines were not written within 60 s: {proc.communicate()[1].decode()}")
    proc.send_signal(signal.SIGINT)
    try:
        _, raw = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("oncelog produce did not exit within 60 s of Ctrl-C; stderr: "
                             f"{proc.communicate()[1].decode()}") from None
    err = raw.decode()
    assert proc.returncode == 130, err
    assert "interrupted: 100 of 100 record(s) written" in err and "Traceback" not in err


def test_ctrl_c_at_any_moment_of_the_start_up_is_one_line(bootstrap: str, topic_name: str) -> None:
    """Ctrl-C while the command's modules load (~0.3 s on an idle box, longer loaded) printed a Python traceback of
    whichever import it hit; it is now "interrupted" and exit 130. The Ctrl-Cs come in the first 0.1 s after the
    console script's entry point is imported (the child says when; a Ctrl-C before that is the interpreter's own).
    Ctrl-C in the middle of an import is delivered at its end (``oncelog.cli``). Six more come later, up to 0.7 s,
    while the producer starts: its start task, left running by the interrupted wait, once hung on a lost
    cancellation (seen once in a full run: "tasks still pending after 5 s", "Task was destroyed"); the wait now
    cancels what it waited for, and the loop's shutdown cancels until each task ends."""
    # "up" once the console script's own import is done (``oncelog.cli``, two small modules: a Ctrl-C before its run()
    # is the interpreter's own, as in any Python program; on a loaded box that import alone took over 5 ms)
    entry = "import sys; from oncelog.cli import run; print('up', flush=True); sys.exit(run())"
    seen = []
    for i in range(18):
        proc = subprocess.Popen([sys.executable, "-c", entry, "produce", topic_name, "--bootstrap-server", bootstrap],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_ctrl_c_as_from_a_terminal)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        time.sleep(0.005 + i * 0.008 if i < 12 else 0.1 * (i - 10))
        proc.send_signal(signal.SIGINT)
        try:
            _, raw = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"no exit within 60 s of Ctrl-C: {proc.communicate()[1].decode()}") from None
        err = raw.decode()
        assert proc.returncode == 130 and "Traceback" not in err and "Task was destroyed" not in err, (i, err)
        seen.append(err.strip().splitlines()[-1])
    assert "interrupted" in seen[0], seen  # the first Ctrl-C came while the modules loaded


def test_broker_going_away_is_reported_once_with_the_real_cause(
        kafka_broker_factory: Callable[..., KafkaBroker], tmp_path: Path) -> None:
    """Finding 6: while the broker was down, produce printed the same warning hundreds of times and its last hint
    pointed at the topic instead of the broker."""
    broker = kafka_broker_factory(in_process=False)  # SIGKILLed
    config = tmp_path / "client.properties"  # half the CLI's 30 s delivery timeout, still more than one 10 s window
    config.write_text("delivery.timeout.ms=15000\n")
    proc = subprocess.Popen([*ONCELOG, "produce", "t", "--bootstrap-server", broker.bootstrap,
                             "--command-config", str(config)],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "300"})
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"before\n")
    proc.stdin.flush()
    time.sleep(3)
    broker.kill()
    for i in range(20):
        proc.stdin.write(b"during %d\n" % i)
        proc.stdin.flush()
        time.sleep(0.25)
    proc.stdin.close()
    closed = time.monotonic()
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 1
    assert time.monotonic() - closed < 15 + 10, err
    lines = err.splitlines()
    # the client's warnings are printed once, then at most once per 10 s with how many were held back (a unit test
    # of RepeatFilter holds the counting); the records expire 15 s after they were queued, not at flush's 60 s
    warnings = [x for x in lines if x.startswith("warning: ")]
    assert len(warnings) <= 3 and len(lines) == len(warnings) + 2, err
    assert all("more like it in the last" in x for x in warnings[1:]), err
    assert lines[-2].startswith("error: 20 record(s) failed, 1 of 21 record(s) written"), err
    assert lines[-1].startswith("hint: is a broker running at") and "topic describe" not in err
