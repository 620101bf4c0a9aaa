"""oncelog.protocol: sans-I/O Kafka wire codecs.

Generated per-message codecs live in :mod:`oncelog.protocol.messages` (``tools/gen_protocol.py``); this
package re-exports the hand-written layer on top of them.
"""

from ._runtime import Message, ProtocolDecodeError, ProtocolEncodeError
from .api import (
    API_KEYS,
    ApiSpec,
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    request_header_version,
    response_class,
    response_header_version,
)
from .errors import RETRIABLE, ErrorCode, describe, is_retriable
from .framing import FrameDecoder, FrameTooLargeError

__all__ = [
    "API_KEYS",
    "ApiSpec",
    "ErrorCode",
    "FrameDecoder",
    "FrameTooLargeError",
    "Message",
    "ProtocolDecodeError",
    "ProtocolEncodeError",
    "RETRIABLE",
    "RequestHeader",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "describe",
    "encode_request",
    "encode_response",
    "is_retriable",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
]
