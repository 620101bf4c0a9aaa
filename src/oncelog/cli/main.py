"""The ``oncelog`` command line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from oncelog.broker.config import BrokerConfig, ConfigError

app = typer.Typer(help="oncelog: a Kafka-compatible log broker with exactly-once semantics.",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _root() -> None:
    """oncelog: a Kafka-compatible log broker with exactly-once semantics."""


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@app.command()
def serve(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="folder for all partition logs (log.dirs)"),
    listen: Optional[str] = typer.Option(None, "--listen", help="HOST:PORT to listen on (default 127.0.0.1:9092)"),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file of broker settings (Kafka names)"),
    set_: list[str] = typer.Option([], "--set", help="override one setting: KEY=VALUE, e.g. log.segment.bytes=1048576"),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error"),
) -> None:
    """Start a broker (one node) and serve until SIGTERM/SIGINT, which shut it down cleanly."""
    _setup_logging(log_level)
    overrides: dict[str, object] = {}
    for item in set_:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    if data_dir is not None:
        overrides["log.dirs"] = str(data_dir)
    if listen is not None:
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit():
            raise typer.BadParameter(f"--listen expects HOST:PORT, got {listen!r}")
        overrides["listeners"] = f"{host or '127.0.0.1'}:{port}"
    try:
        cfg = BrokerConfig.load(config, overrides)
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2)
    from oncelog.broker.server import run_broker

    run_broker(cfg)


from oncelog.cli import consume as _consume  # noqa: E402  (commands register after the app exists)
from oncelog.cli import produce as _produce  # noqa: E402
from oncelog.cli import topic as _topic  # noqa: E402

app.add_typer(_topic.app, name="topic")
app.add_typer(__import__("oncelog.cli.txn", fromlist=["app"]).app, name="txn")
app.add_typer(__import__("oncelog.cli.group", fromlist=["app"]).app, name="group")
app.command("produce")(_produce.produce)
app.command("consume")(_consume.consume)


def main() -> None:  # pragma: no cover
    app()
