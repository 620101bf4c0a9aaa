"""Sans-I/O splitting of a byte stream into Kafka frames (``int32 size`` + payload)."""

from __future__ import annotations

import struct
from typing import Any

from ._runtime import ProtocolDecodeError

__all__ = ["FrameDecoder", "FrameTooLargeError"]

_S_i = struct.Struct(">i")


class FrameTooLargeError(ProtocolDecodeError):
    """A size prefix exceeds ``max_frame_bytes``."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {max_frame_bytes}")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class FrameDecoder:
    """Feed it bytes as they arrive; it returns every completed frame, size prefix stripped.

    Frames lying entirely inside one fed chunk are returned as zero-copy ``memoryview`` slices of it (a
    writable buffer such as a reused ``bytearray`` is copied once first, so the caller may reuse it).
    A frame split across chunks is assembled in a ``bytearray`` that grows geometrically (amortised O(n),
    never O(n^2)) and is returned as that ``bytearray`` (ownership passes to the caller).

    After an error the decoder's state is unspecified: close the connection.
    """

    __slots__ = ("max_frame_bytes", "_head", "_body", "_need")

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._head = bytearray()  # partial size prefix (< 4 bytes)
        self._body: bytearray | None = None  # partial frame payload
        self._need = 0  # payload size of the partial frame

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (prefix included)."""
        return len(self._head) + (4 + len(self._body) if self._body is not None else 0)

    def _check(self, size: int) -> None:
        if size < 0:
            raise ProtocolDecodeError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(size, self.max_frame_bytes)

    def feed(self, data: Any) -> list[memoryview | bytearray]:
        mv = data if type(data) is memoryview else memoryview(data)
        if not mv.readonly:
            mv = memoryview(bytes(mv))
        elif mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        if self._body is None and not self._head and n >= 4:  # the common chunk: exactly one whole frame
            (size,) = _S_i.unpack_from(mv, 0)
            if size == n - 4 and 0 <= size <= self.max_frame_bytes:
                return [mv[4:]]
        frames: list[memoryview | bytearray] = []
        pos = 0
        while pos < n:
            body = self._body
            if body is not None:
                take = min(self._need - len(body), n - pos)
                body += mv[pos : pos + take]
                pos += take
                if len(body) == self._need:
                    frames.append(body)
                    self._body = None
                continue
            head = self._head
            if head or n - pos < 4:
                take = min(4 - len(head), n - pos)
                head += mv[pos : pos + take]
                pos += take
                if len(head) < 4:
                    break
                (size,) = _S_i.unpack(head)
                head.clear()
            else:
                (size,) = _S_i.unpack_from(mv, pos)
                pos += 4
            self._check(size)
            if n - pos >= size:
                frames.append(mv[pos : pos + size])
                pos += size
            else:
                self._body = bytearray(mv[pos:])
                self._need = size
                pos = n
        return frames
