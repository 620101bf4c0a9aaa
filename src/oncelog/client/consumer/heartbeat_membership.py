"""Group membership with the KIP-848 protocol (``group.protocol=consumer``) as a pure state machine: no I/O, no
event loop, an injected clock; the driver (``consumer_group.py``) sends what this builds and applies what it
decides. Kafka's ConsumerMembershipManager, reduced to what a consumer needs::

    UNSUBSCRIBED --subscribe--> JOINING --heartbeat answered--> STABLE
    STABLE --an assignment other than what it owns--> RECONCILING --revoked, then assigned (in poll)-->
        ACKNOWLEDGING --the heartbeat reporting it answered--> STABLE
    any --UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH--> FENCED (its partitions are lost) --> JOINING (epoch 0)
    any --leave--> LEAVING --answered--> UNSUBSCRIBED

The member id is the client's own (a random UUID, KIP-1082, kept across rejoins). Every heartbeat is a full one
(rebalance timeout, subscription, server assignor and owned partitions set), which the protocol allows: the
coordinator then answers with the assignment every time, and a lost answer costs nothing. The broker chooses the
assignment (its ``uniform`` or ``range`` assignor, ``group.remote.assignor``), revocation comes before assignment
on the broker's side too, and the broker tells how often to heartbeat.

Errors, as Kafka's consumer handles them: COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR: look the coordinator up
again; COORDINATOR_LOAD_IN_PROGRESS: retry after the backoff; UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: the
partitions are lost, rejoin with epoch 0; UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR,
INVALID_REGULAR_EXPRESSION, INVALID_REQUEST, authorization errors, UNSUPPORTED_VERSION: fatal.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Callable, Iterable

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest, TopicPartitions
from oncelog.protocol.messages.consumer_group_heartbeat_response import ConsumerGroupHeartbeatResponse

from ..errors import KafkaError
from .membership import Step

__all__ = ["CgState", "HeartbeatMembership", "IdPartition"]

LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
IdPartition = tuple[uuid.UUID, int]

_COORDINATOR_LOST = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_FENCED = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH})
_FATAL_HINTS: dict[int, str] = {
    ErrorCode.UNRELEASED_INSTANCE_ID: "another consumer still holds this group.instance.id; stop it (or wait for "
                                      "its session to expire) before starting this one",
    ErrorCode.FENCED_INSTANCE_ID: "another consumer uses the same group.instance.id; give each consumer its own",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group has group.consumer.max.size members already",
    ErrorCode.UNSUPPORTED_ASSIGNOR: "group.remote.assignor names an assignor the broker does not have "
                                    "(group.consumer.assignors)",
    ErrorCode.INVALID_REGULAR_EXPRESSION: "a ^pattern of the subscription is not a valid regular expression",
    ErrorCode.GROUP_ID_NOT_FOUND: "the group is a classic group the broker cannot convert; use "
                                  "group.protocol=classic, or let its classic members leave first",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "this client may not use the group",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "this client may not describe a subscribed topic",
    ErrorCode.UNSUPPORTED_VERSION: "the broker does not serve the consumer group protocol (KIP-848); use "
                                   "group.protocol=classic",
    ErrorCode.INVALID_REQUEST: "the broker refused the heartbeat as invalid",
}


class CgState(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"  # a heartbeat with epoch 0 to send / sent
    RECONCILING = "reconciling"  # an assignment to apply (in poll)
    ACKNOWLEDGING = "acknowledging"  # applied: the next heartbeat reports it
    STABLE = "stable"
    LEAVING = "leaving"


def new_member_id() -> str:
    """A random member id, as librdkafka makes it (a UUID in URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class HeartbeatMembership:
    def __init__(self, group_id: str, *, group_instance_id: str | None = None, rebalance_timeout_ms: int = 300_000,
                 server_assignor: str | None = None, retry_backoff_ms: int = 100,
                 clock: Callable[[], float]) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.retry_backoff_ms = retry_backoff_ms
        self.clock = clock
        self.member_id = new_member_id()
        self.member_epoch = 0
        self.state = CgState.UNSUBSCRIBED
        self.heartbeat_interval_ms = 5000  # until the coordinator says
        self.names: list[str] = []
        self.regex: str | None = None
        self.owned: set[IdPartition] = set()
        #: the assignment the coordinator gave, not applied yet (RECONCILING)
        self.target: set[IdPartition] | None = None
        self.lost = False  # fenced: the owned partitions are lost, not revoked
        self._next_heartbeat = 0.0
        self._last_answer = 0.0

    # ------------------------------------------------------------------ queries
    @property
    def generation_id(self) -> int:
        """The member epoch: what commits and transactional offset commits carry."""
        return self.member_epoch

    @property
    def stable(self) -> bool:
        return self.state in (CgState.STABLE, CgState.ACKNOWLEDGING, CgState.RECONCILING) and self.member_epoch > 0

    @property
    def active(self) -> bool:
        return self.state not in (CgState.UNSUBSCRIBED, CgState.LEAVING)

    def heartbeat_delay(self) -> float:
        """Seconds until the next heartbeat is due (<= 0: now)."""
        return self._next_heartbeat - self.clock()

    # ------------------------------------------------------------------ subscription
    def subscribe(self, names: Iterable[str], regex: str | None) -> None:
        """The subscription (topic names, one regex or None); sent with the next heartbeat, at once."""
        self.names, self.regex = sorted(set(names)), regex
        if self.state is CgState.UNSUBSCRIBED:
            self.state = CgState.JOINING
            self.member_epoch = 0
        self.heartbeat_now()

    def request_rejoin(self, reason: str) -> None:
        """A changed subscription: every heartbeat carries it, so only heartbeat at once."""
        self.heartbeat_now()

    def heartbeat_now(self) -> None:
        self._next_heartbeat = self.clock()

    # ------------------------------------------------------------------ heartbeat
    def heartbeat_request(self) -> ConsumerGroupHeartbeatRequest:
        """A full heartbeat with the member's epoch and what it owns now."""
        by_topic: dict[uuid.UUID, list[int]] = {}
        for t, p in sorted(self.owned):
            by_topic.setdefault(t, []).append(p)
        if self.state is CgState.ACKNOWLEDGING:
            self.state = CgState.STABLE  # this heartbeat reports the reconciled assignment
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            instance_id=self.group_instance_id, rebalance_timeout_ms=self.rebalance_timeout_ms,
            subscribed_topic_names=list(self.names), subscribed_topic_regex=self.regex or "",
            server_assignor=self.server_assignor,
            topic_partitions=[TopicPartitions(topic_id=t, partitions=ps) for t, ps in by_topic.items()])

    def leave_request(self) -> ConsumerGroupHeartbeatRequest | None:
        """The heartbeat leaving the group (a static member leaves for a while: epoch -2), None when not in it."""
        if self.member_epoch <= 0 and self.state is not CgState.STABLE:
            self.state = CgState.UNSUBSCRIBED
            return None
        epoch = STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        self.state = CgState.LEAVING
        return ConsumerGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                                             instance_id=self.group_instance_id)

    def on_heartbeat_failure(self) -> None:
        self._next_heartbeat = self.clock() + self.retry_backoff_ms / 1000

    def on_heartbeat_response(self, resp: ConsumerGroupHeartbeatResponse) -> Step:
        now = self.clock()
        code = resp.error_code
        if self.state is CgState.LEAVING:
            self.state = CgState.UNSUBSCRIBED
            self.member_epoch = 0
            self.owned = set()
            self.target = None
            return Step.OK
        if code in _COORDINATOR_LOST:
            self._next_heartbeat = now + self.retry_backoff_ms / 1000
            return Step.FIND_COORDINATOR
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._next_heartbeat = now + self.retry_backoff_ms / 1000
            return Step.RETRY
        if code in _FENCED:
            self.fence()
            return Step.REJOIN
        if code:
            hint = _FATAL_HINTS.get(code, "")
            raise KafkaError(code, f"group {self.group_id!r}: ConsumerGroupHeartbeat failed: "
                                   f"{resp.error_message or KafkaError(code).name}" + (f"; {hint}" if hint else ""),
                             retriable=False)
        if resp.member_id:
            self.member_id = resp.member_id
        self.member_epoch = resp.member_epoch
        if resp.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = resp.heartbeat_interval_ms
        self._last_answer = now
        self._next_heartbeat = now + self.heartbeat_interval_ms / 1000
        if resp.assignment is not None:
            target = {(tp.topic_id, p) for tp in resp.assignment.topic_partitions for p in tp.partitions}
            if target != self.owned:
                self.target = target
                self.state = CgState.RECONCILING
                return Step.OK
            self.target = None
            if self.state is CgState.RECONCILING:  # the coordinator is back to what the member owns
                self.state = CgState.STABLE
        if self.state is CgState.JOINING:
            self.state = CgState.STABLE
        return Step.OK

    def fence(self) -> None:
        """UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: what it owns is lost; rejoin at once with epoch 0."""
        if self.owned:
            self.lost = True
        self.owned = set()
        self.target = None
        self.member_epoch = 0
        self.state = CgState.JOINING
        self.heartbeat_now()

    def take_lost(self) -> bool:
        lost, self.lost = self.lost, False
        return lost

    def reconciled(self, owned: set[IdPartition], applied: set[IdPartition]) -> None:
        """The driver revoked and assigned (callbacks done) towards ``applied``: ``owned`` is what the member
        consumes now. A newer assignment that came meanwhile stays to be applied."""
        self.owned = set(owned)
        if self.target is None or self.target == applied:
            self.target = None
            self.state = CgState.ACKNOWLEDGING
        self.heartbeat_now()

    def on_commit_error(self, code: int) -> None:
        """An OffsetCommit answered STALE_MEMBER_EPOCH: heartbeat now to learn the epoch, then commit again."""
        if code == ErrorCode.STALE_MEMBER_EPOCH:
            self.heartbeat_now()
