"""What the admin APIs see of consumer groups: ConsumerGroupDescribe (Kafka's ConsumerGroup.asDescribedGroup),
DescribeGroups and ListGroups (a consumer group shown the way a classic consumer group is: protocol type
``consumer``, its assignor as protocol, each member's subscription and assignment in the consumer protocol's
embedded format, so tools written for classic groups keep working), DeleteGroups (only an Empty group; Kafka's
ConsumerGroup.createGroupTombstoneRecords), and the member epoch checks of OffsetCommit, TxnOffsetCommit and
OffsetFetch (Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch).
"""

from __future__ import annotations

from oncelog.protocol.assignors import Assignment as ProtocolAssignment
from oncelog.protocol.assignors import Subscription, encode_assignment, encode_subscription
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages import consumer_group_describe_response as cgd
from oncelog.protocol.messages.describe_groups_response import DescribedGroup, DescribedGroupMember
from oncelog.protocol.messages.list_groups_response import ListedGroup

from . import consumer_records as rec
from .consumer_group import Assignment, ConsumerGroup, ConsumerGroupMember, ConsumerGroupState, GroupError
from .consumer_membership import ConsumerGroupManager

__all__ = ["delete_group_records", "tombstone_records", "describe", "describe_classic", "list_groups", "validate_offset_commit",
           "validate_offset_fetch"]

Record = tuple[bytes, "bytes | None"]
CONSUMER = "consumer"


def _names(mgr: ConsumerGroupManager, assignment: Assignment) -> list[tuple[str, list[int]]]:
    """(topic name, partitions) of an assignment, topics the image no longer has left out (as Kafka does)."""
    out = []
    for topic_id, parts in assignment.items():
        info = mgr.topics.by_id(topic_id)
        if info is not None and parts:
            out.append((info.name, sorted(parts)))
    return sorted(out)


def _describe_assignment(mgr: ConsumerGroupManager, assignment: Assignment) -> cgd.Assignment:
    tps = []
    for topic_id, parts in sorted(assignment.items(), key=lambda kv: str(kv[0])):
        info = mgr.topics.by_id(topic_id)
        if info is not None and parts:
            tps.append(cgd.TopicPartitions(topic_id=topic_id, topic_name=info.name, partitions=sorted(parts)))
    return cgd.Assignment(topic_partitions=tps)


def describe(mgr: ConsumerGroupManager, group_id: str) -> cgd.DescribedGroup:
    """ConsumerGroupDescribe of one group (GROUP_ID_NOT_FOUND for no group, or a classic one)."""
    group = mgr.groups.get(group_id)
    if group is None:
        return cgd.DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                  error_message=f"Group {group_id} not found." if group_id not in mgr.classic_groups
                                  else f"Group {group_id} is not a consumer group.")
    members = [cgd.Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                          member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                          subscribed_topic_names=sorted(m.subscribed_topic_names),
                          subscribed_topic_regex=m.subscribed_topic_regex or None,
                          assignment=_describe_assignment(mgr, m.assigned),
                          target_assignment=_describe_assignment(mgr, group.target_of(m.member_id)))
               for m in group.members.values()]
    return cgd.DescribedGroup(group_id=group_id, group_state=group.state.display_name,
                              group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                              assignor_name=group.preferred_server_assignor() or mgr.default_assignor,
                              members=members)


def describe_classic(mgr: ConsumerGroupManager, group: ConsumerGroup) -> DescribedGroup:
    """DescribeGroups of a consumer group: protocol type ``consumer``, the assignor as protocol, each member's
    subscription and current assignment in the embedded consumer protocol (Kafka's ClassicGroup view of it)."""
    members = []
    for m in group.members.values():
        topics = sorted(mgr.member_topics(m, group.resolved_regexes))
        assigned = [(t, p) for t, parts in _names(mgr, m.assigned) for p in parts]
        members.append(DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id, client_host=m.client_host,
            member_metadata=encode_subscription(Subscription(topics, rack_id=m.rack_id)),
            member_assignment=encode_assignment(ProtocolAssignment(assigned))))
    return DescribedGroup(error_code=0, group_id=group.group_id, group_state=group.state.display_name,
                          protocol_type=CONSUMER,
                          protocol_data=group.preferred_server_assignor() or mgr.default_assignor, members=members)


