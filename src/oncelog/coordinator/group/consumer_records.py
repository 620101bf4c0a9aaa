"""The consumer group records of ``__consumer_offsets`` (Kafka's GroupCoordinatorRecordHelpers for KIP-848 groups,
in Kafka's format: key version = record type) and their replay into :class:`ConsumerGroup` (Kafka's
GroupMetadataManager.replay overloads).

    3 ConsumerGroupMetadata             the group epoch (its tombstone deletes the group)
    4 ConsumerGroupPartitionMetadata    the subscribed topics' ids and partition counts
    5 ConsumerGroupMemberMetadata       a member's subscription and client information
    6 ConsumerGroupTargetAssignmentMetadata  the epoch of the target assignment
    7 ConsumerGroupTargetAssignmentMember    a member's target assignment
    8 ConsumerGroupCurrentMemberAssignment   a member's epochs, state, assigned and pending partitions
    16 ConsumerGroupRegularExpression   a subscription regex and the topics it resolved to

A member leaves by three tombstones in this order (Kafka's removeMember): its current assignment (the member is kept
with epoch -1 and nothing assigned), its target assignment, its metadata (the member goes). Replay is tolerant of a
record about a group or member it does not know (a compacted log may hold a tombstone for something it no longer
has): it is logged and skipped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from oncelog.protocol.coordinator_records import (
    decode_consumer_group_key,
    decode_consumer_group_value,
    encode_record,
)
from oncelog.protocol.messages.coordinator import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from oncelog.protocol.messages.coordinator import consumer_group_current_member_assignment_value as cma
from oncelog.protocol.messages.coordinator import consumer_group_member_metadata_value as mmv
from oncelog.protocol.messages.coordinator import consumer_group_partition_metadata_value as pmv
from oncelog.protocol.messages.coordinator import consumer_group_target_assignment_member_value as tav

from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    ResolvedRegex,
)
from .topic_image import TopicInfo

__all__ = [
    "current_assignment_record",
    "current_assignment_tombstone",
    "decode_key",
    "epoch_record",
    "epoch_tombstone",
    "member_record",
    "member_tombstone",
    "regex_record",
    "regex_tombstone",
    "replay",
    "subscription_metadata_record",
    "subscription_metadata_tombstone",
    "target_epoch_record",
    "target_epoch_tombstone",
    "target_record",
    "target_tombstone",
]

log = logging.getLogger("oncelog.coordinator.group")
Record = tuple[bytes, "bytes | None"]


def _sorted_partitions(assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(parts)) for t, parts in sorted(assignment.items(), key=lambda kv: str(kv[0])) if parts]


def epoch_record(group_id: str, epoch: int) -> Record:
    return (encode_record(ConsumerGroupMetadataKey(group_id=group_id), 3),
            encode_record(ConsumerGroupMetadataValue(epoch=epoch), 0))


def epoch_tombstone(group_id: str) -> Record:
    return encode_record(ConsumerGroupMetadataKey(group_id=group_id), 3), None


def subscription_metadata_record(group_id: str, metadata: Mapping[str, TopicInfo]) -> Record:
    topics = [pmv.TopicMetadata(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions)
              for _, t in sorted(metadata.items())]
    return (encode_record(ConsumerGroupPartitionMetadataKey(group_id=group_id), 4),
            encode_record(ConsumerGroupPartitionMetadataValue(topics=topics), 0))


def subscription_metadata_tombstone(group_id: str) -> Record:
    return encode_record(ConsumerGroupPartitionMetadataKey(group_id=group_id), 4), None


def member_record(group_id: str, m: ConsumerGroupMember) -> Record:
    classic = None
    if m.classic is not None:
        classic = mmv.ClassicMemberMetadata(
            session_timeout_ms=m.classic.session_timeout_ms,
            supported_protocols=[mmv.ClassicProtocol(name=n, metadata=meta) for n, meta in m.classic.protocols])
    value = ConsumerGroupMemberMetadataValue(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=sorted(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
        classic_member_metadata=classic)
    return (encode_record(ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id), 5),
            encode_record(value, 0))


def member_tombstone(group_id: str, member_id: str) -> Record:
    return encode_record(ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), 5), None


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return (encode_record(ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), 6),
            encode_record(ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch), 0))


def target_epoch_tombstone(group_id: str) -> Record:
    return encode_record(ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), 6), None


def target_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
    value = ConsumerGroupTargetAssignmentMemberValue(topic_partitions=[
        tav.TopicPartition(topic_id=t, partitions=parts) for t, parts in _sorted_partitions(assignment)])
    return (encode_record(ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), 7),
            encode_record(value, 0))


def target_tombstone(group_id: str, member_id: str) -> Record:
    return encode_record(ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), 7), None


def current_assignment_record(group_id: str, m: ConsumerGroupMember) -> Record:
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=int(m.state),
        assigned_partitions=[cma.TopicPartitions(topic_id=t, partitions=p) for t, p in _sorted_partitions(m.assigned)],
        partitions_pending_revocation=[cma.TopicPartitions(topic_id=t, partitions=p)
                                       for t, p in _sorted_partitions(m.pending_revocation)])
    return (encode_record(ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id), 8),
            encode_record(value, 0))


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return encode_record(ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), 8), None


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex) -> Record:
    value = ConsumerGroupRegularExpressionValue(topics=sorted(resolved.topics), version=resolved.version,
                                                timestamp=resolved.timestamp)
    return (encode_record(ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=regex), 16),
            encode_record(value, 0))


def regex_tombstone(group_id: str, regex: str) -> Record:
    return encode_record(ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=regex), 16), None


def decode_key(key: bytes) -> object | None:
    """The consumer group key of a ``__consumer_offsets`` record, None when it is another type."""
    try:
        decoded: object | None = decode_consumer_group_key(key)
        return decoded
    except Exception:  # noqa: BLE001 - a key shorter than its version or malformed: not ours
        return None


def _assignment(parts: list[cma.TopicPartitions] | list[tav.TopicPartition]) -> Assignment:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in parts:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def replay(groups: dict[str, ConsumerGroup], group_for: Callable[[str], ConsumerGroup], key: object,
           value: bytes | None, on_group_removed: Callable[[str], None]) -> None:
    """Apply one consumer group record. ``group_for(id)`` gives the group, creating it (and dropping a simple
    classic group of that id, as Kafka's getOrMaybeCreatePersistedConsumerGroup does); ``on_group_removed`` hears
    of a group deleted by its epoch tombstone."""
    v = None if value is None else decode_consumer_group_value(key, value)
    gid: str = key.group_id  # type: ignore[attr-defined]
    group = groups.get(gid)
    if isinstance(key, ConsumerGroupMetadataKey):
        if v is not None:
            group_for(gid).group_epoch = v.epoch
        elif group is not None:
            if group.members:
                log.warning("group %s: epoch tombstone while it has members %s; removed", gid, list(group.members))
            del groups[gid]
            on_group_removed(gid)
        return
    if isinstance(key, ConsumerGroupPartitionMetadataKey):
        if v is not None:
            group_for(gid).subscription_metadata = {
                t.topic_name: TopicInfo(t.topic_id, t.topic_name, t.num_partitions) for t in v.topics}
        elif group is not None:
            group.subscription_metadata = {}
        return
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        if v is not None:
            group_for(gid).assignment_epoch = v.assignment_epoch
        elif group is not None:
            group.assignment_epoch = -1
        return
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        if v is not None:
            group_for(gid).set_resolved_regex(key.regular_expression,
                                              ResolvedRegex(frozenset(v.topics), v.version, v.timestamp))
        elif group is not None:
            group.set_resolved_regex(key.regular_expression, None)
        return
    member_id: str = key.member_id  # type: ignore[attr-defined]
    if isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        if v is not None:
            group_for(gid).set_target(member_id, _assignment(v.topic_partitions))
        elif group is not None:
            group.set_target(member_id, None)
        return
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        if v is None:
            if group is not None and group.remove_member(member_id) is None:
                log.debug("group %s: tombstone of unknown member %s", gid, member_id)
            return
        group = group_for(gid)
        old = group.members.get(member_id) or ConsumerGroupMember(member_id)
        classic = None
        if v.classic_member_metadata is not None:
            cm = v.classic_member_metadata
            classic = ClassicMemberMetadata(cm.session_timeout_ms,
                                            tuple((p.name, bytes(p.metadata)) for p in cm.supported_protocols))
        group.update_member(old.replace(
            instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
            subscribed_topic_names=frozenset(v.subscribed_topic_names),
            subscribed_topic_regex=v.subscribed_topic_regex or "", rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor, classic=classic))
        return
    if isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            log.debug("group %s: current assignment of unknown member %s skipped", gid, member_id)
            return
        if v is None:
            group.update_member(member.replace(member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                               previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                               state=MemberState.STABLE, assigned={}, pending_revocation={}))
            return
        group.update_member(member.replace(
            member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
            state=MemberState.from_value(v.state), assigned=_assignment(v.assigned_partitions),
            pending_revocation=_assignment(v.partitions_pending_revocation)))
