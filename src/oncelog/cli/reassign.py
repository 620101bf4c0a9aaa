"""``oncelog topic reassign``: move partitions' replicas to other brokers, list and cancel moves in progress (like
kafka-reassign-partitions.sh, through AlterPartitionReassignments / ListPartitionReassignments).

The new replicas copy the data by replication while producers and consumers carry on; the move completes once
they are in sync (the controller then drops the old replicas, and moves the leadership if its broker left).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option
from ._wire import error_name, wire

if TYPE_CHECKING:
    from ._wire import Wire

Plan = dict[tuple[str, int], list[int] | None]


def _brokers(value: str, what: str) -> list[int]:
    try:
        out = [int(b) for b in value.split(",") if b.strip()]
    except ValueError:
        fail(f"{what} expects broker ids separated by commas, got {value!r}", code=2)
    if not out:
        fail(f"{what} names no broker", code=2)
    return out


def _replica_items(topic: str | None, items: tuple[str, ...]) -> Plan:
    """``--replicas PARTITION:B,B,B`` (or ``TOPIC:PARTITION:B,B,B``)."""
    plan: Plan = {}
    for item in items:
        head, sep, brokers = item.rpartition(":")
        name, _, index = head.rpartition(":")
        name = name or topic or ""
        if not sep or not index.isdigit() or not name:
            fail(f"--replicas expects PARTITION:BROKER,BROKER,... (or TOPIC:PARTITION:...), got {item!r}", code=2)
        plan[(name, int(index))] = _brokers(brokers, "--replicas")
    return plan


def _plan_file(path: str) -> Plan:
    """A kafka-reassign-partitions.sh plan: ``{"version": 1, "partitions": [{"topic", "partition", "replicas"}]}``."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        doc = json.loads(text)
        plan: Plan = {}
        for p in doc["partitions"]:
            replicas = p.get("replicas")
            plan[(str(p["topic"]), int(p["partition"]))] = None if replicas is None else [int(r) for r in replicas]
    except OSError as e:
        fail(f"cannot read the plan {path}: {e.strerror or e}", code=2)
    except (ValueError, KeyError, TypeError) as e:
        fail(f"the plan {path} is not a reassignment plan: {e}",
             'expected {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}',
             code=2)
    return plan


def _spread(w: Wire, topic: str, brokers: list[int], replication_factor: int | None) -> Plan:
    """Every partition of ``topic`` onto ``brokers``, the replication factor kept (or the one given), striped so
    that each broker leads about as many partitions (partition i starts at broker i mod n)."""
    shape = w.shape([topic])
    if topic in shape.missing or topic not in shape.topics:
        fail(f"topic {topic!r} does not exist", "check the name with 'oncelog topic list'")
    plan: Plan = {}
    for p in shape.topics[topic]:
        rf = replication_factor or len(p.replicas)
        if rf > len(brokers):
            fail(f"{topic}-{p.partition} has {rf} replicas but --brokers names {len(brokers)}",
                 "name at least as many brokers, or give --replication-factor")
        plan[(topic, p.partition)] = [brokers[(p.partition + k) % len(brokers)] for k in range(rf)]
    return plan


def _list(w: Wire, topics: list[str] | None) -> dict[tuple[str, int], dict[str, list[int]]]:
    from oncelog.protocol.messages.list_partition_reassignments_request import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsTopics,
    )

    if topics is None:
        req = ListPartitionReassignmentsRequest(timeout_ms=15000, topics=None)
    else:
        shape = w.shape(topics)
        req = ListPartitionReassignmentsRequest(timeout_ms=15000, topics=[
            ListPartitionReassignmentsTopics(name=t, partition_indexes=[p.partition for p in shape.topics.get(t, ())])
            for t in topics])
    resp = w.send(req)
    if resp.error_code:
        fail(f"cannot list reassignments: {error_name(resp.error_code)}: {resp.error_message}")
    return {(t.name, p.partition_index): {"replicas": list(p.replicas), "adding": list(p.adding_replicas),
                                          "removing": list(p.removing_replicas)}
            for t in resp.topics for p in t.partitions}


def _send(w: Wire, plan: Plan) -> list[dict[str, Any]]:
    from oncelog.protocol.messages.alter_partition_reassignments_request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
        ReassignableTopic,
    )

    by_topic: dict[str, list[ReassignablePartition]] = {}
    for (t, i), replicas in sorted(plan.items()):
        by_topic.setdefault(t, []).append(ReassignablePartition(partition_index=i, replicas=replicas))
    resp = w.send(AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[
        ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()]), timeout=45.0)
    if resp.error_code:
        fail(f"cannot reassign: {error_name(resp.error_code)}: {resp.error_message}")
    return [{"topic": t.name, "partition": p.partition_index, "replicas": plan.get((t.name, p.partition_index)),
             "error": error_name(p.error_code) if p.error_code else None, "message": p.error_message}
            for t in resp.responses for p in t.partitions]


