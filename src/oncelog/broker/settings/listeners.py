"""The broker's listeners: ``listeners`` and ``advertised.listeners`` (Kafka's ``NAME://HOST:PORT,...``).

Each listener has a name (upper-case, as Kafka's ``ListenerName.normalised``), whose security protocol
``listener.security.protocol.map`` gives (a listener named as a protocol needs no entry); ``HOST:PORT`` alone is a
PLAINTEXT listener (``--listen``). An empty host binds every interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Endpoint", "Listeners", "parse_listeners", "parse_port"]


def _str(v: Any) -> str:
    if isinstance(v, (dict, list, bool)):
        raise ValueError("expected a string")
    return str(v).strip()


def parse_port(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    try:
        p = int(str(v).strip())
    except ValueError:
        raise ValueError("expected an integer") from None
    if not 0 <= p <= 65535:
        raise ValueError("a port is 0-65535")
    return p


@dataclass(frozen=True)
class Endpoint:
    """One listener: ``NAME://HOST:PORT`` (``HOST:PORT`` is a PLAINTEXT listener; an empty host means every
    interface, as in Kafka). The name is upper-case (Kafka's ``ListenerName.normalised``); its security protocol
    comes from ``listener.security.protocol.map``."""

    host: str
    port: int
    name: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"

    @staticmethod
    def parse(v: Any) -> Endpoint:
        items = parse_listeners(v)
        if len(items) != 1:
            raise ValueError("expected one listener such as PLAINTEXT://127.0.0.1:9092")
        return items[0]


class Listeners(tuple[Endpoint, ...]):
    """``listeners`` / ``advertised.listeners``: endpoints with different names (Kafka's string form as str())."""

    def __str__(self) -> str:
        return ",".join(str(e) for e in self)

    def named(self, name: str) -> Endpoint | None:
        return next((e for e in self if e.name == name), None)


def parse_listeners(v: Any) -> Listeners:
    """``NAME://HOST:PORT,...`` (Kafka's ``listeners``); ``HOST:PORT`` alone is a PLAINTEXT listener."""
    out: list[Endpoint] = []
    for item in (x.strip() for x in _str(v).split(",") if x.strip()):
        scheme, sep, rest = item.rpartition("://")
        if not sep:
            scheme, rest = "PLAINTEXT", item
        name = scheme.upper()
        if not name.replace("_", "").isalnum():
            raise ValueError(f"{scheme!r} is not a listener name (letters, digits and _)")
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"expected PLAINTEXT://HOST:PORT (or NAME://HOST:PORT for another listener), e.g. "
                             f"PLAINTEXT://127.0.0.1:9092 (got {item!r})")
        if any(e.name == name for e in out):
            raise ValueError(f"listener {name} is given twice: each listener needs its own name")
        out.append(Endpoint(host.strip("[]"), parse_port(port), name))
    if not out:
        raise ValueError("expected at least one listener, e.g. PLAINTEXT://127.0.0.1:9092")
    ports = [e.port for e in out if e.port]
    if len(set(ports)) != len(ports):
        raise ValueError("each listener needs its own port")
    return Listeners(out)
