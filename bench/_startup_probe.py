"""The startup benchmark's probe (bench/startup_bench.py): one Metadata request made by hand, so that every revision
of the broker is asked the same, and the wait for its answer. Imports nothing of oncelog: the processes it runs in
measure a revision's own src/."""

from __future__ import annotations

import socket
import struct
import time

__all__ = ["first_metadata", "metadata_request"]


def metadata_request(correlation_id: int = 1) -> bytes:
    """A Metadata v1 request for all topics."""
    client = b"startup-bench"
    body = struct.pack(">hhih", 3, 1, correlation_id, len(client)) + client + struct.pack(">i", -1)
    return struct.pack(">i", len(body)) + body


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def first_metadata(port: int, deadline: float) -> None:
    """Connect to 127.0.0.1:``port`` (retrying while refused) and wait for one Metadata answer."""
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            time.sleep(0.002)
            continue
        try:
            s.sendall(metadata_request())
            size = struct.unpack(">i", _recv(s, 4))[0]
            _recv(s, size)
            return
        except OSError:
            time.sleep(0.002)
        finally:
            s.close()
    raise TimeoutError(f"no Metadata answer from 127.0.0.1:{port}")
