"""``oncelog group list|describe|delete|reset-offsets``: inspect consumer groups and manage their offsets.

The operator's counterpart of ``kafka-consumer-groups.sh``. ``describe`` shows each partition's committed offset
next to the log end offset and the last stable offset (LSO); lag is counted against the LSO by default, since a
``read_committed`` consumer cannot read past it (an open transaction holds it back). ``reset-offsets`` is a dry
run unless ``--execute`` is given, and, as in Kafka, only works while the group has no members.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option, user_errors
from ._table import Col, print_table

if TYPE_CHECKING:
    from oncelog.client.admin import Admin, GroupDescription


@click.group(context_settings=CONTEXT)
def group() -> None:
    """Inspect consumer groups and manage their offsets (like kafka-consumer-groups.sh)."""


_ISOLATION = ("read_committed", "read_uncommitted")
#: states in which a group has no members, so an admin may rewrite its offsets ("Dead": unknown to the coordinator)
_RESETTABLE = ("Empty", "Dead")


def _admin(conn: Conn) -> Admin:
    from oncelog.client.admin import Admin

    return Admin(conn.client_conf())


def _code(e: Exception) -> int | None:
    """The Kafka error code of a client error (None for anything else)."""
    from oncelog.client.errors import KafkaError

    return int(e.code()) if isinstance(e, KafkaError) else None




def _known(desc: GroupDescription) -> bool:
    return not (desc.state == "Dead" and not desc.members)


def _describe_one(admin: Admin, group: str) -> GroupDescription:
    from oncelog.protocol.errors import ErrorCode

    try:
        desc = admin.describe_groups([group])[group]
    except Exception as e:
        if _code(e) == ErrorCode.GROUP_ID_NOT_FOUND:
            fail(f"consumer group {group!r} does not exist", "list the groups with 'oncelog group list'")
        raise
    if not _known(desc):
        fail(f"consumer group {group!r} does not exist", "list the groups with 'oncelog group list'")
    return desc


@group.command("list", context_settings=CONTEXT)
@click.option("-s", "--state", multiple=True, metavar="STATE",
              help="only groups in this state, e.g. Empty or Stable (repeatable)")
@connection_options
@json_option
def list_(state: tuple[str, ...], conn: Conn, as_json: bool) -> None:
    """List the consumer groups the coordinators know, with their state."""
    with user_errors("cannot list groups", conn):
        admin = _admin(conn)
        try:
            groups = admin.list_groups(list(state) or None)
        finally:
            admin.close()
    if as_json:
        echo_json([asdict(g) for g in groups])
        return
    print_table(f"{len(groups)} group(s)", [Col("Group", fold=True), Col("Coordinator", right=True),
                                            Col("Protocol type", fold=True), Col("State", fold=True)],
                [[g.group_id, str(g.coordinator_id), g.protocol_type or "-", g.state] for g in groups])


@group.command(context_settings=CONTEXT)
@click.argument("group_id", metavar="GROUP")
@click.option("--isolation", type=click.Choice(_ISOLATION), default="read_committed", show_default=True,
              help="count lag as a read_committed consumer does (against the last stable offset) or as "
                   "read_uncommitted (against the log end offset)")
@connection_options
@json_option
def describe(group_id: str, isolation: str, conn: Conn, as_json: bool) -> None:
    """State and members of GROUP, and per partition its committed offset, log end offset, LSO and lag."""
    group = group_id
    with user_errors(f"cannot describe group {group!r}", conn):
        admin = _admin(conn)
        try:
            desc = _describe_one(admin, group)
            committed = admin.list_group_offsets(group)
            owner = {tp: m for m in desc.members for tp in m.assignment}
            tps = sorted(set(committed) | set(owner))
            end = admin.list_offsets({tp: "latest" for tp in tps}) if tps else {}
            stable = admin.list_offsets({tp: "latest" for tp in tps}, isolation_level=1) if tps else {}
        finally:
            admin.close()
    rows = []
    for tp in tps:
        leo, lso = end[tp].offset, stable[tp].offset
        off = committed.get(tp)
        target = lso if isolation == "read_committed" else leo
        m = owner.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "committed_offset": off, "log_end_offset": leo,
                     "last_stable_offset": lso, "lag": None if off is None else max(target - off, 0),
                     "member_id": m.member_id if m else None, "client_id": m.client_id if m else None,
                     "host": m.client_host if m else None})
    if as_json:
        out = asdict(desc)
        for m in out["members"]:
            m["assignment"] = [{"topic": t, "partition": p} for t, p in m["assignment"]]
        out["isolation"] = isolation
        out["offsets"] = rows
        out["total_lag"] = sum(r["lag"] for r in rows if r["lag"] is not None)
        echo_json(out)
        return
    print_table(f"Group {desc.group_id}", [Col("Field"), Col("Value", fold=True)],
                [["Coordinator", str(desc.coordinator_id)], ["State", desc.state],
                 ["Protocol type", desc.protocol_type or "-"], ["Assignor", desc.protocol or "-"],
                 ["Members", str(len(desc.members))]], show_header=False)
    if desc.members:
        print_table("Members", [Col("Member id", fold=True), Col("Instance id", fold=True),
                                Col("Client id", fold=True), Col("Host", fold=True), Col("Assignment", fold=True)],
                    [[m.member_id, m.group_instance_id or "-", m.client_id, m.client_host,
                      ", ".join(f"{t}-{p}" for t, p in m.assignment) or "-"] for m in desc.members])
    print_table(f"Offsets ({isolation})",
                [Col("Topic", fold=True), Col("Partition", right=True), Col("Committed", right=True),
                 Col("Log end", right=True), Col("LSO", right=True),
                 Col("Lag (vs LSO)" if isolation == "read_committed" else "Lag (vs LEO)", right=True),
                 Col("Consumer", fold=True)],
                [[str(r["topic"]), str(r["partition"]),
                  "-" if r["committed_offset"] is None else str(r["committed_offset"]), str(r["log_end_offset"]),
                  str(r["last_stable_offset"]), "-" if r["lag"] is None else str(r["lag"]),
                  f"{r['client_id']} ({r['host']})" if r["member_id"] else "-"] for r in rows])


@group.command(context_settings=CONTEXT)
@click.argument("groups", nargs=-1, required=True, metavar="GROUP...")
@connection_options
@json_option
def delete(groups: tuple[str, ...], conn: Conn, as_json: bool) -> None:
    """Delete consumer groups with their committed offsets (only groups without active members)."""
    from oncelog.client.errors import KafkaError
    from oncelog.protocol.errors import ErrorCode

    results: dict[str, str | None] = {}
    with user_errors("cannot delete groups", conn):
        admin = _admin(conn)
        try:
            for g in dict.fromkeys(groups):
                try:
                    admin.delete_groups([g])
                    results[g] = None
                except KafkaError as e:
                    if e.code() == ErrorCode.NON_EMPTY_GROUP:
                        results[g] = "the group still has active members; stop its consumers first"
                    elif e.code() == ErrorCode.GROUP_ID_NOT_FOUND:
                        results[g] = "the group does not exist"
                    else:
                        results[g] = f"{e.message} ({e.name()})"
        finally:
            admin.close()
    if as_json:
        echo_json([{"group_id": g, "deleted": err is None, "error": err} for g, err in results.items()])
    else:
        for g, err in results.items():
            if err is None:
                click.echo(f"Deleted group {g!r}.")
            else:
                click.echo(f"error: cannot delete group {g!r}: {err}", err=True)
    if any(err is not None for err in results.values()):
        raise click.exceptions.Exit(1)


def _parse_datetime(text: str) -> int:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        fail(f"--to-datetime expects an ISO-8601 date-time such as 2026-01-31T12:00:00Z, got {text!r}", code=2)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


@group.command("reset-offsets", context_settings=CONTEXT)
@click.argument("group_id", metavar="GROUP")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="topic whose offsets to reset")
@click.option("-p", "--partition", type=click.IntRange(min=0), multiple=True, metavar="N",
              help="only partition N (repeatable; default: all)")
@click.option("--to-earliest", is_flag=True, help="to the log start offset")
@click.option("--to-latest", is_flag=True, help="to the log end offset")
@click.option("--to-offset", type=click.IntRange(min=0), metavar="N", help="to offset N (clamped to the log's range)")
@click.option("--shift-by", type=int, metavar="N", help="move the committed offset by N (may be < 0)")
@click.option("--to-datetime", metavar="ISO-8601",
              help="to the first offset at or after this time, e.g. 2026-01-31T12:00:00Z (UTC unless it has an "
                   "offset)")
@click.option("--execute", is_flag=True, help="commit the new offsets (default: a dry run that only prints them)")
@connection_options
@json_option
def reset_offsets(group_id: str, topic: str, partition: tuple[int, ...], to_earliest: bool, to_latest: bool,
                  to_offset: int | None, shift_by: int | None, to_datetime: str | None, execute: bool,
                  conn: Conn, as_json: bool) -> None:
    """Reset GROUP's committed offsets for a topic; a dry run that only prints the plan unless --execute.

    As in Kafka, only while the group has no members (stop its consumers first).
    """
    group = group_id
    chosen = [n for n, v in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                             ("--to-offset", to_offset is not None), ("--shift-by", shift_by is not None),
                             ("--to-datetime", to_datetime is not None)) if v]
    if len(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-offset N, --shift-by N, --to-datetime ISO"
             + (f" (got {', '.join(chosen)})" if chosen else ""), code=2)
    ts = _parse_datetime(to_datetime) if to_datetime is not None else None
    from oncelog.protocol.errors import ErrorCode

    with user_errors(f"cannot reset offsets of group {group!r}", conn):
        admin = _admin(conn)
        try:
            try:
                desc = admin.describe_groups([group])[group]
                state = desc.state
            except Exception as e:
                if _code(e) != ErrorCode.GROUP_ID_NOT_FOUND:
                    raise
                state = "Dead"
            if state not in _RESETTABLE:
                fail(f"group {group!r} is {state} with {len(desc.members)} member(s); offsets can only be reset "
                     f"while it has no members", "stop the group's consumers first (its state must be Empty)")
            all_parts = [p.partition for p in admin.describe_topic(topic).partitions]
            if partition:
                unknown = sorted(set(partition) - set(all_parts))
                if unknown:
                    fail(f"topic {topic!r} has no partition(s) {', '.join(map(str, unknown))}",
                         f"it has {len(all_parts)} partition(s)")
                parts = sorted(set(partition))
            else:
                parts = all_parts
            tps = [(topic, p) for p in parts]
            current = admin.list_group_offsets(group, tps)
            start = admin.list_offsets({tp: "earliest" for tp in tps})
            end = admin.list_offsets({tp: "latest" for tp in tps})
            by_time = admin.list_offsets({tp: ts for tp in tps}) if ts is not None else {}
            plan: dict[tuple[str, int], int] = {}
            for tp in tps:
                lo, hi = start[tp].offset, end[tp].offset
                if to_earliest:
                    new = lo
                elif to_latest:
                    new = hi
                elif to_offset is not None:
                    new = to_offset
                elif shift_by is not None:
                    if tp not in current:
                        fail(f"{tp[0]}[{tp[1]}] has no committed offset to shift",
                             "use --to-earliest/--to-latest/--to-offset for partitions without one")
                    new = current[tp] + shift_by
                else:
                    new = by_time[tp].offset if by_time[tp].offset >= 0 else hi
                plan[tp] = min(max(new, lo), hi)
            if execute:
                admin.alter_group_offsets(group, plan)
        finally:
            admin.close()
    rows = [{"topic": t, "partition": p, "current_offset": current.get((t, p)), "new_offset": off}
            for (t, p), off in sorted(plan.items())]
    if as_json:
        echo_json({"group_id": group, "executed": execute, "offsets": rows})
        return
    print_table(f"Group {group}: new offsets" + ("" if execute else " (dry run)"),
                [Col("Topic", fold=True), Col("Partition", right=True), Col("Current", right=True),
                 Col("New", right=True)],
                [[str(r["topic"]), str(r["partition"]), "-" if r["current_offset"] is None else str(r["current_offset"]),
                  str(r["new_offset"])] for r in rows])
    if execute:
        click.echo(f"Committed {len(rows)} offset(s) for group {group!r}.")
    else:
        click.echo("Dry run: nothing changed. Add --execute to commit these offsets.")
