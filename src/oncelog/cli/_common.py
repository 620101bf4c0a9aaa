"""Shared CLI pieces: the connection options every command that talks to a broker takes, errors that tell the user
what to do, quiet repeated client warnings.

This module, like every command module, imports neither the client nor rich at import time: ``oncelog --help`` and
``oncelog CMD --help`` load only click (the client and its codecs take ~0.25 s to import); a command imports what it
uses when it runs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from oncelog.client.errors import KafkaError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ONCELOG_BOOTSTRAP_SERVER"
#: click settings of every command: -h as well as --help, help text as wide as the terminal up to 110 columns (100
#: when the output is not a terminal)
def _terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 100 (shutil.get_terminal_size's logic without importing shutil,
    which pulls in bz2, lzma and zlib)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 100
    except (AttributeError, ValueError, OSError):
        return 100


CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 110,
                           "terminal_width": _terminal_width()}

F = TypeVar("F", bound=Callable[..., Any])

#: the hint for an error code (by its Kafka name), where the message alone does not say what to do
_HINTS: dict[str, str] = {
    "UNKNOWN_TOPIC_OR_PARTITION": "check the name with 'oncelog topic list' or create the topic with "
                                  "'oncelog topic create NAME'",
    "INVALID_TOPIC_EXCEPTION": "topic names use letters, digits, '.', '_' and '-' (at most 249 characters)",
    "INVALID_REPLICATION_FACTOR": "leave out --replication-factor to use the broker's default.replication.factor, "
                                  "or give at most as many as there are brokers ('oncelog cluster status' lists them)",
    "INVALID_PARTITIONS": "give --partitions 1 or more, or leave it out to use the broker's num.partitions",
    "INVALID_CONFIG": "'oncelog topic describe TOPIC --all-configs' (any topic) lists the topic configs with their "
                      "values",
    "MESSAGE_TOO_LARGE": "split the record, or raise the topic's max.message.bytes with "
                         "'oncelog topic alter NAME --config max.message.bytes=N'",
    "TOPIC_DELETION_DISABLED": "the broker runs with delete.topic.enable=false",
    "POLICY_VIOLATION": "the broker's settings refuse this request",
}
#: errors that mean the broker could not be reached or did not answer, whatever the request was
UNREACHABLE = frozenset({"NETWORK_EXCEPTION", "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE",
                         "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"})
#: what the CLI's clients use unless --command-config says otherwise: give up on an unreachable broker in seconds
CLIENT_DEFAULTS: dict[str, Any] = {"request.timeout.ms": 15000, "socket.connection.setup.timeout.ms": 5000}


# ----------------------------------------------------------------------------------------- connection options
@dataclass(frozen=True, slots=True)
class Conn:
    """Where and how a command connects: ``--bootstrap-server`` (before or after the command) and the client
    properties of ``--command-config`` (Kafka's tools' option: a Java properties file of client settings)."""

    bootstrap: str
    properties: Mapping[str, str] = field(default_factory=dict)
    config_file: str | None = None

    def client_conf(self, **settings: Any) -> dict[str, Any]:
        """A client's config: the CLI's defaults, then the --command-config file, then ``settings`` (the command's
        own options), and ``bootstrap.servers``."""
        return {**CLIENT_DEFAULTS, **self.properties, **settings, "bootstrap.servers": self.bootstrap}


def _read_properties(path: str) -> dict[str, str]:
    import javaproperties

    try:
        with open(path, encoding="utf-8") as f:
            props: dict[str, str] = javaproperties.load(f)
    except OSError as e:
        fail(f"cannot read --command-config {path}: {e.strerror or e}", "give a Java properties file of client "
             "settings, e.g. a line 'client.id=ops'", code=2)
    except (ValueError, UnicodeDecodeError) as e:
        fail(f"--command-config {path} is not a properties file: {e}", code=2)
    return props


def resolve_conn(bootstrap_server: str | None, command_config: str | None) -> Conn:
    """The connection of the running command: its own -b/--command-config, else the ones given before the command
    (or ONCELOG_BOOTSTRAP_SERVER), else the file's bootstrap.servers, else 127.0.0.1:9092."""
    root = click.get_current_context().find_root().params
    config_file = command_config or root.get("command_config")
    props = _read_properties(config_file) if config_file else {}
    bootstrap = (bootstrap_server or root.get("bootstrap_server") or props.pop("bootstrap.servers", None)
                 or DEFAULT_BOOTSTRAP)
    props.pop("bootstrap.servers", None)
    return Conn(bootstrap, props, config_file)


