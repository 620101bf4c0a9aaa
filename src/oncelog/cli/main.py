"""The ``oncelog`` command line: ``serve`` a broker; ``topic``, ``produce``, ``consume``, ``group`` and ``txn`` talk to
one over the Kafka protocol, like Kafka's own scripts (kafka-topics.sh, kafka-console-producer.sh, ...).

Every error is one ``error:`` line on stderr, often followed by a ``hint:`` line, and a non-zero exit: 1 when the
request failed, 2 for a usage error, 130 when interrupted.
"""

from __future__ import annotations

import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import click

from ._common import CONTEXT, fail, quiet_client_logs


def _version() -> str:
    try:
        return version("oncelog")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without an install
        return "unknown"


@click.group(context_settings=CONTEXT)
@click.version_option(_version(), "-V", "--version", prog_name="oncelog", message="%(prog)s %(version)s")
def cli() -> None:
    """oncelog: a Kafka-compatible log broker with exactly-once semantics.

    Start a broker with 'oncelog serve', then use any Kafka client, or these commands, against 127.0.0.1:9092.
    """


@cli.command(context_settings=CONTEXT)
@click.option("--data-dir", type=click.Path(path_type=Path), metavar="DIR",
              help="folder for all partition logs (log.dirs)  [default: ./data]")
@click.option("--listen", metavar="HOST:PORT", help="where to accept clients (listeners)  [default: 127.0.0.1:9092]")
@click.option("--config", "config_file", type=click.Path(path_type=Path), metavar="FILE",
              help="TOML file of broker settings (Kafka's names)")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="one setting, e.g. log.retention.hours=24 (repeatable; wins over --config); the README lists "
                   "them all")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              default="info", show_default=True)
@click.option("--node-id", type=int, metavar="N", help="this broker's id in a cluster (node.id)")
@click.option("--metadata", metavar="etcd://HOST:PORT[,HOST:PORT]",
              help="join the cluster whose metadata is in this etcd (metadata); without it: one node")
def serve(data_dir: Path | None, listen: str | None, config_file: Path | None, settings: tuple[str, ...],
          log_level: str, node_id: int | None, metadata: str | None) -> None:
    """Start a broker and serve until SIGTERM or Ctrl-C, which shut it down cleanly: one node, or with --node-id
    and --metadata one broker of a cluster."""
    from oncelog.broker.config import BrokerConfig, ConfigError

    overrides: dict[str, object] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set expects KEY=VALUE, got {item!r}", "e.g. --set log.retention.hours=24", code=2)
        overrides[key.strip()] = value.strip()
    if data_dir is not None:
        overrides["log.dirs"] = str(data_dir)
    if listen is not None:
        overrides["listeners"] = listen
    if node_id is not None:
        overrides["node.id"] = node_id
    if metadata is not None:
        overrides["metadata"] = metadata
    try:
        cfg = BrokerConfig.load(config_file, overrides)
    except ConfigError as e:
        fail(str(e), code=2)
    broker_log = logging.getLogger("oncelog")  # the broker logs everything at --log-level, not the CLI's warnings
    broker_log.handlers.clear()
    broker_log.propagate = True
    broker_log.setLevel(logging.NOTSET)
    logging.addLevelName(logging.WARNING, "WARNING")
    logging.addLevelName(logging.ERROR, "ERROR")
    logging.basicConfig(level=getattr(logging, log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from oncelog.broker.server import StartupError, run_broker

    try:
        run_broker(cfg)
    except StartupError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted while starting; the data folder is left as it was (the next start recovers it)",
             code=130)


def _register() -> None:
    from . import cluster, consume, group, produce, reassign, topic, txn, user

    cli.add_command(topic.topic)
    topic.topic.add_command(reassign.reassign)  # a module of its own: topic.py is the admin client's commands
    cli.add_command(cluster.cluster)
    cli.add_command(produce.produce)
    cli.add_command(consume.consume)
    cli.add_command(group.group)
    cli.add_command(txn.txn)
    cli.add_command(user.user)


_register()


def main(argv: list[str] | None = None) -> int:
    """The console script: usage errors and Ctrl-C as one line, never a traceback."""
    quiet_client_logs()
    try:
        rv = cli.main(args=argv, prog_name="oncelog", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.UsageError as e:
        cmd = e.ctx.command_path if e.ctx is not None else "oncelog"
        click.echo(f"error: {e.format_message()}", err=True)
        click.echo(f"hint: '{cmd} --help' shows the options", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)
        return e.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:  # `oncelog consume t | head`: the reader went away
        sys.stderr.close()
        return 0
    return rv if isinstance(rv, int) else 0  # click returns the exit code of a command that called ctx.exit()
