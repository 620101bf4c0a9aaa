"""The checker on hand-made histories: a clean history passes, and each anomaly class is detected (a checker
that cannot fail proves nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.checker import (
    ABORT,
    ANOMALIES,
    COMMIT,
    FAIL,
    OK,
    UNKNOWN,
    History,
    Poll,
    ReadToEnd,
    Seek,
    Send,
    TxnEnd,
    check,
    check_copy,
)
from helpers.checker import READ_COMMITTED as RC
from helpers.checker import READ_UNCOMMITTED as RU

T = "t"


def base() -> History:
    """p0: idempotent writes a, b; p1: txn x (commit) c, d; txn y (abort) e; then a complete RC and RU reader.

    partition 0: a@0 b@1 ; partition 1: c@0 d@1 (marker @2) e@3 (marker @4)."""
    h = History()
    h.add(Send("p0", T, 0, "a", OK, 0))
    h.add(Send("p0", T, 0, "b", OK, 1))
    h.add(Send("p1", T, 1, "c", OK, 0, txn="x"))
    h.add(Send("p1", T, 1, "d", OK, 1, txn="x"))
    h.add(TxnEnd("x", COMMIT))
    h.add(Send("p1", T, 1, "e", OK, 3, txn="y"))
    h.add(TxnEnd("y", ABORT))
    return h


def read_all(h: History, session: str, iso: str, records: list[tuple[int, int, str]]) -> None:
    for part, off, v in records:
        h.add(Poll("final", session, T, part, off, v, iso))
    h.add(ReadToEnd(session, T, iso, {0: 2, 1: 5}))


GOOD_RC = [(0, 0, "a"), (0, 1, "b"), (1, 0, "c"), (1, 1, "d")]
GOOD_RU = GOOD_RC + [(1, 3, "e")]


def clean() -> History:
    h = base()
    read_all(h, "rc", RC, GOOD_RC)
    read_all(h, "ru", RU, GOOD_RU)
    return h


def test_clean_history_passes() -> None:
    rep = check(clean(), sends_complete=True)
    assert rep.ok, rep.summary()
    assert rep.stats["txns"] == {COMMIT: 1, ABORT: 1, UNKNOWN: 0}


def test_lost_acked_write_read_committed() -> None:
    h = base()
    read_all(h, "rc", RC, [r for r in GOOD_RC if r[2] != "b"])
    rep = check(h)
    assert rep.found() == {"lost_write"}
    assert [a["value"] for a in rep.anomalies["lost_write"]] == ["b"]


def test_lost_committed_txn_write() -> None:
    h = base()
    read_all(h, "rc", RC, [r for r in GOOD_RC if r[2] != "d"])
    rep = check(h)
    assert rep.found() == {"lost_write"}
    assert rep.anomalies["lost_write"][0]["txn_outcome"] == COMMIT


def test_lost_aborted_write_under_read_uncommitted() -> None:
    """An acked record stays in the log whatever its transaction's fate."""
    h = base()
    read_all(h, "ru", RU, GOOD_RC)
    rep = check(h)
    assert rep.found() == {"lost_write"}
    assert rep.anomalies["lost_write"][0]["value"] == "e"


def test_unacked_and_failed_writes_are_not_required() -> None:
    h = base()
    h.add(Send("p0", T, 0, "maybe", UNKNOWN))
    h.add(Send("p0", T, 0, "nope", FAIL))
    h.add(Send("p2", T, 2, "elsewhere", OK, 0))  # a partition the reader did not cover
    read_all(h, "rc", RC, GOOD_RC)
    assert check(h).ok


def test_lost_needs_a_complete_reader() -> None:
    h = base()
    h.add(Poll("c", "live", T, 0, 0, "a", RC))  # a live consumer that never read to the end
    assert check(h).ok


def test_duplicate_read_committed() -> None:
    h = base()
    read_all(h, "rc", RC, GOOD_RC + [(0, 2, "a")])
    rep = check(h)
    assert "duplicate" in rep.found()
    assert rep.anomalies["duplicate"][0]["at"] == [(0, 0), (0, 2)]


