"""Modules small enough to read whole: no hand-written Python module (the generated codecs of
``protocol/messages/`` excepted) is over 700 lines, unless the first lines of its docstring say why ("over 700
lines because ...")."""

from __future__ import annotations

import ast
import re

from repo_files import GENERATED, ROOT, tracked_files

LIMIT = 700
REASON = re.compile(r"\bover 700 lines\b", re.IGNORECASE)

# Over the limit today, each being split on another branch of issue 14: remove an entry once its split is merged
# (test_known_exceptions_are_still_over_the_limit says when).
KNOWN_EXCEPTIONS = {
    "tests/unit/coordinator/test_group_coordinator.py": (
        "the group defects of issue 14 add their regression tests here; split it once those branches are merged"
    ),
}


def python_modules() -> list[str]:
    return [
        str(p.relative_to(ROOT)) for p in tracked_files()
        if p.suffix == ".py" and not p.is_relative_to(GENERATED)
    ]


def line_count(name: str) -> int:
    return len((ROOT / name).read_text().splitlines())


def states_a_reason(name: str) -> bool:
    doc = ast.get_docstring(ast.parse((ROOT / name).read_text())) or ""
    return bool(REASON.search("\n".join(doc.splitlines()[:5])))


def test_no_module_over_the_limit_without_a_reason() -> None:
    modules = python_modules()
    assert len(modules) > 100
    too_long = [
        f"{name}: {line_count(name)} lines" for name in modules
        if name not in KNOWN_EXCEPTIONS and line_count(name) > LIMIT and not states_a_reason(name)
    ]
    assert not too_long, (
        f"modules over {LIMIT} lines: split them, or say why at the top of the docstring "
        f"(\"over {LIMIT} lines because ...\"):\n" + "\n".join(too_long)
    )


def test_known_exceptions_are_still_over_the_limit() -> None:
    modules = set(python_modules())
    done = [name for name in KNOWN_EXCEPTIONS if name not in modules or line_count(name) <= LIMIT]
    assert not done, f"now split (or gone): remove them from KNOWN_EXCEPTIONS in this test: {done}"


def test_a_stated_reason_is_recognised() -> None:
    assert REASON.search("Kafka's X. Over 700 lines because the state machine reads best in one piece.")
    assert not REASON.search("A module of 300 lines.")
