"""``oncelog cluster status|partitions|elect-leaders``: the cluster's brokers, controller and partition health, each
partition's leader, leader epoch, replicas and ISR, and preferred/unclean leader elections (kafka-leader-election.sh).
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from oncelog.protocol.messages.elect_leaders_request import ElectLeadersRequest, TopicPartitions
from oncelog.protocol.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest

from ._common import CONTEXT, bootstrap_option, echo_json, fail, json_option
from ._wire import ClusterShape, PartitionInfo, Wire, error_name, wire


@click.group(context_settings=CONTEXT)
def cluster() -> None:
    """Brokers, controller and partition health of a cluster; leader elections."""


def _ongoing(w: Wire) -> dict[tuple[str, int], dict[str, list[int]]]:
    resp = w.send(ListPartitionReassignmentsRequest(timeout_ms=15000, topics=None))
    return {(t.name, p.partition_index): {"replicas": list(p.replicas), "adding": list(p.adding_replicas),
                                          "removing": list(p.removing_replicas)}
            for t in resp.topics for p in t.partitions}


def _partition_json(p: PartitionInfo, ongoing: dict[tuple[str, int], dict[str, list[int]]]) -> dict[str, Any]:
    moving = ongoing.get((p.topic, p.partition))
    return {"topic": p.topic, "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr), "offline_replicas": list(p.offline),
            "under_replicated": p.under_replicated, "offline": p.is_offline,
            "adding": moving["adding"] if moving else [], "removing": moving["removing"] if moving else []}


def _ids(nodes: tuple[int, ...] | list[int]) -> str:
    return ",".join(map(str, nodes)) or "-"


@cluster.command(context_settings=CONTEXT)
@bootstrap_option
@json_option
def status(bootstrap_server: str, as_json: bool) -> None:
    """Brokers, the active controller, and the partitions that are under-replicated (ISR smaller than the replicas),
    offline (no leader) or being reassigned."""
    with wire(bootstrap_server) as w:
        shape = w.shape()
        ongoing = _ongoing(w)
    parts = [p for ps in shape.topics.values() for p in ps]
    under = [p for p in parts if p.under_replicated and not p.is_offline]
    offline = [p for p in parts if p.is_offline]
    leaders: dict[int, int] = {}
    for p in parts:
        leaders[p.leader] = leaders.get(p.leader, 0) + 1
    if as_json:
        echo_json({"cluster_id": shape.cluster_id, "controller": shape.controller,
                   "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                                "leaders": leaders.get(b.node_id, 0)} for b in shape.brokers],
                   "topics": len(shape.topics), "partitions": len(parts),
                   "under_replicated": [_partition_json(p, ongoing) for p in under],
                   "offline": [_partition_json(p, ongoing) for p in offline],
                   "reassigning": [{"topic": t, "partition": i, **r} for (t, i), r in sorted(ongoing.items())]})
        return
    console = Console()
    console.print(f"Cluster {shape.cluster_id}: {len(shape.brokers)} broker(s), controller "
                  f"{shape.controller if shape.controller >= 0 else 'none'}; {len(shape.topics)} topic(s), "
                  f"{len(parts)} partition(s): {len(under)} under-replicated, {len(offline)} offline, "
                  f"{len(ongoing)} being reassigned")
    table = Table(title="Brokers")
    for col in ("Node", "Address", "Rack", "Leaders", "Role"):
        table.add_column(col)
    for b in shape.brokers:
        table.add_row(str(b.node_id), f"{b.host}:{b.port}", b.rack or "-", str(leaders.get(b.node_id, 0)),
                      "controller" if b.node_id == shape.controller else "")
    console.print(table)
    if under or offline:
        _partition_table(console, "Under-replicated and offline partitions", under + offline, ongoing)
    if ongoing:
        rtable = Table(title="Reassignments in progress")
        for col in ("Topic", "Partition", "Replicas", "Adding", "Removing"):
            rtable.add_column(col)
        for (t, i), r in sorted(ongoing.items()):
            rtable.add_row(t, str(i), _ids(r["replicas"]), _ids(r["adding"]), _ids(r["removing"]))
        console.print(rtable)


def _partition_table(console: Console, title: str, parts: list[PartitionInfo],
                     ongoing: dict[tuple[str, int], dict[str, list[int]]]) -> None:
    table = Table(title=title)
    for col in ("Topic", "Partition", "Leader", "Leader epoch", "Replicas", "ISR", "State"):
        table.add_column(col, justify="left" if col == "Topic" else "right")
    for p in parts:
        state = []
        if p.is_offline:
            state.append("offline")
        elif p.under_replicated:
            state.append("under-replicated")
        moving = ongoing.get((p.topic, p.partition))
        if moving:
            state.append(f"reassigning (+{_ids(moving['adding'])} -{_ids(moving['removing'])})")
        table.add_row(p.topic, str(p.partition), str(p.leader) if p.leader >= 0 else "none", str(p.leader_epoch),
                      _ids(p.replicas), _ids(p.isr), ", ".join(state) or "ok")
    console.print(table)


@cluster.command(context_settings=CONTEXT)
@click.argument("topics", nargs=-1, metavar="[TOPIC]...")
@click.option("--internal", "include_internal", is_flag=True, help="include internal topics (without TOPIC)")
@bootstrap_option
@json_option
def partitions(topics: tuple[str, ...], include_internal: bool, bootstrap_server: str, as_json: bool) -> None:
    """Each partition's leader, leader epoch, replicas and ISR (of TOPICs, or of every topic)."""
    with wire(bootstrap_server) as w:
        shape = w.shape(list(topics) if topics else None)
        ongoing = _ongoing(w)
    if shape.missing:
        fail(f"topic {', '.join(repr(t) for t in sorted(shape.missing))} does not exist",
             "check the name with 'oncelog topic list'")
    parts = [p for name, ps in shape.topics.items() if topics or include_internal or name not in shape.internal
             for p in ps]
    if as_json:
        echo_json([_partition_json(p, ongoing) for p in parts])
        return
    _partition_table(Console(), _title(shape, parts), parts, ongoing)


