"""oncelog.client: native asyncio Kafka client with sync facades, a drop-in for confluent-kafka (``import
oncelog.client as ck`` where a program had ``import confluent_kafka as ck``; the admin client is in
:mod:`oncelog.client.admin`). Imports only ``oncelog.protocol``.

The public names load on first use (PEP 562): ``import oncelog.client`` costs nothing, so a program that uses
one part (the CLI's error types, the broker's replica fetcher's connection) does not import the producer, the
consumer and the admin client with it. ``from oncelog.client import Producer`` imports what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what each name is, for type checkers and IDEs (at run time: __getattr__)
    from .admin import (
        Admin,
        AsyncAdmin,
        ConfigEntry,
        ListedOffset,
        PartitionDescription,
        TopicDescription,
        TopicListing,
    )
    from .cluster import Cluster
    from .connection import BrokerConnection
    from .consumer import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, AsyncConsumer, Consumer
    from .errors import (
        ConfigError,
        KafkaConnectionError,
        KafkaError,
        KafkaException,
        KafkaTimeoutError,
        UnsupportedVersionError,
    )
    from .message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, Message
    from .producer import AsyncProducer, PreparedTxnState, Producer
    from .topic_partition import TopicPartition

#: public name -> the submodule that defines it
_WHERE = {
    **dict.fromkeys(["Admin", "AsyncAdmin", "ConfigEntry", "ListedOffset", "PartitionDescription",
                     "TopicDescription", "TopicListing"], "admin"),
    "Cluster": "cluster",
    "BrokerConnection": "connection",
    **dict.fromkeys(["OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "AsyncConsumer",
                     "Consumer"], "consumer"),
    **dict.fromkeys(["ConfigError", "KafkaConnectionError", "KafkaError", "KafkaException", "KafkaTimeoutError",
                     "UnsupportedVersionError"], "errors"),
    **dict.fromkeys(["TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE", "Message"],
                    "message"),
    **dict.fromkeys(["AsyncProducer", "PreparedTxnState", "Producer"], "producer"),
    "TopicPartition": "topic_partition",
}

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "BrokerConnection",
    "Cluster",
    "ConfigEntry",
    "ConfigError",
    "Consumer",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaException",
    "KafkaTimeoutError",
    "ListedOffset",
    "Message",
    "PartitionDescription",
    "PreparedTxnState",
    "Producer",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "UnsupportedVersionError",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
