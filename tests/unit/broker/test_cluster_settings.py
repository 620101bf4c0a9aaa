"""The cluster settings: Kafka's names and defaults, one-line errors naming the setting, checks across settings."""

from __future__ import annotations

import pytest

from oncelog.broker.settings.config import BrokerConfig, ConfigError


def test_defaults_are_kafkas() -> None:
    c = BrokerConfig()
    assert not c.cluster_mode and c.cluster_name == "oncelog" and c.broker_rack is None
    assert (c.broker_session_timeout_ms, c.broker_heartbeat_interval_ms) == (9000, 2000)
    assert (c.default_replication_factor, c.min_insync_replicas) == (1, 1)
    assert (c.offsets_topic_replication_factor, c.transaction_state_log_replication_factor,
            c.transaction_state_log_min_isr) == (3, 3, 2)
    assert (c.replica_lag_time_max_ms, c.replica_fetch_wait_max_ms, c.replica_fetch_max_bytes,
            c.replica_fetch_min_bytes, c.replica_fetch_backoff_ms, c.replica_socket_timeout_ms) == \
        (30000, 500, 1048576, 1, 1000, 30000)
    assert (c.unclean_leader_election_enable, c.auto_leader_rebalance_enable, c.controlled_shutdown_enable) == \
        (False, True, True)
    assert (c.leader_imbalance_check_interval_seconds, c.leader_imbalance_per_broker_percentage) == (300, 10)


def test_a_cluster_broker_with_its_settings() -> None:
    c = BrokerConfig.load(None, {"metadata": "etcd://10.0.0.1:2379,10.0.0.2:2379", "broker.id": "3",
                                 "broker.rack": "r1", "default.replication.factor": "3",
                                 "unclean.leader.election.enable": "true", "listener.host": "10.0.0.3"})
    assert c.cluster_mode and c.node_id == 3 and c.broker_rack == "r1" and c.default_replication_factor == 3
    assert c.unclean_leader_election_enable and "node.id" in c.given


@pytest.mark.parametrize("settings, says", [
    ({"metadata": "etcd://h:1"}, "--node-id N (node.id)"),
    ({"metadata": "etcd://h:port"}, "bad value 'etcd://h:port' for broker setting 'metadata'"),
    ({"default.replication.factor": 3}, "default.replication.factor is 3, but this broker is a single node"),
    ({"broker.session.timeout.ms": 1500}, "etcd's shortest lease is 2 s"),
    ({"metadata": "etcd://h:1", "node.id": 1, "broker.heartbeat.interval.ms": 9000},
     "broker.heartbeat.interval.ms (9000) must be below broker.session.timeout.ms (9000)"),
    ({"metadata": "etcd://h:1", "node.id": 1, "replica.socket.timeout.ms": 100},
     "replica.socket.timeout.ms (100) must be at least replica.fetch.wait.max.ms (500)"),
    ({"metadata": "etcd://h:1", "node.id": 1, "listeners": "PLAINTEXT://0.0.0.0:9092"}, "set advertised.listeners"),
    ({"cluster.name": "a/b"}, "no '/'"),
    ({"min.insync.replicas": 0}, "must be at least 1"),
])
def test_bad_settings_are_one_line(settings: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, settings)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_listening_everywhere_is_fine_with_an_advertised_host() -> None:
    c = BrokerConfig.load(None, {"metadata": "etcd://h:1", "node.id": 1, "listener.host": "0.0.0.0",
                                 "advertised.host": "10.0.0.1"})
    assert c.advertised == ("10.0.0.1", 9092)