def root_connection_options(f: F) -> F:
    """-b and --command-config before the command (``oncelog -b H:P topic list``), read by :func:`resolve_conn`."""
    f = click.option("--command-config", metavar="FILE", type=click.Path(dir_okay=False),
                     help="client settings (a Java properties file, as Kafka's tools take) for every command that "
                          "connects")(f)
    return click.option("-b", "--bootstrap-server", metavar="HOST:PORT", envvar=BOOTSTRAP_ENV, show_envvar=True,
                        help=f"a broker to connect to (comma-separated for several)  [default: {DEFAULT_BOOTSTRAP}]")(f)


def connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``-b/--bootstrap-server`` and ``--command-config`` on a command that connects; the command gets ``conn``."""

    @functools.wraps(f)
    def wrapper(*args: Any, bootstrap_server: str | None, command_config: str | None, **kwargs: Any) -> Any:
        return f(*args, conn=resolve_conn(bootstrap_server, command_config), **kwargs)

    wrapper = click.option("--command-config", metavar="FILE", type=click.Path(dir_okay=False),
                           help="client settings, a Java properties file (Kafka's tools' --command-config)")(wrapper)
    return click.option("-b", "--bootstrap-server", metavar="HOST:PORT",
                        help=f"a broker to connect to (comma-separated for several; may also come before the "
                             f"command)  [default: {DEFAULT_BOOTSTRAP}, or ${BOOTSTRAP_ENV}]")(wrapper)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable JSON on stdout")(f)


# ----------------------------------------------------------------------------------------- errors
def unreachable_hint(bootstrap: str) -> str:
    return (f"is a broker running at {bootstrap}? Start one with 'oncelog serve' (or 'make serve'), or point "
            f"--bootstrap-server at it")


def config_hint(path: str) -> str:
    return (f"fix or remove that line of {path}: it holds client settings with Kafka's names (client.id, "
            f"request.timeout.ms, ...)")


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    """Print ``error: message`` (and ``hint: ...``) on stderr and exit with ``code`` (1: failed, 2: usage). A usage
    error without a hint of its own points at the command's --help."""
    click.echo(f"error: {message}", err=True)
    if hint is None and code == 2:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            hint = f"'{ctx.command_path} --help' shows the options"
    if hint:
        click.echo(f"hint: {hint}", err=True)
    raise click.exceptions.Exit(code)


def kafka_name(e: KafkaError) -> str:
    """Kafka's name of the error's code (``name()`` spells a few as librdkafka does)."""
    from oncelog.protocol.errors import lookup

    known = lookup(int(e.code()))
    return known.name if known is not None else e.name()


def is_unreachable(e: KafkaError) -> bool:
    from oncelog.client.errors import KafkaConnectionError, KafkaTimeoutError

    return isinstance(e, (KafkaConnectionError, KafkaTimeoutError)) or kafka_name(e) in UNREACHABLE


def hint_for(e: KafkaError) -> str | None:
    return _HINTS.get(kafka_name(e))


def without_context(action: str, message: str) -> str:
    """``message`` less a leading ``context: `` that ``action`` already says (the client prefixes its errors with
    what it did: "create topic 'x': ..." after "cannot create topic 'x'" would say it twice)."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head and head.lower() in action.lower() else message


@contextlib.contextmanager
def user_errors(action: str, conn: Conn) -> Iterator[None]:
    """Turn client exceptions into one ``error: <action>: <what>`` line and a hint; exit 1 (2 for bad settings)."""
    from oncelog.client.errors import ConfigError, KafkaError

    try:
        yield
    except ConfigError as e:  # a KafkaError too: first
        if conn.config_file:
            fail(f"{action}: {e.message} (--command-config {conn.config_file})", config_hint(conn.config_file),
                 code=2)
        fail(f"{action}: {e.message}", code=2)
    except KafkaError as e:
        message = without_context(action, e.message)
        if is_unreachable(e):
            fail(f"{action}: {message}", unreachable_hint(conn.bootstrap))
        fail(f"{action}: {message}", hint_for(e))


# ----------------------------------------------------------------------------------------- small helpers
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
