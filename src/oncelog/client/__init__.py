"""oncelog.client: native asyncio Kafka client with sync facades. Imports only ``oncelog.protocol``."""

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
from .consumer import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, AsyncConsumer, Consumer
from .errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError, UnsupportedVersionError
from .message import Message
from .producer import AsyncProducer, PreparedTxnState, Producer

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
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
    "KafkaTimeoutError",
    "ListedOffset",
    "Message",
    "PartitionDescription",
    "PreparedTxnState",
    "Producer",
    "TopicDescription",
    "TopicListing",
    "UnsupportedVersionError",
]
