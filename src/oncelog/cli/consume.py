"""``oncelog consume TOPIC``: print records as they are (bytes, ``null`` for a missing key or value, as
kafka-console-consumer.sh does) or as JSON lines."""

from __future__ import annotations

import base64
import sys
import time
from typing import Any

import click

from oncelog.client.consumer import OFFSET_BEGINNING, OFFSET_END, Consumer
from oncelog.client.message import Message

from ._common import CONTEXT, bootstrap_option, client_conf, echo_json, fail, to_bytes, user_errors

NULL = b"null"


def _json_field(out: dict[str, Any], name: str, b: bytes | None) -> None:
    """``name``: the text, or base64 with ``name_encoding: "base64"`` when it is not UTF-8; null for None."""
    if b is None:
        out[name] = None
        return
    try:
        out[name] = b.decode("utf-8")
    except UnicodeDecodeError:
        out[name] = base64.b64encode(b).decode("ascii")
        out[f"{name}_encoding"] = "base64"


def as_json(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                           "timestamp": m._timestamp}
    _json_field(out, "key", m.key())
    _json_field(out, "value", m.value())
    headers = []
    for k, v in m.headers() or ():
        h: dict[str, Any] = {"key": k}
        _json_field(h, "value", v)
        headers.append(h)
    out["headers"] = headers
    return out


@click.command(context_settings=CONTEXT)
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="start at the oldest record (with --group: only where the group "
                                                     "has no committed offset)")
@click.option("--offset", type=click.IntRange(min=0), metavar="N", help="start at offset N of every partition read")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True, metavar="N",
              help="read only partition N (repeatable)")
@click.option("-g", "--group", metavar="GROUP", help="read as a member of consumer group GROUP, committing its offsets "
                                                     "(the group shares the partitions with its other members)")
@click.option("-n", "--max-messages", type=click.IntRange(min=1), metavar="N", help="stop after N records")
@click.option("--timeout", type=click.FloatRange(min=0), metavar="SECONDS",
              help="stop after SECONDS without a record (default: run until Ctrl-C)")
@click.option("--print-key", is_flag=True, help="print KEY<separator>VALUE")
@click.option("--key-separator", default="\t", show_default=False, metavar="SEP",
              help="separator for --print-key  [default: a tab]")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True, metavar="LEVEL",
              help="read_uncommitted or read_committed (hides records of open and aborted transactions)")
@bootstrap_option
@click.option("--json", "json_lines", is_flag=True, help="one JSON object per record: topic, partition, offset, "
                                                         "timestamp, key, value, headers (base64 where not UTF-8)")
def consume(topic: str, from_beginning: bool, offset: int | None, partitions: tuple[int, ...], group: str | None,
            max_messages: int | None, timeout: float | None, print_key: bool, key_separator: str,
            isolation_level: str, bootstrap_server: str, json_lines: bool) -> None:
    """Print records of TOPIC: new ones by default, --from-beginning or --offset N to read what is there.

    Keys and values are printed as the bytes they are, a missing (null) one as 'null'; --json for scripts.
    """
    if from_beginning and offset is not None:
        fail("--from-beginning and --offset N cannot be combined", code=2)
    if group is not None and (offset is not None or partitions):
        fail("--group reads the partitions the group assigns from its committed offsets; --offset and --partition "
             "work without --group", code=2)
    conf: dict[str, Any] = {**client_conf(bootstrap_server), "isolation.level": isolation_level}
    if group is not None:
        conf.update({"group.id": group, "enable.auto.commit": True,
                     "auto.offset.reset": "earliest" if from_beginning else "latest"})
    sep = to_bytes(key_separator)
    out = sys.stdout.buffer
    count = 0
    with user_errors(f"cannot consume from {topic!r}", bootstrap_server):
        consumer = Consumer(conf)
        try:
            parts = consumer.partitions_for(topic)
            if not parts:
                fail(f"topic {topic!r} does not exist", "check the name with 'oncelog topic list'")
            if group is not None:
                consumer.subscribe([topic])
            else:
                missing = sorted(set(partitions) - set(parts))
                if missing:
                    fail(f"topic {topic!r} has no partition {missing[0]}", f"its partitions are 0..{len(parts) - 1}")
                start = offset if offset is not None else OFFSET_BEGINNING if from_beginning else OFFSET_END
                consumer.assign([(topic, p, start) for p in (partitions or parts)])
            idle_since = time.monotonic()
            while max_messages is None or count < max_messages:
                want = 500 if max_messages is None else min(500, max_messages - count)
                batch = consumer.consume(want, 0.5)
                if not batch:
                    if timeout is not None and time.monotonic() - idle_since >= timeout:
                        break
                    continue
                idle_since = time.monotonic()
                for m in batch:
                    if json_lines:
                        echo_json(as_json(m))
                        continue
                    if print_key:
                        key = m.key()
                        out.write(NULL if key is None else key)
                        out.write(sep)
                    value = m.value()
                    out.write(NULL if value is None else value)
                    out.write(b"\n")
                count += len(batch)
                sys.stdout.flush()
                out.flush()
        except KeyboardInterrupt:
            pass
        finally:
            consumer.close()
    click.echo(f"Consumed {count} record(s) from {topic}" + (f" as group {group}." if group else "."), err=True)
