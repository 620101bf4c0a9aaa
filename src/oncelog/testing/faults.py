"""The faults a test asks of a broker, the same on an in-process broker
(:class:`~oncelog.testing.inprocess.InProcessBroker`) and on a broker process
(:class:`~oncelog.testing.broker_process.BrokerProcess`): what the broker does is :mod:`oncelog.broker.faults`.

Every method takes Kafka's names: APIs as in Kafka's protocol guide (``"Produce"``, ``"EndTxn"``,
``"FindCoordinator"``) and errors as in ``org.apache.kafka.common.protocol.Errors`` (``"NOT_LEADER_OR_FOLLOWER"``).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

__all__ = ["BrokerFaults", "FaultError", "control_command"]


class FaultError(RuntimeError):
    """The broker refused a fault command (unknown API or error, an API that cannot be failed), or is not there."""


def control_command(path: Path, command: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one command over a broker process's control channel (a unix socket, ``ONCELOG_TEST_CONTROL``)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
            s.sendall(json.dumps(command).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except OSError as e:
            raise FaultError(f"cannot reach the broker's control channel {path} ({e}): is the broker running, "
                             f"and not paused?") from None
    answer: dict[str, Any] = json.loads(buf) if buf else {"error": "the broker closed the control channel"}
    return answer


class BrokerFaults:
    """Faults on demand. A subclass sends each command with :meth:`_fault_command`."""

    def _fault_command(self, command: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fault(self, **command: Any) -> dict[str, Any]:
        answer = self._fault_command(command)
        if "error" in answer:
            raise FaultError(answer["error"])
        return answer

    def delay(self, api: str, seconds: float, *, on: str = "request", times: int | None = None) -> None:
        """Requests of ``api`` reach the broker ``seconds`` late (``on="response"``: served at once, answered late),
        the next ``times`` of them (None: until :meth:`clear_faults`). Later requests on the same connection wait
        behind a held one, as on a Kafka broker, which serves a connection's requests one at a time."""
        self._fault(op="delay", api=api, seconds=seconds, on=on, times=times)

    def drop(self, api: str, *, on: str = "request", times: int | None = None) -> None:
        """Requests of ``api`` are never served (``on="response"``: served, never answered): the client times out
        (its ``request.timeout.ms``), closes the connection and retries on a new one."""
        self._fault(op="drop", api=api, on=on, times=times)

    def fail_next(self, api: str, error: str, times: int = 1) -> None:
        """The next ``times`` requests of ``api`` are answered with Kafka's ``error`` (in each partition of a
        Produce or Fetch, at the top of an EndTxn) without being served."""
        self._fault(op="fail", api=api, error=error, times=times)

    def clear_faults(self, api: str | None = None) -> int:
        """Remove the rules of ``api`` (all when None); requests they hold go on at once. How many were removed."""
        cleared: int = self._fault(op="clear", api=api)["cleared"]
        return cleared

    def isolate(self) -> None:
        """Every request of every API is dropped (``drop`` for each): nobody gets an answer from this broker, as
        across a network partition, until :meth:`clear_faults`."""
        self._fault(op="isolate")

    def close_connections(self) -> int:
        """Close every client connection now (the broker keeps running); how many were open."""
        closed: int = self._fault(op="close_connections")["closed"]
        return closed

    def fault_rules(self) -> list[dict[str, Any]]:
        """The rules in force, as the broker holds them (``times`` counts down)."""
        rules: list[dict[str, Any]] = self._fault(op="rules")["rules"]
        return rules
