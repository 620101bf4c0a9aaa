"""``oncelog topic create|list|describe|alter|delete|delete-records`` (kafka-topics.sh, kafka-configs.sh and
kafka-delete-records.sh in one place)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option, parse_pairs, user_errors
from ._table import Col, print_table

if TYPE_CHECKING:
    from oncelog.client.admin import Admin

_INCLUDE_INTERNAL_HELP = "also list internal topics (__consumer_offsets, __transaction_state and other names that " \
                         "start with '__', e.g. the Spark sink's commit log)"


@click.group(context_settings=CONTEXT)
def topic() -> None:
    """Create, list, describe, alter and delete topics, and delete old records."""


def _admin(conn: Conn) -> Admin:
    from oncelog.client.admin import Admin

    return Admin(conn.client_conf())


def is_internal(name: str, flagged: bool) -> bool:
    """Kafka's internal topics (Metadata's is_internal) and, like them, every name that starts with '__' (the
    prefix Kafka reserves for internal use; the Spark sink's commit log is one)."""
    return flagged or name.startswith("__")


def _not_found(e: Exception) -> bool:
    from oncelog.client.errors import KafkaError
    from oncelog.protocol.errors import ErrorCode

    return isinstance(e, KafkaError) and e.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _exists_or_fail(admin: Admin, name: str) -> None:
    try:
        admin.describe_topic(name)
    except Exception as e:
        if _not_found(e):
            fail(f"topic {name!r} does not exist", "check the name with 'oncelog topic list'")
        raise


@topic.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-p", "--partitions", type=click.IntRange(min=1), metavar="N",
              help="number of partitions  [default: the broker's num.partitions]")
@click.option("-r", "--replication-factor", type=click.IntRange(min=1), metavar="N",
              help="copies of each partition  [default: the broker's default.replication.factor]")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="a topic config, e.g. retention.ms=86400000 or cleanup.policy=compact (repeatable)")
@click.option("--if-not-exists", is_flag=True, help="succeed if the topic exists already")
@connection_options
@json_option
def create(name: str, partitions: int | None, replication_factor: int | None, configs: tuple[str, ...],
           if_not_exists: bool, conn: Conn, as_json: bool) -> None:
    """Create topic NAME.

    What is not given is left to the broker, as kafka-topics.sh does (CreateTopics with -1): its num.partitions and
    default.replication.factor.
    """
    from oncelog.client.errors import KafkaError
    from oncelog.protocol.errors import ErrorCode

    cfg = parse_pairs(configs, "--config")
    created = True
    with user_errors(f"cannot create topic {name!r}", conn):
        with _admin(conn) as admin:
            try:
                admin.create_topics(name, -1 if partitions is None else partitions, cfg,
                                    replication_factor=-1 if replication_factor is None else replication_factor)
            except KafkaError as e:
                if e.code() != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                if not if_not_exists:
                    fail(f"topic {name!r} already exists",
                         "add --if-not-exists to accept it, or 'oncelog topic describe " + name + "' to see it")
                created = False
            desc = admin.describe_topic(name)
    count = len(desc.partitions)
    rf = max((len(p.replicas) for p in desc.partitions), default=0)
    if as_json:
        echo_json({"topic": name, "created": created, "partitions": count, "replication_factor": rf,
                   "configs": cfg})
    else:
        click.echo(f"Created topic {name} with {count} partition(s), replication factor {rf}." if created
                   else f"Topic {name} exists already; nothing changed.")


@topic.command("list", context_settings=CONTEXT)
@click.option("--include-internal", "--internal", "include_internal", is_flag=True, help=_INCLUDE_INTERNAL_HELP)
@connection_options
@json_option
def list_(include_internal: bool, conn: Conn, as_json: bool) -> None:
    """List topics (internal ones with --include-internal)."""
    from dataclasses import asdict

    with user_errors("cannot list topics", conn):
        with _admin(conn) as admin:
            listed = admin.list_topics(True)
    topics = [t for t in listed if include_internal or not is_internal(t.name, t.is_internal)]
    hidden = len(listed) - len(topics)
    if as_json:
        echo_json([{**asdict(t), "is_internal": is_internal(t.name, t.is_internal)} for t in topics])
        return
    title = f"{len(topics)} topic(s)" + (f"; {hidden} internal hidden (--include-internal)" if hidden else "")
    print_table(title, [Col("Topic", fold=True), Col("Partitions", right=True), Col("Topic id", dim=True)],
                [[t.name + (" (internal)" if is_internal(t.name, t.is_internal) else ""), str(t.partitions),
                  t.topic_id] for t in topics])


