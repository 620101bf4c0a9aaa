"""Option parsing and offset planning of the oncelog source (no Spark session, no broker)."""

from __future__ import annotations

import pytest

from oncelog.spark.offsets import OffsetRange, rate_limit, split_ranges
from oncelog.spark.options import (
    OncelogOptionError,
    client_conf,
    offsets_from_json,
    offsets_to_json,
    parse_source_options,
    role_conf,
)

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_kafka_options_lose_their_prefix_and_go_to_the_role_that_knows_them() -> None:
    opts = {**BS, "kafka.client.id": "job", "kafka.linger.ms": "20", "kafka.fetch.max.wait.ms": "50",
            "subscribe": "t"}
    assert client_conf(opts) == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "job", "linger.ms": "20",
                                 "fetch.max.wait.ms": "50"}
    assert role_conf(opts, "consumer") == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "job",
                                           "fetch.max.wait.ms": "50"}
    assert role_conf(opts, "producer") == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "job",
                                           "linger.ms": "20"}
    assert role_conf(opts, "admin") == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "job"}


def test_option_errors_name_the_option() -> None:
    with pytest.raises(OncelogOptionError, match="kafka.bootstrap.servers"):
        client_conf({"subscribe": "t"})
    with pytest.raises(OncelogOptionError, match="kafka.group.id"):
        client_conf({**BS, "kafka.group.id": "g"})
    with pytest.raises(OncelogOptionError, match="did you mean 'kafka.linger.ms'"):
        role_conf({**BS, "kafka.linger.mss": "1"}, "consumer")
    with pytest.raises(OncelogOptionError, match="kafka.isolation.level"):
        role_conf({**BS, "kafka.isolation.level": "dirty"}, "consumer")
    with pytest.raises(OncelogOptionError, match="exactly one of"):
        parse_source_options({**BS, "subscribe": "a", "assign": '{"a": [0]}'}, streaming=True)
    with pytest.raises(OncelogOptionError, match="exactly one of"):
        parse_source_options(BS, streaming=True)
    with pytest.raises(OncelogOptionError, match="batch read"):
        parse_source_options({**BS, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OncelogOptionError, match="batch reads only"):
        parse_source_options({**BS, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OncelogOptionError, match="maxOffsetsPerTrigger"):
        parse_source_options({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "lots"}, streaming=True)


def test_spark_lower_cases_option_names_and_defaults_follow_spark_sql_kafka() -> None:
    o = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribepattern": "in-.*",
                              "maxoffsetspertrigger": "10", "includeheaders": "true"}, streaming=True)
    assert o.subscribe_pattern == "in-.*" and o.matches("in-1") and not o.matches("xin-1")
    assert o.max_offsets_per_trigger == 10 and o.include_headers and o.starting == "latest"
    assert o.read_committed and o.consumer_conf["isolation.level"] == "read_committed"
    b = parse_source_options({**BS, "assign": '{"a": [1, 0], "b": [2]}',
                              "startingOffsets": '{"a": {"0": 5, "1": -2}}',
                              "kafka.isolation.level": "read_uncommitted"}, streaming=False)
    assert b.assign == (("a", 0), ("a", 1), ("b", 2)) and b.ending == "latest"
    assert b.starting == {("a", 0): 5, ("a", 1): -2} and not b.read_committed


def test_offsets_json_round_trip() -> None:
    offs = {("t", 0): 5, ("t", 10): 7, ("u", 1): 0}
    assert offsets_to_json(offs) == {"t": {"0": 5, "10": 7}, "u": {"1": 0}}
    assert offsets_from_json(offsets_to_json(offs)) == offs


def test_rate_limit_shares_the_budget_in_proportion_and_uses_all_of_it() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    end = {("t", 0): 1000, ("t", 1): 200, ("t", 2): 50}
    lim = rate_limit(start, end, 110)
    assert sum(lim[tp] - start[tp] for tp in start) == 110
    assert lim[("t", 0)] == 100 and lim[("t", 1)] == 110 and lim[("t", 2)] == 50
    assert rate_limit(start, end, 5000) == end
    tiny = rate_limit(start, end, 1)
    assert sum(tiny[tp] - start[tp] for tp in start) == 1
    assert all(start[tp] <= tiny[tp] <= end[tp] for tp in start)


def test_split_ranges_cuts_big_ranges_and_skips_empty_ones() -> None:
    parts = split_ranges({("t", 0): 10, ("t", 1): 5}, {("t", 0): 35, ("t", 1): 5}, max_records=10)
    assert parts == [OffsetRange("t", 0, 10, 19), OffsetRange("t", 0, 19, 27), OffsetRange("t", 0, 27, 35)]
    more = split_ranges({("t", 0): 0, ("t", 1): 0}, {("t", 0): 30, ("t", 1): 10}, 1000, min_partitions=4)
    assert len(more) >= 4 and sum(r.size for r in more) == 40
