"""Produce (0): validate whole batches (sizes, magic, CRC), assign offsets in place, append, then answer.

acks=0 gets no answer, acks=1 is answered once the batch is in the log, acks=-1 (all) once it is on disk (group
commit, see ``oncelog.broker.durability``). In a cluster only the leader appends (NOT_LEADER_OR_FOLLOWER
otherwise), acks=-1 needs ``min.insync.replicas`` in the ISR before appending (NOT_ENOUGH_REPLICAS) and is answered
once the high watermark passes the batch (every ISR member has it, on disk in the durable default), or with
REQUEST_TIMED_OUT after the request's timeout, or NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile. Records are never decoded here; on a compacted topic their key sizes
are walked (``keyless_records_in``): a batch with records without a key is refused with INVALID_RECORD, the
records listed in the response's per-record errors (Kafka's LogValidator.validateKey, KIP-467), so a client
fails exactly those records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.produce_request import ProduceRequest
from oncelog.protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from oncelog.protocol.record_decode import keyless_records_in
from oncelog.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedMagicError,
    parse_batch_header,
    set_max_timestamp_log_append,
    validate_batches,
)
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage import DuplicateSequenceError, ProducerStateError

from ..security.authorization import allowed, allowed_names
from ..request import NO_RESPONSE
from ._common import error_for, missing_partition_error
from ._txn_verify import TxnChecks, add_to_transaction, transaction_checks, verify_transaction

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.partition import Partition
    from oncelog.broker.request import RequestContext

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 12  # v12: transactions V2, the broker adds a transactional batch's partition to its transaction


def _append_one(broker: "BrokerContext", partition: "Partition", records: memoryview | bytes | None,
                out: PartitionProduceResponse, transactional_id: str | None = None,
                verified: dict[tuple[str, int], int] | None = None, remote: bool = False) -> int | None:
    """Validate and append one partition's batches; fill ``out``; return the last offset appended or None."""
    if not records:
        out.error_code, out.error_message = ErrorCode.CORRUPT_MESSAGE, "produce request carries no record batch"
        return None
    max_bytes = partition.log.config.max_message_bytes
    try:
        headers = validate_batches(records)
    except UnsupportedMagicError as e:
        out.error_code, out.error_message = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(e)
        return None
    except InvalidRecordError as e:
        out.error_code, out.error_message = ErrorCode.INVALID_RECORD, str(e)
        return None
    except CorruptRecordError as e:
        out.error_code, out.error_message = ErrorCode.CORRUPT_MESSAGE, str(e)
        return None
    for h in headers:
        if h.size > max_bytes:
            out.error_code = ErrorCode.MESSAGE_TOO_LARGE
            out.error_message = (f"record batch of {h.size} bytes exceeds max.message.bytes={max_bytes} of "
                                 f"{partition.topic}")
            return None
    if partition.log.config.compact and not _every_record_has_a_key(partition, records, headers, out):
        return None
    first = headers[0]
    if first.is_transactional:
        code = verify_transaction(broker, partition, first.producer_id, first.producer_epoch, transactional_id,
                                  verified, remote)
        if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            # Kafka answers a Produce with a stale epoch INVALID_PRODUCER_EPOCH (AddPartitionsToTxnManager)
            out.error_code = ErrorCode.INVALID_PRODUCER_EPOCH
            out.error_message = (f"producer {first.producer_id} epoch {first.producer_epoch} has been fenced by a "
                                 f"newer epoch of its transactional id; write to {partition.topic}-"
                                 f"{partition.index} refused")
            return None
        if code == ErrorCode.NOT_ENOUGH_REPLICAS:
            note_refused(partition, records)
            out.error_code = code
            out.error_message = (f"the transaction of producer {first.producer_id} could not be checked with (or "
                                 f"added to by) its coordinator now (moving, loading or unreachable); retry")
            return None
        if code:
            out.error_code = code
            out.error_message = (f"producer {first.producer_id} epoch {first.producer_epoch} has no ongoing "
                                 f"transaction containing {partition.topic}-{partition.index} "
                                 f"({_code_name(code)}); a transactions V1 producer adds the partition with "
                                 "AddPartitionsToTxn first")
            return None
    payload = bytearray(records)
    log_append_time: int | None = None
    if partition.log.config.message_timestamp_type == "LogAppendTime":
        log_append_time = broker.clock.wall_ms()
        for h in headers:
            set_max_timestamp_log_append(payload, h.position, h.size, log_append_time)
    try:  # the log stamps the partition's leader epoch on every batch
        result = partition.append(payload, headers, log_append_time)
    except DuplicateSequenceError as dup:
        # a retry of a batch already in the log: success with the offsets of the original append
        out.base_offset = dup.first_offset
        out.log_append_time_ms = dup.timestamp if log_append_time is not None else -1
        out.log_start_offset = partition.log_start_offset
        return dup.last_offset
    except ProducerStateError as e:
        out.error_code, out.error_message = e.error_code, str(e)
        return None
    except Exception as e:
        out.error_code, out.error_message = error_for(e)
        return None
    out.base_offset = result.first_offset
    out.log_append_time_ms = result.log_append_time_ms
    out.log_start_offset = partition.log_start_offset
    bytes_in, records_in, _ = broker.metrics.topic(partition.topic)
    bytes_in.inc(len(payload))
    records_in.inc(sum(h.records_count for h in headers))
    return result.last_offset


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _every_record_has_a_key(partition: "Partition", records: memoryview | bytes, headers: list[BatchHeader],
                            out: PartitionProduceResponse) -> bool:
    """A compacted topic keeps the latest record of each key: a record without one cannot be written (Kafka's
    LogValidator.validateKey). The first batch holding such records is refused with INVALID_RECORD and their
    indexes in ``record_errors`` (KIP-467); nothing of the partition's payload is written."""
    where = f"{partition.topic}-{partition.index}"
    for h in headers:
        try:
            keyless = keyless_records_in(records, h)
        except CorruptRecordError as e:
            out.error_code, out.error_message = ErrorCode.CORRUPT_MESSAGE, f"{where}: {e}"
            return False
        if not keyless:
            continue
        message = (f"a compacted topic keeps the latest record of each key: a record without a key cannot be "
                   f"written to {where}; give every record a key")
        out.error_code = ErrorCode.INVALID_RECORD
        out.record_errors = [BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=message)
                             for i in keyless]
        shown = ", ".join(str(i) for i in keyless[:3])
        out.error_message = (f"{len(keyless)} record(s) of the batch at position {h.position} have no key (record "
                             f"index {shown}{', ...' if len(keyless) > 3 else ''}), and {where} is compacted "
                             "(cleanup.policy=compact); nothing of the batch was written")
        return False
    return True


