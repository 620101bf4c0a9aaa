"""DescribeAcls (29): DESCRIBE on the cluster; the bindings the filter matches, grouped by resource pattern. Without
an authorizer: SECURITY_DISABLED."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_acls_request import DescribeAclsRequest
from oncelog.protocol.messages.describe_acls_response import (
    AclDescription,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from oncelog.security.acl import AclOperation

from ._acls import filter_of, refusal

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 29
MIN_VERSION = 0
MAX_VERSION = 3


def handle(broker: BrokerContext, ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    refused = refusal(broker, ctx, AclOperation.DESCRIBE)
    if refused is not None or broker.authorizer is None:
        code, message = refused or (ErrorCode.UNKNOWN_SERVER_ERROR, "")
        return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message)
    f = filter_of(request)
    if f.is_unknown():
        return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                    error_message="the filter has an unknown resource, pattern, operation or "
                                                  "permission type")
    resources: dict[tuple[int, str, int], list[AclDescription]] = {}
    for b in sorted(broker.authorizer.acls(f), key=lambda b: (b.resource_type, b.name, b.pattern_type,
                                                             b.principal, b.host, b.operation, b.permission)):
        resources.setdefault((b.resource_type, b.name, b.pattern_type), []).append(AclDescription(
            principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=[
        DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt, acls=acls)
        for (rt, name, pt), acls in resources.items()])
