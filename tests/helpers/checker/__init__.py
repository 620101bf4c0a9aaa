"""Jepsen-style history recording and checking for the exactly-once tests (see history.py and checker.py)."""

from .checker import ANOMALIES, Report, check, check_copy
from .history import (
    ABORT,
    COMMIT,
    FAIL,
    OK,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNKNOWN,
    History,
    Poll,
    ReadToEnd,
    Seek,
    Send,
    TxnEnd,
)

__all__ = [
    "ABORT",
    "ANOMALIES",
    "COMMIT",
    "FAIL",
    "OK",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "UNKNOWN",
    "History",
    "Poll",
    "ReadToEnd",
    "Report",
    "Seek",
    "Send",
    "TxnEnd",
    "check",
    "check_copy",
]
