"""SaslAuthenticate (36): on a SASL listener the connection's authenticator answers it while authentication runs
(``security/authenticator.py``); one that reaches this handler comes after authentication (or on a listener without
SASL) and is answered ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis.handleSaslAuthenticateRequest``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from oncelog.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate request received after successful authentication")
