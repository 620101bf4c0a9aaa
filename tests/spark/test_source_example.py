"""The clickstream example (examples/clickstream) end to end on the shared session: generator events ->
oncelog -> both streaming queries -> output topics, checked through the oncelog source (read_committed)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from oncelog.client import Admin, Producer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"clickstream_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generator = _load("generator")
job = _load("job")

pytestmark = pytest.mark.timeout(300)


def test_clickstream_pipeline_outputs_each_click_once_and_each_window_once(
        spark: Any, spark_bootstrap: str, spark_topic: str, tmp_path: Path) -> None:
    clicks, enriched, views = f"{spark_topic}-clicks", f"{spark_topic}-enriched", f"{spark_topic}-views"
    with Admin({"bootstrap.servers": spark_bootstrap}) as admin:
        admin.create_topics([clicks, enriched, views], 3)
    evs = generator.events(600, seed=3, max_lateness_ms=3000, run="t", start_ms=1_700_000_000_000, rate=50)
    p = Producer({"bootstrap.servers": spark_bootstrap})
    generator.send(p, clicks, evs)
    p.produce(clicks, b"not json", key=b"junk")
    generator.send(p, clicks, [generator.tick("t", 1_700_000_000_000 + 600_000)])
    p.flush(30)
    p.close()

    queries = job.build(spark, spark_bootstrap, str(tmp_path / "cp"), input_topic=clicks, enriched_topic=enriched,
                        views_topic=views, max_offsets_per_trigger=None, trigger={"availableNow": True})
    for q in queries:
        assert q.awaitTermination(240), f"query {q.name} still running after 240 s: {q.lastProgress}"
        assert q.exception() is None, q.exception()

    def read(topic: str) -> list[Any]:
        return (spark.read.format("oncelog").option("kafka.bootstrap.servers", spark_bootstrap)
                .option("subscribe", topic).load().collect())

    out = [json.loads(r.value) for r in read(enriched)]
    ids = Counter(o["id"] for o in out)
    missing = ({e["id"] for e in evs} | {"t-tick"}) - set(ids)
    assert not missing and set(ids.values()) == {1}, (
        f"{len(out)} enriched records, {len(missing)} ids missing, duplicates: "
        f"{[i for i, n in ids.items() if n > 1][:5]}; progress {[q.recentProgress for q in queries]}")
    first = next(o for o in out if o["id"] == evs[0]["id"])
    assert first["section"] == (str(evs[0]["page"]).split("/")[1] or "home")
    assert first["traffic"] in ("paid", "direct", "organic")

    windows = [json.loads(r.value) for r in read(views)]
    keys = Counter((w["window"], w["page"]) for w in windows)
    assert keys and set(keys.values()) == {1}, (  # each window emitted once
        f"{len(windows)} windows: {keys.most_common(3)}; progress {queries[1].recentProgress}")
    counted = sum(w["views"] for w in windows if w["page"] != generator.TICK_PAGE)
    assert counted == len(evs), f"{counted} of {len(evs)} clicks counted in {len(windows)} windows"
    per_page = Counter(str(e["page"]) for e in evs)
    got_page: Counter[str] = Counter()
    for w in windows:
        got_page[w["page"]] += w["views"]
    assert all(got_page[pg] == n for pg, n in per_page.items())
