"""AlterUserScramCredentials (51, KIP-554): create, replace and delete users' SCRAM credentials. The client sends a
salt and a salted password (never the password); the broker keeps the salt, the stored key and the server key
(``security/scram.py``, Kafka's ``ScramControlManager``) in the security records: a single node's
``security.json``, a cluster's etcd, where every broker sees them within one watch delay.

A user altered twice in one request fails with DUPLICATE_RESOURCE, an unknown mechanism with
UNSUPPORTED_SASL_MECHANISM, too few or too many iterations (4096-16384) with UNACCEPTABLE_CREDENTIAL, the deletion of
a credential that does not exist with RESOURCE_NOT_FOUND; the others are written together."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.alter_user_scram_credentials_request import AlterUserScramCredentialsRequest
from oncelog.protocol.messages.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from oncelog.security.scram import Deletion, Upsertion, plan_alter
from oncelog.security.store import SCRAM, SecurityStoreError

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(broker: "BrokerContext", ctx: "RequestContext",
                 request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    store = broker.security_store
    names = {d.name for d in request.deletions} | {u.name for u in request.upsertions}
    if store is None:
        return _all(names, ErrorCode.COORDINATOR_NOT_AVAILABLE, "the broker is starting; retry")
    plan = plan_alter(store.records(SCRAM), [Deletion(d.name, d.mechanism) for d in request.deletions],
                      [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                       for u in request.upsertions])
    if plan.puts or plan.deletes:
        try:
            await store.write(SCRAM, plan.puts, plan.deletes)
        except SecurityStoreError as e:
            written = {u for u, code, _ in plan.results if code == ErrorCode.NONE}
            return AlterUserScramCredentialsResponse(results=[
                AlterUserScramCredentialsResult(user=u, error_code=ErrorCode.REQUEST_TIMED_OUT if u in written
                                                else code, error_message=f"not stored: {e}; retry" if u in written
                                                else message)
                for u, code, message in plan.results])
    return AlterUserScramCredentialsResponse(results=[
        AlterUserScramCredentialsResult(user=u, error_code=code, error_message=message)
        for u, code, message in plan.results])


def _all(names: set[str], code: int, message: str) -> AlterUserScramCredentialsResponse:
    return AlterUserScramCredentialsResponse(results=[
        AlterUserScramCredentialsResult(user=n, error_code=code, error_message=message) for n in sorted(names)])
