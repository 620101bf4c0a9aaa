"""The ``oncelog`` command line: ``serve`` a broker; ``topic``, ``produce``, ``consume``, ``group`` and ``txn`` talk to
one over the Kafka protocol, like Kafka's own scripts (kafka-topics.sh, kafka-console-producer.sh, ...).

Every error is one ``error:`` line on stderr, often followed by a ``hint:`` line, and a non-zero exit: 1 when the
request failed, 2 for a usage error, 130 when interrupted.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import click

from ._common import CONTEXT, fail, quiet_client_logs, root_connection_options


def _print_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    """``--version``: ``oncelog.__version__``, the one place the version is written (pyproject.toml reads it too, so
    an installed package's metadata says the same; no importlib.metadata, which is slow, and a source tree knows it
    too)."""
    if not value or ctx.resilient_parsing:
        return
    from oncelog import __version__

    click.echo(f"oncelog {__version__}")
    ctx.exit(0)


def _topic() -> click.Command:
    from . import reassign, topic

    if "reassign" not in topic.topic.commands:  # a module of its own: topic.py is the admin client's commands
        topic.topic.add_command(reassign.reassign)
    return topic.topic


def _cluster() -> click.Command:
    from . import cluster

    return cluster.cluster


def _produce() -> click.Command:
    from . import produce

    return produce.produce


def _consume() -> click.Command:
    from . import consume

    return consume.consume


def _group() -> click.Command:
    from . import group

    return group.group


def _txn() -> click.Command:
    from . import txn

    return txn.txn


def _acl() -> click.Command:
    from . import acl

    return acl.acl


def _quota() -> click.Command:
    from . import quota

    return quota.quota


def _user() -> click.Command:
    from . import user

    return user.user


#: the commands in modules of their own, each loaded only when it runs (its options alone are ~10 ms of click
#: objects), with the line 'oncelog --help' shows for it (tests/integration/test_cli_newcomer.py checks that it is
#: the command's own first line)
LAZY: dict[str, tuple[Callable[[], click.Command], str]] = {
    "acl": (_acl, "Manage ACLs (like kafka-acls.sh); the broker needs authorizer.class.name set."),
    "cluster": (_cluster, "Brokers, controller and partition health of a cluster; leader elections."),
    "consume": (_consume, "Print records of TOPIC: new ones by default, --from-beginning or --offset to read what "
                          "is there."),
    "group": (_group, "Inspect consumer groups and manage their offsets (like kafka-consumer-groups.sh)."),
    "produce": (_produce, "Write records to TOPIC: one per line of stdin, or one per --value."),
    "quota": (_quota, "Set, remove and list client quotas (like kafka-configs.sh for users, clients and ips)."),
    "topic": (_topic, "Create, list, describe, alter and delete topics, and delete old records."),
    "txn": (_txn, "Inspect transactions and abort hanging ones (like kafka-transactions.sh)."),
    "user": (_user, "Add, list and remove SCRAM users (SASL SCRAM-SHA-256 / SCRAM-SHA-512)."),
}


def load(argv: list[str]) -> None:
    """Import what the command named in ``argv`` runs on (its module, and the modules it lists in ``RUNTIME``), so
    that :func:`oncelog.cli.run` can do it while a Ctrl-C in the middle of an import is held to its end."""
    name = next((a for a in argv if a in LAZY), None)
    if name is None:
        return
    command = LAZY[name][0]()
    module = sys.modules.get(command.callback.__module__ if command.callback is not None else "")
    for dependency in getattr(module, "RUNTIME", ()):
        importlib.import_module(dependency)


class _LazyGroup(click.Group):
    """The root group: a command's module is imported when that command runs (or shows its own help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY and cmd_name not in self.commands:
            self.add_command(LAZY[cmd_name][0](), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)  # as click.Group's
        rows = [(name, LAZY[name][1] if name in LAZY and name not in self.commands
                 else self.commands[name].get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings=CONTEXT)
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@root_connection_options
def cli(bootstrap_server: str | None, command_config: str | None) -> None:
    """oncelog: a Kafka-compatible log broker with exactly-once semantics.

    Start a broker with 'oncelog serve', then use any Kafka client, or these commands, against 127.0.0.1:9092.
    -b/--bootstrap-server and --command-config go before the command or after it.
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
    from oncelog.broker.settings.config import BrokerConfig, ConfigError

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
