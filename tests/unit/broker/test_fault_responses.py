"""fail_next's answers: for every API it can fail, at every version the broker serves, the error response is one the
codec encodes and a client decodes back with the error where Kafka puts it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from oncelog.broker.faults import FaultError, FaultInjector, api_key_of, error_code_of, error_response, failable
from oncelog.broker.handlers import HANDLERS
from oncelog.broker.router import Router
from oncelog.protocol import api as kapi
from oncelog.protocol.errors import ErrorCode

CODE = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def _sample_request(key: int, version: int) -> Any:
    """A request with one topic and partition (or one key) where the API has them."""
    req = kapi.request_class(key)()
    module = __import__(type(req).__module__, fromlist=["_"])
    if key == 0:
        req.topic_data = [module.TopicProduceData(name="t", partition_data=[module.PartitionProduceData(index=2)])]
    elif key == 1:
        req.topics = [module.FetchTopic(topic="t", partitions=[module.FetchPartition(partition=2)])]
    elif key == 24:
        topic = module.AddPartitionsToTxnTopic(name="t", partitions=[2])
        req.v3_and_below_topics = [topic]
        req.transactions = [module.AddPartitionsToTxnTransaction(transactional_id="x", topics=[topic])]
    elif key == 10:
        req.coordinator_keys = ["g"]
    elif key == 2:
        req.topics = [module.ListOffsetsTopic(name="t", partitions=[module.ListOffsetsPartition(partition_index=2)])]
    elif key in (8, 28):
        prefix = "OffsetCommit" if key == 8 else "TxnOffsetCommit"
        partition = getattr(module, f"{prefix}RequestPartition")(partition_index=2)
        req.topics = [getattr(module, f"{prefix}RequestTopic")(name="t", partitions=[partition])]
    elif key == 9:
        req.topics = [module.OffsetFetchRequestTopic(name="t", partition_indexes=[2])]
        req.groups = [module.OffsetFetchRequestGroup(group_id="g")]
    elif key == 19:
        req.topics = [module.CreatableTopic(name="t")]
    elif key == 20:
        req.topics = [module.DeleteTopicState(name="t")]
        req.topic_names = ["t"]
    return req


def _errors(message: Any) -> list[int]:
    """Every error code in a decoded response, nested ones included."""
    out = []
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if f.name in ("error_code", "partition_error_code"):
            out.append(value)
        elif isinstance(value, list):
            out += [c for item in value if dataclasses.is_dataclass(item) for c in _errors(item)]
    return out


@pytest.mark.parametrize("key,lo,hi", [(k, lo, hi) for k, _, lo, hi in HANDLERS if kapi.API_KEYS[k].name in failable()])
def test_error_responses_encode_and_carry_the_error(key: int, lo: int, hi: int) -> None:
    for version in range(lo, hi + 1):
        response = error_response(key, version, _sample_request(key, version), CODE)
        frame = b"".join(bytes(b) for b in kapi.encode_response(key, version, 7, response))
        _, decoded = kapi.decode_response(key, version, frame[4:])
        assert CODE in _errors(decoded), (kapi.API_KEYS[key].name, version, decoded)


def test_the_apis_clients_retry_on_can_be_failed() -> None:
    assert {"Produce", "Fetch", "ListOffsets", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat",
            "OffsetCommit", "OffsetFetch", "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
            "TxnOffsetCommit"} <= set(failable())


def test_names_follow_kafka() -> None:
    assert api_key_of("EndTxn") == api_key_of("end_txn") == api_key_of(26) == 26
    assert error_code_of("not_leader_or_follower") == error_code_of(6) == 6
    with pytest.raises(FaultError):
        api_key_of("EndTransaction")
    injector = FaultInjector(Router.with_all_handlers())
    assert injector.apply({"op": "fail", "api": "Metadata", "error": "LEADER_NOT_AVAILABLE"})["error"].startswith(
        "cannot answer Metadata with an error; fail() answers AddOffsetsToTxn, AddPartitionsToTxn")
    assert injector.apply({"op": "delay", "api": "Fetch"}) == {"error": "delay: missing or unexpected argument "
                                                                        "('seconds')"}
    assert injector.apply({"op": "drop", "api": "Produce", "times": 0})["error"].startswith("times must be")
