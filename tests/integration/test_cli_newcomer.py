"""What a newcomer hit in the ``oncelog`` command (issue 24), against the session's real broker: the broker decides
what ``topic create`` leaves out, an empty key separator is a usage error, help loads no heavy module, tables fit 80
columns, -b and --command-config anywhere, kcat's conveniences in consume, internal topics hidden, one prefix and
the right hint in an error."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Producer

from oncelog.client.admin import Admin

from helpers.cli import oncelog

HEAVY = ("rich", "pyarrow", "numpy", "pandas", "oncelog.client", "oncelog.broker", "oncelog.protocol",
         "importlib.metadata")


def test_topic_create_leaves_partitions_and_replication_factor_to_the_broker(bootstrap: str,
                                                                             topic_name: str) -> None:
    """The CLI sent 1 partition and replication factor 1 unless told otherwise; kafka-topics.sh sends -1 for both
    and the broker's num.partitions (3 on the shared broker) and default.replication.factor decide."""
    r = oncelog("topic", "create", topic_name, "--json", "-b", bootstrap)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"topic": topic_name, "created": True, "partitions": 3, "replication_factor": 1,
                                    "configs": {}}
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert len(admin.describe_topic(topic_name).partitions) == 3
    r = oncelog("topic", "create", f"{topic_name}-2", "-p", "2", "-r", "1", "-b", bootstrap)
    assert r.exit_code == 0 and "with 2 partition(s), replication factor 1" in r.stdout, r.stdout + r.stderr


def test_produce_with_an_empty_key_separator_is_a_usage_error(bootstrap: str, topic_name: str) -> None:
    """It was a traceback (ValueError: empty separator)."""
    r = oncelog("produce", topic_name, "--key-separator", "", "-b", bootstrap, input="x\n")
    assert r.exit_code == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: --key-separator must not be empty"), r.stderr
    assert lines[1].startswith("hint: ") and "--key-separator ':'" in lines[1]


def _modules_after(*args: str) -> list[str]:
    """The heavy modules ``oncelog ARGS`` has loaded once it is done (it runs in a fresh interpreter)."""
    code = ("import sys\nfrom oncelog.cli.main import main\nrc = main(sys.argv[1:])\n"
            f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))\n")
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded: list[str] = json.loads(r.stdout.splitlines()[-1].replace("'", '"'))
    return loaded


def test_help_loads_no_heavy_module() -> None:
    """Every command took ~1.4 s to start on a loaded box: the CLI imported the client, its codecs and rich before
    parsing anything. Help (and usage errors) now load click alone; a command imports what it uses."""
    for args in (["--help"], ["topic", "list", "--help"], ["consume", "--help"], ["cluster", "status", "--help"],
                 ["group", "describe", "--help"], ["txn", "find-hanging", "--help"], ["topic", "reassign", "--help"]):
        assert _modules_after(*args) == [], args
    # the check sees a command's imports: one that connects has the admin client loaded
    assert "oncelog.client.admin" in _modules_after("topic", "list", "--json", "-b", "127.0.0.1:1")


def test_the_help_line_of_a_command_not_loaded_is_its_own() -> None:
    """'oncelog --help' shows the commands without importing their modules: its line for each must be the one the
    command itself has."""
    from oncelog.cli.main import LAZY

    for name, (load, line) in LAZY.items():
        assert load().get_short_help_str(1000) == line, name


_BOX = re.compile(r"[│┃┏┓┗┛┡┩┣┫━─┳┻╇╈┼┬┴└┘┌┐]")


def _words(text: str) -> set[str]:
    return set(_BOX.sub(" ", text).split())


def _fits(r_stdout: str, headers: str) -> None:
    lines = r_stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(line for line in lines if len(line) > 80)
    assert "…" not in r_stdout, r_stdout
    missing = set(headers.split()) - _words(r_stdout)
    assert not missing, f"headers cut: {missing}\n{r_stdout}"


