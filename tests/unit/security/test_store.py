"""The security records' stores: a single node's file (atomic, private, survives a restart, refuses a damaged file
with one line), and a cluster's records in its view, written by one broker and seen by every other."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest

from oncelog.broker.cluster.security_store import ClusterSecurityStore
from oncelog.security.principal import ANONYMOUS, KafkaPrincipal, parse_principal
from oncelog.security.store import ACLS, QUOTAS, SCRAM, FileSecurityStore, MemorySecurityStore, SecurityStoreError
from oncelog.testing.memory_store import MemoryMetadataStore


def test_principals_parse_as_kafka_writes_them() -> None:
    assert parse_principal("User:alice") == KafkaPrincipal("User", "alice")
    assert parse_principal("User:CN=a,O=b:c").name == "CN=a,O=b:c"  # a name may hold ':'
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    for bad in ("alice", ":alice", "User:"):
        with pytest.raises(ValueError, match="TYPE:NAME"):
            parse_principal(bad)


def test_a_file_store_writes_atomically_privately_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "security.json"
    seen: list[str] = []

    async def main() -> None:
        store = FileSecurityStore(path)
        store.add_listener(seen.append)
        await store.write(SCRAM, {"alice/SCRAM-SHA-256": b"\x00cred"})
        await store.write(ACLS, {"a": b"1", "b": b"2"})
        await store.write(ACLS, {"c": b"3"}, deletes=["a"])
        await store.write(ACLS, {"c": b"3"})  # no change: no listener call, no write
    asyncio.run(main())
    assert seen == [SCRAM, ACLS, ACLS]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = FileSecurityStore(path)
    assert dict(again.records(ACLS)) == {"b": b"2", "c": b"3"}
    assert dict(again.records(SCRAM)) == {"alice/SCRAM-SHA-256": b"\x00cred"}
    assert dict(again.records(QUOTAS)) == {}
    with pytest.raises(ValueError, match="unknown kind"):
        again.records("nope")


def test_a_damaged_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "security.json"
    path.write_text("{not json")
    with pytest.raises(SecurityStoreError, match="damaged .*restore the file"):
        FileSecurityStore(path)
    path.write_text(json.dumps({"format": 99, "records": {}}))
    with pytest.raises(SecurityStoreError, match="format 99"):
        FileSecurityStore(path)


def test_a_failed_file_write_applies_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    store = FileSecurityStore(folder / "security.json")
    folder.rmdir()  # the data folder vanished: the write cannot happen

    async def main() -> None:
        with pytest.raises(SecurityStoreError, match="cannot write"):
            await store.write(ACLS, {"a": b"1"})
    asyncio.run(main())
    assert dict(store.records(ACLS)) == {}


def test_cluster_records_written_by_one_broker_are_seen_by_another() -> None:
    async def main() -> None:
        etcd = MemoryMetadataStore()
        one, two = ClusterSecurityStore(etcd), ClusterSecurityStore(etcd)
        heard: list[str] = []
        two.add_listener(heard.append)
        two.start()
        await one.write(ACLS, {"Topic:LITERAL:a/b": b"x"})  # a key with '/': percent-encoded in etcd
        assert dict(two.records(ACLS)) == {"Topic:LITERAL:a/b": b"x"}
        for _ in range(20):
            if heard:
                break
            await asyncio.sleep(0.01)
        assert heard == [ACLS]
        await one.write(ACLS, {}, deletes=["Topic:LITERAL:a/b"])
        assert dict(two.records(ACLS)) == {}
        assert dict(MemorySecurityStore().records(SCRAM)) == {}
        await two.close()
    asyncio.run(main())
