"""Topic writes in etcd: create, grow, configure, mark for deletion, remove (private to ``cluster.metadata``).

A topic whose partition keys do not fit in one transaction (``--max-txn-ops``, 128 by default) is written under a
*claim*: a key on a lease of its own, held by the one writer; every transaction of the write compares the claim,
the partition keys go first and the topic key (or its new partition count) last, and readers keep partition keys
invisible until the topic key covers them (``cluster._etcd_view``). So a reader sees a topic with all of its
partitions or not at all; two concurrent creations of one name cannot mix their partitions (the second finds the
claim: TOPIC_ALREADY_EXISTS, as Kafka answers); a writer that dies half-way blocks the name only until its lease
expires, and the next creation deletes what it left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from ._etcd import Cmp, Delete, Etcd, EtcdUnavailable, Get, Put, TxnResult, prefix_end
from .model import Keys, MetadataFormatError, PartitionState, TopicMeta
from .store import MetadataUnavailableError, TopicExistsInClusterError

__all__ = ["TopicWrites"]


class TopicWrites:
    def __init__(self, etcd: Etcd, keys: Keys, max_ops: int, claim_ttl_s: int,
                 written: Callable[[TxnResult], Awaitable[None]]) -> None:
        self._etcd = etcd
        self._keys = keys
        self._max_ops = max_ops
        self._claim_ttl = claim_ttl_s
        self._written = written  # returns once the view shows a successful write

    async def create(self, meta: TopicMeta, states: Sequence[PartitionState]) -> None:
        if len(states) != meta.num_partitions:
            raise ValueError(f"topic {meta.name}: {len(states)} partition states for {meta.num_partitions} "
                             f"partitions")
        if meta.deleting:
            raise ValueError(f"topic {meta.name}: cannot create a topic marked for deletion")
        k = self._keys
        tkey, claim, parts = k.topic(meta.name), k.topic_claim(meta.name), k.partitions_of(meta.name)
        puts = [Put(k.partition(meta.name, i), s.encode()) for i, s in enumerate(states)]
        if len(puts) + 1 <= self._max_ops:  # one transaction, unless keys of an interrupted creation are left
            res = await self._etcd.txn([Cmp.absent(tkey), Cmp.absent(claim), Cmp.none_under(parts)],
                                       puts + [Put(tkey, meta.encode())], [Get(tkey), Get(claim)])
            if res.succeeded:
                await self._written(res)
                return
            if self._exists(meta, res):
                return
        await self._claimed(meta.name, meta.encode(), puts, [Cmp.absent(tkey)], creating=meta)

    def _exists(self, meta: TopicMeta, res: TxnResult) -> bool:
        """After a failed creation: True if the topic is this very one (an earlier attempt of the same request
        went through), TopicExistsInClusterError if another exists or is being created, False if neither."""
        topic, claim = res.gets
        if topic:
            try:
                if TopicMeta.decode(meta.name, topic[0].value).topic_id == meta.topic_id:
                    return True
            except MetadataFormatError:
                pass
            raise TopicExistsInClusterError(f"topic {meta.name} already exists")
        if claim:
            raise TopicExistsInClusterError(f"topic {meta.name} is being created by another request")
        return False

    async def _claimed(self, name: str, topic_value: bytes, puts: list[Put], guard: list[Cmp],
                       creating: TopicMeta | None) -> bool:
        """Partition keys in as many transactions as needed, then the topic key, all under a claim that every
        transaction compares together with ``guard``. False if ``guard`` failed at the start (growing only)."""
        loop = asyncio.get_running_loop()
        k = self._keys
        tkey, claim, parts = k.topic(name), k.topic_claim(name), k.partitions_of(name)
        lease_id, ttl = await self._etcd.grant(self._claim_ttl)
        try:
            # a creation first deletes what an interrupted one left; growing overwrites the keys it writes
            ops: list[Put | Delete] = [Put(claim, b"", lease_id)]
            if creating is not None:
                ops.append(Delete(parts, prefix_end(parts)))
            res = await self._etcd.txn(guard + [Cmp.absent(claim)], ops,
                                       [Get(tkey), Get(claim)])
            if not res.succeeded:
                if creating is None:
                    return False
                if self._exists(creating, res):
                    return True
                raise EtcdUnavailable(f"topic {name} changed while its creation started: retry")
            guard = guard + [Cmp.created_at(claim, res.revision)]
            refreshed = loop.time()
            for i in range(0, len(puts), self._max_ops):
                if loop.time() - refreshed > ttl / 3:
                    refreshed = loop.time()
                    await self._etcd.keepalive(lease_id)
                res = await self._etcd.txn(guard, puts[i:i + self._max_ops])
                if not res.succeeded:
                    raise EtcdUnavailable(f"writing the partitions of topic {name} was interrupted (its claim "
                                          f"expired, or the topic changed meanwhile): retry")
            res = await self._etcd.txn(guard, [Put(tkey, topic_value), Delete(claim)])
            if not res.succeeded:
                raise EtcdUnavailable(f"writing topic {name} was interrupted (its claim expired): retry")
            await self._written(res)
            return True
        finally:
            try:
                await asyncio.shield(self._etcd.revoke(lease_id, timeout=min(self._etcd.timeout, 2.0)))
            except (MetadataUnavailableError, asyncio.CancelledError):
                pass  # the claim is gone already, or goes with its lease

    async def _read(self, name: str) -> tuple[TopicMeta, int] | None:
        _, kvs, _ = await self._etcd.range(self._keys.topic(name))
        return (TopicMeta.decode(name, kvs[0].value), kvs[0].mod_revision) if kvs else None

    async def add_partitions(self, name: str, expected_count: int, states: Sequence[PartitionState]) -> bool:
        got = await self._read(name)
        if got is None or got[0].num_partitions != expected_count or got[0].deleting:
            return False
        meta, rev = got
        tkey = self._keys.topic(name)
        grown = replace(meta, num_partitions=expected_count + len(states)).encode()
        puts = [Put(self._keys.partition(name, expected_count + i), s.encode()) for i, s in enumerate(states)]
        if len(puts) + 1 <= self._max_ops:
            res = await self._etcd.txn([Cmp.mod_is(tkey, rev), Cmp.absent(self._keys.topic_claim(name))],
                                       puts + [Put(tkey, grown)])
            if res.succeeded:
                await self._written(res)
            return res.succeeded
        return await self._claimed(name, grown, puts, [Cmp.mod_is(tkey, rev)], creating=None)

    async def _update(self, name: str, change: Callable[[TopicMeta], TopicMeta | None]) -> bool:
        """Compare-and-swap loop on a topic key; False if the topic does not exist."""
        tkey = self._keys.topic(name)
        while True:
            got = await self._read(name)
            if got is None:
                return False
            new = change(got[0])
            if new is None:
                return True
            res = await self._etcd.txn([Cmp.mod_is(tkey, got[1])], [Put(tkey, new.encode())])
            if res.succeeded:
                await self._written(res)
                return True

    async def mark_deleting(self, name: str) -> bool:
        return await self._update(name, lambda m: None if m.deleting else replace(m, deleting=True))

    async def set_configs(self, name: str, configs: Mapping[str, str]) -> bool:
        frozen = MappingProxyType({str(k): str(v) for k, v in configs.items()})
        return await self._update(name, lambda m: replace(m, configs=frozen))

    async def remove(self, name: str) -> None:
        tkey, parts = self._keys.topic(name), self._keys.partitions_of(name)
        while True:
            got = await self._read(name)
            if got is None:
                return
            if not got[0].deleting:
                raise ValueError(f"topic {name} is not marked for deletion (mark_topic_deleting first)")
            res = await self._etcd.txn([Cmp.mod_is(tkey, got[1])], [Delete(tkey), Delete(parts, prefix_end(parts))])
            if res.succeeded:
                await self._written(res)
                return
