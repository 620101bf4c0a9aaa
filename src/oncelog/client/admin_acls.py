"""ACL administration for the native admin client: create, describe and delete ACLs (CreateAcls, DescribeAcls,
DeleteAcls, sent to any broker, as Kafka's AdminClient does).

Bindings and filters carry Kafka's codes (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``); the names of the codes are in :data:`RESOURCE_TYPES`, :data:`PATTERN_TYPES`,
:data:`OPERATIONS` and :data:`PERMISSIONS`. Each call takes an :class:`~oncelog.client.admin.AsyncAdmin` (the
``*_sync`` ones an :class:`~oncelog.client.admin.Admin`) and raises :class:`~oncelog.client.errors.KafkaError` when
the broker refuses (SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER/DESCRIBE
on the cluster, INVALID_REQUEST with Kafka's reason for a bad binding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from oncelog.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from oncelog.protocol.messages.describe_acls_request import DescribeAclsRequest

from .errors import raise_for_code

if TYPE_CHECKING:
    from .admin import Admin, AsyncAdmin

__all__ = ["ANY", "AclBinding", "AclBindingFilter", "OPERATIONS", "PATTERN_TYPES", "PERMISSIONS", "RESOURCE_TYPES",
           "create_acls", "create_acls_sync", "delete_acls", "delete_acls_sync", "describe_acls",
           "describe_acls_sync"]

#: Kafka's codes by name
RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6,
                  "USER": 7}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {"ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
              "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
              "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
#: the ANY code of every enum (a filter field that matches everything)
ANY = 1
LITERAL = 3


def _name(table: dict[str, int], code: int) -> str:
    return next((k for k, v in table.items() if v == code), f"UNKNOWN({code})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL with Kafka's codes; ``str()`` is kafka-acls.sh's way of showing it."""

    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={_name(RESOURCE_TYPES, self.resource_type)}, name={self.name}, "
                f"patternType={_name(PATTERN_TYPES, self.pattern_type)}): (principal={self.principal}, "
                f"host={self.host}, operation={_name(OPERATIONS, self.operation)}, "
                f"permissionType={_name(PERMISSIONS, self.permission)})")

    def to_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this binding."""
        return AclBindingFilter(self.resource_type, self.name, self.pattern_type, self.principal, self.host,
                                self.operation, self.permission)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs to describe or delete: None or ANY matches everything; pattern type MATCH matches every ACL that
    applies to the named resource (literal, ``*`` and prefixes)."""

    resource_type: int = ANY
    name: str | None = None
    pattern_type: int = ANY
    principal: str | None = None
    host: str | None = None
    operation: int = ANY
    permission: int = ANY


async def create_acls(admin: AsyncAdmin, bindings: Sequence[AclBinding]) -> None:
    """Create every binding (existing ones are kept once); raises for the first one refused."""
    await admin.start()
    conn = await admin.cluster.any_connection()
    resp = await conn.send(CreateAclsRequest(creations=[AclCreation(
        resource_type=b.resource_type, resource_name=b.name, resource_pattern_type=b.pattern_type,
        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
        for b in bindings]))
    for b, r in zip(bindings, resp.results):
        raise_for_code(r.error_code, r.error_message, f"ACL {b}")


async def describe_acls(admin: AsyncAdmin, f: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
    """The ACLs ``f`` matches."""
    await admin.start()
    conn = await admin.cluster.any_connection()
    resp = await conn.send(DescribeAclsRequest(
        resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
        principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission))
    raise_for_code(resp.error_code, resp.error_message, "DescribeAcls")
    return [AclBinding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                       a.permission_type) for r in resp.resources for a in r.acls]


async def delete_acls(admin: AsyncAdmin, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
    """Delete the ACLs each filter matches; per filter, the ACLs it deleted."""
    await admin.start()
    conn = await admin.cluster.any_connection()
    resp = await conn.send(DeleteAclsRequest(filters=[DeleteAclsFilter(
        resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
        principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission)
        for f in filters]))
    out = []
    for r in resp.filter_results:
        raise_for_code(r.error_code, r.error_message, "DeleteAcls")
        out.append([AclBinding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                               m.permission_type) for m in r.matching_acls])
    return out


def create_acls_sync(admin: Admin, bindings: Sequence[AclBinding]) -> None:
    admin._run(create_acls(admin._async, bindings))


def describe_acls_sync(admin: Admin, f: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
    result: list[AclBinding] = admin._run(describe_acls(admin._async, f))
    return result


def delete_acls_sync(admin: Admin, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
    result: list[list[AclBinding]] = admin._run(delete_acls(admin._async, filters))
    return result
