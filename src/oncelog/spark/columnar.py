"""The Spark source's decoder of records sections into Arrow columns: it lives in the client
(:mod:`oncelog.client.consumer.arrow_decode`), shared with the consumer's ``consume_arrow()``; re-exported here."""

from __future__ import annotations

from oncelog.client.consumer.arrow_decode import DecodedColumns, RecordFormatError, Section, decode_sections

__all__ = ["DecodedColumns", "RecordFormatError", "Section", "decode_sections"]