def test_duplicate_read_uncommitted_only_for_values_sent_once() -> None:
    h = base()
    h.add(Send("p1", T, 1, "again", OK, 5, txn="z1"))
    h.add(TxnEnd("z1", ABORT))
    h.add(Send("p1", T, 1, "again", OK, 7, txn="z2"))  # re-sent on purpose by a retried transaction
    h.add(TxnEnd("z2", COMMIT))
    read_all(h, "ru", RU, GOOD_RU + [(1, 5, "again"), (1, 7, "again")])
    assert check(h).ok, check(h).summary()
    h.add(Poll("c", "ru2", T, 0, 3, "b", RU))  # b was sent once: an idempotence failure
    rep = check(h)
    assert rep.found() == {"duplicate"}
    assert rep.anomalies["duplicate"][0]["value"] == "b"


def test_aborted_read() -> None:
    h = base()
    h.add(Poll("c", "live", T, 1, 3, "e", RC))
    rep = check(h)
    assert rep.found() == {"aborted_read"}
    assert rep.anomalies["aborted_read"][0]["txns"] == ["y"]


def test_value_of_aborted_and_committed_txn_is_not_an_aborted_read() -> None:
    h = base()
    h.add(Send("p1", T, 1, "e", OK, 5, txn="y2"))
    h.add(TxnEnd("y2", COMMIT))
    h.add(Poll("c", "live", T, 1, 5, "e", RC))
    assert "aborted_read" not in check(h).found()


def test_read_uncommitted_may_see_aborted() -> None:
    h = base()
    h.add(Poll("c", "live", T, 1, 3, "e", RU))
    assert check(h).ok


def test_non_atomic_unknown_txn() -> None:
    h = base()
    h.add(Send("p1", T, 1, "u1", OK, 5, txn="u"))
    h.add(Send("p1", T, 0, "u2", OK, 2, txn="u"))
    h.add(TxnEnd("u", UNKNOWN))
    ok = base()
    ok.extend([Send("p1", T, 1, "u1", OK, 5, txn="u"), Send("p1", T, 0, "u2", OK, 2, txn="u")])
    read_all(ok, "rc", RC, GOOD_RC)  # none of it: fine (aborted)
    assert check(ok).ok
    read_all(h, "rc", RC, GOOD_RC + [(1, 5, "u1")])
    rep = check(h)
    assert rep.found() == {"non_atomic_txn"}
    assert rep.anomalies["non_atomic_txn"][0]["seen"] == 1


def test_non_monotonic_and_seek() -> None:
    h = base()
    for off, v in [(0, "a"), (1, "b")]:
        h.add(Poll("c", "s1", T, 0, off, v, RU))
    h.add(Seek("s1", T, 0))
    h.add(Poll("c", "s1", T, 0, 0, "a", RU))  # after a seek: fine
    h.add(Poll("c", "s2", T, 0, 1, "b", RU))  # another session: fine
    h.add(Poll("c", "s2", T, 0, 0, "a", RU))  # backwards without a seek
    h.add(Poll("c", "s1", T, 0, 0, "a", RU))  # the same offset again without a seek
    rep = check(h)
    assert rep.found() == {"non_monotonic"}
    assert [(a["session"], a["previous"], a["offset"]) for a in rep.anomalies["non_monotonic"]] == [
        ("s2", 1, 0), ("s1", 0, 0)]


def test_rebalance_seek_of_whole_topic() -> None:
    h = base()
    h.add(Poll("c", "s1", T, 1, 1, "d", RC))
    h.add(Seek("s1", T, None))
    h.add(Poll("c", "s1", T, 1, 0, "c", RC))
    assert check(h).ok


