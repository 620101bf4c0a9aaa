"""The ``oncelog`` data source: Spark's entry point, handing out readers and writers.

Columns follow spark-sql-kafka so a job switches between ``format("kafka")`` and ``format("oncelog")`` by name:
key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int,
and headers array<struct<key string, value binary>> with ``includeHeaders=true``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import get_option

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )

__all__ = ["HEADERS_TYPE", "OncelogDataSource", "source_schema"]

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType(), True),
                                     StructField("value", BinaryType(), True)]), True)


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


class OncelogDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("oncelog")``; register with ``oncelog.spark.register``."""

    @classmethod
    def name(cls) -> str:
        return "oncelog"

    def schema(self) -> StructType:
        return source_schema((get_option(self.options, "includeHeaders") or "false").strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        from .source import OncelogBatchReader

        return OncelogBatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source import OncelogStreamReader

        return OncelogStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .options import OncelogOptionError
        from .sink import OncelogBatchWriter

        if overwrite:  # as spark-sql-kafka: a log is appended to, never overwritten
            raise OncelogOptionError("save mode Overwrite is not allowed for oncelog, as for Kafka: records are "
                                     "appended; use mode('append') or Spark's default mode")

        return OncelogBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import OncelogStreamWriter

        return OncelogStreamWriter(dict(self.options), schema)
