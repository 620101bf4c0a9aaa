"""``oncelog txn list|describe|producers|find-hanging|abort``: inspect transactions and end hanging ones.

The operator's counterpart of ``kafka-transactions.sh``. A *hanging* transaction is one left open on a partition
that no coordinator will ever end (its producer id or transactional id is gone, or the coordinator believes the
transaction is over): it pins the partition's last stable offset, so ``read_committed`` consumers stop there.
``find-hanging`` lists them and ``abort --start-offset`` writes the ABORT marker that releases the partition.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, json_option, user_errors
from ._table import Col, print_table

if TYPE_CHECKING:
    from oncelog.client.admin import Admin, ProducerState


@click.group(context_settings=CONTEXT)
def txn() -> None:
    """Inspect transactions and abort hanging ones (like kafka-transactions.sh)."""

_DEFAULT_MAX_DURATION_MS = 15 * 60 * 1000


def _admin(conn: Conn) -> Admin:
    from oncelog.client.admin import Admin

    return Admin(conn.client_conf())


def _when(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _duration(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _opt(v: int | None) -> str:
    return "-" if v is None else str(v)


@txn.command("list", context_settings=CONTEXT)
@click.option("-s", "--state", multiple=True, metavar="STATE", help="only transactions in this state, e.g. Ongoing "
                                                                     "(repeatable)")
@click.option("--producer-id", type=int, multiple=True, metavar="ID", help="only this producer id (repeatable)")
@click.option("--min-duration-ms", type=int, default=-1, metavar="MS",
              help="only transactions running longer than MS (default: any)")
@connection_options
@json_option
def list_(state: tuple[str, ...], producer_id: tuple[int, ...], min_duration_ms: int, conn: Conn,
          as_json: bool) -> None:
    """List the transactional ids the coordinators know, with their producer id and state."""
    with user_errors("cannot list transactions", conn):
        admin = _admin(conn)
        try:
            listings = admin.list_transactions(list(state) or None, list(producer_id) or None, min_duration_ms)
        finally:
            admin.close()
    if as_json:
        echo_json([asdict(t) for t in listings])
        return
    print_table(f"{len(listings)} transaction(s)",
                [Col("Transactional id", fold=True), Col("Coordinator", right=True), Col("Producer id", right=True),
                 Col("State", fold=True)],
                [[t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state] for t in listings])


@txn.command(context_settings=CONTEXT)
@click.argument("transactional_id", metavar="TRANSACTIONAL_ID")
@connection_options
@json_option
def describe(transactional_id: str, conn: Conn, as_json: bool) -> None:
    """State, producer, timeout and partitions of one transactional id."""
    with user_errors(f"cannot describe transaction {transactional_id!r}", conn):
        admin = _admin(conn)
        try:
            try:
                desc = admin.describe_transactions(transactional_id)[transactional_id]
            except Exception as e:
                from oncelog.client.errors import KafkaError
                from oncelog.protocol.errors import ErrorCode

                if isinstance(e, KafkaError) and e.code() == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    fail(f"transactional id {transactional_id!r} is not known to its coordinator",
                         "list the known ones with 'oncelog txn list'")
                raise
        finally:
            admin.close()
    now = int(time.time() * 1000)
    duration = None if desc.transaction_start_time_ms is None else now - desc.transaction_start_time_ms
    if as_json:
        out = asdict(desc)
        out["topic_partitions"] = [{"topic": t, "partition": p} for t, p in desc.topic_partitions]
        out["duration_ms"] = duration
        echo_json(out)
        return
    print_table(f"Transaction {desc.transactional_id}", [Col("Field"), Col("Value", fold=True)],
                [["Coordinator", str(desc.coordinator_id)], ["State", desc.state],
                 ["Producer id", str(desc.producer_id)], ["Producer epoch", str(desc.producer_epoch)],
                 ["Timeout", f"{desc.transaction_timeout_ms} ms"], ["Started", _when(desc.transaction_start_time_ms)],
                 ["Duration", _duration(duration)],
                 ["Partitions", ", ".join(f"{t}-{p}" for t, p in desc.topic_partitions) or "-"]],
                show_header=False)


def _producer_row(p: ProducerState, now: int) -> list[str]:
    return [str(p.producer_id), str(p.producer_epoch), _opt(p.coordinator_epoch), str(p.last_sequence),
            f"{_when(p.last_timestamp)} ({_duration(now - p.last_timestamp)} ago)" if p.last_timestamp >= 0 else "-",
            _opt(p.current_txn_start_offset)]


@txn.command(context_settings=CONTEXT)
@click.argument("topic")
@click.option("-p", "--partition", type=click.IntRange(min=0), metavar="N", help="only partition N")
@connection_options
@json_option
def producers(topic: str, partition: int | None, conn: Conn, as_json: bool) -> None:
    """The producers with state on a topic's partitions, and where their open transaction starts."""
    with user_errors(f"cannot describe producers of {topic!r}", conn):
        admin = _admin(conn)
        try:
            if partition is None:
                parts = [p.partition for p in admin.describe_topic(topic).partitions]
            else:
                parts = [partition]
            states = admin.describe_producers([(topic, p) for p in parts])
        finally:
            admin.close()
    rows = [(tp, s) for tp in sorted(states) for s in states[tp]]
    if as_json:
        echo_json([{"topic": tp[0], "partition": tp[1], **asdict(s)} for tp, s in rows])
        return
    now = int(time.time() * 1000)
    open_txns = sum(1 for _, s in rows if s.current_txn_start_offset is not None)
    print_table(f"{topic}: {len(rows)} producer state(s), {open_txns} open transaction(s)",
                [Col("Partition", right=True), Col("Producer id", right=True), Col("Epoch", right=True),
                 Col("Coordinator epoch", right=True), Col("Last sequence", right=True),
                 Col("Last timestamp", fold=True), Col("Txn start offset", right=True)],
                [[str(tp[1]), *_producer_row(s, now)] for tp, s in rows])


