"""The ``__consumer_offsets`` records the group coordinator writes (Kafka's GroupCoordinatorRecordHelpers).

Offsets: key OffsetCommitKey v1 (group, topic, partition); value OffsetCommitValue v3 (with leader epoch), or v1
when the commit carries an explicit expire timestamp (OffsetCommit v2-4 retention_time_ms). A null value is a
tombstone. Groups: key GroupMetadataKey v2; value GroupMetadataValue v3 (members with group.instance.id and the
state timestamp). :func:`group_from_record` is the group a GroupMetadata record describes (loading).
"""

from __future__ import annotations

from oncelog.protocol.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offsets_key,
    decode_offsets_value,
    encode_record,
)

from .group import ClassicGroup, Member
from .state import GroupState

__all__ = [
    "GROUP_VALUE_VERSION",
    "decode_key",
    "decode_value",
    "group_record",
    "group_tombstone",
    "offset_record",
    "offset_tombstone",
    "group_from_record",
]

Record = tuple[bytes, "bytes | None"]
GROUP_VALUE_VERSION = 3


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return encode_record(OffsetCommitKey(group=group, topic=topic, partition=partition), 1)


def offset_record(group: str, topic: str, partition: int, offset: int, leader_epoch: int, metadata: str,
                  commit_timestamp: int, expire_timestamp: int = -1) -> Record:
    value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                              commit_timestamp=commit_timestamp, expire_timestamp=expire_timestamp)
    version = 1 if expire_timestamp >= 0 else 3
    return offset_key(group, topic, partition), encode_record(value, version)


def offset_tombstone(group: str, topic: str, partition: int) -> Record:
    return offset_key(group, topic, partition), None


def group_key(group: str) -> bytes:
    return encode_record(GroupMetadataKey(group=group), 2)


def group_record(group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> Record:
    """The group as it stands (generation, protocol, leader, members with subscription and assignment)."""
    members = []
    for m in group.members.values():
        assignment = assignments.get(m.member_id, b"") if assignments is not None else m.assignment
        members.append(MemberMetadata(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                      client_id=m.client_id, client_host=m.client_host,
                                      rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
                                      subscription=m.metadata(group.protocol_name), assignment=assignment))
    value = GroupMetadataValue(protocol_type=group.protocol_type or "", generation=group.generation,
                               protocol=group.protocol_name, leader=group.leader_id,
                               current_state_timestamp=group.state_timestamp, members=members)
    return group_key(group.group_id), encode_record(value, GROUP_VALUE_VERSION)


def group_tombstone(group_id: str) -> Record:
    return group_key(group_id), None


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    try:
        return decode_offsets_key(key)
    except Exception:  # noqa: BLE001 - another record type (a newer consumer-group record): not for the classic coordinator
        return None


def decode_value(key: OffsetCommitKey | GroupMetadataKey, value: bytes) -> OffsetCommitValue | GroupMetadataValue:
    return decode_offsets_value(key, value)


def group_from_record(group_id: str, v: GroupMetadataValue) -> ClassicGroup:
    """The group a GroupMetadata record describes: Stable with its members and their assignments, or Empty."""
    group = ClassicGroup(group_id, state=GroupState.STABLE if v.members else GroupState.EMPTY,
                         state_timestamp=v.current_state_timestamp, generation=v.generation,
                         protocol_type=v.protocol_type or None, protocol_name=v.protocol or None,
                         leader_id=v.leader or None)
    for mm in v.members:
        rebalance = mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout
        member = Member(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host, rebalance,
                        mm.session_timeout, v.protocol_type, [(v.protocol or "", bytes(mm.subscription))],
                        assignment=bytes(mm.assignment))
        group.members[member.member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member.member_id
    return group