def test_tables_fit_80_columns_without_cutting_a_header(bootstrap: str, topic_name: str) -> None:
    """At 80 columns rich cut headers ("Parti…", "under-repl…") and values (topic ids). Long topic names and ids
    fold onto more lines now; headers wrap at their spaces, never inside a word."""
    b = ["-b", bootstrap]
    env = {"COLUMNS": "80"}
    group = f"g-{uuid.uuid4().hex}-a-long-group-name-for-the-members-table"
    assert oncelog("topic", "create", topic_name, *b).exit_code == 0
    assert oncelog("produce", topic_name, *b, input="a\nb\nc\n").exit_code == 0
    r = oncelog("consume", topic_name, "-g", group, "--from-beginning", "-n", "3", "--timeout", "20", *b)
    assert r.exit_code == 0, r.stderr
    checks = [
        (["topic", "list"], "Topic Partitions Topic id"),
        (["topic", "describe", topic_name], "Partition Leader Leader epoch Replicas ISR Start offset End offset LSO "
                                            "Records Key Value Source"),
        (["cluster", "status"], "Node Address Rack Leaders State"),
        (["cluster", "partitions", topic_name], "Topic Partition Leader Leader epoch Replicas ISR State"),
        (["group", "list"], "Group Coordinator Protocol type State"),
        (["group", "describe", group], "Topic Partition Committed Log end LSO Lag (vs LSO) Consumer"),
        (["group", "reset-offsets", group, "-t", topic_name, "--to-earliest"], "Topic Partition Current New"),
        (["txn", "producers", topic_name], "Partition Producer id Epoch Coordinator epoch Last sequence "
                                           "Last timestamp Txn start offset"),
    ]
    for args, headers in checks:
        r = oncelog(*args, *b, **env)
        assert r.exit_code == 0, (args, r.stderr)
        _fits(r.stdout, headers)


def test_bootstrap_server_and_command_config_before_or_after_the_command(bootstrap: str, topic_name: str,
                                                                         tmp_path: Path) -> None:
    """-b worked only after the subcommand; --command-config did not exist."""
    assert oncelog("topic", "create", topic_name, "-b", bootstrap).exit_code == 0
    for args in (["-b", bootstrap, "topic", "list", "--json"], ["topic", "list", "--json", "-b", bootstrap],
                 ["-b", "127.0.0.1:1", "topic", "list", "--json", "-b", bootstrap]):  # the command's own wins
        r = oncelog(*args)
        assert r.exit_code == 0 and topic_name in {t["name"] for t in json.loads(r.stdout)}, (args, r.stderr)
    r = oncelog("topic", "list", "--json", ONCELOG_BOOTSTRAP_SERVER=bootstrap)
    assert r.exit_code == 0 and topic_name in r.stdout, r.stderr
    r = oncelog("-b", bootstrap, "topic", "list", "--json", ONCELOG_BOOTSTRAP_SERVER="127.0.0.1:1")
    assert r.exit_code == 0 and topic_name in r.stdout, r.stderr

    props = tmp_path / "client.properties"
    props.write_text(f"# Kafka tools' --command-config\nbootstrap.servers = {bootstrap}\nclient.id: ops-cli\n"
                     "request.timeout.ms=20000\n")
    for args in (["--command-config", str(props), "topic", "describe", topic_name, "--json"],
                 ["topic", "describe", topic_name, "--json", "--command-config", str(props)],
                 ["cluster", "partitions", topic_name, "--json", "--command-config", str(props)],
                 ["consume", topic_name, "--timeout", "0.5", "--command-config", str(props)],
                 ["--command-config", str(props), "group", "list"]):
        r = oncelog(*args)
        assert r.exit_code == 0, (args, r.stderr)
    bad = tmp_path / "bad.properties"
    bad.write_text(f"bootstrap.servers={bootstrap}\nrequest.timeout.ms=soon\n")
    for args in (["topic", "list"], ["cluster", "status"], ["produce", topic_name, "--value", "x"]):
        r = oncelog(*args, "--command-config", str(bad))
        assert r.exit_code == 2 and "request.timeout.ms" in r.stderr and str(bad) in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.count("error:") == 1
    r = oncelog("topic", "list", "--command-config", str(tmp_path / "missing.properties"))
    assert r.exit_code == 2 and r.stderr.startswith("error: cannot read --command-config"), r.stderr


