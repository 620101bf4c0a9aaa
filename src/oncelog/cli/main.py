"""The ``oncelog`` command line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from oncelog.broker.config import BrokerConfig, ConfigError
from oncelog.cli._common import fail

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
    listen: Optional[str] = typer.Option(None, "--listen", help="HOST:PORT to listen on (listeners; default "
                                         "127.0.0.1:9092)"),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML file of broker settings (Kafka names)"),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE",
                                   help="one setting, e.g. log.segment.bytes=1048576 (repeatable; wins over "
                                        "--config); the README lists them all"),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error"),
) -> None:
    """Start a broker (one node) and serve until SIGTERM/SIGINT, which shut it down cleanly."""
    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        fail(f"--log-level must be debug, info, warning or error, got {log_level!r}", code=2)
    overrides: dict[str, object] = {}
    for item in set_:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set expects KEY=VALUE, got {item!r}", "e.g. --set log.retention.hours=24", code=2)
        overrides[key.strip()] = value.strip()
    if data_dir is not None:
        overrides["log.dirs"] = str(data_dir)
    if listen is not None:
        overrides["listeners"] = listen
    try:
        cfg = BrokerConfig.load(config, overrides)
    except ConfigError as e:
        fail(str(e), code=2)
    _setup_logging(log_level)
    from oncelog.broker.server import StartupError, run_broker

    try:
        run_broker(cfg)
    except StartupError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted while starting; the data folder is left as it was (the next start recovers it)",
             code=130)


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
