"""A blocking Kafka connection for hand-made SASL exchanges (optionally over TLS): what real clients never send."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

from oncelog.protocol import api as kapi
from oncelog.protocol.api import RequestHeader
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from oncelog.protocol.messages.sasl_handshake_request import SaslHandshakeRequest

METADATA, SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 3, 17, 18, 36


class Closed(Exception):
    """The broker closed the connection."""


class Raw:
    def __init__(self, port: int, tls: ssl.SSLContext | None = None, timeout: float = 10.0) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = tls.wrap_socket(sock, server_hostname="127.0.0.1") if tls is not None else sock
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, msg: Any) -> int:
        self._corr += 1
        self.send_bytes(b"".join(bytes(b) for b in kapi.encode_request(
            RequestHeader(api_key, version, self._corr, "raw-sasl"), msg)))
        return self._corr

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except (ConnectionResetError, ssl.SSLError):
                chunk = b""
            if not chunk:
                raise Closed(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def request(self, api_key: int, version: int, msg: Any) -> Any:
        corr = self.send(api_key, version, msg)
        got, resp = kapi.decode_response(api_key, version, self.frame())
        assert got == corr
        return resp

    def api_versions(self) -> Any:
        return self.request(API_VERSIONS, 3, ApiVersionsRequest(client_software_name="raw",
                                                                client_software_version="1"))

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        return self.request(SASL_HANDSHAKE, version, SaslHandshakeRequest(mechanism=mechanism))

    def authenticate(self, token: bytes, version: int = 2) -> Any:
        return self.request(SASL_AUTHENTICATE, version, SaslAuthenticateRequest(auth_bytes=token))

    def plain(self, user: str, password: str) -> Any:
        self.api_versions()
        self.handshake("PLAIN")
        return self.authenticate(f"\0{user}\0{password}".encode())

    def closed_within(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection within ``timeout`` (bytes it sends first are dropped)."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        except socket.timeout:
            return False
        return False
