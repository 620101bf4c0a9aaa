"""DescribeLogDirs (35): the one data directory, partition sizes, and the disk's total/usable bytes."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from oncelog.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from oncelog.protocol.messages.describe_log_dirs_response import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

from oncelog.security.acl import AclOperation, ResourceType
from oncelog.protocol.errors import ErrorCode
from ..security.authorization import allowed

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.request import RequestContext

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4


def handle(broker: "BrokerContext", ctx: "RequestContext",
           request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not allowed(broker, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):  # an empty answer, as Kafka's
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted: dict[str, set[int] | None]
    if request.topics is None:
        wanted = {v.name: None for v in broker.topics}
    else:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    topics = []
    for name, parts in wanted.items():
        view = broker.topics.get(name)
        if view is None:
            continue
        entries = [DescribeLogDirsPartition(partition_index=p.index, partition_size=p.log.size_in_bytes,
                                            offset_lag=0, is_future_key=False)
                   for p in view.partitions if parts is None or p.index in parts]
        topics.append(DescribeLogDirsTopic(name=name, partitions=entries))
    usage = shutil.disk_usage(broker.config.data_dir)
    result = DescribeLogDirsResult(error_code=0, log_dir=str(broker.config.data_dir.resolve()), topics=topics,
                                   total_bytes=usage.total, usable_bytes=usage.free)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
