"""Jepsen-style history recording and checking for the exactly-once tests (see history.py and checker.py)."""

from .checker import ANOMALIES, Report, check, check_copy
from .history import (ABORT, COMMIT, FAIL, OK, READ_COMMITTED, READ_UNCOMMITTED, UNKNOWN, History, Poll,
                      ReadToEnd, Seek, Send, TxnEnd)

__all__ = ["ANOMALIES", "Report", "check", "check_copy", "History", "Send", "TxnEnd", "Poll", "Seek", "ReadToEnd",
           "OK", "FAIL", "UNKNOWN", "COMMIT", "ABORT", "READ_COMMITTED", "READ_UNCOMMITTED"]
