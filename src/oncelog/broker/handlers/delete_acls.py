"""DeleteAcls (31): ALTER on the cluster; every binding a filter matches is deleted (all filters in one write) and
reported under that filter. Without an authorizer: SECURITY_DISABLED."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.delete_acls_request import DeleteAclsRequest
from oncelog.protocol.messages.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)
from oncelog.security.acl import AclOperation
from oncelog.security.authorizer import AclError
from oncelog.security.store import SecurityStoreError

from ._acls import filter_of, refusal, write_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 31
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(broker: BrokerContext, ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    refused = refusal(broker, ctx, AclOperation.ALTER)
    if refused is None and broker.authorizer is not None:
        try:
            results = await broker.authorizer.delete_acls([filter_of(f) for f in request.filters])
        except SecurityStoreError as e:
            refused = write_error(e)
        else:
            out = []
            for r in results:
                if isinstance(r, AclError):
                    out.append(DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=str(r)))
                    continue
                out.append(DeleteAclsFilterResult(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
                    DeleteAclsMatchingAcl(error_code=ErrorCode.NONE, error_message=None,
                                          resource_type=b.resource_type, resource_name=b.name,
                                          pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                                          operation=b.operation, permission_type=b.permission) for b in r]))
            return DeleteAclsResponse(throttle_time_ms=0, filter_results=out)
    code, message = refused or (ErrorCode.UNKNOWN_SERVER_ERROR, "")
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        DeleteAclsFilterResult(error_code=code, error_message=message) for _ in request.filters])
