"""The CLI's RepeatFilter: the first of a run of identical warnings, then at most one per interval saying how
many were held back; nothing is lost from the count."""

from __future__ import annotations

import logging
import re
import time

from oncelog.cli._common import RepeatFilter


def _record(msg: str, name: str = "oncelog.client") -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)


def test_a_run_of_identical_warnings_is_one_line_per_interval_with_the_count_held_back() -> None:
    f = RepeatFilter(interval=0.2)
    passed = []
    for _ in range(60):
        r = _record("could not bump the epoch")
        if f.filter(r):
            passed.append(r.getMessage())
        time.sleep(0.01)
    assert passed[0] == "could not bump the epoch"
    assert 2 <= len(passed) <= 6, passed
    held = [int(m.group(1)) for p in passed[1:] if (m := re.search(r"\(and (\d+) more like it in the last", p))]
    assert len(held) == len(passed) - 1, passed
    # every warning either passed or was counted in a later line, but for those held since the last one passed
    assert len(passed) + sum(held) <= 60 and 60 - len(passed) - sum(held) < 25, (passed, held)


def test_different_warnings_or_loggers_are_not_held_back() -> None:
    f = RepeatFilter(interval=60)
    assert f.filter(_record("a")) and f.filter(_record("b")) and f.filter(_record("a", name="oncelog.other"))
    assert not f.filter(_record("a"))