@txn.command("find-hanging", context_settings=CONTEXT)
@click.option("-t", "--topic", metavar="TOPIC", help="only this topic (default: all topics)")
@click.option("-p", "--partition", type=click.IntRange(min=0), metavar="N", help="only partition N (needs --topic)")
@click.option("--max-duration-ms", type=click.IntRange(min=0), default=_DEFAULT_MAX_DURATION_MS, show_default=True,
              metavar="MS", help="consider transactions whose last write is at least MS old (the default is the "
                                 "default transaction.max.timeout.ms, 15 min)")
@connection_options
@json_option
def find_hanging(topic: str | None, partition: int | None, max_duration_ms: int, conn: Conn,
                 as_json: bool) -> None:
    """Find open transactions that no coordinator will end; abort them with 'oncelog txn abort'."""
    if partition is not None and topic is None:
        fail("--partition needs --topic", code=2)
    with user_errors("cannot search for hanging transactions", conn):
        admin = _admin(conn)
        try:
            hanging = admin.find_hanging_transactions(max_duration_ms, None if topic is None else [topic],
                                                      partition=partition)
        finally:
            admin.close()
    if as_json:
        echo_json([asdict(h) for h in hanging])
        return
    if not hanging:
        click.echo("No hanging transactions found.")
        return
    print_table(f"{len(hanging)} hanging transaction(s)",
                [Col("Partition", fold=True), Col("Start offset", right=True), Col("Producer (epoch)", fold=True),
                 Col("Coordinator epoch", right=True), Col("Idle for", right=True),
                 Col("Transactional id", fold=True), Col("Why", fold=True)],
                [[f"{h.topic}-{h.partition}", str(h.start_offset), f"{h.producer_id} ({h.producer_epoch})",
                  _opt(h.coordinator_epoch), _duration(h.duration_ms), h.transactional_id or "-", h.reason]
                 for h in hanging])
    first = hanging[0]
    click.echo(f"Abort one with: oncelog txn abort --topic {first.topic} --partition {first.partition} "
               f"--start-offset {first.start_offset}")


def _live_owner(admin: Admin, producer_id: int, tp: tuple[str, int]) -> str | None:
    """Why the coordinator will still end this producer's transaction on ``tp`` itself, or None (hanging)."""
    try:
        owners = [t.transactional_id for t in admin.list_transactions(producer_ids=[producer_id])]
        descs = admin.describe_transactions(owners) if owners else {}
    except Exception:
        return None
    for d in descs.values():
        if d.producer_id == producer_id and d.state in ("Ongoing", "PrepareCommit", "PrepareAbort") \
                and tp in d.topic_partitions:
            return f"transaction {d.transactional_id!r} is {d.state} on its coordinator, which will end it"
    return None


