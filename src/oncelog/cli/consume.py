"""``oncelog consume TOPIC``: print records as they are (bytes, ``null`` for a missing key or value, as
kafka-console-consumer.sh does), through a kcat format string (``-f``), or as JSON lines."""

from __future__ import annotations

import base64
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ._common import CONTEXT, Conn, connection_options, echo_json, fail, to_bytes, user_errors

if TYPE_CHECKING:
    from oncelog.client.consumer import Consumer
    from oncelog.client.message import Message

NULL = b"null"

#: what the command imports when it runs (``oncelog.cli.main.load``)
RUNTIME = ("oncelog.client.consumer", "oncelog.client.message", "oncelog.client.topic_partition")


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
                           "timestamp": m.timestamp()[1]}
    _json_field(out, "key", m.key())
    _json_field(out, "value", m.value())
    headers = []
    for k, v in m.headers() or ():
        h: dict[str, Any] = {"key": k}
        _json_field(h, "value", v)
        headers.append(h)
    out["headers"] = headers
    return out


# ----------------------------------------------------------------------------------------- kcat's -f
_TOKEN = re.compile(rb"%(.)|\\(x[0-9a-fA-F]{2}|[0-7]{3}|.)", re.DOTALL)
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"\\": b"\\"}
Field = Callable[["Message"], bytes]


def _length(b: bytes | None) -> bytes:
    return b"-1" if b is None else str(len(b)).encode()


def _headers(m: Message, kv: bytes = b"=", sep: bytes = b",") -> bytes:
    return sep.join(k.encode() + kv + (v if v is not None else b"") for k, v in m.headers() or ())


_FIELDS: dict[bytes, Field] = {
    b"s": lambda m: m.value() or b"",
    b"S": lambda m: _length(m.value()),
    b"R": lambda m: (-1 if m.value() is None else len(m.value() or b"")).to_bytes(4, "big", signed=True),
    b"k": lambda m: m.key() or b"",
    b"K": lambda m: _length(m.key()),
    b"T": lambda m: str(m.timestamp()[1]).encode(),
    b"h": _headers,
    b"t": lambda m: (m.topic() or "").encode(),
    b"p": lambda m: str(m.partition()).encode(),
    b"o": lambda m: str(m.offset()).encode(),
}


def compile_format(fmt: str) -> Callable[[Message], bytes]:
    """kcat's ``-f`` format: %s value, %S its length (-1 for null), %R the length as a big-endian int32, %k key,
    %K its length, %T timestamp (ms), %h headers (n=v,...), %t topic, %p partition, %o offset, %% a percent sign;
    \\n \\r \\t \\\\ and \\xXX (or \\NNN octal) escapes. A null key or value prints as nothing (%K / %S say -1)."""
    raw = to_bytes(fmt)
    parts: list[bytes | Field] = []
    pos = 0
    for match in _TOKEN.finditer(raw):
        if match.start() > pos:
            parts.append(raw[pos:match.start()])
        pos = match.end()
        token, escape = match.group(1), match.group(2)
        if token is not None:
            if token == b"%":
                parts.append(b"%")
            elif token in _FIELDS:
                parts.append(_FIELDS[token])
            else:
                fail(f"--format: unknown token %{token.decode(errors='replace')}",
                     "tokens: %s %S %R %k %K %T %h %t %p %o %% (kcat's); escapes: \\n \\r \\t \\\\ \\xXX", code=2)
        elif escape[:1] == b"x":
            parts.append(bytes([int(escape[1:], 16)]))
        elif escape.isdigit():
            parts.append(bytes([int(escape, 8) & 0xFF]))
        else:
            parts.append(_ESCAPES.get(escape, b"\\" + escape))
    if pos < len(raw):
        parts.append(raw[pos:])

    def render(m: Message) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(m) for p in parts)
    return render


# ----------------------------------------------------------------------------------------- where to start
def parse_offset(text: str) -> tuple[str, int]:
    """``--offset``: ("beginning"|"end", 0), ("absolute", N), ("tail", N) for -N, ("time", ms) for s@MS."""
    t = text.strip().lower()
    if t in ("beginning", "earliest", "oldest"):
        return "beginning", 0
    if t in ("end", "latest"):
        return "end", 0
    if t.startswith("s@") and t[2:].isdigit():
        return "time", int(t[2:])
    if t.startswith("-") and t[1:].isdigit():
        return "tail", int(t[1:])
    if t.isdigit():
        return "absolute", int(t)
    fail(f"--offset expects N, -N (N before the end), s@MS (the first record at or after MS, epoch milliseconds), "
         f"beginning or end; got {text!r}", code=2)


