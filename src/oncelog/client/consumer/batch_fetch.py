"""Batch-level fetching of one partition range for columnar readers (the Spark source): record batches come
back checked (CRC), filtered by the isolation level (aborted transactions and control batches dropped by the
same :func:`make_batch_filter` the consumer uses) and decompressed, but not decoded into per-record objects.

``BatchFetcher.read_range(topic, partition, start, end)`` yields lists of :class:`FetchedBatch` in offset order
and keeps one fetch in flight while the caller decodes the previous one. It ends when the fetch position
reaches ``end`` (markers and aborted records included), never by counting records.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator, Mapping
from typing import Any, Self

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from oncelog.protocol.records import CorruptRecordError

from .._sync import LoopThread
from ..cluster import Cluster
from ..config import ConsumerConfig, parse_consumer_config
from ..errors import KafkaError, KafkaTimeoutError
from .fetcher import FetchedBatch, accepted_batches, make_batch_filter

__all__ = ["AsyncBatchFetcher", "BatchFetcher", "FetchedBatch", "accepted_batches"]


class AsyncBatchFetcher:
    def __init__(self, conf: Mapping[str, Any] | ConsumerConfig) -> None:
        self.config = conf if isinstance(conf, ConsumerConfig) else parse_consumer_config(conf)
        c = self.config
        self.cluster = Cluster.from_config(c)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.cluster.bootstrap()
            self._started = True

    async def close(self) -> None:
        await self.cluster.close()
        self._started = False

    async def fetch(self, topic: str, partition: int, offset: int, max_wait_ms: int
                    ) -> tuple[list[FetchedBatch], int]:
        """One Fetch at ``offset``: the accepted batches that end at or after it, and the next offset to fetch.

        Retriable errors (leader moved, connection lost) refresh metadata and return no batches at the same
        offset; OFFSET_OUT_OF_RANGE and other errors raise KafkaError.
        """
        await self.start()
        c = self.config
        try:
            if self.cluster.topic(topic) is None:
                await self.cluster.wait_for_topic(topic, c.request_timeout_ms / 1000)
            conn = await self.cluster.connection(self.cluster.leader_for(topic, partition))
            req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=c.fetch_min_bytes,
                               max_bytes=c.fetch_max_bytes, isolation_level=c.isolation_level, session_id=0,
                               session_epoch=-1, forgotten_topics_data=[],
                               topics=[FetchTopic(topic=topic, topic_id=self.cluster.topic_id(topic), partitions=[
                                   FetchPartition(partition=partition, fetch_offset=offset,
                                                  partition_max_bytes=c.max_partition_fetch_bytes)])])
            resp = await conn.send(req, timeout=conn.request_timeout + max_wait_ms / 1000)
        except KafkaError as e:
            if not e.retriable():
                raise
            await asyncio.sleep(c.retry_backoff_ms / 1000)
            await self.cluster.refresh([topic])
            return [], offset
        if resp.error_code:
            raise KafkaError(resp.error_code, f"fetch of {topic}[{partition}] failed")
        for rt in resp.responses:
            for rp in rt.partitions:
                if rp.partition_index != partition:
                    continue
                if rp.error_code:
                    err = KafkaError(rp.error_code, f"fetch {topic}[{partition}] at offset {offset}")
                    if err.retriable() and rp.error_code != ErrorCode.OFFSET_OUT_OF_RANGE:
                        await asyncio.sleep(c.retry_backoff_ms / 1000)
                        await self.cluster.refresh([topic])
                        return [], offset
                    raise err
                try:
                    return accepted_batches(rp.records, offset,
                                            make_batch_filter(c.isolation_level, rp.aborted_transactions),
                                            c.check_crcs)
                except CorruptRecordError as e:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{topic}[{partition}] at {offset}: {e}",
                                     retriable=False) from None
        return [], offset


class BatchFetcher:
    """Blocking facade over :class:`AsyncBatchFetcher` on a background event loop thread."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._async = AsyncBatchFetcher(conf)
        self._runner = LoopThread("oncelog-batch-fetcher")
        self._timeout = self._async.config.request_timeout_ms / 1000 + 5
        try:
            self._runner.run(self._async.start(), self._timeout)
        except BaseException:
            self._runner.stop()
            raise

    @property
    def config(self) -> ConsumerConfig:
        return self._async.config

    def _submit(self, topic: str, partition: int, offset: int
                ) -> concurrent.futures.Future[tuple[list[FetchedBatch], int]]:
        coro = self._async.fetch(topic, partition, offset, self._async.config.fetch_max_wait_ms)
        return asyncio.run_coroutine_threadsafe(coro, self._runner.loop)

    def _result(self, fut: concurrent.futures.Future[tuple[list[FetchedBatch], int]]
                ) -> tuple[list[FetchedBatch], int]:
        try:
            return fut.result(self._timeout + self._async.config.fetch_max_wait_ms / 1000)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise KafkaTimeoutError(f"fetch did not finish within {self._timeout:g} s") from None

    def read_range(self, topic: str, partition: int, start: int, end: int) -> Iterator[list[FetchedBatch]]:
        """Accepted batches overlapping [start, end), one list per fetch; the caller trims records outside.

        Yields an empty list when a fetch brought nothing (the caller decides how long to wait). One fetch
        stays in flight while the caller works on the previous result.
        """
        fut = self._submit(topic, partition, start) if start < end else None
        while fut is not None:
            batches, nxt = self._result(fut)
            fut = self._submit(topic, partition, nxt) if nxt < end else None
            yield [b for b in batches if b.base_offset < end]

    def close(self) -> None:
        try:
            self._runner.run(self._async.close(), 10)
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
