"""``oncelog consume TOPIC``: print records as text lines or JSON lines."""

from __future__ import annotations

import base64
import sys
import time
from typing import Any

import typer

from oncelog.client.consumer import OFFSET_BEGINNING, OFFSET_END, Consumer
from oncelog.client.message import Message

from ._common import BOOTSTRAP_HELP, DEFAULT_BOOTSTRAP, echo_json, fail, user_errors


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _json_field(out: dict[str, Any], name: str, b: bytes | None) -> None:
    if b is None:
        out[name] = None
        return
    try:
        out[name] = b.decode("utf-8")
    except UnicodeDecodeError:
        out[name] = base64.b64encode(b).decode("ascii")
        out[f"{name}_encoding"] = "base64"


def as_json(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"topic": m.topic, "partition": m.partition, "offset": m.offset, "timestamp": m.timestamp}
    _json_field(out, "key", m.key)
    _json_field(out, "value", m.value)
    out["headers"] = [[k, _text(v)] for k, v in m.headers]
    return out


def consume(
    topic: str = typer.Argument(..., help="topic to read"),
    from_beginning: bool = typer.Option(False, "--from-beginning", help="start at the log start offset"),
    offset: int | None = typer.Option(None, "--offset", min=0, help="start at this offset (every partition)"),
    partition: list[int] = typer.Option([], "--partition", "-p", help="read only these partitions (repeatable)"),
    max_messages: int | None = typer.Option(None, "--max-messages", "-n", min=1, help="stop after N records"),
    timeout: float | None = typer.Option(None, "--timeout", help="stop after this many seconds without a "
                                            "record (default: run until Ctrl-C)"),
    print_key: bool = typer.Option(False, "--print-key", help="text output: KEY<sep>VALUE"),
    key_separator: str = typer.Option("\t", "--key-separator", help="separator for --print-key"),
    isolation_level: str = typer.Option("read_uncommitted", "--isolation-level",
                                        help="read_uncommitted or read_committed"),
    bootstrap_server: str = typer.Option(DEFAULT_BOOTSTRAP, "--bootstrap-server", "-b", help=BOOTSTRAP_HELP),
    json_lines: bool = typer.Option(False, "--json", help="one JSON object per record: topic, partition, offset, "
                                    "timestamp, key, value, headers"),
) -> None:
    """Print records of TOPIC (new ones by default; --from-beginning or --offset to read history)."""
    if from_beginning and offset is not None:
        fail("--from-beginning and --offset are exclusive", code=2)
    start = offset if offset is not None else OFFSET_BEGINNING if from_beginning else OFFSET_END
    conf = {"bootstrap.servers": bootstrap_server, "isolation.level": isolation_level,
            "request.timeout.ms": 15000, "socket.connection.setup.timeout.ms": 5000}
    count = 0
    with user_errors(f"cannot consume from {topic!r}"):
        consumer = Consumer(conf)
        try:
            parts = consumer.partitions_for(topic)
            if not parts:
                fail(f"topic {topic!r} does not exist", "check the name with 'oncelog topic list'")
            chosen = partition or parts
            missing = sorted(set(chosen) - set(parts))
            if missing:
                fail(f"topic {topic!r} has no partition {missing[0]}", f"partitions are 0..{len(parts) - 1}")
            consumer.assign([(topic, p, start) for p in chosen])
            idle_since = time.monotonic()
            out = sys.stdout
            while max_messages is None or count < max_messages:
                want = 500 if max_messages is None else min(500, max_messages - count)
                batch = consumer.consume(want, 0.5)
                if not batch:
                    if timeout is not None and time.monotonic() - idle_since >= timeout:
                        break
                    continue
                idle_since = time.monotonic()
                for m in batch:
                    if json_lines:
                        echo_json(as_json(m))
                    elif print_key:
                        out.write(f"{_text(m.key) or ''}{key_separator}{_text(m.value) or ''}\n")
                    else:
                        out.write(f"{_text(m.value) or ''}\n")
                count += len(batch)
                out.flush()
        except KeyboardInterrupt:
            pass
        finally:
            consumer.close()
    typer.echo(f"Consumed {count} record(s) from {topic}.", err=True)
