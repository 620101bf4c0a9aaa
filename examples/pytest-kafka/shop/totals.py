"""Totals per customer, read by an asyncio consumer (aiokafka) in a consumer group."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

from aiokafka import AIOKafkaConsumer


async def totals(bootstrap: str, topic: str, group: str, orders: int, timeout: float = 30.0) -> dict[str, int]:
    """Read ``orders`` orders of ``topic`` as member of ``group`` (committing what it read); the amount each
    customer ordered."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    out: dict[str, int] = defaultdict(int)
    seen = 0
    try:
        async with asyncio.timeout(timeout):
            while seen < orders:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        order = json.loads(record.value)
                        out[order["customer"]] += order["amount"]
                        seen += 1
                await consumer.commit()
    finally:
        await consumer.stop()
    return dict(out)
