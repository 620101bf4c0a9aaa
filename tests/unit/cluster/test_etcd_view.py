"""Views built from etcd events without etcd: copy-on-write sharing, partitions hidden until their topic covers
them, the change sets subscribers get, and a full reload that publishes only the difference."""

from __future__ import annotations

import asyncio
import uuid

from oncelog.cluster._etcd import KV, WatchEvent
from oncelog.cluster._etcd_view import ViewState
from oncelog.cluster.partition_map import PartitionMap, changed_since
from oncelog.cluster.changes import ViewChange, ViewSubscription
from oncelog.cluster.model import (
    BrokerInfo,
    ClusterView,
    ControllerInfo,
    Keys,
    PartitionState,
    TopicMeta,
    VersionedPartition,
    encode_configs,
)

KEYS = Keys("unit")


class Etcd:
    """Just enough of etcd's revision bookkeeping to produce the events a watch would deliver."""

    def __init__(self) -> None:
        self.rev = 1
        self.kvs: dict[bytes, KV] = {}

    def txn(self, puts: dict[bytes, bytes] | None = None, deletes: list[bytes] = ()) -> list[WatchEvent]:
        self.rev += 1
        out = []
        for key, value in (puts or {}).items():
            old = self.kvs.get(key)
            kv = KV(key, value, old.create_revision if old else self.rev, self.rev, (old.version if old else 0) + 1, 0)
            self.kvs[key] = kv
            out.append(WatchEvent(True, kv))
        for key in deletes:
            if self.kvs.pop(key, None) is not None:
                out.append(WatchEvent(False, KV(key, b"", 0, self.rev, 0, 0)))
        return out


def state(leader: int = 1) -> PartitionState:
    return PartitionState((1, 2, 3), (1, 2, 3), leader)


def topic(name: str, n: int, tid: uuid.UUID | None = None) -> TopicMeta:
    return TopicMeta(name, tid or uuid.UUID(int=7), n)


def test_partition_map_updates_share_untouched_buckets() -> None:
    base = PartitionMap.build((("t", i), VersionedPartition(state(), i + 1)) for i in range(1000))
    assert len(base) == 1000 and base[("t", 999)].mod_revision == 1000
    new = base.updated({("t", 5): VersionedPartition(state(2), 2000)}, [("t", 700)])
    assert len(new) == 999 and ("t", 700) not in new and ("t", 700) in base
    assert new[("t", 5)].state.leader == 2 and base[("t", 5)].state.leader == 1
    # only the buckets holding partitions 5 and 700 were copied
    shared = [b for b in new._buckets if new._buckets[b] is base._buckets[b]]
    assert sorted(shared) == [("t", 1), ("t", 3)]
    assert dict(new.items()) == {tp: vp for tp, vp in base.items() if tp != ("t", 700)} | {
        ("t", 5): VersionedPartition(state(2), 2000)}


def test_changed_since_yields_the_buckets_an_update_copied() -> None:
    base = PartitionMap.build((("t", i), VersionedPartition(state(), i + 1)) for i in range(1000))
    new = base.updated({("t", 5): VersionedPartition(state(2), 2000), ("u", 0): VersionedPartition(state(), 1)}, [])
    changed = dict(new.changed_since(base))
    assert set(changed) == {("t", i) for i in range(256)} | {("u", 0)}  # the two buckets copied, whole
    assert changed[("t", 5)].mod_revision == 2000
    assert list(new.changed_since(new)) == []
    assert len(dict(PartitionMap.build(new.items()).changed_since(new))) == 1001  # built anew: nothing shared
    assert len(list(changed_since(dict(base), new))) == 1001  # another mapping: every partition


