"""A broker's metadata client in a process of its own, so that tests can SIGKILL or SIGSTOP it like a broker.

Run as ``python _member.py ENDPOINT CLUSTER NODE_ID PORT SESSION_MS [campaign]``: it registers (and campaigns),
reports on stdout as JSON lines ({"registered": epoch}, {"controller": epoch}, {"session": alive, "epoch": e}) and
obeys JSON lines on stdin: {"op": "update", "topic", "index", "expected", "leader", "controller_epoch"} ->
{"update": bool}; {"op": "state"} -> {"session_valid", "is_controller"}. ``Member`` drives it from a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class Member:
    """The test's side: start, send, expect, kill, pause, resume."""

    def __init__(self, endpoint: str, cluster: str, node_id: int, port: int, session_ms: int,
                 campaign: bool = False) -> None:
        self.args = [endpoint, cluster, str(node_id), str(port), str(session_ms)] + (["campaign"] if campaign else [])
        self.proc: asyncio.subprocess.Process | None = None
        self.seen: list[dict[str, Any]] = []

    async def start(self) -> Member:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "_member.py"), *self.args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        return self

    async def expect(self, key: str, timeout: float = 20.0) -> dict[str, Any]:
        """The next message carrying ``key`` (earlier ones without it are kept in ``seen``)."""
        assert self.proc is not None and self.proc.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), max(0.01, deadline - loop.time()))
            if not line:
                raise AssertionError(f"member exited ({await self.proc.wait()}) before sending {key!r}; "
                                     f"seen {self.seen}")
            msg = json.loads(line)
            self.seen.append(msg)
            if "error" in msg:
                raise AssertionError(f"member failed: {msg['error']}")
            if key in msg:
                return msg

    async def send(self, **msg: Any) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        await self.proc.stdin.drain()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            await self.proc.wait()


async def _main(endpoint: str, cluster: str, node_id: int, port: int, session_ms: int, campaign: bool) -> None:
    from oncelog.cluster.metadata import EtcdMetadata
    from oncelog.cluster.model import BrokerInfo, PartitionState
    from oncelog.cluster.store import PartitionChange

    def emit(**msg: Any) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    store = await EtcdMetadata.connect([endpoint], cluster, session_timeout_ms=session_ms,
                                       heartbeat_interval_ms=max(200, session_ms // 4))
    store.add_session_listener(lambda s: emit(session=s.alive, epoch=s.broker.epoch if s.broker else None))
    broker = await store.register(BrokerInfo(node_id, "127.0.0.1", port))
    emit(registered=broker.epoch)
    if campaign:
        emit(controller=(await store.campaign()).epoch)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        cmd = json.loads(line)
        if cmd["op"] == "update":
            state = PartitionState((1, 2), (1, 2), cmd["leader"], cmd["leader"], cmd["leader"])
            ok = await store.update_partitions(
                [PartitionChange((cmd["topic"], cmd["index"]), cmd["expected"], state)],
                controller_epoch=cmd.get("controller_epoch"))
            emit(update=ok)
        elif cmd["op"] == "state":
            emit(session_valid=store.session_valid(), is_controller=store.is_controller())
    await store.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    try:
        asyncio.run(_main(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), len(a) > 5 and a[5] == "campaign"))
    except Exception as e:
        sys.stdout.write(json.dumps({"error": repr(e)}) + "\n")
        sys.exit(1)
