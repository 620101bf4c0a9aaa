"""The committed codecs of ``src/oncelog/protocol/messages/`` are exactly what ``tools/gen_protocol.py`` writes from
the committed schemas (``schemas/``): nobody edited generated code by hand, and nobody changed a schema or the
generator without regenerating (``make gen``)."""

from __future__ import annotations

from pathlib import Path

from schema_strategies import ROOT, gen

COMMITTED = ROOT / "src" / "oncelog" / "protocol" / "messages"


def _modules(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py"))}


def test_generator_reads_only_schemas_inside_the_repository() -> None:
    for folder in (gen.DEFAULT_SCHEMAS, gen.DEFAULT_COORD, gen.OVERRIDES):
        assert folder.resolve().is_relative_to(ROOT), folder
        assert any(folder.glob("*.json")), f"no schema in {folder}"


def test_committed_codecs_match_the_generator(tmp_path: Path) -> None:
    out = tmp_path / "messages"
    assert gen.main(["--out", str(out)]) == 0
    fresh = _modules(out)
    committed = _modules(COMMITTED)
    assert len(fresh) > 180  # every request and response of Kafka's schemas, plus records and consumer protocol
    missing = sorted(set(fresh) - set(committed))
    stale = sorted(set(committed) - set(fresh))
    changed = sorted(name for name in set(fresh) & set(committed) if fresh[name] != committed[name])
    assert (missing, stale, changed) == ([], [], []), (
        "src/oncelog/protocol/messages differs from what tools/gen_protocol.py writes from schemas/ "
        f"(not committed: {missing}, not generated: {stale}, different: {changed}); run `make gen` and commit"
    )