def test_partitions_are_invisible_until_the_topic_key_covers_them() -> None:
    etcd, vs = Etcd(), ViewState(KEYS)
    # a creation in three transactions: partitions first, the topic key last
    for chunk in (range(0, 4), range(4, 6)):
        ch = vs.apply(etcd.txn({KEYS.partition("t", i): state().encode() for i in chunk}), etcd.rev)
        assert ch is None and vs.view.partitions == {} and "t" not in vs.view.topics
    assert vs.hidden_count == 6
    ch = vs.apply(etcd.txn({KEYS.topic("t"): topic("t", 6).encode()}), etcd.rev)
    assert ch is not None and ch.topics == {"t"} and ch.partitions == {("t", i) for i in range(6)}
    assert [i for i, _ in vs.view.topic_partitions("t")] == list(range(6)) and vs.hidden_count == 0
    assert ch.since == 0 and ch.view.revision == etcd.rev  # the invisible writes did not move the view

    # growing: new keys are invisible until the count covers them
    assert vs.apply(etcd.txn({KEYS.partition("t", 6): state().encode()}), etcd.rev) is None
    ch = vs.apply(etcd.txn({KEYS.topic("t"): topic("t", 7).encode()}), etcd.rev)
    assert ch is not None and ch.partitions == {("t", 6)} and len(vs.view.partitions) == 7

    # removal (topic key and partition keys in one txn) leaves nothing, hidden included
    ch = vs.apply(etcd.txn(deletes=[KEYS.topic("t")] + [KEYS.partition("t", i) for i in range(7)]), etcd.rev)
    assert ch is not None and ch.topics == {"t"} and len(ch.partitions) == 7
    assert vs.view.partitions == {} and vs.view.topics == {} and vs.hidden_count == 0


def test_events_in_any_order_within_one_revision() -> None:
    etcd, vs = Etcd(), ViewState(KEYS)
    events = etcd.txn({KEYS.topic("t"): topic("t", 2).encode(), KEYS.partition("t", 0): state().encode(),
                       KEYS.partition("t", 1): state().encode()})
    vs.apply(events, etcd.rev)
    assert len(vs.view.partitions) == 2 and vs.hidden_count == 0


def test_one_change_per_batch_with_exactly_what_changed() -> None:
    etcd, vs = Etcd(), ViewState(KEYS)
    vs.apply(etcd.txn({KEYS.topic("t"): topic("t", 3).encode(),
                       **{KEYS.partition("t", i): state().encode() for i in range(3)}}), etcd.rev)
    before = vs.view
    events = etcd.txn({KEYS.partition("t", 1): state(2).encode(),
                       KEYS.broker(4): BrokerInfo(4, "h", 9).encode(),
                       KEYS.controller: ControllerInfo(4, 0).encode(),
                       KEYS.broker_config(None): encode_configs({"log.retention.ms": "5"}),
                       KEYS.producer_id_block: b"1000", KEYS.topic_claim("x"): b""})
    ch = vs.apply(events, etcd.rev)
    assert ch is not None
    assert (ch.partitions, ch.brokers, ch.controller, ch.broker_configs, ch.topics) == \
        ({("t", 1)}, {4}, True, {None}, frozenset())
    v = vs.view
    assert v.controller == ControllerInfo(4, etcd.rev) and v.brokers[4].epoch == etcd.rev
    assert v.broker_config(4, "log.retention.ms") == "5"
    assert before.partition("t", 1).leader == 1 and v.partition("t", 1).leader == 2  # the old view is unchanged
    assert before.brokers == {}


def test_a_bad_value_is_skipped_not_fatal() -> None:
    etcd, vs = Etcd(), ViewState(KEYS)
    ch = vs.apply(etcd.txn({KEYS.broker(1): b"{not json", KEYS.broker(2): BrokerInfo(2, "h", 1).encode()}), etcd.rev)
    assert ch is not None and set(vs.view.brokers) == {2}


def test_reload_publishes_the_difference_only() -> None:
    etcd, vs = Etcd(), ViewState(KEYS)
    vs.apply(etcd.txn({KEYS.topic("t"): topic("t", 3).encode(),
                       **{KEYS.partition("t", i): state().encode() for i in range(3)},
                       KEYS.broker(1): BrokerInfo(1, "h", 1).encode()}), etcd.rev)
    # what a compaction hid from the watch: partition 2 changed, broker 1 left, broker 2 came
    etcd.txn({KEYS.partition("t", 2): state(3).encode(), KEYS.broker(2): BrokerInfo(2, "h", 2).encode()},
             deletes=[KEYS.broker(1)])
    ch = vs.load(list(etcd.kvs.values()), etcd.rev)
    assert ch.partitions == {("t", 2)} and ch.brokers == {1, 2} and ch.topics == frozenset()
    assert vs.view.revision == etcd.rev and vs.view.partition("t", 2).leader == 3