def test_consume_takes_kcat_formats_offsets_from_the_end_and_by_time(bootstrap: str, topic_name: str) -> None:
    """consume lacked kcat's -f, negative offsets and s@timestamp; headers showed only with --json."""
    b = ["-b", bootstrap]
    assert oncelog("topic", "create", topic_name, "-p", "1", *b).exit_code == 0
    p = Producer({"bootstrap.servers": bootstrap})
    base = 1_700_000_000_000
    for i in range(5):
        p.produce(topic_name, value=f"v{i}".encode(), key=f"k{i}".encode(), timestamp=base + i * 1000,
                  headers=[("h", f"x{i}".encode()), ("n", b"1")] if i != 3 else None)
    p.produce(topic_name, value=None, key=None, timestamp=base + 5000)
    assert p.flush(10) == 0

    r = oncelog("consume", topic_name, "-o", "beginning", "-n", "6", "--timeout", "10", *b,
                "-f", r"%t|%p|%o|%k|%s|%S|%K|%T|%h|%%\n")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{topic_name}|0|0|k0|v0|2|2|{base}|h=x0,n=1|%"
    assert lines[3] == f"{topic_name}|0|3|k3|v3|2|2|{base + 3000}||%"
    assert lines[5] == f"{topic_name}|0|5|||-1|-1|{base + 5000}||%"

    r = oncelog("consume", topic_name, "-o", "-2", "--timeout", "2", "-f", r"%o\t%s\n", *b)
    assert r.stdout_bytes == b"4\tv4\n5\t\n", r.stdout + r.stderr
    r = oncelog("consume", topic_name, "-o", f"s@{base + 2500}", "--timeout", "2", "-f", r"%o ", *b)
    assert r.stdout == "3 4 5 ", r.stdout + r.stderr
    r = oncelog("consume", topic_name, "--offset", "3", "--timeout", "2", "--print-headers", "--print-key", *b)
    assert r.stdout_bytes == b"NO_HEADERS\tk3\tv3\nh:x4,n:1\tk4\tv4\nNO_HEADERS\tnull\tnull\n", r.stdout
    r = oncelog("consume", topic_name, "-o", "2", "-n", "1", "--timeout", "2", "-f", r"\x41%k\n", *b)
    assert r.stdout == "Ak2\n"

    for args, says in ((["-o", "-x"], "--offset expects"), (["-f", "%q"], "unknown token %q"),
                       (["-f", "%s", "--json"], "cannot be combined"), (["-o", "1", "--from-beginning"],
                                                                         "cannot be combined")):
        r = oncelog("consume", topic_name, *args, *b)
        assert r.exit_code == 2 and says in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_topic_list_hides_internal_topics(bootstrap: str, topic_name: str) -> None:
    """topic list showed __consumer_offsets, __transaction_state and the Spark sink's commit log."""
    internal = f"__{topic_name}"  # a name with Kafka's internal prefix, as the Spark sink's commit log has
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([topic_name, internal], 1)
    r = oncelog("topic", "list", "--json", "-b", bootstrap)
    names = {t["name"] for t in json.loads(r.stdout)}
    assert topic_name in names and not any(n.startswith("__") for n in names), names
    r = oncelog("topic", "list", "-b", bootstrap)
    assert "internal hidden (--include-internal)" in " ".join(r.stdout.split()), r.stdout
    r = oncelog("topic", "list", "--include-internal", "--json", "-b", bootstrap)
    listed = {t["name"]: t["is_internal"] for t in json.loads(r.stdout)}
    assert listed[internal] is True and listed[topic_name] is False
    r = oncelog("cluster", "partitions", "--json", "-b", bootstrap)
    assert not any(p["topic"].startswith("__") for p in json.loads(r.stdout))


def test_an_error_says_its_context_once_with_the_right_hint(bootstrap: str, topic_name: str) -> None:
    """"cannot create topic 'x': create topic 'x': ..." and a hint at the broker settings for a topic config;
    elect-leaders without arguments had no hint."""
    r = oncelog("topic", "create", topic_name, "--config", "retention.ms=soon", "-b", bootstrap)
    assert r.exit_code == 1 and r.stderr.count(f"topic {topic_name!r}") == 1, r.stderr
    assert "retention.ms" in r.stderr and "--all-configs" in r.stderr and "README" not in r.stderr, r.stderr
    r = oncelog("topic", "create", topic_name, "-r", "3", "-b", bootstrap)
    assert r.exit_code == 1 and "single node" not in r.stderr and "default.replication.factor" in r.stderr, r.stderr
    r = oncelog("cluster", "elect-leaders", "-b", bootstrap)
    lines = r.stderr.splitlines()
    assert r.exit_code == 2 and len(lines) == 2 and lines[1].startswith("hint: ") and "--all" in lines[1], r.stderr
    r = oncelog("topic", "alter", topic_name, "-b", bootstrap)  # any usage error points at the command's help
    assert r.exit_code == 2 and "hint: 'oncelog topic alter --help'" in r.stderr, r.stderr
