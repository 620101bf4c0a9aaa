"""Group membership (classic protocol) as a pure state machine: no I/O, no event loop, an injected clock.

Kafka's ``AbstractCoordinator`` split in two: this object builds the JoinGroup / SyncGroup / Heartbeat /
LeaveGroup requests and digests their responses into a :class:`Step` telling the driver (``group.py``) what to do
next; the driver only sends requests and sleeps. So every transition and error path is unit-testable.

Life of a member (Kafka's AbstractCoordinator.MemberState)::

    UNJOINED --join_request--> JOINING --on_join_response(NONE)--> SYNCING (leader assigns first)
    SYNCING --on_sync_response(NONE)--> STABLE --heartbeat REBALANCE_IN_PROGRESS--> (rejoin) JOINING ...

Errors, as Kafka's consumer handles them:

* MEMBER_ID_REQUIRED (KIP-394): the coordinator handed out a member id; join again at once with it.
* REBALANCE_IN_PROGRESS: join again, keeping member id and generation (the group is re-forming).
* UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION: the coordinator forgot us or moved on: reset member id and generation,
  the partitions are *lost* (not revoked: someone else may own them already), join again.
* COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR (or no heartbeat answered within the session timeout): look the
  coordinator up again, then rejoin. COORDINATOR_LOAD_IN_PROGRESS: retry after the backoff.
* FENCED_INSTANCE_ID (another process uses our group.instance.id), INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_
  TIMEOUT, GROUP_MAX_SIZE_REACHED, authorization errors: fatal, raised as :class:`KafkaError`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.heartbeat_request import HeartbeatRequest
from oncelog.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from oncelog.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from oncelog.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment

from ..errors import KafkaError

__all__ = ["PROTOCOL_TYPE", "GroupMembership", "JoinResult", "MemberState", "Step"]

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1

_COORDINATOR_LOST = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_GENERATION_LOST = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION})
_FATAL_HINTS: dict[int, str] = {
    ErrorCode.FENCED_INSTANCE_ID: "another consumer uses the same group.instance.id; give each consumer its own",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "the group's members share no partition.assignment.strategy (or the "
                                           "group is not a consumer group); configure a common assignor",
    ErrorCode.INVALID_SESSION_TIMEOUT: "session.timeout.ms is outside the broker's group.min/max.session."
                                       "timeout.ms",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group has group.max.size members already",
    ErrorCode.INVALID_GROUP_ID: "group.id is not valid",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "this client may not use the group",
    ErrorCode.UNSUPPORTED_VERSION: "the broker does not support this request version",
}


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"  # JoinGroup sent
    SYNCING = "syncing"  # JoinGroup answered, SyncGroup to send / sent
    STABLE = "stable"  # assignment received; heartbeating


class Step(enum.Enum):
    """What the driver does after a response."""

    OK = "ok"  # nothing special (heartbeat answered, ...)
    SYNC = "sync"  # JoinGroup succeeded: (leader: compute assignments,) send SyncGroup
    DONE = "done"  # SyncGroup succeeded: apply the assignment
    REJOIN = "rejoin"  # send JoinGroup again now
    RETRY = "retry"  # send the same kind of request again after retry.backoff.ms
    FIND_COORDINATOR = "find_coordinator"  # the coordinator moved or died: look it up, then rejoin


@dataclass(slots=True)
class JoinResult:
    step: Step
    is_leader: bool = False
    protocol: str | None = None
    #: leader only: (member id, group instance id, subscription metadata) of every member
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


class GroupMembership:
    """One member's view of its group. ``clock()`` returns seconds (monotonic); times below are in its unit."""

    def __init__(self, group_id: str, *, group_instance_id: str | None = None, session_timeout_ms: int = 45000,
                 rebalance_timeout_ms: int = 300000, heartbeat_interval_ms: int = 3000,
                 retry_backoff_ms: int = 100, clock: Callable[[], float]) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout = session_timeout_ms / 1000
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.clock = clock
        self.state = MemberState.UNJOINED
        self.generation_id = NO_GENERATION
        self.member_id = ""
        self.protocol: str | None = None
        self.leader_id = ""
        self.rejoin_needed = True
        self.rejoin_reason = "the consumer subscribed"
        #: set when the generation was reset while we held one: the owned partitions are lost, not revoked
        self.lost = False
        now = clock()
        self._next_heartbeat = now
        self._last_heartbeat_ok = now
        self._heartbeat_in_flight = False
        self._last_poll = now

    # ------------------------------------------------------------------ queries

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def stable(self) -> bool:
        return self.state is MemberState.STABLE and not self.rejoin_needed

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    def describe(self) -> str:
        return (f"group {self.group_id!r} member {self.member_id or '(none yet)'} generation {self.generation_id} "
                f"({self.state.value})")

    # ------------------------------------------------------------------ state changes

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            self.rejoin_reason = reason
        self.rejoin_needed = True

    def reset_generation(self, reason: str) -> None:
        """Forget member id and generation (Kafka's resetGenerationOnResponseError / on leave)."""
        if self.generation_id != NO_GENERATION or self.state is MemberState.STABLE:
            self.lost = True
        self.generation_id = NO_GENERATION
        self.member_id = ""
        self.protocol = None
        self.leader_id = ""
        self.state = MemberState.UNJOINED
        self.request_rejoin(reason)

    def take_lost(self) -> bool:
        """Whether partitions were lost since the last call (the driver then calls on_lost, not on_revoke)."""
        lost, self.lost = self.lost, False
        return lost

    def coordinator_lost(self, reason: str) -> None:
        """The coordinator must be looked up again; a member that was mid-rebalance must rejoin."""
        self._heartbeat_in_flight = False
        if self.state is not MemberState.STABLE:
            self.state = MemberState.UNJOINED
            self.request_rejoin(reason)

    def _fatal(self, code: int, what: str) -> KafkaError:
        err = KafkaError(code)
        hint = _FATAL_HINTS.get(code)
        return KafkaError(code, f"{what} for {self.describe()} failed: {err.message}"
                          + (f" ({hint})" if hint else ""), retriable=False)

    # ------------------------------------------------------------------ join

    def join_request(self, protocols: Sequence[tuple[str, bytes]]) -> JoinGroupRequest:
        if not protocols:
            raise ValueError("a member must offer at least one assignment protocol")
        self.state = MemberState.JOINING
        return JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocols=[JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
            reason=self.rejoin_reason)

    def on_join_response(self, error_code: int, *, generation_id: int = NO_GENERATION, member_id: str = "",
                         leader: str = "", protocol_type: str | None = None, protocol_name: str | None = None,
                         members: Sequence[tuple[str, str | None, bytes]] = ()) -> JoinResult:
        code = error_code
        if code == ErrorCode.NONE:
            if protocol_type not in (None, "", PROTOCOL_TYPE):
                self.state = MemberState.UNJOINED
                raise self._fatal(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup")
            self.generation_id, self.member_id, self.leader_id = generation_id, member_id, leader
            self.protocol = protocol_name
            self.state = MemberState.SYNCING
            leading = self.is_leader
            return JoinResult(Step.SYNC, leading, protocol_name, list(members) if leading else [])
        self.state = MemberState.UNJOINED
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = member_id
            self.rejoin_reason = "the coordinator required a member id (KIP-394)"
            return JoinResult(Step.REJOIN)
        if code in _GENERATION_LOST:
            self.reset_generation(f"JoinGroup: {KafkaError(code).name}")
            return JoinResult(Step.REJOIN)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return JoinResult(Step.REJOIN)
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return JoinResult(Step.RETRY)
        if code in _COORDINATOR_LOST:
            return JoinResult(Step.FIND_COORDINATOR)
        raise self._fatal(code, "JoinGroup")

    # ------------------------------------------------------------------ sync

    def sync_request(self, assignments: dict[str, bytes] | None = None) -> SyncGroupRequest:
        """SyncGroup; ``assignments`` (member id -> encoded assignment) from the leader only."""
        if self.state is not MemberState.SYNCING:
            raise RuntimeError(f"SyncGroup in state {self.state.value}")
        return SyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE, protocol_name=self.protocol,
            assignments=[SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()])

    def on_sync_response(self, error_code: int, protocol_name: str | None = None) -> Step:
        code = error_code
        if code == ErrorCode.NONE:
            if protocol_name is not None and self.protocol is not None and protocol_name != self.protocol:
                self.state = MemberState.UNJOINED
                raise self._fatal(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "SyncGroup")
            self.state = MemberState.STABLE
            self.rejoin_needed = False
            now = self.clock()
            self._last_heartbeat_ok = now
            self._next_heartbeat = now + self.heartbeat_interval
            self._heartbeat_in_flight = False
            return Step.DONE
        self.state = MemberState.UNJOINED
        self.request_rejoin(f"SyncGroup: {KafkaError(code).name}")
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return Step.REJOIN
        if code in _GENERATION_LOST:
            self.reset_generation(f"SyncGroup: {KafkaError(code).name}")
            return Step.REJOIN
        if code in _COORDINATOR_LOST:
            return Step.FIND_COORDINATOR
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return Step.RETRY
        raise self._fatal(code, "SyncGroup")

    # ------------------------------------------------------------------ heartbeat

    def heartbeat_delay(self) -> float:
        """Seconds until the next heartbeat is due (0: now). Only a STABLE member heartbeats."""
        if self.state is not MemberState.STABLE or self._heartbeat_in_flight:
            return self.heartbeat_interval
        return max(0.0, self._next_heartbeat - self.clock())

    def session_expired(self) -> bool:
        """No heartbeat answered for a whole session timeout: the coordinator is presumed gone."""
        return self.state is MemberState.STABLE and self.clock() - self._last_heartbeat_ok > self.session_timeout

    def heartbeat_request(self) -> HeartbeatRequest:
        self._heartbeat_in_flight = True
        self._next_heartbeat = self.clock() + self.heartbeat_interval
        return HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
                                group_instance_id=self.group_instance_id)

    def on_heartbeat_failure(self) -> None:
        """No response (connection error, timeout): try again after the backoff."""
        self._heartbeat_in_flight = False
        self._next_heartbeat = self.clock() + self.retry_backoff

    def on_heartbeat_response(self, error_code: int, sent_generation: int | None = None) -> Step:
        self._heartbeat_in_flight = False
        code = error_code
        if sent_generation is not None and sent_generation != self.generation_id:
            return Step.OK  # answer to a heartbeat of an older generation: meaningless now
        if code == ErrorCode.NONE:
            self._last_heartbeat_ok = self.clock()
            return Step.OK
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._last_heartbeat_ok = self.clock()
            if self.state is MemberState.STABLE:
                self.request_rejoin("the group is rebalancing (heartbeat)")
                return Step.REJOIN
            return Step.OK
        if code in _GENERATION_LOST:
            self.reset_generation(f"heartbeat: {KafkaError(code).name}")
            return Step.REJOIN
        if code in _COORDINATOR_LOST:
            self.coordinator_lost(f"heartbeat: {KafkaError(code).name}")
            self._next_heartbeat = self.clock() + self.retry_backoff
            return Step.FIND_COORDINATOR
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._next_heartbeat = self.clock() + self.retry_backoff
            return Step.RETRY
        raise self._fatal(code, "Heartbeat")

    # ------------------------------------------------------------------ poll / commit / leave

    def on_poll(self) -> None:
        self._last_poll = self.clock()

    def poll_timeout_expired(self, max_poll_interval_ms: int) -> bool:
        """The application did not call poll() within max.poll.interval.ms (while a member)."""
        return (self.state is not MemberState.UNJOINED
                and self.clock() - self._last_poll > max_poll_interval_ms / 1000)

    def on_commit_error(self, error_code: int) -> None:
        """Membership consequences of an OffsetCommit error (Kafka's OffsetCommitResponseHandler)."""
        if error_code in _GENERATION_LOST:
            self.reset_generation(f"OffsetCommit: {KafkaError(error_code).name}")
        elif error_code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("OffsetCommit: the group is rebalancing")

    def leave_request(self, reason: str) -> LeaveGroupRequest | None:
        """LeaveGroup for a dynamic member that has a member id (a static member never leaves on its own: its
        partitions wait for it until session.timeout.ms); either way the generation is reset."""
        req = None
        if not self.is_static and self.member_id and self.state is not MemberState.UNJOINED:
            req = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id,
                                    members=[MemberIdentity(member_id=self.member_id, reason=reason)])
        self.reset_generation(reason)
        return req
