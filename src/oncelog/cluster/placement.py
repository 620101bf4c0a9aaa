"""Where new partitions' replicas go: CreateTopics and CreatePartitions (pure decisions over a ClusterView).

Automatic placement is Kafka's ``StripedReplicaPlacer`` (KRaft): brokers are grouped by rack (brokers without a
rack form one group of their own, as KRaft does: no error when only some brokers name a rack; the ZooKeeper-era
``AdminUtils`` refused that mix unless the CLI passed ``--disable-rack-aware``, a switch CreateTopics never had).
Each partition takes its leader from the next rack in turn and, within a rack, the next broker in turn; its
followers come one per rack from the racks after it, so a partition spans min(replication factor, racks) racks.
After as many partitions as there are brokers, the rack order and each rack's broker order are shuffled, so
partitions do not all share the same replica sets. Randomness comes from the ``rng`` the caller passes (seeded in
tests). Two changes from Kafka: a rack's leader cursor moves only when the rack gives a leader (Kafka's one cursor
per rack also moves for followers, so with 2 racks of 2 brokers and replication factor 2 every leader of a rack
lands on the same broker until the next shuffle), and a rack gives as follower its broker with the fewest replicas
so far in this placement (ties in ring order). Leaders are thus even over the brokers, to one, and replica counts
within the replication factor + 1, whenever the racks are of equal size.

Manual assignments are validated as Kafka's ``ReplicationControlManager.validateManualPartitionAssignment``:
non-empty, no duplicates, every broker alive, every partition with the same number of replicas. A new partition
starts with the ISR = its assigned replicas that are alive and not shutting down, led by the first of them,
epochs 0 (``buildPartitionRegistration``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..protocol.errors import ErrorCode
from .api_error import ApiError
from .model import BrokerInfo, ClusterView, PartitionState

__all__ = [
    "new_partitions",
    "new_topic_partitions",
    "place_replicas",
    "usable_brokers",
    "validate_manual_assignment",
]


def usable_brokers(view: ClusterView) -> list[BrokerInfo]:
    """Brokers that may take new replicas: alive and not in controlled shutdown (KRaft's ``usableBrokers``)."""
    return [b for b in view.brokers.values() if not b.shutting_down]


class _Rack:
    """One rack's brokers: a leader cursor, and a follower ring handing each broker out at most once per
    iteration epoch (one epoch per partition) from a start offset that moves every epoch."""

    def __init__(self, ids: list[int], rng: random.Random) -> None:
        self.ids = sorted(ids)
        self.leader_cursor = rng.randrange(len(self.ids))
        self.offset = rng.randrange(len(self.ids))
        self.epoch = 0

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.ids)
        self.leader_cursor = 0
        self.epoch = -1  # restart the follower ring at the next call

    def leader(self) -> int:
        broker = self.ids[self.leader_cursor % len(self.ids)]
        self.leader_cursor += 1
        return broker

    def follower(self, epoch: int, taken: Sequence[int], load: dict[int, int]) -> int:
        """The least loaded broker of this rack not yet in the partition (ties: ring order from the offset)."""
        if self.epoch != epoch:
            self.epoch = epoch
            self.offset = (self.offset + 1) % len(self.ids)
        n = len(self.ids)
        free = [self.ids[(i + self.offset) % n] for i in range(n) if self.ids[(i + self.offset) % n] not in taken]
        return min(free, key=lambda b: load[b]) if free else -1


class _Striper:
    def __init__(self, brokers: Sequence[BrokerInfo], rng: random.Random) -> None:
        by_rack: dict[str | None, list[int]] = {}
        for b in brokers:
            by_rack.setdefault(b.rack, []).append(b.node_id)
        # Racks in Kafka's order (no rack first, then by name), so the same seed gives the same placement.
        self.names = sorted(by_rack, key=lambda r: (r is not None, r or ""))
        self.racks = {name: _Rack(by_rack[name], rng) for name in self.names}
        self.rng = rng
        self.load = {b.node_id: 0 for b in brokers}  # replicas placed on each broker by this placement
        self.num_brokers = len(brokers)
        self.epoch = 0
        self.offset = rng.randrange(len(self.names))

    def place(self, replication_factor: int) -> tuple[int, ...]:
        if self.epoch == self.num_brokers and self.num_brokers > 1:
            self.rng.shuffle(self.names)
            for rack in self.racks.values():
                rack.shuffle(self.rng)
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        first_rack = self.offset
        leader = self.racks[self.names[first_rack]].leader()
        replicas = [leader]
        rack_index = self.offset
        for _ in range(replication_factor - 1):
            follower = -1
            while follower < 0:
                if rack_index == first_rack:
                    first_rack = -1  # that rack gave the leader: the first pass skips it
                else:
                    follower = self.racks[self.names[rack_index]].follower(self.epoch, replicas, self.load)
                rack_index = (rack_index + 1) % len(self.names)
            replicas.append(follower)
        for b in replicas:
            self.load[b] += 1
        self.epoch += 1
        self.offset += 1
        return tuple(replicas)


