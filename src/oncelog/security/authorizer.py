"""Authorization as a pure decision: (principal, host, operation, resource) and the ACLs -> allow or deny, as
Kafka's ``StandardAuthorizer`` decides (``metadata/.../authorizer/StandardAuthorizerData.java``):

- a principal in ``super.users`` may do anything;
- the ACLs that apply to a resource are the LITERAL ones of its name, the LITERAL wildcard ``*`` of its type and the
  PREFIXED ones whose name starts it; of those, the ones whose principal is the request's (or ``User:*``) and whose
  host is the client's (or ``*``) match when their operation is the one asked, or ALL; an ALLOW of READ, WRITE,
  DELETE or ALTER also allows DESCRIBE, an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS;
- a matching DENY wins over any ALLOW; without a match the answer is DENY when the resource has ACLs (for anyone),
  and ``allow.everyone.if.no.acl.found`` when it has none.

:meth:`StandardAuthorizer.authorize_by_resource_type` is KIP-679's check "may this principal WRITE to some topic"
(Kafka's default ``Authorizer.authorizeByResourceType``), used by InitProducerId of an idempotent producer.

The ACLs are read from the ``acls`` records of a :class:`~oncelog.security.store.SecurityStore` into an index,
rebuilt whenever the records change (a listener on the store: writes of this broker and, in a cluster, of every
other one); a decision reads only the index. Creating and deleting ACLs writes the records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    operation_bits,
    validate_new_binding,
)
from .principal import parse_principal
from .store import ACLS, SecurityStore

__all__ = ["ACCEPTED_CLASS_NAMES", "AclError", "Decision", "StandardAuthorizer", "parse_super_users"]

log = logging.getLogger("oncelog.security.authorizer")

#: the ``authorizer.class.name`` values that turn authorization on: KRaft's authorizer and the ZooKeeper-era
#: ``AclAuthorizer`` (both decide the same way here; the ACLs live in the broker's security records either way)
ACCEPTED_CLASS_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "kafka.security.authorizer.AclAuthorizer")

_A = AclOperation
_IMPLIES_DESCRIBE = frozenset({_A.DESCRIBE, _A.READ, _A.WRITE, _A.DELETE, _A.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({_A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS})
#: the name ``authorizeByResourceType`` first checks, so super users (and allow-everyone) pass
_HARDCODE = "hardcode"


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by ';' (``User:admin;User:broker``). Raises ValueError."""
    out = set()
    for part in text.split(";"):
        if part.strip():
            out.add(str(parse_principal(part.strip())))
    return frozenset(out)


class AclError(Exception):
    """A binding or filter Kafka refuses (INVALID_REQUEST), with Kafka's message."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer, and the rule that gave it (for the audit log)."""

    allowed: bool
    rule: str


@dataclass(slots=True)
class _Entry:
    binding: AclBinding
    principal: str
    host: str
    operation: AclOperation
    allow: bool


@dataclass(slots=True)
class _TypeIndex:
    """The ACLs of one resource type: LITERAL ones (the wildcard ``*`` among them) and PREFIXED ones by name."""

    literal: dict[str, list[_Entry]] = field(default_factory=dict)
    prefixed: dict[str, list[_Entry]] = field(default_factory=dict)
    prefix_lengths: tuple[int, ...] = ()