def note_refused(partition: "Partition", records: object) -> None:
    """An idempotent batch refused before the append with a retriable error: the batches of that producer
    pipelined behind it get the same answer, not OUT_OF_ORDER_SEQUENCE_NUMBER, until it is retried
    (``ProducerStateManager.note_refused``)."""
    if not isinstance(records, (bytes, bytearray, memoryview)) or len(records) < BATCH_HEADER_SIZE:
        return
    try:
        h = parse_batch_header(records, 0)
    except Exception:  # noqa: BLE001 - a malformed batch: nothing to note
        return
    if h.producer_id >= 0:
        partition.log.producer_state_manager.note_refused(h.producer_id, h.producer_epoch, h.base_sequence)


def _may_append(partition: "Partition", acks: int, out: PartitionProduceResponse) -> bool:
    """In a cluster: this broker leads the partition, and for acks=all the ISR has min.insync.replicas."""
    where = f"{partition.topic}-{partition.index}"
    if not partition.is_leader:
        out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        out.error_message = f"this broker does not lead {where} (leader: {partition.leader_id})"
        return False
    lr = partition.leader_replicas
    if acks == -1 and lr is not None and len(lr.isr) < lr.min_isr:
        out.error_code = ErrorCode.NOT_ENOUGH_REPLICAS
        out.error_message = (f"{where} has {len(lr.isr)} in-sync replica(s) {sorted(lr.isr)}, fewer than "
                             f"min.insync.replicas={lr.min_isr}; nothing was written")
        return False
    return True


