"""Kafka's ACL model: resource types, pattern types, operations and permissions with Kafka's codes, bindings
(a resource pattern and an access control entry), the filters Describe/DeleteAcls take, and the records ACLs are
kept as (kind ``acls`` of the :class:`~oncelog.security.store.SecurityStore`).

The codes are those of ``org.apache.kafka.common.resource.ResourceType`` / ``PatternType`` and
``org.apache.kafka.common.acl.AclOperation`` / ``AclPermissionType``; a code this version does not know reads as
UNKNOWN (Kafka's ``fromCode``). Filters match as ``ResourcePatternFilter.matches`` and
``AccessControlEntryFilter.matches`` do; a new binding is checked as ``AclControlManager.validateNewAcl`` does.

A binding is one record: its key is a digest of the binding (creating the same binding twice keeps one, as Kafka
does), its value the binding as JSON with the enums by name (readable in ``security.json`` and etcd).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from .principal import parse_principal

__all__ = ["AclBinding", "AclBindingFilter", "AclOperation", "AclPermissionType", "CLUSTER_NAME", "PatternType",
           "ResourceType", "SUPPORTED_OPERATIONS", "WILDCARD", "WILDCARD_PRINCIPAL", "operation_bits",
           "parse_enum", "validate_new_binding"]

#: the resource name that matches every name of its type (LITERAL pattern only), and the host matching every host
WILDCARD = "*"
#: the principal every principal matches (``StandardAuthorizerData.WILDCARD_PRINCIPAL``)
WILDCARD_PRINCIPAL = "User:*"
#: the only name of the CLUSTER resource (``org.apache.kafka.common.resource.Resource.CLUSTER_NAME``)
CLUSTER_NAME = "kafka-cluster"


class _Coded(IntEnum):
    @classmethod
    def of(cls: type[_E], code: int) -> _E:
        """The member of ``code``; UNKNOWN for a code this version does not know (as Kafka's ``fromCode``)."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


_E = TypeVar("_E", bound=_Coded)


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_O = AclOperation
#: the operations that apply to each resource type (Kafka's ``AclEntry.supportedOperations``): what KIP-430's
#: authorized operations are computed over
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                           _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


def operation_bits(operations: set[AclOperation] | frozenset[AclOperation]) -> int:
    """KIP-430's authorized operations field: bit ``code`` set for each operation (Kafka's
    ``Utils.to32BitField``)."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def parse_enum(cls: type[_E], text: str) -> _E:
    """A member by Kafka's names in any case and spelling: ``Read``, ``READ``, ``IdempotentWrite``,
    ``idempotent_write``, ``TransactionalId``, ``Prefixed``. Raises ValueError listing the names."""
    key = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()).replace("-", "_").upper()
    try:
        return cls[key]
    except KeyError:
        names = ", ".join(m.name for m in cls if m.name != "UNKNOWN")
        raise ValueError(f"unknown {cls.__name__} {text!r} (one of {names})") from None


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal, host, operation,
    ALLOW or DENY)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def _doc(self) -> dict[str, str]:
        return {"resource_type": self.resource_type.name, "name": self.name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permission": self.permission.name}

    def record(self) -> tuple[str, bytes]:
        """(key, value) of this binding in the ``acls`` records."""
        value = json.dumps(self._doc(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(value).hexdigest()[:40], value

    @classmethod
    def from_record(cls, value: bytes) -> AclBinding:
        """Raises ValueError for a record this version cannot read."""
        try:
            doc = json.loads(value)
            return cls(ResourceType[doc["resource_type"]], str(doc["name"]), PatternType[doc["pattern_type"]],
                       str(doc["principal"]), str(doc["host"]), AclOperation[doc["operation"]],
                       AclPermissionType[doc["permission"]])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"unreadable ACL record: {e!r}") from None

    def __str__(self) -> str:
        """kafka-acls.sh's way of showing one ACL."""
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name}): (principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission.name})")


def validate_new_binding(b: AclBinding) -> str | None:
    """Why Kafka refuses to create ``b`` (INVALID_REQUEST), or None (``AclControlManager.validateNewAcl``,
    ``AclApis.handleCreateAcls``; the principal is checked too, as kafka-acls.sh does)."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {b.resource_type.name}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {b.pattern_type.name}"
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {b.operation.name}"
    if b.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {b.permission.name}"
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.name:
        return "Resource name should not be empty"
    try:
        parse_principal(b.principal)
    except ValueError as e:
        return str(e)
    if not b.host:
        return "Invalid empty host (use * for every host)"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings Describe/DeleteAcls mean: None (or ANY) matches everything in a field; pattern type MATCH
    matches the bindings that apply to the named resource (literal, the wildcard ``*``, and prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        """A filter with an UNKNOWN field matches nothing and is refused (``AclBindingFilter.isUnknown``)."""
        return (self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN)

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type in (PatternType.ANY, b.pattern_type):
                if self.name != b.name:
                    return False
            elif b.pattern_type == PatternType.LITERAL:  # MATCH against a literal binding
                if not (self.name == b.name or b.name == WILDCARD):
                    return False
            elif not self.name.startswith(b.name):  # MATCH against a prefixed binding
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == b.permission
