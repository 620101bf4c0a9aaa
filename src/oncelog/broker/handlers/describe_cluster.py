"""DescribeCluster (60): on a single node one broker, which is also the controller; in a cluster every live broker
and the controller, from the view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_cluster_request import DescribeClusterRequest
from oncelog.protocol.messages.describe_cluster_response import DescribeClusterBroker, DescribeClusterResponse
from oncelog.security.acl import AclOperation, ResourceType

from ..security.authorization import allowed, authorized_operations
from ._cluster_metadata import brokers, controller_id, served_brokers

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeClusterRequest) -> DescribeClusterResponse:
    return _with_authorized_operations(broker, ctx, request, _describe(broker, ctx, request))


def _with_authorized_operations(broker: "BrokerContext", ctx: "RequestContext", request: DescribeClusterRequest,
                                response: DescribeClusterResponse) -> DescribeClusterResponse:
    """KIP-430: the cluster's operations the principal may do (0 without DESCRIBE on it), when asked."""
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(broker, ctx, ResourceType.CLUSTER) \
            if allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER) else 0
    return response


def _describe(broker: "BrokerContext", ctx: "RequestContext", request: DescribeClusterRequest
              ) -> DescribeClusterResponse:
    if broker.cluster is not None:
        view = broker.cluster.view
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=request.endpoint_type,
            cluster_id=view.cluster_id, controller_id=controller_id(view),
            brokers=[DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                     for b in brokers(served_brokers(view, broker.cluster.registration), ctx.listener)])
    host, port = broker.config.advertised_for(ctx.listener)
    node = broker.config.node_id
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   endpoint_type=request.endpoint_type, cluster_id=broker.cluster_id,
                                   controller_id=node,
                                   brokers=[DescribeClusterBroker(broker_id=node, host=host, port=port, rack=None)])
