"""oncelog.client: native asyncio Kafka client with sync facades, a drop-in for confluent-kafka (``import
oncelog.client as ck`` where a program had ``import confluent_kafka as ck``; the admin client is in
:mod:`oncelog.client.admin`). Imports only ``oncelog.protocol``."""

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
