"""``oncelog cluster status|partitions|elect-leaders``: the cluster's brokers, controller and partition health, each
partition's leader, leader epoch, replicas and ISR, and preferred/unclean leader elections (kafka-leader-election.sh).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option
from ._table import Col, print_table
from ._wire import ClusterShape, PartitionInfo, error_name, wire
from .topic import is_internal

if TYPE_CHECKING:
    from ._wire import Wire

Ongoing = dict[tuple[str, int], dict[str, list[int]]]


@click.group(context_settings=CONTEXT)
def cluster() -> None:
    """Brokers, controller and partition health of a cluster; leader elections."""


def _ongoing(w: Wire) -> Ongoing:
    from oncelog.protocol.messages.list_partition_reassignments_request import ListPartitionReassignmentsRequest

    resp = w.send(ListPartitionReassignmentsRequest(timeout_ms=15000, topics=None))
    return {(t.name, p.partition_index): {"replicas": list(p.replicas), "adding": list(p.adding_replicas),
                                          "removing": list(p.removing_replicas)}
            for t in resp.topics for p in t.partitions}


def _partition_json(p: PartitionInfo, ongoing: Ongoing) -> dict[str, Any]:
    moving = ongoing.get((p.topic, p.partition))
    return {"topic": p.topic, "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr), "offline_replicas": list(p.offline),
            "under_replicated": p.under_replicated, "offline": p.is_offline,
            "adding": moving["adding"] if moving else [], "removing": moving["removing"] if moving else []}


def _ids(nodes: tuple[int, ...] | list[int]) -> str:
    return ",".join(map(str, nodes)) or "-"


def down_brokers(shape: ClusterShape, ongoing: Ongoing) -> list[int]:
    """Brokers the cluster knows but that are not registered (Metadata lists only live brokers): those named as a
    replica, in an ISR or as an offline replica of a partition, or in a reassignment."""
    named: set[int] = set()
    for ps in shape.topics.values():
        for p in ps:
            named.update(p.replicas, p.isr, p.offline)
    for r in ongoing.values():
        named.update(r["replicas"], r["adding"], r["removing"])
    return sorted(named - {b.node_id for b in shape.brokers} - {-1})


@cluster.command(context_settings=CONTEXT)
@connection_options
@json_option
def status(conn: Conn, as_json: bool) -> None:
    """Brokers (a broker that holds replicas but is not registered shows as down), the active controller, and the
    partitions that are under-replicated (ISR smaller than the replicas), offline (no leader) or being reassigned."""
    with wire(conn) as w:
        shape = w.shape()
        ongoing = _ongoing(w)
    parts = [p for ps in shape.topics.values() for p in ps]
    under = [p for p in parts if p.under_replicated and not p.is_offline]
    offline = [p for p in parts if p.is_offline]
    down = down_brokers(shape, ongoing)
    leaders: dict[int, int] = {}
    for p in parts:
        leaders[p.leader] = leaders.get(p.leader, 0) + 1
    if as_json:
        echo_json({"cluster_id": shape.cluster_id, "controller": shape.controller,
                   "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                                "leaders": leaders.get(b.node_id, 0), "state": "up"} for b in shape.brokers]
                   + [{"node_id": n, "host": None, "port": None, "rack": None, "leaders": 0, "state": "down"}
                      for n in down],
                   "topics": len(shape.topics), "partitions": len(parts),
                   "under_replicated": [_partition_json(p, ongoing) for p in under],
                   "offline": [_partition_json(p, ongoing) for p in offline],
                   "reassigning": [{"topic": t, "partition": i, **r} for (t, i), r in sorted(ongoing.items())]})
        return
    click.echo(f"Cluster {shape.cluster_id}: {len(shape.brokers) + len(down)} broker(s)"
               + (f" ({len(down)} down: {_ids(down)})" if down else "")
               + f", controller {shape.controller if shape.controller >= 0 else 'none'}")
    click.echo(click.wrap_text(f"{len(shape.topics)} topic(s), {len(parts)} partition(s): {len(under)} "
                               f"under-replicated, {len(offline)} offline, {len(ongoing)} being reassigned",
                               width=CONTEXT["terminal_width"]))
    rows = [[str(b.node_id), f"{b.host}:{b.port}", b.rack or "-", str(leaders.get(b.node_id, 0)),
             "up, controller" if b.node_id == shape.controller else "up"] for b in shape.brokers]
    rows += [[str(n), "-", "-", "0", "DOWN (not registered)"] for n in down]
    rows.sort(key=lambda r: int(r[0]))
    print_table("Brokers", [Col("Node", right=True), Col("Address", fold=True), Col("Rack", fold=True),
                            Col("Leaders", right=True), Col("State", fold=True)], rows)
    if under or offline:
        _partition_table("Under-replicated and offline partitions", under + offline, ongoing)
    if ongoing:
        print_table("Reassignments in progress",
                    [Col("Topic", fold=True), Col("Partition", right=True), Col("Replicas", fold=True),
                     Col("Adding", fold=True), Col("Removing", fold=True)],
                    [[t, str(i), _ids(r["replicas"]), _ids(r["adding"]), _ids(r["removing"])]
                     for (t, i), r in sorted(ongoing.items())])


def _partition_table(title: str, parts: list[PartitionInfo], ongoing: Ongoing) -> None:
    rows = []
    for p in parts:
        state = []
        if p.is_offline:
            state.append("offline")
        elif p.under_replicated:
            state.append("under-replicated")
        moving = ongoing.get((p.topic, p.partition))
        if moving:
            state.append(f"reassigning (+{_ids(moving['adding'])} -{_ids(moving['removing'])})")
        rows.append([p.topic, str(p.partition), str(p.leader) if p.leader >= 0 else "none", str(p.leader_epoch),
                     _ids(p.replicas), _ids(p.isr), ", ".join(state) or "ok"])
    print_table(title, [Col("Topic", fold=True), Col("Partition", right=True), Col("Leader", right=True),
                        Col("Leader epoch", right=True), Col("Replicas", fold=True), Col("ISR", fold=True),
                        Col("State", fold=True)], rows)


@cluster.command(context_settings=CONTEXT)
@click.argument("topics", nargs=-1, metavar="[TOPIC]...")
@click.option("--include-internal", "--internal", "include_internal", is_flag=True,
              help="without TOPIC: also internal topics (__consumer_offsets and other names that start with '__')")
@connection_options
@json_option
def partitions(topics: tuple[str, ...], include_internal: bool, conn: Conn, as_json: bool) -> None:
    """Each partition's leader, leader epoch, replicas and ISR (of TOPICs, or of every topic)."""
    with wire(conn) as w:
        shape = w.shape(list(topics) if topics else None)
        ongoing = _ongoing(w)
    if shape.missing:
        fail(f"topic {', '.join(repr(t) for t in sorted(shape.missing))} does not exist",
             "check the name with 'oncelog topic list'")
    parts = [p for name, ps in shape.topics.items()
             if topics or include_internal or not is_internal(name, name in shape.internal) for p in ps]
    if as_json:
        echo_json([_partition_json(p, ongoing) for p in parts])
        return
    _partition_table(_title(shape, parts), parts, ongoing)


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
@connection_options
@json_option
def elect_leaders(election_type: str, topics: tuple[str, ...], tps: tuple[str, ...], all_partitions: bool,
                  conn: Conn, as_json: bool) -> None:
    """Elect leaders (like kafka-leader-election.sh): partitions that need no election say so."""
    from oncelog.protocol.messages.elect_leaders_request import ElectLeadersRequest, TopicPartitions

    if all_partitions and (topics or tps):
        fail("--all cannot be combined with --topic or --partition", "give --all alone, or name the partitions",
             code=2)
    if not all_partitions and not (topics or tps):
        fail("say which partitions need a leader election: --all, --topic TOPIC or --partition TOPIC:PARTITION",
             "e.g. 'oncelog cluster elect-leaders --all' moves every leadership back to its preferred replica; "
             "'oncelog cluster status' shows which partitions need it", code=2)
    with wire(conn) as w:
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
