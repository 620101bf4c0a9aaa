"""Request/response headers, header versions, unsupported versions, ApiVersions quirks."""

from __future__ import annotations

import struct

import pytest

from oncelog.protocol import (
    API_KEYS,
    ProtocolDecodeError,
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from oncelog.protocol.messages.api_versions_request import ApiVersionsRequest
from oncelog.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from oncelog.protocol.messages.metadata_request import MetadataRequest


def _join(parts: list[object]) -> bytes:
    return b"".join(bytes(p) for p in parts)  # type: ignore[call-overload]


def test_header_versions() -> None:
    assert request_header_version(0, 8) == 1
    assert request_header_version(0, 9) == 2
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0
    assert request_header_version(7, 1) == 1
    assert request_header_version(18, 3) == 2
    assert response_header_version(18, 3) == 0  # ApiVersions: always v0
    assert response_header_version(0, 9) == 1
    assert response_header_version(0, 8) == 0
    assert request_header_version(30000, 0) == 1


def test_api_keys_table() -> None:
    spec = API_KEYS[0]
    assert (spec.key, spec.name, spec.min_version, spec.flexible_min) == (0, "Produce", 3, 9)  # v0-2 are gone from Kafka 4.0
    assert spec.request_class.__name__ == "ProduceRequest"
    assert spec.response_class.__name__ == "ProduceResponse"
    assert API_KEYS[18].name == "ApiVersions"
    assert API_KEYS[22].max_version == 6


def test_request_header_v2_with_tags_skipped() -> None:
    body = MetadataRequest(topics=None).encode(12)
    hdr = struct.pack(">hhi", 3, 12, 42) + struct.pack(">h", 3) + b"cli" + b"\x01\x00\x02ab"
    header, off = decode_request_header(hdr + body)
    assert header == RequestHeader(3, 12, 42, "cli")
    assert off == len(hdr)
    assert decode_request(3, 12, hdr + body, off) == MetadataRequest(topics=None)


def test_null_client_id() -> None:
    frame = _join(encode_request(RequestHeader(3, 1, 5, None), MetadataRequest(topics=[])))
    header, off = decode_request_header(frame[4:])
    assert header.client_id is None


def test_unknown_api_and_version_still_yield_header() -> None:
    header, _ = decode_request_header(struct.pack(">hhi", 999, 0, 77))
    assert (header.api_key, header.correlation_id) == (999, 77)
    header, _ = decode_request_header(struct.pack(">hhi", 18, 99, 78) + b"\x00")  # ApiVersions v99
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 99, 78)
    with pytest.raises(ProtocolDecodeError):
        decode_request(18, 99, b"", 8)
    with pytest.raises(ProtocolDecodeError):
        decode_request_header(b"\x00\x12\x00")


def test_truncated_header_of_supported_version_fails() -> None:
    with pytest.raises(ProtocolDecodeError):
        decode_request_header(struct.pack(">hhi", 3, 1, 5) + struct.pack(">h", 10) + b"abc")


def test_api_versions_response_header_v0_even_when_flexible() -> None:
    resp = ApiVersionsResponse(api_keys=[ApiVersion(api_key=0, min_version=0, max_version=11)])
    frame = _join(encode_response(18, 3, 1234, resp))
    # size, correlation id, then directly the body (no tagged-field byte of header v1)
    assert frame[4:8] == struct.pack(">i", 1234)
    assert frame[8:] == resp.encode(3)
    assert decode_response(18, 3, frame[4:]) == (1234, resp)


def test_response_header_v1_has_tags() -> None:
    from oncelog.protocol.messages.metadata_response import MetadataResponse

    frame = _join(encode_response(3, 12, 9, MetadataResponse()))
    assert frame[8] == 0
    assert decode_response(3, 12, frame[4:]) == (9, MetadataResponse())


def test_api_versions_request_known_bytes() -> None:
    req = ApiVersionsRequest(client_software_name="oncelog", client_software_version="0.1")
    frame = _join(encode_request(RequestHeader(18, 3, 1, "c"), req))
    assert frame == (
        struct.pack(">ihhi", len(frame) - 4, 18, 3, 1) + b"\x00\x01c" + b"\x00" + b"\x08oncelog" + b"\x040.1" + b"\x00"
    )


def test_wrong_message_type_rejected() -> None:
    from oncelog.protocol import ProtocolEncodeError

    with pytest.raises(ProtocolEncodeError):
        encode_request(RequestHeader(0, 9, 1, None), MetadataRequest())
    with pytest.raises(ProtocolEncodeError):
        encode_request(RequestHeader(3, 99, 1, None), MetadataRequest())
