"""Shared CLI pieces: common options, errors that tell the user what to do, quiet repeated client warnings."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import click

from oncelog.client.errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError
from oncelog.protocol.errors import ErrorCode

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: click settings of every command: -h as well as --help, help text as wide as the terminal up to 110 columns (100
#: when the output is not a terminal)
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 110,
                           "terminal_width": shutil.get_terminal_size((100, 24)).columns}

F = TypeVar("F", bound=Callable[..., Any])

_HINTS: dict[int, str] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "check the name with 'oncelog topic list' or create the topic with "
                                          "'oncelog topic create NAME'",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "topic names use letters, digits, '.', '_' and '-' (at most 249 characters)",
    ErrorCode.INVALID_REPLICATION_FACTOR: "this broker is a single node: use --replication-factor 1",
    ErrorCode.INVALID_CONFIG: "the README's settings reference lists the topic configs and their values",
    ErrorCode.MESSAGE_TOO_LARGE: "split the record, or raise the topic's max.message.bytes with "
                                 "'oncelog topic alter NAME --config max.message.bytes=N'",
    ErrorCode.TOPIC_DELETION_DISABLED: "the broker runs with delete.topic.enable=false",
    ErrorCode.POLICY_VIOLATION: "the broker's settings refuse this request",
}
#: error codes that mean the broker could not be reached or did not answer, whatever the request was
UNREACHABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_NOT_AVAILABLE,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                         ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


def bootstrap_option(f: F) -> F:
    return click.option("-b", "--bootstrap-server", "bootstrap_server", default=DEFAULT_BOOTSTRAP, show_default=True,
                        metavar="HOST:PORT", envvar="ONCELOG_BOOTSTRAP_SERVER", show_envvar=True,
                        help="a broker to connect to (comma-separated for several)")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable JSON on stdout")(f)


def unreachable_hint(bootstrap: str) -> str:
    return (f"is a broker running at {bootstrap}? Start one with 'oncelog serve' (or 'make serve'), or point "
            f"--bootstrap-server at it")


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    """Print ``error: message`` (and ``hint: ...``) on stderr and exit with ``code`` (1: failed, 2: usage)."""
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    raise click.exceptions.Exit(code)


def is_unreachable(e: KafkaError) -> bool:
    return isinstance(e, (KafkaConnectionError, KafkaTimeoutError)) or int(e.code()) in UNREACHABLE


@contextlib.contextmanager
def user_errors(action: str, bootstrap: str) -> Iterator[None]:
    """Turn client exceptions into one ``error: <action>: <what>`` line and a hint; exit 1 (2 for bad settings)."""
    try:
        yield
    except KafkaError as e:
        if is_unreachable(e):
            fail(f"{action}: {e.message}", unreachable_hint(bootstrap))
        fail(f"{action}: {e.message}", _HINTS.get(int(e.code())))
    except ConfigError as e:
        fail(f"{action}: {e}", code=2)


def client_conf(bootstrap: str) -> dict[str, Any]:
    """Settings of every client the CLI makes: give up on an unreachable broker in seconds, not minutes."""
    return {"bootstrap.servers": bootstrap, "request.timeout.ms": 15000, "socket.connection.setup.timeout.ms": 5000}


def parse_pairs(items: tuple[str, ...] | list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"{what} expects KEY=VALUE, got {item!r}", code=2)
        out[key.strip()] = value
    return out


def echo_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


def to_bytes(text: str) -> bytes:
    """A command-line argument as the bytes the user typed (arguments that are not UTF-8 survive)."""
    return os.fsencode(text)


class RepeatFilter(logging.Filter):
    """Lets the first of a run of identical warnings through, then at most one per ``interval`` seconds with how many
    were held back: a client retrying against a broker that is down must not print the same line hundreds of
    times."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self.interval = interval
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = time.monotonic()
        last, held = self._seen.get(key, (0.0, 0))
        if last and now - last < self.interval:
            self._seen[key] = (last, held + 1)
            return False
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {now - last:.0f} s)"
        return True


def quiet_client_logs() -> None:
    """Client warnings as one ``warning: ...`` line each, repeated ones held back (see :class:`RepeatFilter`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    handler.addFilter(RepeatFilter())
    logger = logging.getLogger("oncelog")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    logging.addLevelName(logging.WARNING, "warning")
    logging.addLevelName(logging.ERROR, "error")
