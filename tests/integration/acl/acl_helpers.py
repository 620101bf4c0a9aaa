"""Who the ACL tests' clients are, and how they talk to a broker (a module of its own: ``conftest`` is ambiguous
when several test folders have one).

Until SASL lands every connection's principal is ``User:ANONYMOUS``, so the tests tell their clients apart by the
host they connect from: the admin from 127.0.0.2, the application (the copier) from 127.0.0.1 (an unbound socket),
an intruder from 127.0.0.3 — all loopback addresses of this machine. :func:`identities` is the one place that says
so: with authentication, it returns users (``User:admin``, ``User:copier``, ``User:mallory``) with host ``*`` and
their clients' SASL settings, and the tests stay as they are.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.protocol import api as kapi
from oncelog.security.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from oncelog.security.store import ACLS, FileSecurityStore

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class Identity:
    """A client as the broker sees it: its principal and host, and what a client needs to be it."""

    principal: str
    host: str
    source: str | None = None  # the local address raw connections bind to (None: the kernel's choice)
    client_config: dict[str, Any] = field(default_factory=dict)  # extra confluent-kafka settings (SASL later)

    def acl(self, resource_type: ResourceType, name: str, op: AclOperation,
            pattern: PatternType = PatternType.LITERAL,
            permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
        return AclBinding(resource_type, name, pattern, self.principal, self.host, op, permission)


def identities() -> dict[str, Identity]:
    """admin (may manage ACLs), app (the application under test), intruder (has no ACL at all)."""
    return {"admin": Identity("User:ANONYMOUS", "127.0.0.2", "127.0.0.2"),
            "app": Identity("User:ANONYMOUS", "127.0.0.1"),
            "intruder": Identity("User:ANONYMOUS", "127.0.0.3", "127.0.0.3")}


def request(bootstrap: str, message: Any, version: int, who: Identity, timeout: float = 15.0) -> Any:
    """Send one request on a fresh connection made as ``who``; the decoded response."""
    host, port = bootstrap.rsplit(":", 1)
    source = (who.source, 0) if who.source else None
    with socket.create_connection((host, int(port)), timeout=timeout, source_address=source) as sock:
        header = kapi.RequestHeader(message.API_KEY, version, 1, "acl-tests")
        sock.sendall(b"".join(bytes(b) for b in kapi.encode_request(header, message)))
        size = struct.unpack(">i", _recv(sock, 4))[0]
        frame = _recv(sock, size)
    return kapi.decode_response(message.API_KEY, version, frame)[1]


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"the broker closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def seed_acls(data_dir: Path, *bindings: AclBinding) -> None:
    """Write ACLs into a single node's records before it starts (how the first admin gets its rights here;
    with SASL, ``super.users`` does it)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(FileSecurityStore(data_dir / "security.json").write(ACLS, dict(b.record() for b in bindings)))


def admin_acls() -> list[AclBinding]:
    admin = identities()["admin"]
    return [admin.acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALL),
            admin.acl(ResourceType.TOPIC, "*", AclOperation.ALL),
            admin.acl(ResourceType.GROUP, "*", AclOperation.ALL),
            admin.acl(ResourceType.TRANSACTIONAL_ID, "*", AclOperation.ALL)]