def _wait(w: Wire, plan: Plan, timeout: float) -> dict[tuple[str, int], dict[str, list[int]]]:
    """Poll until none of ``plan``'s partitions is being reassigned; the ones still moving after ``timeout``."""
    topics = sorted({t for t, _ in plan})
    deadline = time.monotonic() + timeout
    while True:
        moving = {tp: r for tp, r in _list(w, topics).items() if tp in plan}
        if not moving or time.monotonic() >= deadline:
            return moving
        time.sleep(0.5)


def _ids(nodes: list[int]) -> str:
    return ",".join(map(str, nodes)) or "-"


@click.command(context_settings=CONTEXT)
@click.argument("name", required=False)
@click.option("-r", "--replicas", "replica_items", multiple=True, metavar="PARTITION:BROKER,BROKER,...",
              help="the new replicas of one partition of NAME, the first the preferred leader, e.g. 0:2,3,4 "
                   "(repeatable; TOPIC:PARTITION:... without NAME)")
@click.option("--brokers", metavar="BROKER,BROKER,...",
              help="move every partition of NAME onto these brokers (replication factor kept, leaders spread)")
@click.option("--replication-factor", type=click.IntRange(min=1), metavar="N", help="with --brokers: N replicas each")
@click.option("--plan", "plan_path", metavar="FILE|-",
              help="a kafka-reassign-partitions.sh JSON plan ({\"version\":1,\"partitions\":[{\"topic\":..., "
                   "\"partition\":..., \"replicas\":[...]}]})")
@click.option("--list", "list_only", is_flag=True, help="show the reassignments in progress (of NAME, or all)")
@click.option("--cancel", is_flag=True,
              help="cancel the reassignments in progress (of NAME, of the --replicas partitions, or of the plan)")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="wait up to SECONDS for the moves to complete (exit 1 if they do not)")
@connection_options
@json_option
def reassign(name: str | None, replica_items: tuple[str, ...], brokers: str | None, replication_factor: int | None,
             plan_path: str | None, list_only: bool, cancel: bool, wait_s: float | None, conn: Conn,
             as_json: bool) -> None:
    """Move partitions of topic NAME (or of a plan) to other brokers, or list / cancel moves in progress."""
    sources = sum(1 for s in (replica_items, brokers, plan_path) if s)
    if list_only:
        if sources or cancel:
            fail("--list takes only NAME", code=2)
        with wire(conn) as w:
            ongoing = _list(w, [name] if name else None)
        _print_ongoing(ongoing, as_json)
        return
    if sources > 1:
        fail("give one of --replicas, --brokers and --plan", code=2)
    if not sources and not (cancel and name):
        fail("nothing to do: give --replicas, --brokers or --plan (or --list, or --cancel with NAME)", code=2)
    if replication_factor is not None and not brokers:
        fail("--replication-factor goes with --brokers", code=2)
    with wire(conn) as w:
        if plan_path:
            plan = _plan_file(plan_path)
        elif replica_items:
            plan = _replica_items(name, replica_items)
        elif brokers:
            if not name:
                fail("--brokers needs the topic NAME", code=2)
            plan = _spread(w, name, _brokers(brokers, "--brokers"), replication_factor)
        else:
            assert name is not None
            plan = {tp: None for tp in _list(w, [name])}
            if not plan:
                fail(f"no reassignment of {name!r} is in progress", code=1)
        if cancel:
            plan = {tp: None for tp in plan}
        results = _send(w, plan)
        moving = _wait(w, plan, wait_s) if wait_s is not None and not cancel else {}
    failed = [r for r in results if r["error"]]
    if as_json:
        echo_json({"results": results, "still_moving": [{"topic": t, "partition": i, **r}
                                                        for (t, i), r in sorted(moving.items())]})
    else:
        for r in results:
            where = f"{r['topic']}-{r['partition']}"
            if r["error"]:
                click.echo(f"{where}: {r['error']}: {r['message']}", err=True)
            elif cancel:
                click.echo(f"{where}: reassignment cancelled.")
            else:
                click.echo(f"{where}: reassignment to {_ids(r['replicas'] or [])} started.")
        if wait_s is not None and not cancel and not failed:
            click.echo("Every move completed." if not moving else f"{len(moving)} partition(s) still moving after "
                                                                  f"{wait_s:g} s; see 'oncelog topic reassign --list'.")
    if failed or moving:
        raise click.exceptions.Exit(1)


def _print_ongoing(ongoing: dict[tuple[str, int], dict[str, list[int]]], as_json: bool) -> None:
    if as_json:
        echo_json([{"topic": t, "partition": i, **r} for (t, i), r in sorted(ongoing.items())])
        return
    if not ongoing:
        click.echo("No reassignment in progress.")
        return
    for (t, i), r in sorted(ongoing.items()):
        click.echo(f"{t}-{i}: replicas {_ids(r['replicas'])}, adding {_ids(r['adding'])}, "
                   f"removing {_ids(r['removing'])}")
