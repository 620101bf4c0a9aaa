"""Request metrics are plain numbers on the event loop, exported as a Prometheus counter and histogram with the
same names and bucket semantics (``le``: at most the bound) prometheus_client's own types would give."""

from __future__ import annotations

import dataclasses

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oncelog.broker.metrics.counts import LATENCY_BUCKETS, BrokerMetrics
from oncelog.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from oncelog.protocol.messages.end_txn_response import EndTxnResponse
from oncelog.protocol.messages.fetch_response import FetchableTopicResponse, FetchResponse, PartitionData
from oncelog.protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)


def samples(m: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_request_counts_and_latency_histogram() -> None:
    m = BrokerMetrics()
    for seconds in (0.00005, 0.0001, 0.0003, 0.002, 7.0):  # 0.0001 is on a bound: counted in that bucket
        m.observe_request("produce", seconds)
    m.observe_request("fetch", 0.001)
    s = samples(m)
    assert s[("oncelog_requests_total", (("api", "produce"),))] == 5
    assert s[("oncelog_requests_total", (("api", "fetch"),))] == 1
    produce = {le: s[("oncelog_request_latency_seconds_bucket", (("api", "produce"), ("le", le)))]
               for le in ("0.0001", "0.0005", "0.001", "0.0025", "5.0", "+Inf")}
    assert produce == {"0.0001": 2, "0.0005": 3, "0.001": 3, "0.0025": 4, "5.0": 4, "+Inf": 5}
    assert s[("oncelog_request_latency_seconds_count", (("api", "produce"),))] == 5
    assert abs(s[("oncelog_request_latency_seconds_sum", (("api", "produce"),))] - 7.00245) < 1e-9
    assert s[("oncelog_request_latency_seconds_bucket", (("api", "fetch"), ("le", "0.0005")))] == 0
    assert s[("oncelog_request_latency_seconds_bucket", (("api", "fetch"), ("le", "0.001")))] == 1
    assert len([k for k in s if k[0] == "oncelog_request_latency_seconds_bucket" and k[1][0] == ("api", "fetch")]) \
        == len(LATENCY_BUCKETS) + 1


def test_topic_counters_are_the_labelled_ones() -> None:
    m = BrokerMetrics()
    bytes_in, records_in, bytes_out = m.topic("t")
    assert m.topic("t") == (bytes_in, records_in, bytes_out)  # looked up once
    bytes_in.inc(100)
    records_in.inc(3)
    bytes_out.inc(7)
    s = samples(m)
    assert s[("oncelog_bytes_in_total", (("topic", "t"),))] == 100
    assert s[("oncelog_records_in_total", (("topic", "t"),))] == 3
    assert s[("oncelog_bytes_out_total", (("topic", "t"),))] == 7


def test_error_counts_walk_nested_structures_not_lists_of_ids() -> None:
    """Every error code of an answer is counted, at any depth; lists of plain values (a Metadata answer's 30,000
    replica lists at 10,000 partitions) are not walked."""
    from oncelog.broker.metrics.counts import ErrorCounts
    from oncelog.protocol.messages.metadata_response import (
        MetadataResponse,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )

    answer = MetadataResponse(topics=[
        MetadataResponseTopic(error_code=3, name="gone"),
        MetadataResponseTopic(name="t", partitions=[
            MetadataResponsePartition(error_code=5, partition_index=0, replica_nodes=[1, 2, 3]),
            MetadataResponsePartition(error_code=5, partition_index=1, isr_nodes=[1]),
            MetadataResponsePartition(partition_index=2)])])
    errors = ErrorCounts()
    errors.add("metadata", answer)
    assert errors.counts == {("metadata", 3): 1, ("metadata", 5): 2}
    assert errors._plan(MetadataResponsePartition) == (("error_code",), ())
    assert errors._plan(MetadataResponse) == ((), ("topics",))  # a broker holds no error code


def _every_error_code(obj: object) -> list[int]:
    """Every non-zero ``error_code`` of a response, nested ones included: a full walk of its structures."""
    if not dataclasses.is_dataclass(obj):
        return []
    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "error_code" and value:
            out.append(value)
        elif isinstance(value, list):
            out += [code for item in value for code in _every_error_code(item)]
    return out


def test_error_counts_are_every_nested_error_code() -> None:
    """Responses are walked only where an error code can be (plans made once per class): what they count is what a
    walk of every field finds."""
    responses = [
        ("produce", ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[
            PartitionProduceResponse(index=0, error_code=6), PartitionProduceResponse(index=1),
            PartitionProduceResponse(index=2, error_code=6, record_errors=[BatchIndexAndErrorMessage(batch_index=1)]),
        ])])),
        ("fetch", FetchResponse(error_code=0, responses=[FetchableTopicResponse(topic="t", partitions=[
            PartitionData(partition_index=0, error_code=1), PartitionData(partition_index=1, error_code=74)])])),
        ("add_partitions_to_txn", AddPartitionsToTxnResponse(error_code=0, results_by_topic_v3_and_below=[
            AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
                AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=51)])])),
        ("end_txn", EndTxnResponse(error_code=48)),
        ("end_txn", EndTxnResponse(error_code=0)),
    ]
    m = BrokerMetrics()
    expected: dict[tuple[str, int], int] = {}
    for api, response in responses:
        m.observe_request(api, 0.001, response)
        for code in _every_error_code(response):
            expected[(api, code)] = expected.get((api, code), 0) + 1
    assert m.errors.counts == expected == {("produce", 6): 2, ("fetch", 1): 1, ("fetch", 74): 1, ("end_txn", 48): 1}
