"""The codes a record batch's attributes carry (compression codec, timestamp type), in a module of their own: a
client's configuration names them without importing the record batch code (and its CRC32C library)."""

from __future__ import annotations

from typing import ClassVar

__all__ = ["Compression", "TimestampType"]


class Compression:
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4
    NAMES: ClassVar[dict[int, str]] = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    BY_NAME: ClassVar[dict[str, int]] = {v: k for k, v in NAMES.items()}


class TimestampType:
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1
