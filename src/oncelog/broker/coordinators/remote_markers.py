"""The transaction coordinator's marker channel in a cluster (Kafka's ``TransactionMarkerChannelManager``).

A transaction's partitions are led by any broker of the cluster. The coordinator's :class:`MarkerDriver` asks
:meth:`ClusterMarkerChannel.leader` for each partition's current leader (from this broker's view of etcd) and sends
each leader one WriteTxnMarkers request for its partitions (the driver gathers the markers of one loop iteration per
destination broker). Markers for partitions this broker leads are written here, in the call itself
(``LocalMarkerWriter``); the others go over one connection per destination broker, kept open between requests.

What the answers mean is the driver's business (``oncelog.coordinator.transaction.markers``): a leader that moved
answers NOT_LEADER_OR_FOLLOWER and the partition is sent again after looking its leader up anew; a request that
fails as a whole (the broker is gone, the connection closed, no answer within ``request.timeout.ms``) is retried
for all its partitions; TRANSACTION_COORDINATOR_FENCED means a newer coordinator exists and this one stops. The
receiving leader fences each marker by its coordinator epoch (the leader epoch of the ``__transaction_state``
partition this coordinator leads), so a marker of a coordinator that lost its partition during a pause never ends
a transaction a newer coordinator decided.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from oncelog.cluster.model import ClusterView, TopicPartition
from oncelog.coordinator.transaction import MarkerResults, TxnMarker
from oncelog.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from oncelog.protocol.messages.write_txn_markers_response import WriteTxnMarkersResponse

from .markers import LocalMarkerWriter
from ..network.peer_connections import PeerConnections, PeerLink

__all__ = ["ClusterMarkerChannel"]

log = logging.getLogger("oncelog.broker.coordinators.markers")


class ClusterMarkerChannel:
    """Markers to the current leader of each partition: written here, or sent as WriteTxnMarkers."""

    def __init__(self, writer: LocalMarkerWriter, node_id: int, view: Callable[[], ClusterView],
                 request_timeout_ms: int, link: PeerLink | None = None) -> None:
        self.writer = writer
        self.local_node = node_id
        self._view = view
        self._peers = PeerConnections(node_id, lambda n: view().address(n), request_timeout_ms, "txn-markers",
                                      link)
        self.requests_sent = 0

    def leader(self, tp: TopicPartition) -> int | None:
        view = self._view()
        meta = view.topics.get(tp[0])
        if meta is None or meta.deleting:
            return None  # the topic is gone: no marker needed
        state = view.partition(*tp)
        if state is None:
            return None
        return state.leader  # NO_LEADER while none is elected: the send fails and the driver retries

    def send(self, broker: int, markers: Sequence[TxnMarker]) -> Awaitable[MarkerResults]:
        if broker == self.local_node:
            return self.writer.write(markers)
        return self._send_remote(broker, list(markers))

    async def _send_remote(self, broker: int, markers: list[TxnMarker]) -> MarkerResults:
        request = WriteTxnMarkersRequest(markers=[
            WritableTxnMarker(producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                              transaction_result=m.commit, coordinator_epoch=m.coordinator_epoch,
                              topics=_topics(m.partitions))
            for m in markers])
        self.requests_sent += 1
        response: WriteTxnMarkersResponse = await self._peers.send(broker, request)
        results: MarkerResults = []
        for i, m in enumerate(markers):
            answers: dict[TopicPartition, int] = {}
            if i < len(response.markers) and response.markers[i].producer_id == m.producer_id:
                for t in response.markers[i].topics:
                    for p in t.partitions:
                        answers[(t.name, p.partition_index)] = p.error_code
            results.append(answers)  # a partition missing from the answer is retried (UNKNOWN_SERVER_ERROR)
        return results

    async def close(self) -> None:
        await self._peers.close()


def _topics(partitions: Sequence[TopicPartition]) -> list[WritableTxnMarkerTopic]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return [WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
