"""The controller's settings, from the broker's (a leaf: the handlers that run on the controller import it without
importing etcd's client)."""

from __future__ import annotations

from oncelog.cluster.controller import ControllerConfig

from ..settings.config import BrokerConfig

__all__ = ["controller_config"]


def controller_config(config: BrokerConfig) -> ControllerConfig:
    return ControllerConfig(
        unclean_leader_election_enable=config.unclean_leader_election_enable,
        auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
        leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        leader_imbalance_check_interval_seconds=float(config.leader_imbalance_check_interval_seconds))
