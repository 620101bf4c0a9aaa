"""CLI round trip through typer's CliRunner against the session broker."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from oncelog.cli.main import app

runner = CliRunner()  # click >= 8.2 keeps stderr apart (result.stderr)


def run(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def test_topic_produce_consume_describe_delete(bootstrap: str, topic_name: str) -> None:
    b = ["--bootstrap-server", bootstrap]
    r = run("topic", "create", topic_name, "--partitions", "3", "--config", "retention.ms=7200000", "--json", *b)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {"topic": topic_name, "created": True, "partitions": 3,
                                    "configs": {"retention.ms": "7200000"}}
    r = run("topic", "create", topic_name, *b)
    assert r.exit_code == 1 and "already exists" in r.stderr and "hint:" in r.stderr

    lines = "".join(f"key{i % 4}:value {i}\n" for i in range(40))
    r = run("produce", topic_name, "--key-separator", ":", "--compression", "gzip", *b, input=lines)
    assert r.exit_code == 0, r.stderr
    assert "Produced 40 record(s)" in r.stderr
    r = run("produce", topic_name, "--value", "solo", "--partition", "2", "--header", "src=cli", *b)
    assert r.exit_code == 0, r.stderr

    r = run("consume", topic_name, "--from-beginning", "--json", "--max-messages", "41", "--timeout", "5", *b)
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
    assert solo["partition"] == 2 and solo["headers"] == [["src", "cli"]] and solo["timestamp"] > 0

    r = run("consume", topic_name, "--offset", "0", "--partition", "2", "--timeout", "1", *b)
    assert r.exit_code == 0 and "solo" in r.stdout.splitlines()

    r = run("topic", "describe", topic_name, "--json", *b)
    assert r.exit_code == 0, r.stderr
    desc = json.loads(r.stdout)
    assert sum(p["high_watermark"] - p["log_start_offset"] for p in desc["partitions"]) == 41
    assert desc["configs"]["retention.ms"]["value"] == "7200000"
    r = run("topic", "describe", topic_name, *b)
    flat = " ".join(r.stdout.split())  # rich wraps to the terminal width
    assert r.exit_code == 0 and "retention.ms" in flat and "Start" in flat and "41 records" in flat

    r = run("topic", "list", "--json", *b)
    assert topic_name in {t["name"] for t in json.loads(r.stdout)}

    r = run("topic", "delete", topic_name, *b)
    assert r.exit_code == 0 and f"Deleted topic {topic_name}" in r.stdout
    r = run("topic", "describe", topic_name, *b)
    assert r.exit_code == 1 and "does not exist" in r.stderr
    r = run("topic", "delete", topic_name, "--if-exists", *b)
    assert r.exit_code == 0


def test_errors_speak_to_the_user(bootstrap: str, topic_name: str) -> None:
    r = run("topic", "list", "--bootstrap-server", "127.0.0.1:1")
    assert r.exit_code == 1 and "127.0.0.1:1" in r.stderr and "broker running" in r.stderr
    r = run("produce", topic_name, "--value", "x", "--bootstrap-server", bootstrap)
    assert r.exit_code == 1 and topic_name in r.stderr and "topic create" in r.stderr
    r = run("consume", topic_name, "--timeout", "1", "--bootstrap-server", bootstrap)
    assert r.exit_code == 1 and "does not exist" in r.stderr
    r = run("produce", topic_name, "--value", "x", "--compression", "brotli", "--bootstrap-server", bootstrap)
    assert r.exit_code == 2 and "compression.type" in r.stderr
