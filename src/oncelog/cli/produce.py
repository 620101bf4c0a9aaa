"""``oncelog produce TOPIC``: records from stdin lines (bytes as they are) or ``--value``, like
kafka-console-producer.sh."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

import click

from ._common import (
    CONTEXT,
    Conn,
    connection_options,
    echo_json,
    fail,
    is_unreachable,
    json_option,
    parse_pairs,
    to_bytes,
    unreachable_hint,
    user_errors,
)

if TYPE_CHECKING:
    from oncelog.client.errors import KafkaError
    from oncelog.client.message import Message
    from oncelog.client.producer import Producer

_PROGRESS_MIN_BYTES = 1 << 20
#: what the command imports when it runs (``oncelog.cli.main.load``)
RUNTIME = ("oncelog.client.producer", "oncelog.client.message", "oncelog.client.errors")


@click.command(context_settings=CONTEXT)
@click.argument("topic")
@click.option("-v", "--value", "values", multiple=True, metavar="VALUE",
              help="a record's value (repeatable); without it, each line of stdin is a record")
@click.option("-k", "--key", metavar="KEY", help="the key of every record")
@click.option("--key-separator", metavar="SEP", help="split each line (or --value) at the first SEP into KEY and "
                                                    "VALUE")
@click.option("-p", "--partition", type=click.IntRange(min=0), metavar="N", help="write to partition N (default: "
                                                                                 "by key, or sticky for no key)")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="a header of every record (repeatable)")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none",
              show_default=True)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True, metavar="MS")
@click.option("--batch-size", type=click.IntRange(min=1), default=262144, show_default=True, metavar="BYTES")
@click.option("--progress/--no-progress", default=None,
              help="a progress bar (default: on for a big file piped in on a terminal)")
@connection_options
@json_option
def produce(topic: str, values: tuple[str, ...], key: str | None, key_separator: str | None, partition: int | None,
            headers: tuple[str, ...], compression: str, acks: str, linger_ms: int, batch_size: int,
            progress: bool | None, conn: Conn, as_json: bool) -> None:
    """Write records to TOPIC: one per line of stdin, or one per --value.

    Lines are sent as the bytes they are (no decoding; a trailing CR of CRLF line ends is dropped). A topic that does
    not exist is created if the broker creates topics on first use (auto.create.topics.enable). Exits 1 if any
    record failed, 130 on Ctrl-C, each time saying how many records were written.
    """
    if key_separator == "":
        # kafka-console-producer.sh would take an empty key and the whole line as the value (indexOf("") is 0), and
        # kcat -K '' fails the same way: an empty separator splits nothing, so it is surely a mistake (a variable
        # that was not set, a lost quote)
        fail("--key-separator must not be empty: it splits each line at its first occurrence into KEY and VALUE",
             "give the character between key and value, e.g. --key-separator ':' (or $'\\t' for a tab)", code=2)
    if key_separator is not None and key is not None:
        fail("--key and --key-separator cannot be combined: one key for every record, or a key on each line",
             code=2)
    hdrs = [(k, to_bytes(v)) for k, v in parse_pairs(headers, "--header").items()]
    sep = None if key_separator is None else to_bytes(key_separator)
    fixed_key = None if key is None else to_bytes(key)
    ctx = click.get_current_context()
    # the options' defaults give way to the --command-config file; an option given on the command line wins over it
    # (kafka-console-producer.sh does the same with --producer.config)
    own = {"compression.type": ("compression", compression), "acks": ("acks", acks),
           "linger.ms": ("linger_ms", linger_ms), "batch.size": ("batch_size", batch_size)}
    settings = {k: v for k, (param, v) in own.items()
                if k not in conn.properties or ctx.get_parameter_source(param) != click.core.ParameterSource.DEFAULT}
    defaults = {"allow.auto.create.topics": True, "delivery.timeout.ms": 30000}
    settings.update({k: v for k, v in defaults.items() if k not in conn.properties})
    conf = conn.client_conf(**settings)
    failures: list[KafkaError] = []
    stats = {"sent": 0, "delivered": 0}

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
        else:
            stats["delivered"] += 1

    def split(data: bytes) -> tuple[bytes | None, bytes]:
        if sep is None:
            return fixed_key, data
        k, found, v = data.partition(sep)
        if not found:
            fail(f"record {stats['sent'] + 1} has no key separator {key_separator!r}: {data[:60]!r}",
                 "with --key-separator every line needs KEY<separator>VALUE")
        return k, v

    interrupted = False
    left = 0
    with user_errors(f"cannot produce to {topic!r}", conn):
        from oncelog.client.producer import Producer

        producer = Producer(conf)
        try:
            parts = _partitions(producer, topic)
            if partition is not None and partition not in parts:
                fail(f"topic {topic!r} has no partition {partition}", f"its partitions are 0..{len(parts) - 1}")

            def send(data: bytes) -> None:
                k, v = split(data)
                producer.produce(topic, v, key=k, partition=partition, headers=hdrs, on_delivery=on_delivery)
                stats["sent"] += 1
                if stats["sent"] % 10000 == 0:
                    producer.poll(0)

            try:
                if values:
                    for v in values:
                        send(to_bytes(v))
                else:
                    _send_lines(sys.stdin.buffer, send, progress)
                left = producer.flush(60)
            except KeyboardInterrupt:
                interrupted = True
                left = producer.flush(10)  # what was read before Ctrl-C is still written
        finally:
            producer.close(5)
    done = f"{stats['delivered']} of {stats['sent']} record(s) written to {topic}"
    if interrupted:
        fail(f"interrupted: {done}" + (f"; {left} not acknowledged" if left else ""), code=130)
    if failures:
        first = failures[0]
        if is_unreachable(first):
            fail(f"{len(failures)} record(s) failed, {done}: the broker did not answer ({first.message})",
                 unreachable_hint(conn.bootstrap))
        fail(f"{len(failures)} record(s) failed, {done}; the first: {first.message} ({first.name})",
             "'oncelog topic describe " + topic + "' shows the topic's partitions and configs")
    if left:
        fail(f"{left} record(s) were not acknowledged within 60 s, {done}", unreachable_hint(conn.bootstrap))
    if as_json:
        echo_json({"topic": topic, "records": stats["delivered"]})
    else:
        click.echo(f"Produced {stats['delivered']} record(s) to {topic}.", err=True)


def _partitions(producer: Producer, topic: str) -> list[int]:
    """The topic's partitions; the broker creates the topic here if it creates topics on first use."""
    from oncelog.client.errors import KafkaError
    from oncelog.protocol.errors import ErrorCode

    try:
        return producer.partitions_for(topic, 5.0)
    except KafkaError as e:
        if e.code() != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
    fail(f"topic {topic!r} does not exist, and the broker does not create topics on first use "
         f"(auto.create.topics.enable=false)", f"create it with 'oncelog topic create {topic}'")


def _send_lines(stream: IO[bytes], send: Callable[[bytes], None], progress: bool | None) -> None:
    total = None
    try:
        st = os.fstat(stream.fileno())
        if stat.S_ISREG(st.st_mode):
            total = st.st_size
    except (OSError, ValueError, AttributeError):
        pass
    if progress is None:
        progress = sys.stderr.isatty() and total is not None and total >= _PROGRESS_MIN_BYTES
    if not progress:
        for line in stream:
            send(_strip(line))
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

    with Progress(TextColumn("producing"), BarColumn(), TextColumn("{task.fields[records]} records"),
                  TransferSpeedColumn(), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("produce", total=total, records=0)
        n = done = 0
        for line in stream:
            send(_strip(line))
            n += 1
            done += len(line)
            if n % 1000 == 0:
                bar.update(task, completed=done, records=n)
        bar.update(task, completed=total, records=n)


def _strip(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line
