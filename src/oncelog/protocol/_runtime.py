"""Runtime support for the generated codecs in :mod:`oncelog.protocol.messages`.

Everything here is small and called from generated straight-line code, so it is written for speed: no
per-field interpretation, bounds checked before anything is allocated. Decoding primitives raise whatever
Python raises on bad input (``IndexError``, ``struct.error``, ``UnicodeDecodeError`` ...) or
:class:`ProtocolDecodeError`; the public entry points convert everything to :class:`ProtocolDecodeError`
and name the field that failed (every generated line carries a ``# @Field.Path`` comment which is looked up
from the traceback, so the happy path pays nothing for it).
"""

from __future__ import annotations

import linecache
import os
import struct
from types import TracebackType
from typing import Any, Callable, ClassVar, Sequence, TypeVar
from uuid import UUID

__all__ = [
    "ProtocolDecodeError",
    "ProtocolEncodeError",
    "Message",
    "ZERO_UUID",
    "Buffer",
]

Buffer = bytes | bytearray | memoryview

_GEN_MARKER = os.sep + "messages" + os.sep


class ProtocolDecodeError(ValueError):
    """Raised for any malformed input: truncated, negative lengths, invalid UTF-8, unknown versions..."""


class ProtocolEncodeError(ValueError):
    """Raised when a message cannot be encoded in the requested version (wrong types, null in a
    non-nullable field, string too long ...)."""


ZERO_UUID = UUID(int=0)

S_b = struct.Struct(">b")
S_h = struct.Struct(">h")
S_i = struct.Struct(">i")
S_I = struct.Struct(">I")
S_q = struct.Struct(">q")
S_QQ = struct.Struct(">QQ")
_unpack_from = struct.unpack_from
_pack = struct.pack
_h_unpack = S_h.unpack_from
_i_unpack = S_i.unpack_from
_h_pack = S_h.pack
_i_pack = S_i.pack
_QQ_unpack = S_QQ.unpack_from

NULL16 = b"\xff\xff"
NULL32 = b"\xff\xff\xff\xff"


# ---------------------------------------------------------------------------------------------- errors


def field_from_traceback(tb: TracebackType | None) -> str | None:
    """The ``# @Field`` annotation of the innermost generated-code line in ``tb``, if any."""
    found: str | None = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if _GEN_MARKER in filename:
            line = linecache.getline(filename, tb.tb_lineno)
            idx = line.rfind("# @")
            if idx >= 0:
                found = line[idx + 3 :].strip()
        tb = tb.tb_next
    return found


def decode_error(exc: BaseException, what: str) -> ProtocolDecodeError:
    field = field_from_traceback(exc.__traceback__)
    where = f"{what} field {field}" if field else what
    if isinstance(exc, (IndexError, struct.error)):
        detail = "truncated input"
        if not isinstance(exc, IndexError):
            detail = f"truncated input ({exc})"
    else:
        detail = str(exc) or type(exc).__name__
    return ProtocolDecodeError(f"cannot decode {where}: {detail}")


def encode_error(exc: BaseException, what: str) -> ProtocolEncodeError:
    field = field_from_traceback(exc.__traceback__)
    where = f"{what} field {field}" if field else what
    return ProtocolEncodeError(f"cannot encode {where}: {type(exc).__name__}: {exc}")


#: Exceptions that malformed input can provoke inside generated readers.
DECODE_EXCEPTIONS: tuple[type[BaseException], ...] = (
    IndexError,
    struct.error,
    UnicodeDecodeError,
    ValueError,
    TypeError,
    OverflowError,
    MemoryError,
    RecursionError,
    KeyError,
)
ENCODE_EXCEPTIONS: tuple[type[BaseException], ...] = (
    struct.error,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    UnicodeEncodeError,
)


def null_error() -> ProtocolDecodeError:
    return ProtocolDecodeError("null value in a non-nullable field")


def too_long(n: int, remaining: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"length {n} exceeds the {remaining} remaining bytes")


#: the longest string Kafka reads or writes, compact (flexible versions) or not: 32767 bytes (its generated codecs
#: refuse a longer one, "string field ... had invalid length", MessageDataGenerator)
MAX_STRING_BYTES = 0x7FFF


def string_too_long(n: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"a string of {n} bytes is longer than Kafka's limit of {MAX_STRING_BYTES}")


