"""The documentation points at what exists: every relative link of the README, docs/ and bench/README.md reaches a
file (and its ``#anchor`` a heading of that file), every module path or ``oncelog.*`` module it names in code
spans exists, and every block it marks ``<!-- doc-test: NAME -->`` is run by a test (``doc_blocks.block``)."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.doc_blocks import marked_blocks
from repo_files import ROOT, SRC, tracked_files

# third-party documents, copied verbatim
EXEMPT = [ROOT / "schemas" / "kafka-protocol"]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
# a path under src/oncelog/ (docs name modules relative to it: `broker/partition.py`), or under the repository
PACKAGE_PATH = re.compile(r"^(?:protocol|storage|coordinator|cluster|broker|client|spark|cli|testing)/[\w./-]*$")
REPO_PATH = re.compile(r"^(?:src|tests|tools|bench|examples|docs|schemas|\.ci)/[\w./-]*?(?:\[[^\]]*\])?$")
DOTTED = re.compile(r"^oncelog(?:\.\w+)+$")


def documents() -> list[Path]:
    return [p for p in tracked_files() if p.suffix == ".md" and not any(p.is_relative_to(e) for e in EXEMPT)]


def prose(path: Path) -> str:
    """The text of a markdown file without its fenced code blocks."""
    return FENCE.sub("", path.read_text())


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path``: lower case, punctuation dropped, spaces as hyphens,
    ``-1``, ``-2``... for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_relative_links_reach_a_file_and_a_heading() -> None:
    docs = documents()
    assert ROOT / "README.md" in docs and len(docs) >= 8
    bad = []
    for doc in docs:
        for target in LINK.findall(CODE_SPAN.sub("", prose(doc))):
            if SCHEME.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{doc.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not bad, "broken links:\n" + "\n".join(sorted(set(bad)))


def _exists_dotted(name: str) -> bool:
    """``oncelog.a.b`` is a module or package, or a name defined in one (at most one attribute deep)."""
    parts = name.split(".")[1:]
    for depth in (len(parts), len(parts) - 1):
        base = SRC.joinpath(*parts[:depth])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            return depth == len(parts) or re.search(rf"^\s*(class|def)\s+{parts[-1]}\b|^{parts[-1]}\b\s*[:=]",
                                                     module.read_text(), re.M) is not None
    return False


def test_module_paths_in_the_docs_exist() -> None:
    bad = []
    for doc in documents():
        for span in CODE_SPAN.findall(prose(doc)):
            if PACKAGE_PATH.match(span):
                ok = (SRC / span).exists()
            elif REPO_PATH.match(span):
                ok = (ROOT / span.split("[")[0]).exists()
            elif DOTTED.match(span):
                ok = _exists_dotted(span)
            else:
                continue
            if not ok:
                bad.append(f"{doc.relative_to(ROOT)}: `{span}`")
    assert not bad, "the docs name modules that do not exist (moved? renamed?):\n" + "\n".join(sorted(set(bad)))


def test_every_marked_block_is_run_by_a_test() -> None:
    marked = marked_blocks()
    assert {"cli-tour", "confluent-quickstart", "python-copier", "spark-job"} <= set(marked)
    calls = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    unrun = [name for name in marked if f'block("{name}")' not in calls]
    twice = [name for name, places in marked.items() if len(places) > 1]
    assert not unrun, f"marked doc-test blocks no test runs (call doc_blocks.block(NAME)): {unrun}"
    assert not twice, f"doc-test names marking more than one block: {twice}"