def test_departed_brokers_keep_their_last_address_while_the_partitions_count_on_them() -> None:
    """A registration that goes (its lease expired) stays in ``departed``: the data plane still reaches a leader or
    ISR member at its last address until the controller moves things off it; registering again clears it."""
    etcd, vs = Etcd(), ViewState(KEYS)
    vs.apply(etcd.txn({KEYS.topic("t"): topic("t", 2).encode(),
                       KEYS.partition("t", 0): state(1).encode(),
                       KEYS.partition("t", 1): PartitionState((1, 2, 3), (1,), -1).encode(),
                       **{KEYS.broker(b): BrokerInfo(b, "h", 9000 + b).encode() for b in (1, 2, 3, 4)}}), etcd.rev)
    vs.apply(etcd.txn(deletes=[KEYS.broker(1), KEYS.broker(4)]), etcd.rev)
    v = vs.view
    assert set(v.brokers) == {2, 3} and set(v.departed) == {1, 4}
    assert v.address(1) == BrokerInfo(1, "h", 9001, epoch=2) and v.address(9) is None
    assert set(v.counted_on) == {1, 2, 3}  # 1 leads t-0; 4 is named nowhere; t-1 has no leader
    vs.apply(etcd.txn({KEYS.broker(1): BrokerInfo(1, "h", 9001, incarnation=2).encode()}), etcd.rev)
    assert set(vs.view.departed) == {4} and vs.view.brokers[1].process_epoch == 2
    # a full reload (after a compaction, or a resync) keeps what it knew of departed brokers
    etcd.txn(deletes=[KEYS.broker(2)])
    vs.load(list(etcd.kvs.values()), etcd.rev)
    assert set(vs.view.brokers) == {1, 3} and set(vs.view.departed) == {2, 4}


def test_subscription_coalesces_changes_between_reads() -> None:
    async def main() -> None:
        v0 = ClusterView(revision=1)
        sub = ViewSubscription(v0)
        assert await sub.next(timeout=0.01) is None
        sub.publish(ViewChange(ClusterView(revision=2), 1, partitions=frozenset({("a", 0)})))
        sub.publish(ViewChange(ClusterView(revision=3), 2, brokers=frozenset({5}), partitions=frozenset({("b", 1)})))
        ch = await sub.next()
        assert ch is not None and ch.since == 1 and ch.view.revision == 3
        assert ch.partitions == {("a", 0), ("b", 1)} and ch.brokers == {5}
        sub.publish(ViewChange(ClusterView(revision=3), 2, brokers=frozenset({6})))  # not newer: ignored
        assert await sub.next(timeout=0.01) is None
        waiter = asyncio.ensure_future(sub.next())
        await asyncio.sleep(0)
        sub.publish(ViewChange(ClusterView(revision=4), 3, controller=True))
        ch = await waiter
        assert ch is not None and ch.controller and sub.revision == 4
        sub.close()
        assert [c async for c in sub] == []

    asyncio.run(main())


def test_security_records_are_part_of_the_view_by_kind() -> None:
    etcd, vs = Etcd(), ViewState(KEYS)
    key = "User:CN=a/b,O=x"  # any character: percent-encoded in the etcd key
    assert KEYS.security("scram", key).endswith(b"/security/scram/User%3ACN%3Da%2Fb%2CO%3Dx")
    ch = vs.apply(etcd.txn({KEYS.security("scram", key): b"cred", KEYS.security("acls", "t"): b"acl"}), etcd.rev)
    assert ch is not None and ch.security == {"scram", "acls"}
    before = vs.view
    assert dict(before.security["scram"]) == {key: b"cred"}
    ch = vs.apply(etcd.txn({KEYS.security("acls", "u"): b"2"}, deletes=[KEYS.security("acls", "t")]), etcd.rev)
    assert ch is not None and ch.security == {"acls"} and not ch.brokers
    assert dict(vs.view.security["acls"]) == {"u": b"2"} and vs.view.security["scram"] is before.security["scram"]
    assert dict(before.security["acls"]) == {"t": b"acl"}  # the old view is unchanged
    assert vs.apply(etcd.txn({KEYS.security("acls", "u"): b"2"}), etcd.rev) is None  # the same value: no change
    reloaded = ViewState(KEYS)
    assert reloaded.load(list(etcd.kvs.values()), etcd.rev).security == {"scram", "acls"}