def list_groups(mgr: ConsumerGroupManager, states: set[str] | None) -> list[ListedGroup]:
    """ListGroups entries of the consumer groups (``states``: lower-case state names to keep, None for all)."""
    out = []
    for g in mgr.groups.values():
        state = g.state
        if states is None or state.display_name.lower() in states:
            out.append(ListedGroup(group_id=g.group_id, protocol_type=CONSUMER, group_state=state.display_name,
                                   group_type=CONSUMER))
    return out


def delete_group_records(group: ConsumerGroup) -> list[Record]:
    """The tombstones deleting a consumer group; NON_EMPTY_GROUP unless it is Empty."""
    if group.state is not ConsumerGroupState.EMPTY:
        raise GroupError(ErrorCode.NON_EMPTY_GROUP)
    return tombstone_records(group)


def tombstone_records(group: ConsumerGroup) -> list[Record]:
    """Every tombstone of a consumer group and its members (Kafka's createGroupTombstoneRecords)."""
    gid = group.group_id
    records: list[Record] = []
    records += [rec.current_assignment_tombstone(gid, mid) for mid in group.members]
    records += [rec.target_tombstone(gid, mid) for mid in group.members]
    records.append(rec.target_epoch_tombstone(gid))
    records += [rec.member_tombstone(gid, mid) for mid in group.members]
    records += [rec.regex_tombstone(gid, regex) for regex in group.resolved_regexes]
    records.append(rec.subscription_metadata_tombstone(gid))
    records.append(rec.epoch_tombstone(gid))
    return records


def _check_epoch(member: ConsumerGroupMember, received: int) -> None:
    if received != member.member_epoch:
        if member.uses_classic_protocol:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION, f"The received generation id {received} does not match "
                             f"the expected member epoch {member.member_epoch}.")
        raise GroupError(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {received} does not match the "
                         f"expected member epoch {member.member_epoch}.")


def validate_offset_commit(group: ConsumerGroup, member_id: str, instance_id: str | None, epoch: int,
                           transactional: bool, version: int, partitions: list[tuple[str, int]] | None = None) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit: a commit without a member (epoch < 0) only into an Empty group;
    a member of the KIP-848 protocol commits with OffsetCommit v9+ and its current member epoch
    (STALE_MEMBER_EPOCH otherwise; TxnOffsetCommit gets ILLEGAL_GENERATION, KIP-447, and may name no member).

    An older epoch is accepted too when every partition committed (``partitions``) has been owned by the member
    since that epoch or before: KIP-1251's rule, assignment epoch <= request epoch <= member epoch (Kafka 4.3). A
    member whose epoch moved on while its commit was in flight (it got a partition, or revoked one it was asked
    to) commits what it still owns without a STALE_MEMBER_EPOCH; a member that lost the partition is refused."""
    if epoch < 0 and not group.members:
        return
    if transactional and epoch == -1 and not member_id and instance_id is None:
        return
    member = group.member_or_error(member_id)
    if not transactional and not member.uses_classic_protocol and version < 9:
        raise GroupError(ErrorCode.UNSUPPORTED_VERSION,
                         "OffsetCommit version 9 or above must be used by members using the modern group protocol")
    if 0 <= epoch < member.member_epoch and partitions and _owned_since(group, member, epoch, partitions):
        return
    try:
        _check_epoch(member, epoch)
    except GroupError as e:
        if transactional and e.code == ErrorCode.STALE_MEMBER_EPOCH:
            raise GroupError(ErrorCode.ILLEGAL_GENERATION, e.message or "") from None
        raise


def _owned_since(group: ConsumerGroup, member: ConsumerGroupMember, epoch: int,
                 partitions: list[tuple[str, int]]) -> bool:
    for topic, partition in partitions:
        info = group.subscription_metadata.get(topic)
        since = None if info is None else group.owned_since(member.member_id, info.topic_id, partition)
        if since is None or since > epoch:
            return False
    return True


def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, epoch: int) -> None:
    """Kafka's ConsumerGroup.validateOffsetFetch: no member id and epoch -1 (an admin) may always fetch."""
    if member_id is None and epoch < 0:
        return
    member = group.members.get(member_id or "")
    if member is None:
        raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                         f"{group.group_id}.")
    _check_epoch(member, epoch)
