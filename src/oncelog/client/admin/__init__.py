"""oncelog.client.admin: the admin clients, as ``confluent_kafka.admin`` for drop-in use.

- :class:`Admin` (:mod:`.sync_admin`): blocking, plain return values, raising :class:`~oncelog.client.KafkaError`
  at once; :class:`AsyncAdmin` (:mod:`.async_admin`): the same operations on the running event loop (topics,
  partitions and configs in :mod:`.topics`, transactions in :mod:`.transactions`, consumer groups in
  :mod:`.groups`).
- :class:`AdminClient` (:mod:`.admin_client`): confluent-kafka's, each call returning futures, with
  :class:`NewTopic`, :class:`NewPartitions`, :class:`ConfigResource`, :class:`OffsetSpec`.
- What the operations return (:class:`TopicDescription`, :class:`GroupDescription`, ...): :mod:`.results`.

The names load on first use (PEP 562): ``from oncelog.client.admin import Admin`` does not import
confluent-kafka's AdminClient with it (the ``oncelog`` command's start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what each name is, for type checkers (at run time: __getattr__)
    from .admin_client import (
        AdminClient, ConfigResource, ConsumerGroupListing, ListConsumerGroupsResult, ListOffsetsResultInfo,
        NewPartitions, NewTopic, OffsetSpec, ResourceType,
    )
    from .async_admin import AsyncAdmin
    from .results import (
        RESOURCE_BROKER, RESOURCE_TOPIC, TXN_STATES, ConfigEntry, GroupDescription, GroupListing, GroupMember,
        HangingTransaction, ListedOffset, PartitionDescription, ProducerState, Spec, TopicDescription,
        TopicListing, TransactionDescription, TransactionListing, decode_consumer_assignment,
    )
    from .sync_admin import Admin

#: public name -> the submodule that defines it
_WHERE: dict[str, str] = {
    **dict.fromkeys([
        "AdminClient", "ConfigResource", "ConsumerGroupListing", "ListConsumerGroupsResult",
        "ListOffsetsResultInfo", "NewPartitions", "NewTopic", "OffsetSpec", "ResourceType"
    ], "admin_client"),
    **dict.fromkeys(["AsyncAdmin"], "async_admin"),
    **dict.fromkeys([
        "RESOURCE_BROKER", "RESOURCE_TOPIC", "TXN_STATES", "ConfigEntry", "GroupDescription",
        "GroupListing", "GroupMember", "HangingTransaction", "ListedOffset", "PartitionDescription",
        "ProducerState", "Spec", "TopicDescription", "TopicListing", "TransactionDescription",
        "TransactionListing", "decode_consumer_assignment"
    ], "results"),
    **dict.fromkeys(["Admin"], "sync_admin"),
}

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