def _start_offsets(consumer: Consumer, topic: str, parts: list[int], how: str, n: int) -> dict[int, int]:
    """Each partition's first offset to read, as kcat reads -o."""
    from oncelog.client.consumer import OFFSET_BEGINNING, OFFSET_END
    from oncelog.client.topic_partition import TopicPartition

    if how == "beginning":
        return dict.fromkeys(parts, OFFSET_BEGINNING)
    if how == "end":
        return dict.fromkeys(parts, OFFSET_END)
    if how == "absolute":
        return dict.fromkeys(parts, n)
    if how == "time":
        found = consumer.offsets_for_times([TopicPartition(topic, p, n) for p in parts])
        return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_END for tp in found}
    out = {}
    for p in parts:  # tail: N records before the end, never before the log start
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p))
        out[p] = max(high - n, low)
    return out


def _kafka_headers(m: Message) -> bytes:
    """kafka-console-consumer.sh's print.headers: ``k1:v1,k2:v2``, or NO_HEADERS."""
    return _headers(m, b":", b",") if m.headers() else b"NO_HEADERS"


@click.command(context_settings=CONTEXT)
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="start at the oldest record (with --group: only where the group "
                                                     "has no committed offset)")
@click.option("-o", "--offset", metavar="OFFSET",
              help="where to start in every partition read: N, -N (N records before the end), s@MS (the first "
                   "record at or after MS, epoch milliseconds), beginning or end  [default: end]")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True, metavar="N",
              help="read only partition N (repeatable)")
@click.option("-g", "--group", metavar="GROUP", help="read as a member of consumer group GROUP, committing its offsets "
                                                     "(the group shares the partitions with its other members)")
@click.option("-n", "--max-messages", type=click.IntRange(min=1), metavar="N", help="stop after N records")
@click.option("--timeout", type=click.FloatRange(min=0), metavar="SECONDS",
              help="stop after SECONDS without a record (default: run until Ctrl-C)")
@click.option("-f", "--format", "fmt", metavar="FORMAT",
              help="print each record through kcat's format: %s value, %k key, %t topic, %p partition, %o offset, "
                   "%T timestamp (ms), %h headers (n=v,...), %S / %K value / key length, %R, %%; \\n \\t \\r "
                   "escapes (no newline is added), e.g. '%t[%p]@%o %k: %s\\n'")
@click.option("--print-key", is_flag=True, help="print KEY<separator>VALUE")
@click.option("--print-headers", is_flag=True,
              help="print the headers (k1:v1,k2:v2 or NO_HEADERS, as kafka-console-consumer.sh) and the separator "
                   "before the key and value")
@click.option("--key-separator", default="\t", show_default=False, metavar="SEP",
              help="separator for --print-key and --print-headers  [default: a tab]")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True, metavar="LEVEL",
              help="read_uncommitted or read_committed (hides records of open and aborted transactions)")
@connection_options
@click.option("--json", "json_lines", is_flag=True, help="one JSON object per record: topic, partition, offset, "
                                                         "timestamp, key, value, headers (base64 where not UTF-8)")
def consume(topic: str, from_beginning: bool, offset: str | None, partitions: tuple[int, ...], group: str | None,
            max_messages: int | None, timeout: float | None, fmt: str | None, print_key: bool, print_headers: bool,
            key_separator: str, isolation_level: str, conn: Conn, json_lines: bool) -> None:
    """Print records of TOPIC: new ones by default, --from-beginning or --offset to read what is there.

    Keys and values are printed as the bytes they are, a missing (null) one as 'null'; -f for kcat's format
    strings, --json for scripts.
    """
    if from_beginning and offset is not None:
        fail("--from-beginning and --offset cannot be combined", "--offset beginning is the same as --from-beginning",
             code=2)
    if group is not None and (offset is not None or partitions):
        fail("--group reads the partitions the group assigns from its committed offsets; --offset and --partition "
             "work without --group", code=2)
    if fmt is not None and (json_lines or print_key or print_headers):
        fail("--format says what to print: it cannot be combined with --json, --print-key or --print-headers",
             "use %k and %h in the format", code=2)
    how, n = parse_offset(offset) if offset is not None else ("beginning" if from_beginning else "end", 0)
    render = compile_format(fmt) if fmt is not None else None
    conf: dict[str, Any] = {"isolation.level": isolation_level}
    if group is not None:
        conf.update({"group.id": group, "enable.auto.commit": True,
                     "auto.offset.reset": "earliest" if from_beginning else "latest"})
    sep = to_bytes(key_separator)
    out = sys.stdout.buffer
    count = 0
    with user_errors(f"cannot consume from {topic!r}", conn):
        from oncelog.client.consumer import Consumer

        consumer = Consumer(conn.client_conf(**conf))
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
                chosen = sorted(set(partitions)) or parts
                start = _start_offsets(consumer, topic, chosen, how, n)
                consumer.assign([(topic, p, start[p]) for p in chosen])
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
                    if render is not None:
                        out.write(render(m))
                        continue
                    if print_headers:
                        out.write(_kafka_headers(m))
                        out.write(sep)
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
