"""``oncelog.client``'s public names: the same list as before it loaded them lazily (PEP 562), each one the object its
submodule defines, and a bare ``import oncelog.client`` loads none of the producer, consumer or admin client."""

from __future__ import annotations

import ast
import subprocess
import sys

import oncelog.client as client

PUBLIC = [
    "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE", "Admin", "AsyncAdmin", "AsyncConsumer", "AsyncProducer",
    "BrokerConnection", "Cluster", "ConfigEntry", "ConfigError", "Consumer", "KafkaConnectionError", "KafkaError",
    "KafkaException", "KafkaTimeoutError", "ListedOffset", "Message", "PartitionDescription", "PreparedTxnState",
    "Producer", "TopicDescription", "TopicListing", "TopicPartition", "UnsupportedVersionError",
]


def test_public_names_are_pinned() -> None:
    assert client.__all__ == PUBLIC
    assert set(PUBLIC) <= set(dir(client))


def test_each_name_is_its_submodules_object() -> None:
    import oncelog.client.admin as admin
    import oncelog.client.consumer as consumer
    import oncelog.client.errors as errors
    import oncelog.client.producer as producer

    for name in PUBLIC:
        assert getattr(client, name) is not None, name
    assert client.Producer is producer.Producer
    assert client.Consumer is consumer.Consumer
    assert client.Admin is admin.Admin
    assert client.KafkaException is errors.KafkaException
    from oncelog.client import OFFSET_END, TopicPartition, aio  # names and a submodule, as programs import them

    assert OFFSET_END == consumer.OFFSET_END and TopicPartition.__module__.startswith("oncelog.client")
    assert aio.__name__ == "oncelog.client.aio"


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        client.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("oncelog.client.NoSuchThing resolved")


def test_bare_import_loads_no_client_part() -> None:
    code = ("import sys, oncelog.client, oncelog.client.errors; "
            "print(sorted(m for m in sys.modules if m.startswith('oncelog.client.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = ast.literal_eval(out)
    assert loaded == ["oncelog.client.errors"], loaded