# ---------------------------------------------------------------------------------------------- varints


def uvarint_cont(buf: Any, pos: int, first: int) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte (``first``, continuation bit set) was already consumed."""
    result = first & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolDecodeError("unsigned varint is longer than 5 bytes")


def r_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return uvarint_cont(buf, pos + 1, b)


def w_uvarint(out: bytearray, n: int) -> None:
    if n < 0:
        raise ValueError(f"negative unsigned varint {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    w_uvarint(out, n)
    return bytes(out)


def skip_tagged(buf: Any, pos: int, count: int) -> int:
    """Skip ``count`` tagged fields (KIP-482: unknown tags are ignored)."""
    blen = len(buf)
    for _ in range(count):
        _tag, pos = r_uvarint(buf, pos)
        size, pos = r_uvarint(buf, pos)
        pos += size
        if pos > blen:
            raise too_long(size, blen - pos + size)
    return pos


def tagged_header(buf: Any, pos: int) -> tuple[int, int, int]:
    """Read ``tag`` and ``size`` of one tagged field; return (tag, start of data, end of data)."""
    tag, pos = r_uvarint(buf, pos)
    size, pos = r_uvarint(buf, pos)
    end = pos + size
    if end > len(buf):
        raise too_long(size, len(buf) - pos)
    return tag, pos, end


# ---------------------------------------------------------------------------------------------- readers


def r_uuid(buf: Any, pos: int) -> UUID:
    hi, lo = _QQ_unpack(buf, pos)
    if hi == 0 and lo == 0:
        return ZERO_UUID
    return UUID(int=(hi << 64) | lo)


def r_str(buf: Any, pos: int) -> tuple[str, int]:
    (n,) = _h_unpack(buf, pos)
    pos += 2
    if n < 0:
        raise null_error()
    end = pos + n
    if end > len(buf):
        raise too_long(n, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def r_nstr(buf: Any, pos: int) -> tuple[str | None, int]:
    (n,) = _h_unpack(buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise too_long(n, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def r_cstr(buf: Any, pos: int) -> tuple[str, int]:
    n = buf[pos]
    pos += 1
    if n > 127:
        n, pos = uvarint_cont(buf, pos, n)
        if n > MAX_STRING_BYTES + 1:
            raise string_too_long(n - 1)
    if n == 0:
        raise null_error()
    end = pos + n - 1
    if end > len(buf):
        raise too_long(n - 1, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def r_cnstr(buf: Any, pos: int) -> tuple[str | None, int]:
    n = buf[pos]
    pos += 1
    if n > 127:
        n, pos = uvarint_cont(buf, pos, n)
        if n > MAX_STRING_BYTES + 1:
            raise string_too_long(n - 1)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise too_long(n - 1, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def _r_blob32(buf: Any, pos: int, nullable: bool) -> tuple[Any, int]:
    (n,) = _i_unpack(buf, pos)
    pos += 4
    if n < 0:
        if nullable:
            return None, pos
        raise null_error()
    end = pos + n
    if end > len(buf):
        raise too_long(n, len(buf) - pos)
    return buf[pos:end], end


def _r_cblob(buf: Any, pos: int, nullable: bool) -> tuple[Any, int]:
    n = buf[pos]
    pos += 1
    if n > 127:
        n, pos = uvarint_cont(buf, pos, n)
    if n == 0:
        if nullable:
            return None, pos
        raise null_error()
    end = pos + n - 1
    if end > len(buf):
        raise too_long(n - 1, len(buf) - pos)
    return buf[pos:end], end


def r_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    v, pos = _r_blob32(buf, pos, False)
    return bytes(v), pos


def r_nbytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    v, pos = _r_blob32(buf, pos, True)
    return (None if v is None else bytes(v)), pos


def r_cbytes(buf: Any, pos: int) -> tuple[bytes, int]:
    v, pos = _r_cblob(buf, pos, False)
    return bytes(v), pos


def r_cnbytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    v, pos = _r_cblob(buf, pos, True)
    return (None if v is None else bytes(v)), pos


def r_rec(buf: Any, pos: int) -> tuple[Any, int]:
    return _r_blob32(buf, pos, False)


def r_nrec(buf: Any, pos: int) -> tuple[Any, int]:
    return _r_blob32(buf, pos, True)


def r_crec(buf: Any, pos: int) -> tuple[Any, int]:
    return _r_cblob(buf, pos, False)


def r_cnrec(buf: Any, pos: int) -> tuple[Any, int]:
    return _r_cblob(buf, pos, True)


def r_alen(buf: Any, pos: int) -> tuple[int, int]:
    """int32 array length (-1 = null), checked against the remaining bytes before anything is allocated."""
    (n,) = _i_unpack(buf, pos)
    pos += 4
    if n > len(buf) - pos:
        raise too_long(n, len(buf) - pos)
    return n, pos


def r_calen(buf: Any, pos: int) -> tuple[int, int]:
    """Compact array length (-1 = null), checked against the remaining bytes."""
    n = buf[pos]
    pos += 1
    if n > 127:
        n, pos = uvarint_cont(buf, pos, n)
    n -= 1
    if n > len(buf) - pos:
        raise too_long(n, len(buf) - pos)
    return n, pos


def r_fixed_arr(buf: Any, pos: int, n: int, code: str, size: int) -> tuple[list[Any], int]:
    if n == 0:
        return [], pos
    return list(_unpack_from(">%d%s" % (n, code), buf, pos)), pos + n * size


def r_uuid_arr(buf: Any, pos: int, n: int) -> tuple[list[UUID], int]:
    if pos + 16 * n > len(buf):
        raise too_long(16 * n, len(buf) - pos)
    return [r_uuid(buf, pos + 16 * k) for k in range(n)], pos + 16 * n


T = TypeVar("T")


def r_list(buf: Any, pos: int, n: int, reader: Callable[[Any, int], tuple[T, int]]) -> tuple[list[T], int]:
    out: list[T] = []
    append = out.append
    for _ in range(n):
        item, pos = reader(buf, pos)
        append(item)
    return out, pos


# ---------------------------------------------------------------------------------------------- writers


def w_str(out: bytearray, s: str) -> None:
    b = s.encode()
    n = len(b)
    if n > 0x7FFF:
        raise ValueError(f"string of {n} bytes is longer than 32767")
    out += _h_pack(n)
    out += b


def w_nstr(out: bytearray, s: str | None) -> None:
    if s is None:
        out += NULL16
    else:
        w_str(out, s)


def w_cstr(out: bytearray, s: str) -> None:
    b = s.encode()
    n = len(b) + 1
    if n < 0x80:
        out.append(n)
    else:
        if n > MAX_STRING_BYTES + 1:
            raise ValueError(f"string of {n - 1} bytes is longer than 32767")
        w_uvarint(out, n)
    out += b


def w_cnstr(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
    else:
        w_cstr(out, s)


def _nbytes(b: Any) -> int:
    return b.nbytes if type(b) is memoryview else len(b)


def w_bytes(out: bytearray, b: Any) -> None:
    out += _i_pack(_nbytes(b))
    out += b


def w_nbytes(out: bytearray, b: Any) -> None:
    if b is None:
        out += NULL32
    else:
        out += _i_pack(_nbytes(b))
        out += b


def w_cbytes(out: bytearray, b: Any) -> None:
    w_uvarint(out, _nbytes(b) + 1)
    out += b


def w_cnbytes(out: bytearray, b: Any) -> None:
    if b is None:
        out.append(0)
    else:
        w_uvarint(out, _nbytes(b) + 1)
        out += b


#: Records blobs at least this large are passed by reference instead of copied into the output buffer.
RECORDS_BY_REFERENCE_MIN = 512


def _uvarint_to(out: bytearray, n: int) -> None:
    if n < 0x80:
        out.append(n)
    elif n < 0x4000:
        out.append((n & 0x7F) | 0x80)
        out.append(n >> 7)
    else:
        w_uvarint(out, n)


def _w_records(out: bytearray, parts: list[Any], val: Any, compact: bool, nullable: bool) -> None:
    tv = type(val)
    if tv is bytes or tv is bytearray:
        bufs: Sequence[Any] = (val,)
        total = len(val)
    elif tv is memoryview:
        bufs = (val,)
        total = val.nbytes
    elif val is None:
        if not nullable:
            raise TypeError("records field is not nullable in this version")
        if compact:
            out.append(0)
        else:
            out += NULL32
        return
    else:
        bufs = val if isinstance(val, (list, tuple)) else (val,)
        total = 0
        for b in bufs:
            total += b.nbytes if type(b) is memoryview else len(b)
    if compact:
        _uvarint_to(out, total + 1)
    else:
        out += _i_pack(total)
    if total < RECORDS_BY_REFERENCE_MIN:
        for b in bufs:
            out += b
        return
    if out:
        parts.append(out[:])
        del out[:]
    for b in bufs:
        if b:
            parts.append(b)


def w_rec(out: bytearray, parts: list[Any], val: Any) -> None:
    _w_records(out, parts, val, False, False)


def w_nrec(out: bytearray, parts: list[Any], val: Any) -> None:
    _w_records(out, parts, val, False, True)


def w_crec(out: bytearray, parts: list[Any], val: Any) -> None:
    _w_records(out, parts, val, True, False)


def w_cnrec(out: bytearray, parts: list[Any], val: Any) -> None:
    """Compact nullable records (Produce v9+, Fetch v12+): the hot path, specialised for one blob."""
    tv = type(val)
    if tv is bytes:
        total = len(val)
    elif val is None:
        out.append(0)
        return
    else:
        _w_records(out, parts, val, True, True)
        return
    n = total + 1
    if n < 0x80:
        out.append(n)
    elif n < 0x4000:
        out.append((n & 0x7F) | 0x80)
        out.append(n >> 7)
    else:
        w_uvarint(out, n)
    if total < RECORDS_BY_REFERENCE_MIN:
        out += val
        return
    parts.append(out[:])
    del out[:]
    parts.append(val)


def w_alen(out: bytearray, n: int) -> None:
    out += _i_pack(n)


def w_calen(out: bytearray, n: int) -> None:
    n += 1
    if n < 0x80:
        out.append(n)
    else:
        w_uvarint(out, n)


def w_fixed_arr(out: bytearray, vals: Sequence[Any], code: str) -> None:
    if vals:
        out += _pack(">%d%s" % (len(vals), code), *vals)


def join_tagged(tmp: bytearray, tmp_parts: list[Any]) -> bytes | bytearray:
    if not tmp_parts:
        return tmp
    tmp_parts.append(tmp)
    return b"".join(tmp_parts)


# ---------------------------------------------------------------------------------------------- base


M = TypeVar("M", bound="Message")


class Message:
    """Base of every generated top-level message class (``__slots__``-compatible)."""

    __slots__ = ()

    _READERS: ClassVar[dict[int, Callable[[Any, int], tuple[Any, int]]]] = {}
    _WRITERS: ClassVar[dict[int, Callable[[bytearray, list[Any], Any], None]]] = {}
    NAME: ClassVar[str] = ""
    MIN_VERSION: ClassVar[int] = 0
    MAX_VERSION: ClassVar[int] = 0

    @classmethod
    def decode_from(cls: type[M], buf: Buffer, version: int, offset: int = 0) -> tuple[M, int]:
        """Decode one message at ``offset``; return it and the offset just past it."""
        reader = cls._READERS.get(version)
        if reader is None:
            raise ProtocolDecodeError(f"{cls.NAME}: unsupported version {version}")
        if type(buf) is not memoryview:
            buf = memoryview(buf)
        elif buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        try:
            msg, pos = reader(buf, offset)
        except ProtocolDecodeError as exc:
            raise decode_error(exc, f"{cls.NAME} v{version}") from None
        except DECODE_EXCEPTIONS as exc:
            raise decode_error(exc, f"{cls.NAME} v{version}") from None
        return msg, pos

    @classmethod
    def decode(cls: type[M], buf: Buffer, version: int) -> M:
        return cls.decode_from(buf, version, 0)[0]

    def encode_parts(self, version: int) -> list[Any]:
        """Encode into a list of bytes-like parts (large records blobs are included by reference)."""
        writer = self._WRITERS.get(version)
        if writer is None:
            raise ProtocolEncodeError(f"{self.NAME}: unsupported version {version}")
        parts: list[Any] = []
        out = bytearray()
        try:
            writer(out, parts, self)
        except ENCODE_EXCEPTIONS as exc:
            raise encode_error(exc, f"{self.NAME} v{version}") from None
        if out:
            parts.append(out)
        return parts

    def encode(self, version: int) -> bytes:
        return b"".join(self.encode_parts(version))
