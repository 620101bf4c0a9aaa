"""A job killed while Spark writes its first offsets leaves ``offsets/.0.<uuid>.tmp``; the restart then fails
with STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY (run 7 of 20 of the clickstream kill variant, issue 17 finding 1).
``remove_interrupted_writes`` clears it, and the restarted query runs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from oncelog.client import Producer
from oncelog.spark.checkpoints import remove_interrupted_writes

pytestmark = pytest.mark.timeout(240)


def _killed_before_first_offsets(checkpoint: Path) -> Path:
    """The checkpoint a run leaves when killed while writing offsets/0: the query id, a half-written temp file."""
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    tmp = checkpoint / "offsets" / f".0.{uuid.uuid4()}.tmp"
    tmp.write_bytes(b"")
    return tmp


def _start(spark: Any, bootstrap: str, topic: str, checkpoint: Path) -> Any:
    return (spark.readStream.format("oncelog").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def test_restart_after_a_kill_during_the_first_offsets_write(spark: Any, spark_bootstrap: str, spark_topic: str,
                                                             tmp_path: Path) -> None:
    p = Producer({"bootstrap.servers": spark_bootstrap})
    for i in range(5):
        p.produce(spark_topic, f"v{i}")
    assert p.flush(30) == 0
    p.close()
    checkpoint = tmp_path / "cp"
    tmp = _killed_before_first_offsets(checkpoint)

    q = _start(spark, spark_bootstrap, spark_topic, checkpoint)  # what Spark does with it
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        q.awaitTermination(120)

    assert remove_interrupted_writes(checkpoint) == [tmp]
    q = _start(spark, spark_bootstrap, spark_topic, checkpoint)
    assert q.awaitTermination(120) and q.exception() is None
    assert (checkpoint / "commits" / "0").exists()


def test_only_temporary_files_are_removed(tmp_path: Path) -> None:
    keep = [tmp_path / "offsets" / "0", tmp_path / "offsets" / ".0.crc", tmp_path / "metadata",
            tmp_path / "state" / "0" / "0" / "1.delta", tmp_path / ".hidden.tmp"]
    gone = [tmp_path / "offsets" / f".1.{uuid.uuid4()}.tmp", tmp_path / "offsets" / f"..1.{uuid.uuid4()}.tmp.crc",
            tmp_path / "state" / "0" / "0" / f".2.delta.{uuid.uuid4()}.tmp"]
    for f in keep + gone:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
    assert sorted(remove_interrupted_writes(f"file://{tmp_path}")) == sorted(gone)
    assert all(f.exists() for f in keep) and not any(f.exists() for f in gone)
    assert remove_interrupted_writes("hdfs://nn/checkpoints") == []
