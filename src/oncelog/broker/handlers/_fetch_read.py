"""What a Fetch reads, shared by the full fetch (:mod:`.fetch`) and the incremental one (:mod:`._fetch_incremental`):
the plan (leadership, a follower's fetch offset and diverging epoch, authorization) and the read (up to the high
watermark, the last stable offset, or for a follower the log end; within ``max_bytes``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest
from oncelog.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    PartitionData,
)
from oncelog.storage import OffsetOutOfRangeError

from ..fetch_session import Groups
from ._common import error_for, leadership_error, missing_partition_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition

__all__ = ["READ_COMMITTED", "Want", "plan", "read", "replica_id_of"]

READ_COMMITTED = 1


@dataclass(slots=True)
class Want:
    out: PartitionData
    partition: "Partition | None"
    fetch_offset: int
    max_bytes: int
    replica: bool = False  # a follower's fetch: up to the log end


def replica_id_of(request: FetchRequest, version: int) -> int:
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def plan(broker: "BrokerContext", request: FetchRequest, version: int, groups: Groups,
          may_read: "Callable[[str], bool] | None" = None) -> tuple[list[FetchableTopicResponse], list[Want]]:
    topics: list[FetchableTopicResponse] = []
    wants: list[Want] = []
    replica_id = replica_id_of(request, version) if broker.cluster is not None else -1
    broker_epoch = request.replica_state.replica_epoch if version >= 15 else -1
    for name, topic_id, partitions in groups:
        if version >= 13:
            view = broker.topics.by_id(topic_id)
            missing_code = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            view = broker.topics.get(name)
            missing_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        resp = FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=[])
        for p in partitions:
            out = PartitionData(partition_index=p.partition, high_watermark=-1, last_stable_offset=-1,
                                log_start_offset=-1, aborted_transactions=None, records=b"")
            partition = view.partitions[p.partition] if view and 0 <= p.partition < len(view.partitions) else None
            if may_read is not None and (view is not None or version < 13) \
                    and not may_read(view.name if view is not None else name):
                out.error_code, partition = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
            elif partition is None:
                out.error_code = missing_partition_error(broker, name, p.partition, missing_code) if name \
                    else missing_code
            elif code := leadership_error(partition, p.current_leader_epoch):
                out.error_code = code
                partition = None
            elif replica_id >= 0 and not _replica_fetch(partition, p, out, replica_id, broker_epoch, version):
                partition = None
            resp.partitions.append(out)
            wants.append(Want(out, partition, p.fetch_offset, p.partition_max_bytes, replica_id >= 0))
        topics.append(resp)
    return topics, wants


def _replica_fetch(partition: "Partition", p: FetchPartition, out: PartitionData, replica_id: int,
                   broker_epoch: int, version: int) -> bool:
    """A follower's fetch of a partition led here: record its end offset; False when the answer is already
    complete (an error, or a diverging epoch)."""
    lr = partition.leader_replicas
    if lr is None or replica_id not in lr.replicas or replica_id == lr.local_id:
        out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return False
    log = partition.log
    if version >= 12 and p.last_fetched_epoch >= 0:
        epoch, end = log.end_offset_for_epoch(p.last_fetched_epoch)
        if epoch < p.last_fetched_epoch or end < p.fetch_offset:
            out.diverging_epoch.epoch, out.diverging_epoch.end_offset = epoch, end
            out.high_watermark = partition.high_watermark
            out.last_stable_offset = partition.last_stable_offset
            out.log_start_offset = partition.log_start_offset
            return False
    if log.log_start_offset <= p.fetch_offset <= log.log_end_offset:
        partition.on_replica_fetch(replica_id, p.fetch_offset, p.log_start_offset, broker_epoch)
    return True


def read(broker: "BrokerContext", wants: list[Want], max_bytes: int, isolation: int) -> tuple[int, bool]:
    """Fill every partition's records; return (bytes gathered, whether any partition has an error)."""
    total = 0
    error = False
    first = True
    for want in wants:
        out = want.out
        partition = want.partition
        if partition is None:
            error = True
            continue
        hw = partition.high_watermark
        lso = partition.last_stable_offset
        out.high_watermark = hw
        out.last_stable_offset = lso
        out.log_start_offset = partition.log_start_offset
        out.error_code = ErrorCode.NONE
        limit = partition.log_end_offset if want.replica else lso if isolation == READ_COMMITTED else hw
        budget = min(want.max_bytes, max_bytes - total)
        if want.fetch_offset >= limit and want.fetch_offset <= partition.log_end_offset:
            out.records = b""
            continue
        try:
            result = partition.log.read(want.fetch_offset, max(budget, 0), limit,
                                        min_one_batch=first)
        except OffsetOutOfRangeError:
            out.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            out.records = b""
            error = True
            continue
        except Exception as e:  # pragma: no cover - disk errors
            out.error_code, _ = error_for(e)
            error = True
            continue
        if result.size:
            out.records = result.records
            total += result.size
            first = False
            broker.metrics.topic(partition.topic)[2].inc(result.size)
        else:
            out.records = b""
        if isolation == READ_COMMITTED and not want.replica:
            out.aborted_transactions = [
                AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                for a in partition.log.collect_aborted_txns(want.fetch_offset, limit)
            ] if out.records else None
    return total, error
