"""ElectLeaders / AlterPartitionReassignments / ListPartitionReassignments as the broker runs them
(:mod:`oncelog.broker.cluster.reassign`): on the controller's driver against the in-memory store, the guard against
electing a broker that restarted since the partition's last write, and the single node's answers."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import MappingProxyType, SimpleNamespace
from typing import Any

from oncelog.broker.cluster.reassign import alter, elect, list_ongoing
from oncelog.broker.settings.config import BrokerConfig
from oncelog.cluster.controller import ControllerConfig, ElectionType, elect_leaders
from oncelog.cluster.controller_driver import ControllerDriver
from oncelog.cluster.model import PartitionState, TopicMeta
from oncelog.protocol.errors import ErrorCode
from oncelog.testing.memory_store import MemoryMetadataStore

from .views import make_view

NO_REBALANCE = ControllerConfig(auto_leader_rebalance_enable=False)


def _node(store: MemoryMetadataStore, driver: ControllerDriver | None) -> Any:
    return SimpleNamespace(driver=driver, store=store, view=store.view, config=BrokerConfig(), node_id=1,
                           is_controller=lambda: driver is not None and driver.is_active())


async def _controller(states: list[PartitionState]) -> tuple[MemoryMetadataStore, ControllerDriver, Any]:
    store = MemoryMetadataStore()
    for b in (1, 2, 3, 4):
        store.register_broker(b)
    store.publish()
    await store.create_topic(TopicMeta("t", uuid.uuid4(), len(states)), states)
    info = store.elect_controller(1)
    driver = ControllerDriver(store, info.epoch, NO_REBALANCE)
    return store, driver, SimpleNamespace(cluster=_node(store, driver))


def test_on_the_controller_a_reassignment_is_written_and_listed() -> None:
    async def main() -> None:
        store, _driver, broker = await _controller([PartitionState((1, 2, 3), (1, 2, 3), 1)])
        got = await alter(broker, [(("t", 0), (4, 1, 2)), (("t", 7), (1, 2))], 5.0)
        assert isinstance(got, dict)
        assert {tp: e.code for tp, e in got.items()} == {("t", 0): ErrorCode.NONE,
                                                         ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        state = store.view.partition("t", 0)
        assert state is not None and state.adding == (4,) and state.removing == (3,)
        broker.cluster.view = store.view
        assert {tp: (r.adding, r.removing) for tp, r in list_ongoing(broker, None).items()} == {
            ("t", 0): ((4,), (3,))}
        got = await alter(broker, [(("t", 0), None)], 5.0)
        assert isinstance(got, dict) and got[("t", 0)].code is ErrorCode.NONE
        state = store.view.partition("t", 0)
        assert state is not None and state.replicas == (1, 2, 3) and not state.adding

    asyncio.run(main())


def test_a_deposed_controller_answers_not_controller() -> None:
    async def main() -> None:
        store, _driver, broker = await _controller([PartitionState((2, 1), (1, 2), 1)])
        store.resign_controller()
        store.elect_controller(2)
        got = await elect(broker, ElectionType.PREFERRED, [("t", 0)], 5.0)
        assert isinstance(got, dict) and got[("t", 0)].code is ErrorCode.NOT_CONTROLLER
        assert store.view.partition("t", 0) == PartitionState((2, 1), (1, 2), 1)

    asyncio.run(main())


def test_a_broker_restarted_since_the_partitions_last_write_is_not_elected() -> None:
    async def main() -> None:
        store, _driver, broker = await _controller([PartitionState((2, 1), (1, 2), 1)])
        got = await elect(broker, ElectionType.PREFERRED, [("t", 0)], 5.0)
        assert isinstance(got, dict) and got[("t", 0)].code is ErrorCode.NONE
        state = store.view.partition("t", 0)
        assert state is not None and state.leader == 2

    asyncio.run(main())
    view = make_view([1, 2, 3], {("t", 0): PartitionState((2, 1), (1, 2), 1)})
    assert len(elect_leaders(view, ElectionType.PREFERRED, [("t", 0)], NO_REBALANCE).changes) == 1
    restarted = dataclasses.replace(view, brokers=MappingProxyType({
        **view.brokers, 2: dataclasses.replace(view.brokers[2], epoch=500)}))  # registered after the write (100)

    async def guarded() -> None:
        store = MemoryMetadataStore()
        store.publish()
        driver = ControllerDriver(store, 1, NO_REBALANCE)
        calls: list[Any] = []

        async def apply(decide: Any) -> Any:
            decision = decide(restarted)
            calls.append(decision)
            return dict(decision.results)

        driver.apply = apply  # type: ignore[method-assign]
        got = await elect(SimpleNamespace(cluster=_node(store, driver)), ElectionType.PREFERRED, [("t", 0)], 5.0)
        assert isinstance(got, dict) and got[("t", 0)].code is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        assert calls and not calls[0].changes

    asyncio.run(guarded())


def _single_node() -> Any:
    parts = [SimpleNamespace(index=i) for i in range(2)]
    topic = SimpleNamespace(name="t", topic_id=uuid.uuid4(), partitions=parts, configs={})
    return SimpleNamespace(cluster=None, config=BrokerConfig(), topics=[topic], cluster_id="single")


def test_a_single_node_answers_as_kafka() -> None:
    broker = _single_node()
    node = broker.config.node_id

    async def main() -> None:
        got = await elect(broker, ElectionType.PREFERRED, [("t", 0), ("t", 5), ("x", 0)], 1.0)
        assert isinstance(got, dict)
        assert {tp: e.code for tp, e in got.items()} == {
            ("t", 0): ErrorCode.ELECTION_NOT_NEEDED, ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        got = await elect(broker, ElectionType.UNCLEAN, None, 1.0)
        assert got == {}
        got = await alter(broker, [(("t", 0), (node,)), (("t", 1), (node + 1,)), (("t", 0), None)], 1.0)
        assert isinstance(got, dict)
        assert {tp: e.code for tp, e in got.items()} == {("t", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                                         ("t", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
        got = await alter(broker, [(("t", 0), (node,))], 1.0)
        assert isinstance(got, dict) and got[("t", 0)].code is ErrorCode.NONE
        assert list_ongoing(broker, None) == {}

    asyncio.run(main())
