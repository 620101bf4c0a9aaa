"""``oncelog topic create|list|describe|alter|delete|delete-records`` (kafka-topics.sh, kafka-configs.sh and
kafka-delete-records.sh in one place)."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.console import Console
from rich.table import Table

from oncelog.client.admin import Admin
from oncelog.client.errors import KafkaError
from oncelog.protocol.errors import ErrorCode

from ._common import CONTEXT, bootstrap_option, client_conf, echo_json, fail, json_option, parse_pairs, user_errors


@click.group(context_settings=CONTEXT)
def topic() -> None:
    """Create, list, describe, alter and delete topics, and delete old records."""


def _admin(bootstrap: str) -> Admin:
    return Admin(client_conf(bootstrap))


def _exists_or_fail(admin: Admin, name: str) -> None:
    try:
        admin.describe_topic(name)
    except KafkaError as e:
        if e.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            fail(f"topic {name!r} does not exist", "check the name with 'oncelog topic list'")
        raise


@topic.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), default=1, show_default=True, metavar="N")
@click.option("-r", "--replication-factor", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="1 on this single-node broker")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="a topic config, e.g. retention.ms=86400000 or cleanup.policy=compact (repeatable)")
@click.option("--if-not-exists", is_flag=True, help="succeed if the topic exists already")
@bootstrap_option
@json_option
def create(name: str, partitions: int, replication_factor: int, configs: tuple[str, ...], if_not_exists: bool,
           bootstrap_server: str, as_json: bool) -> None:
    """Create topic NAME."""
    cfg = parse_pairs(configs, "--config")
    created = True
    with user_errors(f"cannot create topic {name!r}", bootstrap_server):
        with _admin(bootstrap_server) as admin:
            try:
                admin.create_topics(name, partitions, cfg, replication_factor=replication_factor)
            except KafkaError as e:
                if e.code() != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                if not if_not_exists:
                    fail(f"topic {name!r} already exists",
                         "add --if-not-exists to accept it, or 'oncelog topic describe " + name + "' to see it")
                created = False
    if as_json:
        echo_json({"topic": name, "created": created, "partitions": partitions, "configs": cfg})
    else:
        click.echo(f"Created topic {name} with {partitions} partition(s)." if created
                   else f"Topic {name} exists already; nothing changed.")


@topic.command("list", context_settings=CONTEXT)
@click.option("--internal", "include_internal", is_flag=True, help="include internal topics (__consumer_offsets, ...)")
@bootstrap_option
@json_option
def list_(include_internal: bool, bootstrap_server: str, as_json: bool) -> None:
    """List topics."""
    with user_errors("cannot list topics", bootstrap_server):
        with _admin(bootstrap_server) as admin:
            topics = admin.list_topics(include_internal)
    if as_json:
        echo_json([asdict(t) for t in topics])
        return
    table = Table(title=f"{len(topics)} topic(s)")
    table.add_column("Topic", overflow="fold")
    table.add_column("Partitions", justify="right")
    table.add_column("Topic id", style="dim")
    for t in topics:
        table.add_row(t.name + (" (internal)" if t.is_internal else ""), str(t.partitions), t.topic_id)
    Console().print(table)


@topic.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("--all-configs", is_flag=True, help="show every config, not only those set on the topic or broker")
@bootstrap_option
@json_option
def describe(name: str, all_configs: bool, bootstrap_server: str, as_json: bool) -> None:
    """Partitions (leader and its epoch, replicas, ISR, start, end and stable offsets) and configs of topic NAME."""
    with user_errors(f"cannot describe topic {name!r}", bootstrap_server):
        with _admin(bootstrap_server) as admin:
            try:
                desc = admin.describe_topic(name)
            except KafkaError as e:
                if e.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    fail(f"topic {name!r} does not exist", "check the name with 'oncelog topic list'")
                raise
            configs = admin.describe_configs(name)
    if as_json:
        out = asdict(desc)
        out["configs"] = {k: asdict(v) for k, v in sorted(configs.items())}
        echo_json(out)
        return
    console = Console()
    total = sum(p.high_watermark - p.log_start_offset for p in desc.partitions)
    table = Table(title=f"{desc.name}  ({len(desc.partitions)} partitions, {total} records, id {desc.topic_id})")
    for col in ("Partition", "Leader", "Leader epoch", "Replicas", "ISR", "Start offset", "End offset",
                "Stable offset", "Records"):
        table.add_column(col, justify="right")
    for p in desc.partitions:
        table.add_row(str(p.partition), str(p.leader), str(p.leader_epoch), ",".join(map(str, p.replicas)),
                      ",".join(map(str, p.isr)),
                      str(p.log_start_offset), str(p.high_watermark), str(p.last_stable_offset),
                      str(p.high_watermark - p.log_start_offset))
    console.print(table)
    shown = {k: v for k, v in sorted(configs.items()) if all_configs or not v.is_default}
    ctable = Table(title="Configs" + ("" if all_configs else " (set on the topic or broker; --all-configs for all)"))
    ctable.add_column("Key")
    ctable.add_column("Value", overflow="fold")
    ctable.add_column("Source", style="dim")
    for k, v in shown.items():
        ctable.add_row(k, "******" if v.is_sensitive else str(v.value), v.source)
    console.print(ctable)


@topic.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="set a topic config (repeatable)")
@click.option("-d", "--delete-config", "deletes", multiple=True, metavar="KEY",
              help="return a config to the broker's default (repeatable)")
@click.option("-p", "--partitions", type=click.IntRange(min=1), metavar="N",
              help="grow the topic to N partitions (keys then map to other partitions)")
@bootstrap_option
@json_option
def alter(name: str, configs: tuple[str, ...], deletes: tuple[str, ...], partitions: int | None,
          bootstrap_server: str, as_json: bool) -> None:
    """Change configs of topic NAME, or add partitions to it."""
    to_set = parse_pairs(configs, "--config")
    if not to_set and not deletes and partitions is None:
        fail("nothing to change: give --config KEY=VALUE, --delete-config KEY or --partitions N", code=2)
    with user_errors(f"cannot alter topic {name!r}", bootstrap_server):
        with _admin(bootstrap_server) as admin:
            _exists_or_fail(admin, name)
            before = len(admin.describe_topic(name).partitions)
            if partitions is not None and partitions < before:
                fail(f"topic {name!r} has {before} partitions; a topic's partitions can be added, never removed",
                     f"give --partitions {before} or more")
            if to_set or deletes:
                admin.alter_configs(name, to_set, deletes)
            if partitions is not None and partitions > before:
                admin.create_partitions(name, partitions)
    if as_json:
        echo_json({"topic": name, "set": to_set, "deleted": list(deletes),
                   "partitions": partitions if partitions is not None else before})
        return
    for k, v in to_set.items():
        click.echo(f"Set {k}={v} on topic {name}.")
    for k in deletes:
        click.echo(f"Returned {k} of topic {name} to its default.")
    if partitions is not None:
        click.echo(f"Topic {name} has {partitions} partition(s)" + (f" (was {before})." if partitions != before
                                                                    else " already."))


@topic.command(context_settings=CONTEXT)
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option("--if-exists", is_flag=True, help="succeed if a topic does not exist")
@bootstrap_option
@json_option
def delete(names: tuple[str, ...], if_exists: bool, bootstrap_server: str, as_json: bool) -> None:
    """Delete topics with their data."""
    deleted: list[str] = []
    missing: list[str] = []
    with user_errors("cannot delete topic", bootstrap_server):
        with _admin(bootstrap_server) as admin:
            for name in names:
                try:
                    admin.delete_topics(name)
                    deleted.append(name)
                except KafkaError as e:
                    if e.code() != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        raise
                    missing.append(name)
    if as_json:
        echo_json({"deleted": deleted, "missing": missing})
    else:
        for name in deleted:
            click.echo(f"Deleted topic {name}.")
    if missing and not if_exists:
        fail(f"topic {', '.join(repr(m) for m in missing)} does not exist", "check the names with 'oncelog topic "
             "list' (or add --if-exists)")


@topic.command("delete-records", context_settings=CONTEXT)
@click.argument("name")
@click.option("--before", required=True, metavar="OFFSET|end",
              help="delete every record below OFFSET; 'end' deletes all records written so far")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True, metavar="N",
              help="only partition N (repeatable; default: every partition)")
@bootstrap_option
@json_option
def delete_records(name: str, before: str, partitions: tuple[int, ...], bootstrap_server: str,
                   as_json: bool) -> None:
    """Delete the oldest records of topic NAME (its log start offset moves up), like kafka-delete-records.sh."""
    if before != "end" and not before.isdigit():
        fail(f"--before expects an offset or 'end', got {before!r}", code=2)
    with user_errors(f"cannot delete records of {name!r}", bootstrap_server):
        with _admin(bootstrap_server) as admin:
            _exists_or_fail(admin, name)
            all_parts = [p.partition for p in admin.describe_topic(name).partitions]
            unknown = sorted(set(partitions) - set(all_parts))
            if unknown:
                fail(f"topic {name!r} has no partition {unknown[0]}", f"its partitions are 0..{len(all_parts) - 1}")
            tps = [(name, p) for p in (sorted(set(partitions)) or all_parts)]
            ends = admin.list_offsets({tp: "latest" for tp in tps})
            target = {tp: ends[tp].offset if before == "end" else min(int(before), ends[tp].offset) for tp in tps}
            low = admin.delete_records(target)
    rows = [{"topic": t, "partition": p, "log_start_offset": low[(t, p)]} for t, p in tps]
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(f"{name}-{r['partition']}: records below offset {r['log_start_offset']} deleted.")
