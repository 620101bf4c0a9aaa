"""What CreateAcls, DescribeAcls and DeleteAcls share (Kafka's ``AclApis``): the cluster check, the answer when
authorization is off, and the conversion between the wire's fields and the ACL model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.security.acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from oncelog.security.store import SecurityStoreError

from ..security.authorization import allowed

if TYPE_CHECKING:
    from typing import Any

    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

__all__ = ["binding_of", "filter_of", "refusal", "write_error"]

_NO_AUTHORIZER = "No Authorizer is configured on the broker (set authorizer.class.name)"


def refusal(broker: BrokerContext, ctx: RequestContext, op: AclOperation) -> tuple[ErrorCode, str] | None:
    """The error of the whole request: CLUSTER_AUTHORIZATION_FAILED without ``op`` on the cluster, SECURITY_DISABLED
    without an authorizer; None to go on."""
    if not allowed(broker, ctx, op, ResourceType.CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{ctx.principal} may not {op.name} the cluster's ACLs"
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER
    return None


def write_error(e: SecurityStoreError) -> tuple[ErrorCode, str]:
    """A write of the ACL records that failed (nothing applied): retriable."""
    return ErrorCode.REQUEST_TIMED_OUT, f"the ACLs could not be stored ({e}); nothing changed, retry"


def binding_of(c: Any) -> AclBinding:
    return AclBinding(ResourceType.of(c.resource_type), c.resource_name, PatternType.of(c.resource_pattern_type),
                      c.principal, c.host, AclOperation.of(c.operation), AclPermissionType.of(c.permission_type))


def filter_of(f: Any) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.of(f.resource_type_filter), f.resource_name_filter,
                            PatternType.of(f.pattern_type_filter), f.principal_filter, f.host_filter,
                            AclOperation.of(f.operation), AclPermissionType.of(f.permission_type))