def _has_transactional_batches(request: ProduceRequest) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: the first batch of some partition is transactional."""
    for topic in request.topic_data:
        for pdata in topic.partition_data:
            try:
                if pdata.records and parse_batch_header(pdata.records).is_transactional:
                    return True
            except Exception:  # not a batch: refused as such in the append
                continue
    return False


def _refused(request: ProduceRequest, code: ErrorCode, message: str) -> ProduceResponse:
    return ProduceResponse(throttle_time_ms=0, responses=[TopicProduceResponse(name=t.name, partition_responses=[
        PartitionProduceResponse(index=p.index, error_code=code, error_message=message, base_offset=-1,
                                 log_append_time_ms=-1, log_start_offset=-1) for p in t.partition_data])
        for t in request.topic_data])


def handle(broker: "BrokerContext", ctx: "RequestContext", request: ProduceRequest) -> object:
    denied: frozenset[str] = frozenset()
    if broker.authorizer is not None:  # WRITE on the transactional id of transactional batches, on each topic
        txn_id = request.transactional_id
        if _has_transactional_batches(request) and (
                txn_id is None or not allowed(broker, ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)):
            return NO_RESPONSE if request.acks == 0 else _refused(
                request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                f"{ctx.principal} may not WRITE to transactional id {txn_id}")
        names = [t.name for t in request.topic_data]
        denied = frozenset(names) - allowed_names(broker, ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    checks = transaction_checks(broker, request, ctx.api_version)
    if checks is None:  # not transactional, or a V1 write whose coordinator is here: checked in the append
        return _append_all(broker, request, None, denied)
    assert request.transactional_id
    if not checks.partitions and broker.txn_order.appending_after(request.transactional_id) is None:
        # every transaction ongoing here already, nothing before it waits
        return _append_all(broker, request, {} if checks.remote else None, denied, checks.remote)
    return _checked_then_appended(broker, request, checks, denied)


async def _checked_then_appended(broker: "BrokerContext", request: ProduceRequest, checks: TxnChecks,
                                 denied: frozenset[str]) -> object:
    """Check the transaction with its coordinator (V1) or add the partitions to it (V2), then append: after every
    earlier request of the same transactional id, even one that needs nothing of the coordinator itself (a
    pipelined request whose batches follow a batch still being checked must not be appended before it: its
    sequence numbers would be out of order)."""
    txn_id = request.transactional_id
    assert txn_id
    pid, epoch, partitions, remote, add = checks
    with broker.txn_order.in_order(txn_id) as before:
        answers: dict[tuple[str, int], int] = {}
        if partitions and add:
            answers = await add_to_transaction(broker, txn_id, pid, epoch, partitions, remote)
        elif partitions:
            assert broker.txn_verifier is not None
            answers = await broker.txn_verifier.verify(txn_id, pid, epoch, partitions)
        if before is not None:
            await before
        # in the step it may: appends keep their order
        result = _append_all(broker, request, answers if remote or answers else None, denied, remote)
    if isinstance(result, ProduceResponse) or result is NO_RESPONSE:
        return result
    assert isinstance(result, Awaitable)
    return await result


def _append_all(broker: "BrokerContext", request: ProduceRequest,
                verified: dict[tuple[str, int], int] | None, denied: frozenset[str] = frozenset(),
                remote: bool = False) -> object:
    responses: list[TopicProduceResponse] = []
    waits: list[tuple[PartitionProduceResponse, asyncio.Future[None] | asyncio.Future[int]]] = []
    acks = request.acks
    for topic in request.topic_data:
        view = broker.topics.get(topic.name)
        parts: list[PartitionProduceResponse] = []
        for pdata in topic.partition_data:
            out = PartitionProduceResponse(index=pdata.index, base_offset=-1, log_append_time_ms=-1,
                                           log_start_offset=-1)
            parts.append(out)
            if topic.name in denied:
                out.error_code, out.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to WRITE"
                continue
            partition = view.partitions[pdata.index] if view and 0 <= pdata.index < len(view.partitions) else None
            if partition is None:
                out.error_code = missing_partition_error(broker, topic.name, pdata.index,
                                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                out.error_message = f"this broker has no partition {topic.name}-{pdata.index}"
                continue
            if acks not in (0, 1, -1):
                out.error_code, out.error_message = ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not 0, 1 or -1"
                continue
            if partition.replicated and not _may_append(partition, acks, out):
                if out.error_code == ErrorCode.NOT_ENOUGH_REPLICAS:
                    note_refused(partition, pdata.records)
                continue
            last = _append_one(broker, partition, pdata.records, out, request.transactional_id, verified, remote)
            if last is None or acks != -1:
                continue
            if partition.replicated:
                waits.append((out, partition.wait_replicated(last)))
            elif partition.durable_per_append:
                waits.append((out, partition.wait_durable(last)))
        responses.append(TopicProduceResponse(name=topic.name, partition_responses=parts))
    response = ProduceResponse(responses=responses, throttle_time_ms=0)
    if acks == 0:
        return NO_RESPONSE
    if not waits or all(f.done() for _, f in waits):
        _settle(waits, request.timeout_ms, broker.cluster is not None)
        return response
    return _await_durable(response, waits, request.timeout_ms, broker.cluster is not None)


async def _await_durable(response: ProduceResponse,
                         waits: list[tuple[PartitionProduceResponse, asyncio.Future[None] | asyncio.Future[int]]],
                         timeout_ms: int, replicated: bool = False) -> ProduceResponse:
    futures = [f for _, f in waits]
    await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
    _settle(waits, timeout_ms, replicated)
    return response


def _settle(waits: list[tuple[PartitionProduceResponse, asyncio.Future[None] | asyncio.Future[int]]],
            timeout_ms: int, replicated: bool) -> None:
    for out, fut in waits:
        if not fut.done():
            fut.cancel()
            out.error_code = ErrorCode.REQUEST_TIMED_OUT
            out.error_message = f"not on disk within the request timeout of {timeout_ms} ms" if not replicated \
                else f"not on every in-sync replica within the request timeout of {timeout_ms} ms"
        elif fut.exception() is not None:
            out.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            out.error_message = str(fut.exception())
        elif (code := fut.result()) is not None and code:
            out.error_code = code
            out.error_message = "leadership moved before the write was replicated" \
                if code == ErrorCode.NOT_LEADER_OR_FOLLOWER else "the ISR shrank below min.insync.replicas"
