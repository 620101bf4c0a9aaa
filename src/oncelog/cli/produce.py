"""``oncelog produce TOPIC``: records from stdin lines or --value."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from typing import IO

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

from oncelog.client.errors import KafkaError
from oncelog.client.message import Message
from oncelog.client.producer import Producer

from ._common import BOOTSTRAP_HELP, DEFAULT_BOOTSTRAP, echo_json, fail, parse_pairs, user_errors

_PROGRESS_MIN_BYTES = 1 << 20


def produce(
    topic: str = typer.Argument(..., help="topic to write to"),
    value: list[str] | None = typer.Option(None, "--value", "-v", help="record value (repeatable); "
                                              "without it, each stdin line is a record"),
    key: str | None = typer.Option(None, "--key", "-k", help="key for every record"),
    key_separator: str | None = typer.Option(None, "--key-separator", help="split each line/value into "
                                                "KEY<sep>VALUE at the first separator"),
    partition: int | None = typer.Option(None, "--partition", "-p", min=0, help="write to this partition"),
    header: list[str] = typer.Option([], "--header", "-H", help="record header KEY=VALUE (repeatable)"),
    compression: str = typer.Option("none", "--compression", help="none, gzip, snappy, lz4 or zstd"),
    acks: str = typer.Option("all", "--acks", help="0, 1 or all"),
    linger_ms: int = typer.Option(5, "--linger-ms", min=0),
    batch_size: int = typer.Option(262144, "--batch-size", min=1),
    progress: bool | None = typer.Option(None, "--progress/--no-progress",
                                            help="progress bar (default: on for big piped files on a terminal)"),
    bootstrap_server: str = typer.Option(DEFAULT_BOOTSTRAP, "--bootstrap-server", "-b", help=BOOTSTRAP_HELP),
    as_json: bool = typer.Option(False, "--json", help="print a JSON summary"),
) -> None:
    """Write records to TOPIC, one per stdin line or per --value. Exits 1 if any record failed."""
    headers = list(parse_pairs(header, "--header").items())
    conf = {"bootstrap.servers": bootstrap_server, "compression.type": compression, "acks": acks,
            "linger.ms": linger_ms, "batch.size": batch_size, "allow.auto.create.topics": False,
            "delivery.timeout.ms": 30000, "request.timeout.ms": 15000,
            "socket.connection.setup.timeout.ms": 5000}
    failures: list[KafkaError] = []
    stats = {"sent": 0, "delivered": 0}

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
        else:
            stats["delivered"] += 1

    def split(text: str) -> tuple[str | None, str]:
        if key_separator is not None:
            k, sep, v = text.partition(key_separator)
            if not sep:
                fail(f"record {stats['sent'] + 1} has no key separator {key_separator!r}: {text[:60]!r}",
                     "every line needs KEY<separator>VALUE when --key-separator is given")
            return k, v
        return key, text

    with user_errors(f"cannot produce to {topic!r}"):
        producer = Producer(conf)
        try:
            parts = producer.partitions_for(topic, 5.0)
            if partition is not None and partition not in parts:
                fail(f"topic {topic!r} has no partition {partition}", f"partitions are 0..{len(parts) - 1}")

            def send(text: str) -> None:
                k, v = split(text)
                producer.produce(topic, v, key=k, partition=partition, headers=headers, on_delivery=on_delivery)
                stats["sent"] += 1
                if stats["sent"] % 10000 == 0:
                    producer.poll(0)

            if value:
                for v in value:
                    send(v)
            else:
                _send_lines(sys.stdin, send, progress)
            left = producer.flush(60)
        finally:
            producer.close(10)
    if failures:
        first = failures[0]
        fail(f"{len(failures)} of {stats['sent']} record(s) to {topic!r} failed; first: {first.message} "
             f"({first.name})", "check the topic with 'oncelog topic describe'")
    if left:
        fail(f"{left} record(s) to {topic!r} were not acknowledged in time")
    if as_json:
        echo_json({"topic": topic, "records": stats["delivered"]})
    else:
        typer.echo(f"Produced {stats['delivered']} record(s) to {topic}.", err=True)


def _send_lines(stream: IO[str], send: Callable[[str], None], progress: bool | None) -> None:
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
            send(line.rstrip("\r\n"))
        return
    with Progress(TextColumn("producing"), BarColumn(), TextColumn("{task.fields[records]} records"),
                  TransferSpeedColumn(), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("produce", total=total, records=0)
        n = done = 0
        for line in stream:
            send(line.rstrip("\r\n"))
            n += 1
            done += len(line)
            if n % 1000 == 0:
                bar.update(task, completed=done, records=n)
        bar.update(task, completed=total, records=n)