def _title(shape: ClusterShape, parts: list[PartitionInfo]) -> str:
    return f"{len(parts)} partition(s) on {len(shape.brokers)} broker(s), controller {shape.controller}"


def _tp(value: str) -> tuple[str, int]:
    topic, sep, index = value.rpartition(":")
    if not sep or not topic or not index.isdigit():
        fail(f"--partition expects TOPIC:PARTITION, got {value!r}", code=2)
    return topic, int(index)


@cluster.command("elect-leaders", context_settings=CONTEXT)
@click.option("--election-type", type=click.Choice(["preferred", "unclean"], case_sensitive=False),
              default="preferred", show_default=True,
              help="preferred: back to the first replica when it is in sync; unclean: a leader for a leaderless "
                   "partition even from outside the ISR (may lose acknowledged records)")
@click.option("-t", "--topic", "topics", multiple=True, metavar="TOPIC", help="every partition of TOPIC (repeatable)")
@click.option("-p", "--partition", "tps", multiple=True, metavar="TOPIC:PARTITION", help="one partition (repeatable)")
@click.option("--all", "all_partitions", is_flag=True, help="every partition of the cluster")
@bootstrap_option
@json_option
def elect_leaders(election_type: str, topics: tuple[str, ...], tps: tuple[str, ...], all_partitions: bool,
                  bootstrap_server: str, as_json: bool) -> None:
    """Elect leaders (like kafka-leader-election.sh): partitions that need no election say so."""
    if all_partitions == bool(topics or tps):
        fail("give --all, or --topic / --partition", code=2)
    with wire(bootstrap_server) as w:
        wanted: dict[str, list[int]] | None = None
        if not all_partitions:
            wanted = {}
            if topics:
                shape = w.shape(list(topics))
                if shape.missing:
                    fail(f"topic {', '.join(repr(t) for t in sorted(shape.missing))} does not exist",
                         "check the name with 'oncelog topic list'")
                for name, ps in shape.topics.items():
                    wanted.setdefault(name, []).extend(p.partition for p in ps)
            for t, i in map(_tp, tps):
                wanted.setdefault(t, []).append(i)
        req = ElectLeadersRequest(election_type=0 if election_type.lower() == "preferred" else 1,
                                  topic_partitions=None if wanted is None else [
                                      TopicPartitions(topic=t, partitions=sorted(set(ps)))
                                      for t, ps in sorted(wanted.items())],
                                  timeout_ms=30000)
        resp = w.send(req, timeout=45.0)
    if resp.error_code:
        fail(f"cannot elect leaders: {error_name(resp.error_code)}")
    rows = [{"topic": r.topic, "partition": p.partition_id, "error": error_name(p.error_code) if p.error_code else None,
             "message": p.error_message} for r in resp.replica_election_results for p in r.partition_result]
    if as_json:
        echo_json(rows)
    else:
        for r in rows:
            if r["error"] is None:
                click.echo(f"{r['topic']}-{r['partition']}: leader elected.")
            elif r["error"] == "ELECTION_NOT_NEEDED":
                click.echo(f"{r['topic']}-{r['partition']}: no election needed.")
            else:
                click.echo(f"{r['topic']}-{r['partition']}: {r['error']}: {r['message']}", err=True)
        if not rows:
            click.echo("No partition needed an election.")
    if any(r["error"] not in (None, "ELECTION_NOT_NEEDED") for r in rows):
        raise click.exceptions.Exit(1)
