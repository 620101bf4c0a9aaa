"""SaslHandshake (17): on a SASL listener the connection's authenticator answers it, before routing
(``security/authenticator.py``); it reaches this handler only where SASL is not under way (a PLAINTEXT or SSL
listener, or an authenticated connection whose client cannot re-authenticate), and is answered ILLEGAL_SASL_STATE, as
Kafka's ``KafkaApis.handleSaslHandshakeRequest``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from oncelog.protocol.messages.sasl_handshake_response import SaslHandshakeResponse

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: "BrokerContext", ctx: "RequestContext", request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
