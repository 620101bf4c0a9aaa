"""Batch and streaming readers of the ``oncelog`` format (Spark's DataSourceReader / DataSourceStreamReader).

Planning runs on the driver (:mod:`.offsets`), reading on executors (:mod:`.reader`). Streaming offsets are the
spark-sql-kafka JSON shape ``{"topic": {"0": 42}}`` checkpointed by Spark; each is the next offset to read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .offsets import OffsetPlanner, OffsetRange, rate_limit, split_ranges
from .options import SourceOptions, offsets_from_json, offsets_to_json, parse_source_options
from .reader import read_range

__all__ = ["OncelogBatchReader", "OncelogStreamReader"]

TopicPartition = tuple[str, int]


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if type(partition) is InputPartition and getattr(partition, "value", None) is None:
        return iter(())  # Spark's stand-in partition when partitions() planned none (nothing to read)
    if not isinstance(partition, OffsetRange):
        raise TypeError(f"the oncelog source got an input partition it did not plan: {partition!r}")
    return read_range(partition, opts.consumer_conf, opts.include_headers, opts.fail_on_data_loss)


class OncelogBatchReader(DataSourceReader):
    """``spark.read.format("oncelog")``: records between startingOffsets (default earliest) and endingOffsets
    (default latest, i.e. the LSO under read_committed), fixed when the query is planned."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=False)
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        planner = OffsetPlanner(self.opts)
        try:
            tps = planner.topic_partitions()
            start = planner.resolve(self.opts.starting, tps, "earliest", "startingOffsets")
            end = planner.resolve(self.opts.ending, tps, "latest", "endingOffsets")
        finally:
            planner.close()
        bad = [f"{t}[{p}] {start[(t, p)]} > {end[(t, p)]}" for t, p in tps if start[(t, p)] > end[(t, p)]]
        if bad:
            raise ValueError(f"startingOffsets lie after endingOffsets for {', '.join(bad)}; fix the options")
        return split_ranges(start, end, self.opts.max_records_per_partition, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class OncelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("oncelog")`` with admission control (maxOffsetsPerTrigger -> ReadMaxRows).

    Partitions found after the start (new partitions, new topics matching subscribePattern) are read from their
    earliest offset, as spark-sql-kafka does.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=True)
        self.schema = schema
        self._planner = OffsetPlanner(self.opts)
        self._latest: dict[TopicPartition, int] | None = None
        self._available_now_end: dict[TopicPartition, int] | None = None

    def initialOffset(self) -> dict[str, Any]:
        tps = self._planner.topic_partitions()
        return offsets_to_json(self._planner.resolve(self.opts.starting, tps, "latest", "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what is there now, however many micro-batches that takes."""
        tps = self._planner.topic_partitions()
        self._available_now_end = self._planner.latest(tps)

    def _end_offsets(self, start: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        if self._available_now_end is not None:
            end = dict(self._available_now_end)
        else:
            end = self._planner.latest(self._planner.topic_partitions())
        new = [tp for tp in end if tp not in start]
        start.update(self._planner.earliest(new))
        # a partition that disappeared keeps its last offset; nothing is read from it
        for tp, off in start.items():
            end[tp] = max(end.get(tp, off), off)
        return end

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start)
        end = self._end_offsets(begin)
        self._latest = dict(end)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        missing = [tp for tp in stop if tp not in begin]
        if missing:  # partitions added between two batches start at their earliest offset
            begin.update(self._planner.earliest(missing))
        return split_ranges(begin, stop, self.opts.max_records_per_partition, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in the broker."""

    def stop(self) -> None:
        self._planner.close()
