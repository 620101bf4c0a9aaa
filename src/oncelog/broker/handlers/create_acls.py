"""CreateAcls (30): ALTER on the cluster; each binding is checked as Kafka's controller does (INVALID_REQUEST with
its reason) and the valid ones are stored together (every broker of a cluster enforces them within a watch delay).
Without an authorizer: SECURITY_DISABLED."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.create_acls_request import CreateAclsRequest
from oncelog.protocol.messages.create_acls_response import AclCreationResult, CreateAclsResponse
from oncelog.security.acl import AclOperation
from oncelog.security.store import SecurityStoreError

from ._acls import binding_of, refusal, write_error

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 30
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(broker: BrokerContext, ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    refused = refusal(broker, ctx, AclOperation.ALTER)
    if refused is None and broker.authorizer is not None:
        try:
            results = await broker.authorizer.create_acls([binding_of(c) for c in request.creations])
        except SecurityStoreError as e:
            refused = write_error(e)
        else:
            return CreateAclsResponse(throttle_time_ms=0, results=[
                AclCreationResult(error_code=ErrorCode.NONE, error_message=None) if r is None
                else AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=str(r)) for r in results])
    code, message = refused or (ErrorCode.UNKNOWN_SERVER_ERROR, "")
    return CreateAclsResponse(throttle_time_ms=0, results=[AclCreationResult(error_code=code, error_message=message)
                                                           for _ in request.creations])
