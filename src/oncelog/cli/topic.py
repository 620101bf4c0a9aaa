"""``oncelog topic create|list|describe|delete``."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.console import Console
from rich.table import Table

from oncelog.client.admin import Admin

from ._common import BOOTSTRAP_HELP, DEFAULT_BOOTSTRAP, echo_json, fail, parse_pairs, user_errors

app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)

_BOOT = typer.Option(DEFAULT_BOOTSTRAP, "--bootstrap-server", "-b", help=BOOTSTRAP_HELP)
_JSON = typer.Option(False, "--json", help="machine-readable JSON on stdout")


def _admin(bootstrap: str) -> Admin:
    return Admin({"bootstrap.servers": bootstrap, "request.timeout.ms": 15000,
                  "socket.connection.setup.timeout.ms": 5000})


@app.command()
def create(
    name: str = typer.Argument(..., help="topic name"),
    partitions: int = typer.Option(1, "--partitions", "-p", min=1, help="number of partitions"),
    replication_factor: int = typer.Option(1, "--replication-factor", "-r", min=1),
    config: list[str] = typer.Option([], "--config", "-c", help="topic config KEY=VALUE (repeatable)"),
    if_not_exists: bool = typer.Option(False, "--if-not-exists", help="succeed if the topic already exists"),
    bootstrap_server: str = _BOOT,
    as_json: bool = _JSON,
) -> None:
    """Create a topic."""
    configs = parse_pairs(config, "--config")
    with user_errors(f"cannot create topic {name!r}"):
        admin = _admin(bootstrap_server)
        try:
            try:
                admin.create_topics(name, partitions, configs, replication_factor=replication_factor)
                created = True
            except Exception as e:
                if if_not_exists and getattr(e, "name", "") == "TOPIC_ALREADY_EXISTS":
                    created = False
                else:
                    raise
        finally:
            admin.close()
    if as_json:
        echo_json({"topic": name, "created": created, "partitions": partitions, "configs": configs})
    else:
        typer.echo(f"Created topic {name} with {partitions} partition(s)." if created
                   else f"Topic {name} already exists.")


@app.command("list")
def list_(
    include_internal: bool = typer.Option(False, "--internal", help="include internal topics"),
    bootstrap_server: str = _BOOT,
    as_json: bool = _JSON,
) -> None:
    """List topics."""
    with user_errors("cannot list topics"):
        admin = _admin(bootstrap_server)
        try:
            topics = admin.list_topics(include_internal)
        finally:
            admin.close()
    if as_json:
        echo_json([asdict(t) for t in topics])
        return
    table = Table(title=f"{len(topics)} topic(s)")
    table.add_column("Topic")
    table.add_column("Partitions", justify="right")
    table.add_column("Topic id", style="dim")
    for t in topics:
        table.add_row(t.name + (" (internal)" if t.is_internal else ""), str(t.partitions), t.topic_id)
    Console().print(table)


@app.command()
def describe(
    name: str = typer.Argument(..., help="topic name"),
    all_configs: bool = typer.Option(False, "--all-configs", help="show default configs too"),
    bootstrap_server: str = _BOOT,
    as_json: bool = _JSON,
) -> None:
    """Partitions (leader, start/end offsets) and configs of a topic."""
    with user_errors(f"cannot describe topic {name!r}"):
        admin = _admin(bootstrap_server)
        try:
            desc = admin.describe_topic(name)
            configs = admin.describe_configs(name)
        finally:
            admin.close()
    if as_json:
        out = asdict(desc)
        out["configs"] = {k: asdict(v) for k, v in sorted(configs.items())}
        echo_json(out)
        return
    console = Console()
    total = sum(p.high_watermark - p.log_start_offset for p in desc.partitions)
    table = Table(title=f"{desc.name}  ({len(desc.partitions)} partitions, {total} records, id {desc.topic_id})")
    for col in ("Partition", "Leader", "Replicas", "ISR", "Start offset", "End offset", "Stable offset", "Records"):
        table.add_column(col, justify="right")
    for p in desc.partitions:
        table.add_row(str(p.partition), str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                      str(p.log_start_offset), str(p.high_watermark), str(p.last_stable_offset),
                      str(p.high_watermark - p.log_start_offset))
    console.print(table)
    shown = {k: v for k, v in sorted(configs.items()) if all_configs or not v.is_default}
    ctable = Table(title="Configs" + ("" if all_configs else " (non-default; --all-configs for all)"))
    ctable.add_column("Key")
    ctable.add_column("Value")
    ctable.add_column("Source", style="dim")
    for k, v in shown.items():
        ctable.add_row(k, "******" if v.is_sensitive else str(v.value), v.source)
    console.print(ctable)


@app.command()
def delete(
    names: list[str] = typer.Argument(..., help="topic name(s)"),
    if_exists: bool = typer.Option(False, "--if-exists", help="succeed if a topic does not exist"),
    bootstrap_server: str = _BOOT,
    as_json: bool = _JSON,
) -> None:
    """Delete topics (their data is removed)."""
    deleted: list[str] = []
    with user_errors("cannot delete topic"):
        admin = _admin(bootstrap_server)
        try:
            for name in names:
                try:
                    admin.delete_topics(name)
                    deleted.append(name)
                except Exception as e:
                    if if_exists and getattr(e, "name", "") == "UNKNOWN_TOPIC_OR_PARTITION":
                        continue
                    raise
        finally:
            admin.close()
    if as_json:
        echo_json({"deleted": deleted})
    else:
        for name in deleted:
            typer.echo(f"Deleted topic {name}.")
    if not deleted and not if_exists:
        fail("no topic deleted")
