"""oncelog.client.admin: the admin clients, as ``confluent_kafka.admin`` for drop-in use.

- :class:`Admin` (:mod:`.sync_admin`): blocking, plain return values, raising :class:`~oncelog.client.KafkaError`
  at once; :class:`AsyncAdmin` (:mod:`.async_admin`): the same operations on the running event loop (topics,
  partitions and configs in :mod:`.topics`, transactions in :mod:`.transactions`, consumer groups in
  :mod:`.groups`).
- :class:`AdminClient` (:mod:`.admin_client`): confluent-kafka's, each call returning futures, with
  :class:`NewTopic`, :class:`NewPartitions`, :class:`ConfigResource`, :class:`OffsetSpec`.
- What the operations return (:class:`TopicDescription`, :class:`GroupDescription`, ...): :mod:`.results`.
"""

from .admin_client import (
    AdminClient,
    ConfigResource,
    ConsumerGroupListing,
    ListConsumerGroupsResult,
    ListOffsetsResultInfo,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from .async_admin import AsyncAdmin
from .results import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TXN_STATES,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    GroupMember,
    HangingTransaction,
    ListedOffset,
    PartitionDescription,
    ProducerState,
    Spec,
    TopicDescription,
    TopicListing,
    TransactionDescription,
    TransactionListing,
    decode_consumer_assignment,
)
from .sync_admin import Admin

__all__ = [
    "RESOURCE_BROKER",
    "RESOURCE_TOPIC",
    "TXN_STATES",
    "Admin",
    "AdminClient",
    "AsyncAdmin",
    "ConfigEntry",
    "ConfigResource",
    "ConsumerGroupListing",
    "GroupDescription",
    "GroupListing",
    "GroupMember",
    "HangingTransaction",
    "ListConsumerGroupsResult",
    "ListOffsetsResultInfo",
    "ListedOffset",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "PartitionDescription",
    "ProducerState",
    "ResourceType",
    "Spec",
    "TopicDescription",
    "TopicListing",
    "TransactionDescription",
    "TransactionListing",
    "decode_consumer_assignment",
]