@txn.command(context_settings=CONTEXT)
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="topic of the open transaction")
@click.option("-p", "--partition", type=click.IntRange(min=0), required=True, metavar="N",
              help="partition of the open transaction")
@click.option("--start-offset", type=click.IntRange(min=0), metavar="OFFSET",
              help="first offset of the transaction to abort (its producer is looked up with DescribeProducers)")
@click.option("--producer-id", type=int, metavar="ID", help="producer id (with --producer-epoch and "
                                                            "--coordinator-epoch)")
@click.option("--producer-epoch", type=int, metavar="EPOCH", help="producer epoch")
@click.option("--coordinator-epoch", type=int, metavar="EPOCH", help="coordinator epoch (-1 is sent as 0)")
@connection_options
@json_option
def abort(topic: str, partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int | None, conn: Conn, as_json: bool) -> None:
    """Abort an open transaction on one partition by writing its ABORT marker (for hanging transactions).

    Identify it with --start-offset (see 'oncelog txn find-hanging' / 'oncelog txn producers'), or with
    --producer-id, --producer-epoch and --coordinator-epoch.
    """
    explicit = [producer_id, producer_epoch, coordinator_epoch]
    if start_offset is None and all(v is None for v in explicit):
        fail("say which transaction to abort: --start-offset O, or --producer-id P --producer-epoch E "
             "--coordinator-epoch C", "find the start offset with 'oncelog txn find-hanging' or "
             "'oncelog txn producers TOPIC'", code=2)
    if start_offset is not None and any(v is not None for v in explicit):
        fail("--start-offset cannot be combined with --producer-id/--producer-epoch/--coordinator-epoch", code=2)
    if start_offset is None and any(v is None for v in explicit):
        missing = [n for n, v in zip(("--producer-id", "--producer-epoch", "--coordinator-epoch"), explicit)
                   if v is None]
        fail(f"missing {', '.join(missing)} (all three are needed without --start-offset)", code=2)
    tp = (topic, partition)
    with user_errors(f"cannot abort the transaction on {topic}[{partition}]", conn):
        admin = _admin(conn)
        try:
            if start_offset is not None:
                states = admin.describe_producers([tp])[tp]
                match = next((s for s in states if s.current_txn_start_offset == start_offset), None)
                if match is None:
                    opened = sorted(s.current_txn_start_offset for s in states
                                    if s.current_txn_start_offset is not None)
                    fail(f"no open transaction starts at offset {start_offset} on {topic}[{partition}]",
                         f"open transactions there start at {', '.join(map(str, opened))}" if opened
                         else "the partition has no open transaction")
                pid, epoch = match.producer_id, match.producer_epoch
                coord_epoch = match.coordinator_epoch if match.coordinator_epoch is not None else -1
            else:
                assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
                pid, epoch, coord_epoch = producer_id, producer_epoch, coordinator_epoch
            live = _live_owner(admin, pid, tp)
            if live:
                click.echo(f"warning: {live}; aborting it here breaks its atomicity (records the producer writes "
                           f"after this may still be committed)", err=True)
            lso_before = admin.list_offsets({tp: "latest"}, isolation_level=1)[tp].offset
            admin.abort_transaction(topic, partition, pid, epoch, coord_epoch)
            lso_after = admin.list_offsets({tp: "latest"}, isolation_level=1)[tp].offset
        finally:
            admin.close()
    if as_json:
        echo_json({"topic": topic, "partition": partition, "producer_id": pid, "producer_epoch": epoch,
                   "coordinator_epoch": max(coord_epoch, 0), "start_offset": start_offset, "aborted": True,
                   "last_stable_offset_before": lso_before, "last_stable_offset": lso_after})
    else:
        click.echo(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {topic}-{partition}"
                   + (f" starting at offset {start_offset}" if start_offset is not None else "")
                   + f"; last stable offset {lso_before} -> {lso_after}.")