def _result(entry: _Entry, principal: str, host: str, operation: AclOperation) -> bool | None:
    """True (ALLOW), False (DENY) or None (the entry does not match): Kafka's ``StandardAuthorizerData.findResult``."""
    if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
        return None
    if entry.host != WILDCARD and entry.host != host:
        return None
    op = entry.operation
    if op != _A.ALL:
        if entry.allow:
            if operation == _A.DESCRIBE:
                if op not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == _A.DESCRIBE_CONFIGS:
                if op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != operation:
                return None
        elif op != operation:
            return None
    return entry.allow


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over the ``acls`` records of ``store``."""

    def __init__(self, store: SecurityStore, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._bindings: dict[str, AclBinding] = {}
        self._index: dict[ResourceType, _TypeIndex] = {}
        self.reload()
        store.add_listener(self._on_change)

    # ------------------------------------------------------------------------------------------------ the index
    def _on_change(self, kind: str) -> None:
        if kind == ACLS:
            self.reload()

    def reload(self) -> None:
        """Rebuild the index from the records (an unreadable record is skipped and logged)."""
        bindings: dict[str, AclBinding] = {}
        for key, value in self.store.records(ACLS).items():
            try:
                bindings[key] = AclBinding.from_record(value)
            except ValueError as e:
                log.error("ACL record %s skipped: %s", key, e)
        index: dict[ResourceType, _TypeIndex] = {}
        for b in bindings.values():
            ti = index.setdefault(b.resource_type, _TypeIndex())
            by_name = ti.literal if b.pattern_type == PatternType.LITERAL else ti.prefixed
            by_name.setdefault(b.name, []).append(
                _Entry(b, b.principal, b.host, b.operation, b.permission == AclPermissionType.ALLOW))
        for ti in index.values():
            ti.prefix_lengths = tuple(sorted({len(name) for name in ti.prefixed}))
        self._bindings, self._index = bindings, index

    # ------------------------------------------------------------------------------------------------ decisions
    def decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
               name: str) -> Decision:
        """May ``principal`` from ``host`` do ``operation`` on the resource ``name`` of ``resource_type``?"""
        if principal in self.super_users:
            return Decision(True, "SuperUser")
        ti = self._index.get(resource_type)
        if ti is None:
            return Decision(self.allow_if_no_acl, "NoAcl")
        lists = []
        if name in ti.literal:
            lists.append(ti.literal[name])
        if name != WILDCARD and WILDCARD in ti.literal:
            lists.append(ti.literal[WILDCARD])
        if ti.prefixed:
            n = len(name)
            for length in ti.prefix_lengths:
                if length > n:
                    break
                entries = ti.prefixed.get(name[:length])
                if entries is not None:
                    lists.append(entries)
        if not lists:
            return Decision(self.allow_if_no_acl, "NoAcl")
        allowed_by: AclBinding | None = None
        for entries in lists:
            for entry in entries:
                result = _result(entry, principal, host, operation)
                if result is False:
                    return Decision(False, f"Deny {entry.binding}")
                if result:
                    allowed_by = entry.binding
        if allowed_by is not None:
            return Decision(True, f"Allow {allowed_by}")
        return Decision(False, "NoMatchingAcl")

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        return self.decide(principal, host, operation, resource_type, name).allowed

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of ``resource_type`` (KIP-679: an ALLOW on a
        literal or prefixed name, or on ``*``, not dominated by a DENY)? Kafka's default
        ``Authorizer.authorizeByResourceType``."""
        if self.authorize(principal, host, operation, resource_type, _HARDCODE):
            return True
        ti = self._index.get(resource_type)
        if ti is None:
            return False
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        for pattern_type, by_name in ((PatternType.LITERAL, ti.literal), (PatternType.PREFIXED, ti.prefixed)):
            for name, entries in by_name.items():
                for e in entries:
                    if e.host != host and e.host != WILDCARD:
                        continue
                    if e.principal != principal and e.principal != WILDCARD_PRINCIPAL:
                        continue
                    if e.operation != operation and e.operation != _A.ALL:
                        continue
                    if not e.allow:
                        if pattern_type == PatternType.LITERAL and name == WILDCARD:
                            return False
                        (deny_literal if pattern_type == PatternType.LITERAL else deny_prefixed).add(name)
                    else:
                        allow.append((pattern_type, name))
        if (PatternType.LITERAL, WILDCARD) in allow:
            return True
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """KIP-430: the bit field of the operations of ``resource_type`` allowed on ``name``."""
        return operation_bits({op for op in SUPPORTED_OPERATIONS[resource_type]
                               if self.authorize(principal, host, op, resource_type, name)})

    # ------------------------------------------------------------------------------------------------ the ACLs
    def acls(self, filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``filter`` matches (DescribeAcls)."""
        return [b for b in self._bindings.values() if filter.matches(b)]

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Create every valid binding in one write; one result per binding (None: created or already there).
        Raises :class:`~oncelog.security.store.SecurityStoreError` when the write fails (nothing created)."""
        results: list[AclError | None] = []
        puts: dict[str, bytes] = {}
        for b in bindings:
            why = validate_new_binding(b)
            if why is not None:
                results.append(AclError(why))
                continue
            key, value = b.record()
            puts[key] = value
            results.append(None)
        if puts:
            await self.store.write(ACLS, puts)
        return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | AclError]:
        """Delete the bindings each filter matches, all in one write; per filter the bindings it deleted (a binding
        matched by two filters is reported by both), or why the filter is refused."""
        results: list[list[AclBinding] | AclError] = []
        deletes: set[str] = set()
        records = dict(self._bindings)
        for f in filters:
            if f.is_unknown():
                results.append(AclError("Unknown patternFilter." if ResourceType.UNKNOWN == f.resource_type
                                        or f.pattern_type == PatternType.UNKNOWN else "Unknown entryFilter."))
                continue
            matched = [(k, b) for k, b in records.items() if f.matches(b)]
            deletes.update(k for k, _ in matched)
            results.append([b for _, b in matched])
        if deletes:
            await self.store.write(ACLS, {}, sorted(deletes))
        return results
