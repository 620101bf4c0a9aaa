"""oncelog.spark: the ``oncelog`` PySpark data source (batch and streaming read and write, exactly-once sink).

The only package that imports ``pyspark``; it talks to the broker through ``oncelog.client`` only::

    from oncelog.spark import register
    register(spark)
    df = spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bs).option("subscribe", "t").load()
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]

log = logging.getLogger("oncelog.spark")


def register(spark: SparkSession) -> None:
    """Register the ``oncelog`` format with ``spark`` (once per session; registering again is harmless).

    In local mode the data source's Python workers run this interpreter unless ``PYSPARK_PYTHON`` (or
    ``spark.pyspark.python``) says otherwise, so a job started from a virtualenv's python finds oncelog in its workers
    without any environment variable.
    """
    from .datasource import OncelogDataSource

    _register_safely(spark, OncelogDataSource)
    _append_by_default()


#: save modes spark-sql-kafka accepts for a batch write; both append
_APPENDING_MODES = (None, "append", "error", "errorifexists", "default")


def _append_by_default() -> None:
    """Let ``df.write.format("oncelog")...save()`` run with Spark's default save mode, as ``format("kafka")`` does.

    The default (ErrorIfExists) means nothing for a log: spark-sql-kafka appends for it and for Append, and refuses
    Overwrite and Ignore. Spark refuses ErrorIfExists for every Python data source before the source is asked, so
    the writer of this session's ``format("oncelog")`` writes turns it into Append (the sink refuses Overwrite
    itself, see :meth:`OncelogDataSource.writer`). Other formats are untouched.
    """
    from pyspark.sql.readwriter import DataFrameWriter

    if getattr(DataFrameWriter, "_oncelog_appends", False):
        return
    original_format, original_mode, original_save = DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save

    def format(self: Any, source: str) -> Any:
        self._oncelog_format = source
        return original_format(self, source)

    def mode(self: Any, saveMode: Any) -> Any:
        self._oncelog_mode = saveMode
        return original_mode(self, saveMode)

    def save(self: Any, path: Any = None, format: Any = None, mode: Any = None, partitionBy: Any = None,
             **options: Any) -> None:
        fmt = format or getattr(self, "_oncelog_format", None)
        chosen = mode or getattr(self, "_oncelog_mode", None)
        if fmt == "oncelog" and (chosen is None or str(chosen).lower() in _APPENDING_MODES):
            original_mode(self, "append")
            mode = None
        return original_save(self, path, format, mode, partitionBy, **options)

    for name, fn in (("format", format), ("mode", mode), ("save", save)):
        fn.__doc__ = getattr(DataFrameWriter, name).__doc__
        setattr(DataFrameWriter, name, fn)
    setattr(DataFrameWriter, "_oncelog_appends", True)


def _python_exec(spark: SparkSession) -> str:
    sc = spark.sparkContext
    chosen = os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python")
    if chosen or not str(sc.master).startswith("local"):
        return str(sc.pythonExec)  # what the user chose, or what a cluster's executors run
    return sys.executable


def _register_safely(spark: SparkSession, source: type[Any]) -> None:
    """``spark.dataSource.register(source)``, but with the data source's environment in a ConcurrentHashMap.

    Spark (4.x) keeps one ``java.util.HashMap`` of environment variables per registered Python data source and
    shares it with every function it makes for it, in every query of the session: each streaming query's
    ``PythonStreamingSourceRunner.init`` puts keys into it on its query thread, while the DAGScheduler serializes
    tasks that contain it. Two queries starting together (the clickstream job after a restart) could insert the
    same keys at once, leaving the map's size larger than its entries; from then on every task of that data source
    failed to deserialize with ``java.io.OptionalDataException at java.util.HashMap.readObject``. A
    ``ConcurrentHashMap`` takes concurrent puts and serializes consistently while they happen.
    """
    try:
        from pyspark.core.rdd import _prepare_for_python_RDD

        sc = spark.sparkContext
        jvm: Any = sc._jvm
        pickled, broadcast_vars, env, includes = _prepare_for_python_RDD(sc, source)
        env_map = jvm.java.util.concurrent.ConcurrentHashMap()
        for k, v in env.items():
            env_map.put(str(k), str(v))
        func = jvm.org.apache.spark.api.python.SimplePythonFunction(
            bytearray(pickled), env_map, includes, _python_exec(spark), sc.pythonVer, broadcast_vars,
            sc._javaAccumulator)
        ds = getattr(jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource")(func)
        spark._jsparkSession.dataSource().registerPython(source.name(), ds)
    except Exception as e:  # noqa: BLE001 - another PySpark (or Spark Connect) without these internals
        log.warning("registering %s through PySpark's own register() (%s: %s); streaming queries started at the "
                    "same moment may then fail with OptionalDataException (see oncelog.spark._register_safely)",
                    source.name(), type(e).__name__, e)
        spark.dataSource.register(source)
