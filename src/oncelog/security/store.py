"""The records security is made of — ACL bindings, SCRAM credentials, client quotas — behind one small interface.

A record is a key and opaque bytes in a *kind* (``"acls"``, ``"scram"``, ``"quotas"``); the typed meaning belongs to
the module of that kind. Writes of one call are applied together (one etcd transaction in a cluster, one file
replace on a single node) and are visible to :meth:`SecurityStore.records` when the call returns (read your writes).
Listeners hear which kind changed, from this broker or another one, so caches (the authorizer's ACL index) are
rebuilt from the records and nothing else.

- :class:`MemorySecurityStore`: for unit tests and throwaway brokers.
- :class:`FileSecurityStore`: a single node's records, in one JSON file of its data folder, replaced atomically
  (written before the call returns, fsynced: an ACL a client was told exists survives a power cut).
- In a cluster the records are keys of the cluster's etcd prefix, part of its view
  (``oncelog.broker.cluster.security_store``): every broker enforces the same records within one watch delay.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from oncelog.storage.files import write_atomic

__all__ = ["ACLS", "FileSecurityStore", "GROUP_CONFIGS", "KINDS", "MemorySecurityStore", "QUOTAS", "SCRAM", "SecurityStore",
           "SecurityStoreError"]

log = logging.getLogger("oncelog.security.store")

ACLS, SCRAM, QUOTAS = "acls", "scram", "quotas"
#: not security, but dynamic configs that must reach every broker the same way: a consumer group's own configs
#: (ConfigResource GROUP; ``oncelog.broker.settings.group_configs``)
GROUP_CONFIGS = "group_configs"
KINDS = (ACLS, SCRAM, QUOTAS, GROUP_CONFIGS)
_EMPTY: Mapping[str, bytes] = MappingProxyType({})


class SecurityStoreError(Exception):
    """The records could not be written (etcd unavailable, the file system refused); nothing was applied."""


class SecurityStore(Protocol):
    def records(self, kind: str) -> Mapping[str, bytes]:
        """Every record of ``kind`` now (an immutable snapshot)."""
        ...

    async def write(self, kind: str, puts: Mapping[str, bytes], deletes: Iterable[str] = ()) -> None:
        """Put and delete records of ``kind`` together; visible to :meth:`records` once this returns. Raises
        :class:`SecurityStoreError`."""
        ...

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """``callback(kind)`` after the records of ``kind`` changed (on the event loop)."""
        ...


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown kind of security record {kind!r} (one of {', '.join(KINDS)})")


class MemorySecurityStore:
    """Records in memory; listeners are called synchronously after each write."""

    def __init__(self, records: Mapping[str, Mapping[str, bytes]] | None = None) -> None:
        self._records: dict[str, Mapping[str, bytes]] = {k: MappingProxyType(dict((records or {}).get(k, {})))
                                                         for k in KINDS}
        self._listeners: list[Callable[[str], None]] = []

    def records(self, kind: str) -> Mapping[str, bytes]:
        _check_kind(kind)
        return self._records[kind]

    def _apply(self, kind: str, puts: Mapping[str, bytes], deletes: Iterable[str]) -> bool:
        _check_kind(kind)
        new = dict(self._records[kind])
        for key in deletes:
            new.pop(key, None)
        new.update(puts)
        if new == self._records[kind]:
            return False
        self._records[kind] = MappingProxyType(new)
        return True

    async def write(self, kind: str, puts: Mapping[str, bytes], deletes: Iterable[str] = ()) -> None:
        if self._apply(kind, puts, deletes):
            self._changed(kind)

    def _changed(self, kind: str) -> None:
        for callback in list(self._listeners):
            callback(kind)

    def add_listener(self, callback: Callable[[str], None]) -> None:
        self._listeners.append(callback)


class FileSecurityStore(MemorySecurityStore):
    """A single node's records in ``path`` (JSON: kind -> key -> base64 value), replaced atomically on each write."""

    FORMAT = 1

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        super().__init__(self._load())

    def _load(self) -> dict[str, dict[str, bytes]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise SecurityStoreError(f"cannot read the security records {self.path}: {e.strerror or e}") from None
        try:
            doc = json.loads(raw)
            if doc.get("format") != self.FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, this version reads {self.FORMAT}")
            return {kind: {key: base64.b64decode(value, validate=True) for key, value in entries.items()}
                    for kind, entries in doc["records"].items() if kind in KINDS}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise SecurityStoreError(f"the security records {self.path} are damaged ({e}); restore the file from a "
                                     f"backup or remove it (every ACL, SCRAM user and quota is then gone)") from None

    async def write(self, kind: str, puts: Mapping[str, bytes], deletes: Iterable[str] = ()) -> None:
        _check_kind(kind)
        before = self._records[kind]
        if not self._apply(kind, puts, deletes):
            return
        doc = {"format": self.FORMAT, "records": {
            k: {key: base64.b64encode(value).decode("ascii") for key, value in sorted(entries.items())}
            for k, entries in self._records.items() if entries}}
        try:
            write_atomic(self.path, json.dumps(doc, indent=1).encode(), mode=0o600)  # salted credentials inside
        except OSError as e:
            self._records[kind] = before  # not written: not applied
            raise SecurityStoreError(f"cannot write the security records {self.path}: {e.strerror or e}") from None
        self._changed(kind)
