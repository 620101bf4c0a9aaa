"""The shop's tests against a real broker, from the oncelog pytest plugin (pip install oncelog): nothing to start,
nothing to configure. ``kafka_broker`` is the session's broker with names of this test's own; the faults come from
the same handle."""

from __future__ import annotations

import asyncio
import json
import threading

from shop import orders, totals
from shop.invoicer import Invoicer

ORDERS = [{"id": i, "customer": f"c{i % 3}", "amount": 10 + i} for i in range(60)]


def test_orders_are_published_once_each(kafka_broker):
    topic = kafka_broker.topic("orders")
    assert orders.publish(kafka_broker.bootstrap, topic, ORDERS) == len(ORDERS)
    kafka_broker.assert_exactly_once(topic, [orders.encode(o) for o in ORDERS])


def test_publishing_rides_out_a_leader_change(kafka_broker):
    """Three NOT_LEADER_OR_FOLLOWER answers, as while a partition's leadership moves: the producer retries and no
    order is lost or doubled."""
    topic = kafka_broker.topic("orders")
    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", times=3)
    orders.publish(kafka_broker.bootstrap, topic, ORDERS)
    kafka_broker.assert_exactly_once(topic, [orders.encode(o) for o in ORDERS])


def test_totals_per_customer_and_the_group_catches_up(kafka_broker):
    topic, group = kafka_broker.topic("orders"), kafka_broker.group("totals")
    orders.publish(kafka_broker.bootstrap, topic, ORDERS)
    got = asyncio.run(totals.totals(kafka_broker.bootstrap, topic, group, len(ORDERS)))
    want: dict[str, int] = {}
    for o in ORDERS:
        want[str(o["customer"])] = want.get(str(o["customer"]), 0) + int(o["amount"])
    assert got == want
    kafka_broker.wait_for_lag_zero(group, topic)


def _invoices(source: list[dict[str, object]]) -> list[bytes]:
    from shop.invoicer import invoice

    return [invoice(orders.encode(o)) for o in source]


def test_every_order_is_invoiced_exactly_once(kafka_broker):
    source, target = kafka_broker.topic("orders"), kafka_broker.topic("invoices")
    orders.publish(kafka_broker.bootstrap, source, ORDERS)
    invoicer = Invoicer(kafka_broker.bootstrap, source, target, kafka_broker.group("invoicer"),
                        kafka_broker.transactional_id("invoicer"))
    try:
        assert invoicer.run(idle=2.0) == len(ORDERS)
    finally:
        invoicer.close()
    kafka_broker.assert_exactly_once(target, _invoices(ORDERS))
    kafka_broker.wait_for_lag_zero(kafka_broker.group("invoicer"), source)
    assert kafka_broker.open_transactions() == []


def test_a_refused_write_aborts_its_transaction_and_every_order_is_still_invoiced_once(kafka_broker_factory):
    """Mid-stream the broker refuses one write of the invoicer's (INVALID_RECORD, not retriable): that transaction
    must be aborted, its orders read again from the committed offsets and invoiced in a new one. A reader of the
    invoices (read_committed) sees each order's invoice exactly once; nothing of the aborted one."""
    broker = kafka_broker_factory()
    source, target = broker.topic("orders"), broker.topic("invoices")
    many = [{"id": i, "customer": f"c{i % 5}", "amount": i} for i in range(200)]
    orders.publish(broker.bootstrap, source, many)
    invoicer = Invoicer(broker.bootstrap, source, target, broker.group(), broker.transactional_id())
    worker = threading.Thread(target=invoicer.run, kwargs={"idle": 3.0, "batch": 20})
    worker.start()
    while invoicer.invoiced < 60 and worker.is_alive():
        worker.join(0.01)
    broker.fail_next("Produce", "INVALID_RECORD")
    worker.join(120)
    invoicer.close()
    assert not worker.is_alive() and invoicer.aborted >= 1
    records = broker.assert_exactly_once(target, _invoices(many))
    assert len({json.loads(r.value)["invoice"] for r in records}) == len(many)