def place_replicas(brokers: Sequence[BrokerInfo], num_partitions: int, replication_factor: int,
                   rng: random.Random) -> list[tuple[int, ...]] | ApiError:
    """Replica lists (leader first) for ``num_partitions`` new partitions over ``brokers``."""
    if replication_factor <= 0:
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"Invalid replication factor {replication_factor}: the replication factor must be positive.")
    if not brokers:
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        "No broker is alive (or every one is shutting down): no replica can be placed.")
    if replication_factor > len(brokers):
        ids = ", ".join(str(b.node_id) for b in sorted(brokers, key=lambda b: b.node_id))
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"The target replication factor of {replication_factor} cannot be reached because only "
                        f"{len(brokers)} broker(s) are alive and not shutting down ({ids}); start more brokers "
                        f"or use a smaller replication factor.")
    striper = _Striper(brokers, rng)
    return [striper.place(replication_factor) for _ in range(num_partitions)]


def validate_manual_assignment(view: ClusterView, replicas: Sequence[int],
                               replication_factor: int | None) -> ApiError | None:
    """None if ``replicas`` is a valid manual assignment, else INVALID_REPLICA_ASSIGNMENT saying why."""
    if not replicas:
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in view.brokers:
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The manual partition assignment includes broker {broker}, but no such broker is "
                            f"alive (alive: {sorted(view.brokers)}).")
        if broker == previous:
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The manual partition assignment includes the broker {broker} more than once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
                        f"but this is not consistent with previous partitions, which have {replication_factor} "
                        f"replica(s).")
    return None


def _initial_state(view: ClusterView, replicas: Sequence[int]) -> PartitionState | None:
    isr = tuple(r for r in replicas if r in view.brokers and not view.brokers[r].shutting_down)
    if not isr:
        return None
    return PartitionState(replicas=tuple(replicas), isr=isr, leader=isr[0])


def _manual_states(view: ClusterView, assignments: Sequence[tuple[int, Sequence[int]]], first_index: int,
                   replication_factor: int | None) -> list[PartitionState] | ApiError:
    states: dict[int, PartitionState] = {}
    for index, replicas in assignments:
        if index in states:
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"Found multiple manual partition assignments for partition {index}")
        error = validate_manual_assignment(view, replicas, replication_factor)
        if error is not None:
            return error
        replication_factor = len(replicas)
        state = _initial_state(view, replicas)
        if state is None:
            return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"All brokers specified in the manual partition assignment for partition {index} are "
                            f"shutting down.")
        states[index] = state
    expected = range(first_index, first_index + len(states))
    if sorted(states) != list(expected):
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"partitions should be a consecutive sequence starting at {first_index}")
    return [states[i] for i in expected]


def _placed_states(view: ClusterView, num_partitions: int, replication_factor: int,
                   rng: random.Random) -> list[PartitionState] | ApiError:
    placed = place_replicas(usable_brokers(view), num_partitions, replication_factor, rng)
    if isinstance(placed, ApiError):
        return placed
    states = []
    for replicas in placed:
        state = _initial_state(view, replicas)
        assert state is not None  # placement only uses usable brokers and the leader is one of them
        states.append(state)
    return states


def new_topic_partitions(view: ClusterView, num_partitions: int, replication_factor: int,
                         assignments: Sequence[tuple[int, Sequence[int]]] = (), *, rng: random.Random,
                         default_num_partitions: int = 1,
                         default_replication_factor: int = 1) -> list[PartitionState] | ApiError:
    """The partition states of a new topic (CreateTopics; Kafka's ``ReplicationControlManager.createTopic``).

    ``num_partitions`` / ``replication_factor`` of -1 mean the broker defaults; ``assignments`` are the request's
    manual (partition index, broker ids) pairs, which require both to be -1.
    """
    if assignments:
        if replication_factor != -1:
            return ApiError(ErrorCode.INVALID_REQUEST,
                            "A manual partition assignment was specified, but replication factor was not set to -1.")
        if num_partitions != -1:
            return ApiError(ErrorCode.INVALID_REQUEST,
                            "A manual partition assignment was specified, but numPartitions was not set to -1.")
        return _manual_states(view, assignments, 0, None)
    if replication_factor < -1 or replication_factor == 0:
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        "Replication factor must be larger than 0, or -1 to use the default value.")
    if num_partitions < -1 or num_partitions == 0:
        return ApiError(ErrorCode.INVALID_PARTITIONS,
                        "Number of partitions was set to an invalid non-positive value.")
    return _placed_states(view, default_num_partitions if num_partitions == -1 else num_partitions,
                          default_replication_factor if replication_factor == -1 else replication_factor, rng)


def new_partitions(view: ClusterView, topic: str, count: int,
                   assignments: Sequence[Sequence[int]] | None = None, *,
                   rng: random.Random) -> list[PartitionState] | ApiError:
    """The states of the partitions CreatePartitions adds to grow ``topic`` to ``count`` partitions
    (Kafka's ``ReplicationControlManager.createPartitions``); the replication factor is the first partition's."""
    meta = view.topics.get(topic)
    if meta is None:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
    if meta.deleting:
        return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"The topic {topic} is queued for deletion.")
    current = meta.num_partitions
    if count == current:
        return ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        return ApiError(ErrorCode.INVALID_PARTITIONS,
                        f"The topic {topic} currently has {current} partition(s); {count} would not be an increase.")
    additional = count - current
    if assignments is not None and len(assignments) != additional:
        return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                        f"assignment(s) were specified.")
    first = view.partition(topic, 0)
    if first is None:
        return ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Invalid state: topic {topic} appears to have no partitions.")
    replication_factor = len(first.target_replicas)
    if assignments is not None:
        return _manual_states(view, list(enumerate(assignments, start=current)), current, replication_factor)
    return _placed_states(view, additional, replication_factor, rng)
