"""What a handler knows of the request it serves: who sent it, over which listener, and which API version.

A leaf module: handlers, the router and the connection import it; it imports nothing of the broker. The principal
is Kafka's ``KafkaPrincipal`` (``User:ANONYMOUS`` on a PLAINTEXT listener, the authenticated user once a connection
has authenticated); authorization decisions take it with the client's host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Union

from oncelog.security.principal import ANONYMOUS, KafkaPrincipal

__all__ = ["ANONYMOUS", "HandlerResult", "KafkaPrincipal", "NO_RESPONSE", "RequestContext"]


class _NoResponse:
    def __repr__(self) -> str:
        return "NO_RESPONSE"


#: a handler's answer when nothing goes back to the client (acks=0 Produce)
NO_RESPONSE: Any = _NoResponse()
HandlerResult = Union[Any, Awaitable[Any]]


@dataclass(slots=True)
class RequestContext:
    connection_id: int
    peer: str  # "host:port" of the client
    client_id: str | None
    api_key: int
    api_version: int
    correlation_id: int
    principal: KafkaPrincipal = ANONYMOUS
    listener: str = "PLAINTEXT"  # the listener's name (listeners=NAME://host:port)

    @property
    def client_host(self) -> str:
        """The client's address without its port (what ACLs name as the host)."""
        host, sep, _ = self.peer.rpartition(":")
        host = host if sep else self.peer
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        # an IPv4 client of a dual-stack listener: its IPv4 address, as Java's InetAddress gives it to Kafka
        return host[7:] if host.startswith("::ffff:") and "." in host else host
