"""DescribeUserScramCredentials (50, KIP-554): the SCRAM mechanisms and iteration counts of users (never salts or
keys), from the security records (``security/scram.py``: Kafka's ``ScramImage.describe``). No users named: every
user with a credential; a user named twice: DUPLICATE_RESOURCE; one without a credential: RESOURCE_NOT_FOUND."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.describe_user_scram_credentials_request import DescribeUserScramCredentialsRequest
from oncelog.protocol.messages.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from oncelog.security.scram import describe
from oncelog.security.store import SCRAM

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    store = broker.security_store
    if store is None:
        return DescribeUserScramCredentialsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                    error_message="the broker is starting; retry")
    users = [u.name for u in request.users] if request.users else None
    return DescribeUserScramCredentialsResponse(error_code=ErrorCode.NONE, error_message=None, results=[
        DescribeUserScramCredentialsResult(
            user=user, error_code=code, error_message=message,
            credential_infos=[CredentialInfo(mechanism=m, iterations=i) for m, i in infos])
        for user, code, message, infos in describe(store.records(SCRAM), users)])
