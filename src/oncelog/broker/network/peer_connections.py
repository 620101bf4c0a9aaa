"""Connections from this broker to the other brokers of its cluster, one per peer, kept open between requests.

Used by the replica fetchers (Fetch from a partition's leader), the transaction marker channel (WriteTxnMarkers to
partition leaders) and the transaction verifier (AddPartitionsToTxn ``verify_only`` to a transaction's coordinator).
A peer is looked up in the current view at each (re)connection, so a broker that re-registered at another address is found again; a request that fails closes
its connection (the next one reconnects) and raises to the caller, which decides whether to retry.

Peers are reached on their inter-broker listener (``inter.broker.listener.name``) with this broker's own client
credentials (:class:`PeerLink`, :func:`peer_link`): its TLS certificate and truststore, and on a SASL listener the
``username``/``password`` of ``sasl.mechanism.inter.broker.protocol``'s JAAS config, as Kafka's brokers do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.client.connection import BrokerConnection
from oncelog.client.errors import KafkaError
from oncelog.client.security import PLAINTEXT, ClientSecurity, parse_security
from oncelog.cluster.model import NO_LEADER, BrokerInfo
from oncelog.protocol.errors import ErrorCode

from ..settings.security_checks import jaas_for

if TYPE_CHECKING:
    from ..settings.config import BrokerConfig

__all__ = ["PeerConnections", "PeerLink", "peer_link", "refused_by_peers"]


@dataclass(frozen=True)
class PeerLink:
    """How this broker reaches the others: the listener, and this broker's client security on it."""

    listener: str = "PLAINTEXT"
    security: ClientSecurity = PLAINTEXT

    def address(self, info: BrokerInfo) -> tuple[str, int] | None:
        return info.endpoint(self.listener)

    def connection(self, info: BrokerInfo, **kwargs: Any) -> BrokerConnection:
        """A (not yet connected) connection to ``info``'s inter-broker listener; KafkaError when it has none."""
        address = self.address(info)
        if address is None:
            raise KafkaError(ErrorCode.LISTENER_NOT_FOUND, f"broker {info.node_id} has no listener {self.listener} "
                             f"(inter.broker.listener.name must name a listener of every broker)")
        return BrokerConnection(*address, security=self.security, **kwargs)


def peer_link(cfg: BrokerConfig) -> PeerLink:
    """This broker's way to the others, from its settings (Kafka's inter-broker client configuration)."""
    listener = cfg.inter_broker_listener
    protocol = cfg.protocol_of(listener)
    conf: dict[str, Any] = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        def get(key: str) -> str:
            return str(cfg.for_listener(listener, key))

        conf.update({"ssl.truststore.type": "PEM", "ssl.keystore.type": "PEM",
                     "ssl.truststore.location": get("ssl.truststore.location"),
                     "ssl.truststore.certificates": get("ssl.truststore.certificates"),
                     "ssl.keystore.location": get("ssl.keystore.location"),
                     "ssl.keystore.certificate.chain": get("ssl.keystore.certificate.chain"),
                     "ssl.keystore.key": get("ssl.keystore.key"), "ssl.key.password": get("ssl.key.password"),
                     "ssl.endpoint.identification.algorithm": get("ssl.endpoint.identification.algorithm") or "none"})
    if protocol.startswith("SASL_"):
        mechanism = cfg.sasl_mechanism_inter_broker_protocol
        jaas = jaas_for(cfg, listener, mechanism)
        conf.update({"sasl.mechanism": mechanism, "sasl.username": jaas.username if jaas else "",
                     "sasl.password": jaas.password if jaas else ""})
    return PeerLink(listener, parse_security({k: v for k, v in conf.items() if v != ""}))


async def refused_by_peers(link: PeerLink, peers: list[BrokerInfo], timeout_s: float) -> str | None:
    """Whether the other brokers refuse this one's inter-broker credentials: the first live peer that answers
    decides (None: accepted, or none could be reached to tell); else what it said. A broker whose credentials
    are refused does not join (Kafka's brokers cannot register with wrong ones)."""
    if not link.security.sasl and not link.security.tls:
        return None
    for info in peers:
        try:
            conn = link.connection(info, client_id="oncelog-join-check", node_id=info.node_id,
                                   request_timeout=timeout_s, connect_timeout=timeout_s)
        except KafkaError:
            continue
        try:
            await conn.connect()
            return None
        except KafkaError as e:
            if not e.retriable():
                return f"broker {info.node_id} refused this broker on listener {link.listener}: {e.message}"
        finally:
            with contextlib.suppress(Exception):
                await conn.close()
    return None


class PeerConnections:
    def __init__(self, node_id: int, address: Callable[[int], BrokerInfo | None], request_timeout_ms: int,
                 purpose: str, link: PeerLink | None = None) -> None:
        """``address``: a node id's live registration in the current view (None: not registered); ``link``: the
        listener and credentials to use (default: PLAINTEXT)."""
        self.node_id = node_id
        self.link = link or PeerLink()
        self._address = address
        self._timeout = request_timeout_ms / 1000
        self._client_id = f"{purpose}-{node_id}"
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def connection(self, broker: int) -> BrokerConnection:
        conn = self._conns.get(broker)
        if conn is not None and conn.connected:
            return conn
        lock = self._connecting.setdefault(broker, asyncio.Lock())
        async with lock:
            conn = self._conns.get(broker)
            if conn is not None and conn.connected:
                return conn
            if conn is not None:
                self._conns.pop(broker, None)
                with contextlib.suppress(Exception):
                    await conn.close()
            info = self._address(broker) if broker != NO_LEADER else None
            if info is None:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {broker} is not registered in the cluster")
            conn = self.link.connection(info, client_id=self._client_id, node_id=broker,
                                        request_timeout=self._timeout, connect_timeout=min(self._timeout, 10.0))
            await conn.connect()
            self._conns[broker] = conn
            return conn

    async def send(self, broker: int, request: Any, version: int | None = None) -> Any:
        """Send ``request`` to ``broker`` and return its response; a failure closes the connection and raises."""
        conn = await self.connection(broker)
        try:
            return await conn.send(request, version=version)
        except Exception:
            await self.drop(broker, conn)
            raise

    async def drop(self, broker: int, conn: BrokerConnection | None = None) -> None:
        """Close the connection to ``broker`` (only if it is still ``conn``, when given): the next one reconnects."""
        current = self._conns.get(broker)
        if current is None or (conn is not None and current is not conn):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            return
        self._conns.pop(broker, None)
        with contextlib.suppress(Exception):
            await current.close()

    async def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            with contextlib.suppress(Exception):
                await conn.close()