def test_inconsistent_offset_between_readers_and_ack() -> None:
    h = base()
    h.add(Poll("c", "r1", T, 0, 1, "b", RU))
    h.add(Poll("c", "r2", T, 0, 1, "zzz", RU))
    rep = check(h)
    assert "inconsistent_offset" in rep.found()
    assert set(rep.anomalies["inconsistent_offset"][0]["values"]) == {"b", "zzz"}
    h2 = base()
    h2.add(Poll("c", "r1", T, 0, 0, "b", RU))  # acked a@0, but a reader finds b there
    assert "inconsistent_offset" in check(h2).found()


def test_phantom_read_only_when_sends_are_complete() -> None:
    h = base()
    h.add(Poll("c", "r", T, 0, 9, "ghost", RC))
    assert check(h).ok
    assert check(h, sends_complete=True).found() == {"phantom_read"}


# -------------------------------------------------------------------------------------------------- copy check
def copy_history(outputs: list[tuple[int, int, str]]) -> History:
    h = History()
    for part, off, v in outputs:
        h.add(Poll("final", "out", "o", part, off, v, RC))
    h.add(ReadToEnd("out", "o", RC, {0: 10, 1: 10}))
    return h


INPUTS = {0: ["0", "2", "4"], 1: ["1", "3"]}


def ext(v: str) -> str:
    return v.split("|")[0]


def test_copy_exactly_once_passes() -> None:
    h = copy_history([(0, 0, "0|t1"), (0, 1, "1|t1"), (0, 3, "2|t2"), (1, 0, "3|t1"), (1, 1, "4|t3")])
    rep = check_copy(h, INPUTS, "o", ext)
    assert rep.ok, rep.summary()


def test_copy_lost_duplicate_unexpected() -> None:
    h = copy_history([(0, 0, "0|t1"), (0, 1, "1|t1"), (0, 2, "3|t9"), (1, 0, "3|t1"), (1, 3, "77|t1")])
    rep = check_copy(h, INPUTS, "o", ext)
    assert rep.found() == {"copy_lost", "copy_duplicate", "copy_unexpected"}
    assert sorted(a["input"] for a in rep.anomalies["copy_lost"]) == ["2", "4"]
    assert rep.anomalies["copy_duplicate"][0]["input"] == "3"


def test_copy_order() -> None:
    h = copy_history([(0, 0, "2|t1"), (0, 1, "0|t1"), (0, 2, "4|t1"), (0, 3, "1|t1"), (0, 4, "3|t1")])
    rep = check_copy(h, INPUTS, "o", ext)
    assert rep.found() == {"copy_order"}
    assert check_copy(h, INPUTS, "o", ext, ordered=False).ok


def test_copy_without_complete_reader_fails() -> None:
    h = History([Poll("c", "live", "o", 0, 0, "0|t", RC)])
    assert "copy_lost" in check_copy(h, INPUTS, "o", ext).found()


def test_every_anomaly_class_is_exercised() -> None:
    """Guard: a new anomaly class must come with a test above."""
    src = Path(__file__).read_text()
    for kind in ANOMALIES:
        assert f'"{kind}"' in src.replace("{" + '"', '"'), kind


def test_jsonl_round_trip_and_torn_line(tmp_path: Path) -> None:
    h = clean()
    path = tmp_path / "h.jsonl"
    h.dump(path)
    with open(path, "a") as f:
        f.write('{"kind":"Poll","consumer":"x","sess')  # torn by a SIGKILL
    back = History(History.load_lines(path))
    assert len(back) == len(h)
    assert [History.to_line(e) for e in back] == [History.to_line(e) for e in h]
    assert check(back).ok


@pytest.mark.parametrize("kind", ["lost_write", "aborted_read", "duplicate"])
def test_report_summary_names_the_anomaly(kind: str) -> None:
    h = base()
    if kind == "lost_write":
        read_all(h, "rc", RC, GOOD_RC[:1])
    elif kind == "aborted_read":
        h.add(Poll("c", "s", T, 1, 3, "e", RC))
    else:
        h.add(Poll("c", "s", T, 0, 0, "a", RC))
        h.add(Poll("c", "s", T, 0, 2, "a", RC))
    rep = check(h)
    assert not rep.ok and kind in rep.summary() and rep.counts()[kind] >= 1
