"""What the group coordinator reads of the consumer protocol (Kafka's ConsumerProtocol, clients side): the topics
of a member's ConsumerProtocolSubscription, any version, read tolerantly. That is all the broker needs of the
protocol's member metadata (offset retention and OffsetDelete of consumer groups, KIP-496)."""

from __future__ import annotations

import struct

__all__ = ["parse_subscription_topics"]


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """The topic list of a ConsumerProtocolSubscription: int16 version, then an array of int16-length strings
    (the layout every version starts with). None if the bytes do not parse."""
    try:
        (_version, n) = struct.unpack_from(">hi", data, 0)
        pos = 6
        if n < 0 or n > len(data):
            return None
        topics = []
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if ln < 0 or pos + ln > len(data):
                return None
            topics.append(bytes(data[pos:pos + ln]).decode("utf-8"))
            pos += ln
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