@topic.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("--all-configs", is_flag=True, help="show every config, not only those set on the topic or broker")
@connection_options
@json_option
def describe(name: str, all_configs: bool, conn: Conn, as_json: bool) -> None:
    """Partitions (leader and its epoch, replicas, ISR, start, end and stable offsets) and configs of topic NAME."""
    from dataclasses import asdict

    with user_errors(f"cannot describe topic {name!r}", conn):
        with _admin(conn) as admin:
            try:
                desc = admin.describe_topic(name)
            except Exception as e:
                if _not_found(e):
                    fail(f"topic {name!r} does not exist", "check the name with 'oncelog topic list'")
                raise
            configs = admin.describe_configs(name)
    if as_json:
        out = asdict(desc)
        out["configs"] = {k: asdict(v) for k, v in sorted(configs.items())}
        echo_json(out)
        return
    total = sum(p.high_watermark - p.log_start_offset for p in desc.partitions)
    print_table(f"{desc.name}  ({len(desc.partitions)} partitions, {total} records, id {desc.topic_id})",
                [Col("Partition", right=True), Col("Leader", right=True), Col("Leader epoch", right=True),
                 Col("Replicas", right=True), Col("ISR", right=True), Col("Start offset", right=True),
                 Col("End offset", right=True), Col("LSO", right=True), Col("Records", right=True)],
                [[str(p.partition), str(p.leader), str(p.leader_epoch), ",".join(map(str, p.replicas)),
                  ",".join(map(str, p.isr)), str(p.log_start_offset), str(p.high_watermark),
                  str(p.last_stable_offset), str(p.high_watermark - p.log_start_offset)] for p in desc.partitions])
    shown = {k: v for k, v in sorted(configs.items()) if all_configs or not v.is_default}
    print_table("Configs" + ("" if all_configs else " (set on the topic or broker; --all-configs for all)"),
                [Col("Key", fold=True), Col("Value", fold=True), Col("Source", fold=True, dim=True)],
                [[k, "******" if v.is_sensitive else str(v.value), v.source] for k, v in shown.items()])


@topic.command(context_settings=CONTEXT)
@click.argument("name")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="set a topic config (repeatable)")
@click.option("-d", "--delete-config", "deletes", multiple=True, metavar="KEY",
              help="return a config to the broker's default (repeatable)")
@click.option("-p", "--partitions", type=click.IntRange(min=1), metavar="N",
              help="grow the topic to N partitions (keys then map to other partitions)")
@connection_options
@json_option
def alter(name: str, configs: tuple[str, ...], deletes: tuple[str, ...], partitions: int | None, conn: Conn,
          as_json: bool) -> None:
    """Change configs of topic NAME, or add partitions to it."""
    to_set = parse_pairs(configs, "--config")
    if not to_set and not deletes and partitions is None:
        fail("nothing to change: give --config KEY=VALUE, --delete-config KEY or --partitions N", code=2)
    with user_errors(f"cannot alter topic {name!r}", conn):
        with _admin(conn) as admin:
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
@connection_options
@json_option
def delete(names: tuple[str, ...], if_exists: bool, conn: Conn, as_json: bool) -> None:
    """Delete topics with their data."""
    deleted: list[str] = []
    missing: list[str] = []
    with user_errors("cannot delete topic", conn):
        with _admin(conn) as admin:
            for name in names:
                try:
                    admin.delete_topics(name)
                    deleted.append(name)
                except Exception as e:
                    if not _not_found(e):
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
@connection_options
@json_option
def delete_records(name: str, before: str, partitions: tuple[int, ...], conn: Conn, as_json: bool) -> None:
    """Delete the oldest records of topic NAME (its log start offset moves up), like kafka-delete-records.sh."""
    if before != "end" and not before.isdigit():
        fail(f"--before expects an offset or 'end', got {before!r}", code=2)
    with user_errors(f"cannot delete records of {name!r}", conn):
        with _admin(conn) as admin:
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
