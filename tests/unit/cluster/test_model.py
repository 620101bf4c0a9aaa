"""The cluster metadata values: JSON round trips, epochs bumped by each kind of change, readable errors."""

from __future__ import annotations

import uuid

import pytest

from oncelog.cluster.model import (
    NO_LEADER,
    BrokerInfo,
    ClusterView,
    Keys,
    MetadataFormatError,
    PartitionState,
    TopicMeta,
    VersionedPartition,
)


def test_partition_state_round_trip_and_epochs() -> None:
    s = PartitionState(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4, partition_epoch=9)
    assert PartitionState.decode(s.encode()) == s
    shrunk = s.with_isr((1, 2))
    assert (shrunk.leader_epoch, shrunk.partition_epoch, shrunk.isr) == (4, 10, (1, 2))
    moved = shrunk.with_leader(2, (2,))
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch, moved.isr) == (2, 5, 11, (2,))
    offline = moved.with_leader(NO_LEADER, (2,))
    assert offline.leader == NO_LEADER and offline.leader_epoch == 6
    assert s.preferred_leader == 1


def test_reassignment_target() -> None:
    s = PartitionState(replicas=(1, 2, 3, 4), isr=(1, 2, 3), leader=1, adding=(4,), removing=(1,))
    assert s.target_replicas == (2, 3, 4)
    assert PartitionState.decode(s.encode()) == s


def test_topic_and_broker_round_trip() -> None:
    t = TopicMeta("orders", uuid.uuid4(), 6, {"cleanup.policy": "compact"})
    back = TopicMeta.decode("orders", t.encode())
    assert (back.topic_id, back.num_partitions, dict(back.configs), back.deleting) == \
        (t.topic_id, 6, {"cleanup.policy": "compact"}, False)
    b = BrokerInfo(2, "127.0.0.1", 9093, "rack-a", epoch=77)
    assert BrokerInfo.decode(b.encode(), epoch=77) == b
    leaving = BrokerInfo(2, "127.0.0.1", 9093, None, epoch=77, shutting_down=True)
    assert BrokerInfo.decode(leaving.encode(), epoch=77) == leaving
    assert b"shutting_down" not in b.encode()  # a registration without the flag reads the same as before it
    # a process's first registration is its incarnation; it registers again with the same one
    assert b.process_epoch == 77 and b"incarnation" not in b.encode()
    again = BrokerInfo.decode(BrokerInfo(2, "127.0.0.1", 9093, "rack-a", incarnation=77).encode(), epoch=90)
    assert (again.epoch, again.incarnation, again.process_epoch) == (90, 77, 77)


@pytest.mark.parametrize("raw", [b"not json", b"[1]", b'{"replicas": [1]}', b'{"replicas": "x", "isr": [],'
                                 b' "leader": 1, "leader_epoch": 0, "partition_epoch": 0}'])
def test_bad_values_are_reported_not_crashed_on(raw: bytes) -> None:
    with pytest.raises(MetadataFormatError, match="orders-0"):
        PartitionState.decode(raw, "partition state of orders-0")


def test_keys_and_view_lookups() -> None:
    k = Keys("prod")
    assert k.partition("orders", 3) == b"/oncelog/prod/partitions/orders/3"
    assert k.broker_config(None).endswith(b"/configs/broker/default")
    with pytest.raises(ValueError):
        Keys("a/b")
    t = TopicMeta("orders", uuid.uuid4(), 2)
    p0 = PartitionState((1, 2), (1, 2), 1)
    p1 = PartitionState((2, 3), (2,), 2)
    view = ClusterView(topics={"orders": t},
                       partitions={("orders", 0): VersionedPartition(p0, 5), ("orders", 1): VersionedPartition(p1, 6)},
                       brokers={1: BrokerInfo(1, "h", 1)},
                       broker_configs={None: {"min.insync.replicas": "2"}, 2: {"min.insync.replicas": "1"}})
    assert [i for i, _ in view.topic_partitions("orders")] == [0, 1]
    assert [tp for tp, _ in view.replicas_of(2)] == [("orders", 0), ("orders", 1)]
    assert [tp for tp, _ in view.led_by(2)] == [("orders", 1)]
    assert view.is_alive(1) and not view.is_alive(2)
    assert view.broker_config(1, "min.insync.replicas") == "2"
    assert view.broker_config(2, "min.insync.replicas") == "1"


def test_a_registration_carries_every_listener_and_an_old_one_still_decodes() -> None:
    info = BrokerInfo(1, "10.0.0.1", 9093, "r1", endpoints=(("PLAINTEXT", "10.0.0.1", 9092),
                                                            ("SASL_SSL", "broker1.example.com", 9093)))
    back = BrokerInfo.decode(info.encode(), epoch=7)
    assert back.endpoint("SASL_SSL") == ("broker1.example.com", 9093) and back.endpoint("SSL") is None
    assert (back.host, back.port, back.epoch) == ("10.0.0.1", 9093, 7)
    old = BrokerInfo.decode(b'{"node_id":2,"host":"h","port":9092,"rack":null}')  # written before listeners
    assert old.endpoints == () and old.endpoint("ANY") == ("h", 9092)
