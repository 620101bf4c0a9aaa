"""Request/response framing on top of the generated message codecs (sans-I/O).

Frames are ``int32 size`` + header + body. :func:`decode_request_header` and :func:`decode_request` take one
frame *without* its size prefix; :func:`encode_request` / :func:`encode_response` return a list of
bytes-like parts *including* the size prefix, ready for ``writelines``/``sendmsg`` (large records blobs are
included by reference, never copied).

Generated modules are imported lazily, on first use of an API (the protocol has ~90 APIs, a process
typically uses a handful).
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from typing import Any

from ._runtime import (
    DECODE_EXCEPTIONS,
    ENCODE_EXCEPTIONS,
    Message,
    ProtocolDecodeError,
    ProtocolEncodeError,
    decode_error,
    encode_error,
    r_nstr,
    r_uvarint,
    skip_tagged,
    w_nstr,
)
from .messages import _index

__all__ = [
    "API_KEYS",
    "API_VERSIONS_KEY",
    "CONTROLLED_SHUTDOWN_KEY",
    "ApiSpec",
    "ProtocolDecodeError",
    "RequestHeader",
    "request_header_version",
    "response_header_version",
    "decode_request_header",
    "decode_request",
    "encode_request",
    "encode_response",
    "decode_response",
    "request_class",
    "response_class",
]

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7

_MESSAGES_PKG = "oncelog.protocol.messages."
_S_hhi = struct.Struct(">hhi")
_S_i = struct.Struct(">i")
_i_pack = _S_i.pack


def _load(module: str, cls: str) -> type[Message]:
    mod = importlib.import_module(_MESSAGES_PKG + module)
    result: type[Message] = getattr(mod, cls)
    return result


class ApiSpec:
    """One Kafka API. ``request_class``/``response_class`` import their generated module on first access."""

    __slots__ = (
        "key",
        "name",
        "min_version",
        "max_version",
        "flexible_min",
        "_request",
        "_response",
        "_request_class",
        "_response_class",
    )

    def __init__(
        self,
        key: int,
        name: str,
        min_version: int,
        max_version: int,
        flexible_min: int | None,
        request: tuple[str, str],
        response: tuple[str, str],
    ) -> None:
        self.key = key
        self.name = name
        self.min_version = min_version
        self.max_version = max_version
        self.flexible_min = flexible_min
        self._request = request
        self._response = response
        self._request_class: type[Message] | None = None
        self._response_class: type[Message] | None = None

    @property
    def request_class(self) -> type[Message]:
        cls = self._request_class
        if cls is None:
            cls = self._request_class = _load(*self._request)
        return cls

    @property
    def response_class(self) -> type[Message]:
        cls = self._response_class
        if cls is None:
            cls = self._response_class = _load(*self._response)
        return cls

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min is not None and version >= self.flexible_min

    def __repr__(self) -> str:
        return (
            f"ApiSpec(key={self.key}, name={self.name!r}, min_version={self.min_version}, "
            f"max_version={self.max_version}, flexible_min={self.flexible_min})"
        )


def _build() -> dict[int, ApiSpec]:
    specs: dict[int, ApiSpec] = {}
    for key, (lo, hi, fmin) in sorted(_index.VERSIONS.items()):
        req = _index.REQUESTS[key]
        resp = _index.RESPONSES[key]
        name = req[1].removesuffix("Request")
        specs[key] = ApiSpec(key, name, lo, hi, fmin, req, resp)
    return specs


#: Every API Kafka's schemas define, by api key.
API_KEYS: dict[int, ApiSpec] = _build()


def request_class(api_key: int) -> type[Message]:
    return API_KEYS[api_key].request_class


def response_class(api_key: int) -> type[Message]:
    return API_KEYS[api_key].response_class


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible versions, 1 otherwise (0 for ControlledShutdown v0). Unknown APIs -> 1."""
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    spec = API_KEYS.get(api_key)
    if spec is None or spec.flexible_min is None or api_version < spec.flexible_min:
        return 1
    return 2


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible versions, 0 otherwise; ApiVersions responses always use header v0."""
    if api_key == API_VERSIONS_KEY:
        return 0
    spec = API_KEYS.get(api_key)
    if spec is None or spec.flexible_min is None or api_version < spec.flexible_min:
        return 0
    return 1


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def _as_mv(buf: Any) -> memoryview:
    mv = buf if type(buf) is memoryview else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


_REQUEST_HEADER_VERSIONS: dict[tuple[int, int], int] = {}  # (api key, version) -> request_header_version


def decode_request_header(buf: Any) -> tuple[RequestHeader, int]:
    """Decode the request header at the start of ``buf`` (a frame without its size prefix).

    Returns the header and the offset of the body. api_key/api_version/correlation_id are read first, so an
    unknown API or unsupported version still yields a header (with ``client_id`` best-effort) that the
    broker can answer with UNSUPPORTED_VERSION.
    """
    mv = _as_mv(buf)
    try:
        api_key, api_version, correlation_id = _S_hhi.unpack_from(mv, 0)
    except struct.error:
        raise ProtocolDecodeError(f"request header truncated ({len(mv)} bytes)") from None
    header = RequestHeader(api_key, api_version, correlation_id, None)
    hv = _REQUEST_HEADER_VERSIONS.get((api_key, api_version))
    if hv is None:
        hv = _REQUEST_HEADER_VERSIONS[(api_key, api_version)] = request_header_version(api_key, api_version)
    pos = 8
    if hv == 0:
        return header, pos
    spec = API_KEYS.get(api_key)
    try:
        header.client_id, pos = r_nstr(mv, pos)
        if hv >= 2:
            n, pos = r_uvarint(mv, pos)
            if n:
                pos = skip_tagged(mv, pos, n)
    except DECODE_EXCEPTIONS as exc:
        if spec is None or not spec.supports(api_version):
            return header, 8  # best effort: the body will not be decoded anyway
        raise decode_error(exc, f"request header v{hv} (api {api_key} v{api_version})") from None
    return header, pos


_REQUEST_READERS: dict[tuple[int, int], tuple[Any, str]] = {}


def _request_reader(api_key: int, api_version: int) -> tuple[Any, str]:
    spec = API_KEYS.get(api_key)
    if spec is None:
        raise ProtocolDecodeError(f"unknown api key {api_key}")
    if not spec.supports(api_version):
        raise ProtocolDecodeError(f"{spec.name}Request: unsupported version {api_version}")
    entry = (spec.request_class._READERS[api_version], f"{spec.name}Request v{api_version}")
    _REQUEST_READERS[(api_key, api_version)] = entry
    return entry


def decode_request(api_key: int, api_version: int, buf: Any, offset: int) -> Any:
    """Decode the body of a request whose header ended at ``offset``."""
    entry = _REQUEST_READERS.get((api_key, api_version))
    if entry is None:
        entry = _request_reader(api_key, api_version)
    mv = buf if type(buf) is memoryview and buf.c_contiguous and buf.format == "B" else _as_mv(buf)
    try:
        return entry[0](mv, offset)[0]
    except DECODE_EXCEPTIONS as exc:
        raise decode_error(exc, entry[1]) from None


def _nbytes(p: Any) -> int:
    return p.nbytes if type(p) is memoryview else len(p)


_WRITER_OF: dict[tuple[type, int, int], Any] = {}  # (message class, api key, version) -> its writer


def _writer(cls: type, api_key: int, version: int, kind: str) -> Any:
    writers = getattr(cls, "_WRITERS", None)
    if writers is None or getattr(cls, "API_KEY", None) != api_key:
        raise ProtocolEncodeError(f"{cls.__name__} is not a {kind} of api key {api_key}")
    writer = writers.get(version)
    if writer is None:
        raise ProtocolEncodeError(f"{cls.__name__}: unsupported version {version}")
    _WRITER_OF[(cls, api_key, version)] = writer
    return writer


def _encode(out: bytearray, message: Any, api_key: int, version: int, kind: str) -> list[Any]:
    cls = type(message)
    writer = _WRITER_OF.get((cls, api_key, version)) or _writer(cls, api_key, version, kind)
    parts: list[Any] = []
    try:
        writer(out, parts, message)
    except ENCODE_EXCEPTIONS as exc:
        raise encode_error(exc, f"{cls.__name__} v{version}") from None
    if out:
        parts.append(out)
    total = 0
    for p in parts:
        total += p.nbytes if type(p) is memoryview else len(p)
    parts.insert(0, _i_pack(total))
    return parts


def encode_request(header: RequestHeader, message: Any) -> list[Any]:
    """Size prefix + request header + body, as a list of bytes-like parts."""
    hv = request_header_version(header.api_key, header.api_version)
    out = bytearray(_S_hhi.pack(header.api_key, header.api_version, header.correlation_id))
    if hv >= 1:
        w_nstr(out, header.client_id)
        if hv >= 2:
            out.append(0)
    return _encode(out, message, header.api_key, header.api_version, "request")


_RESPONSE_HEADER_VERSIONS: dict[tuple[int, int], int] = {}  # (api key, version) -> response_header_version


def encode_response(api_key: int, api_version: int, correlation_id: int, message: Any) -> list[Any]:
    """Size prefix + response header + body, as a list of bytes-like parts (records by reference)."""
    out = bytearray(_i_pack(correlation_id))
    hv = _RESPONSE_HEADER_VERSIONS.get((api_key, api_version))
    if hv is None:
        hv = _RESPONSE_HEADER_VERSIONS[(api_key, api_version)] = response_header_version(api_key, api_version)
    if hv >= 1:
        out.append(0)
    return _encode(out, message, api_key, api_version, "response")


def decode_response(api_key: int, api_version: int, buf: Any) -> tuple[int, Any]:
    """Decode one response frame (without size prefix): (correlation_id, message)."""
    spec = API_KEYS.get(api_key)
    if spec is None:
        raise ProtocolDecodeError(f"unknown api key {api_key}")
    mv = _as_mv(buf)
    try:
        (correlation_id,) = _S_i.unpack_from(mv, 0)
        pos = 4
        if response_header_version(api_key, api_version) >= 1:
            n, pos = r_uvarint(mv, pos)
            if n:
                pos = skip_tagged(mv, pos, n)
    except DECODE_EXCEPTIONS as exc:
        raise decode_error(exc, f"{spec.name}Response header") from None
    return correlation_id, spec.response_class.decode_from(mv, api_version, pos)[0]
