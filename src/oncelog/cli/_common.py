"""Shared CLI pieces: the --bootstrap-server option, and errors that tell the user what to do."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import typer

from oncelog.client.errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError
from oncelog.protocol.errors import ErrorCode

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_HELP = "HOST:PORT of a broker (comma-separated for several)"

_HINTS: dict[int, str] = {
    ErrorCode.TOPIC_ALREADY_EXISTS: "use another name, or delete it first with 'oncelog topic delete'",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "check the name with 'oncelog topic list' or create it with "
                                          "'oncelog topic create'",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "topic names use letters, digits, '.', '_' and '-' (at most 249 chars)",
    ErrorCode.INVALID_PARTITIONS: "the partition count must be at least 1 (and can only grow)",
    ErrorCode.INVALID_REPLICATION_FACTOR: "this broker is a single node: use --replication-factor 1",
    ErrorCode.INVALID_CONFIG: "check the key and value with 'oncelog topic describe'",
    ErrorCode.NETWORK_EXCEPTION: "is the broker running, and is --bootstrap-server right?",
    ErrorCode.REQUEST_TIMED_OUT: "the broker may be overloaded or unreachable; try again or raise --timeout",
    ErrorCode.MESSAGE_TOO_LARGE: "split the record or raise the topic's max.message.bytes",
}


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors(action: str) -> Iterator[None]:
    """Turn client exceptions into one 'error: <action>: <what>' line, a hint, and exit code 1 (2 for usage)."""
    try:
        yield
    except KafkaConnectionError as e:
        fail(f"{action}: {e.message}", _HINTS[ErrorCode.NETWORK_EXCEPTION])
    except KafkaTimeoutError as e:
        fail(f"{action}: {e.message}", _HINTS[ErrorCode.REQUEST_TIMED_OUT])
    except KafkaError as e:
        fail(f"{action}: {e.message} ({e.name})", _HINTS.get(int(e.code)))
    except ConfigError as e:
        fail(f"{action}: {e}", code=2)


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{what} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def echo_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
