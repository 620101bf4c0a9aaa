"""Test modules and helper modules under ``tests/`` have unique names where pytest imports them by their basename
(folders without ``__init__.py``: pytest's default "prepend" import mode puts their folder on ``sys.path``). Two
``test_x.py`` in such folders make a full run fail at collection ("import file mismatch") while each folder alone
passes: the clash shows only when everything runs together, as in CI."""

from __future__ import annotations

from collections import defaultdict

from repo_files import ROOT, tracked_files


def test_test_and_helper_modules_have_unique_basenames() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in tracked_files():
        if path.suffix != ".py" or not path.is_relative_to(ROOT / "tests") or path.name == "__init__.py":
            continue
        if "node_modules" in path.parts or (path.parent / "__init__.py").exists():
            continue  # inside a package: imported by its dotted name
        if path.name == "conftest.py":
            continue  # pytest imports each conftest by its own path
        seen[path.stem].append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"modules that pytest would import under the same name (rename one of each): {clashes}"
