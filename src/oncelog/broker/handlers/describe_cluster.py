"""DescribeCluster (60): one broker, which is also the controller."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_cluster_request import DescribeClusterRequest
from oncelog.protocol.messages.describe_cluster_response import DescribeClusterBroker, DescribeClusterResponse

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.router import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeClusterRequest) -> DescribeClusterResponse:
    host, port = broker.config.advertised
    node = broker.config.node_id
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   endpoint_type=request.endpoint_type, cluster_id=broker.cluster_id,
                                   controller_id=node,
                                   brokers=[DescribeClusterBroker(broker_id=node, host=host, port=port, rack=None)])
