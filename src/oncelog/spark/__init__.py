"""oncelog.spark: the ``oncelog`` PySpark data source (batch and streaming read and write, exactly-once sink).

The only package that imports ``pyspark``; it talks to the broker through ``oncelog.client`` only::

    from oncelog.spark import register
    register(spark)
    df = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "t").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``oncelog`` format with ``spark`` (once per session; registering again is harmless)."""
    from .datasource import OncelogDataSource

    spark.dataSource.register(OncelogDataSource)
