"""The broker's fetch session cache (KIP-227): epochs, what an incremental answer carries, eviction."""

from __future__ import annotations

import uuid

from oncelog.broker.fetch_session import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    new_context,
    next_epoch,
)
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from oncelog.protocol.messages.fetch_response import PartitionData

TID = uuid.uuid4()


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def parts(n: int) -> dict[tuple[uuid.UUID | str, int], CachedPartition]:
    return {(TID, i): CachedPartition("t", TID, FetchPartition(partition=i)) for i in range(n)}


def test_epochs_wrap_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1 and next_epoch(7) == 8
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_incremental_answer_carries_only_changes() -> None:
    c = CachedPartition("t", TID, FetchPartition(partition=0), high_watermark=5, last_stable_offset=5,
                        log_start_offset=0)
    same = PartitionData(partition_index=0, high_watermark=5, last_stable_offset=5, log_start_offset=0, records=b"")
    assert not c.must_respond(same)
    assert c.must_respond(PartitionData(high_watermark=5, last_stable_offset=5, log_start_offset=0, records=b"x"))
    assert c.must_respond(PartitionData(high_watermark=6, last_stable_offset=5, log_start_offset=0, records=b""))
    assert not c.must_respond(PartitionData(high_watermark=6, last_stable_offset=5, log_start_offset=0, records=b""))
    assert c.must_respond(PartitionData(high_watermark=6, last_stable_offset=6, log_start_offset=0, records=b""))
    assert c.must_respond(PartitionData(high_watermark=6, last_stable_offset=6, log_start_offset=3, records=b""))
    err = PartitionData(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, high_watermark=-1, last_stable_offset=-1,
                        log_start_offset=-1, records=b"")
    assert c.must_respond(err)
    # once the error is gone the partition is reported again, even at the high watermark it had before
    assert c.must_respond(PartitionData(high_watermark=6, last_stable_offset=6, log_start_offset=3, records=b""))


def test_a_full_cache_gives_no_session_until_one_is_stale() -> None:
    clock = Clock()
    cache = FetchSessionCache(1, clock)
    first = cache.create(False, True, parts(10))
    assert first != INVALID_SESSION_ID
    assert cache.create(False, True, parts(50)) == INVALID_SESSION_ID  # the other is young: not evictable
    clock.ms += EVICTION_MS + 1  # unused that long: stale, any new session takes its slot
    second = cache.create(False, True, parts(1))
    assert second != INVALID_SESSION_ID and cache.get(first) is None and cache.evictions == 1


def test_a_follower_evicts_a_consumer_and_bigger_beats_smaller_once_old() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, clock)
    consumer = cache.create(False, True, parts(100))
    follower = cache.create(True, True, parts(10))
    # a follower's session takes a consumer's slot at once, however large the consumer's
    follower2 = cache.create(True, True, parts(5))
    assert follower2 != INVALID_SESSION_ID and cache.get(consumer) is None
    # between followers: only a session created over EVICTION_MS ago, and only by a larger one
    assert cache.create(True, True, parts(50)) == INVALID_SESSION_ID
    clock.ms += EVICTION_MS // 2
    for sid in (follower, follower2):
        s = cache.get(sid)
        assert s is not None
        cache.touch(s)  # in use: not stale
    clock.ms += EVICTION_MS // 2 + 1
    assert cache.create(True, True, parts(5)) == INVALID_SESSION_ID  # not larger than the smallest (5)
    assert cache.create(False, True, parts(500)) == INVALID_SESSION_ID  # a consumer never evicts a follower
    big = cache.create(True, True, parts(6))
    assert big != INVALID_SESSION_ID and cache.get(follower2) is None and cache.get(follower) is not None


def test_a_watched_partition_marks_the_session_until_it_is_closed() -> None:
    cache = FetchSessionCache(10, Clock())
    sid = cache.create(False, True, parts(2))
    s = cache.get(sid)
    assert s is not None
    assert s.poke((TID, 1)) and s.take_dirty() == {(TID, 1)} and s.take_dirty() == set()
    assert not s.poke((TID, 9))  # not in the session: the partition stops calling
    cache.remove(sid)
    assert not s.poke((TID, 0))


def request(session_id: int, epoch: int, partitions: list[int], forget: list[int] | None = None) -> FetchRequest:
    return FetchRequest(session_id=session_id, session_epoch=epoch,
                        topics=[FetchTopic(topic_id=TID, partitions=[FetchPartition(partition=i) for i in partitions])]
                        if partitions else [],
                        forgotten_topics_data=[ForgottenTopic(topic_id=TID, partitions=forget)] if forget else [])


def test_contexts_and_session_errors() -> None:
    cache = FetchSessionCache(10, Clock())
    full = new_context(cache, request(0, 0, [0, 1, 2]), 13, privileged=False)
    assert not isinstance(full, int) and full.create
    sid = cache.create(False, True, parts(3))
    assert new_context(cache, request(sid + 1, 1, []), 13, False) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert new_context(cache, request(sid, 2, []), 13, False) == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert new_context(cache, request(sid, 1, []), 12, False) == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    inc = new_context(cache, request(sid, 1, [3], forget=[1]), 13, False)
    assert not isinstance(inc, int) and inc.session is not None and inc.listed == {(TID, 3)}
    assert sorted(k[1] for k in inc.session.partitions) == [0, 2, 3]  # added 3, forgot 1
    assert new_context(cache, request(sid, 1, []), 13, False) == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # a replay
    # forgetting everything ends the session; a full fetch naming a session closes it
    last = new_context(cache, request(sid, 2, [], forget=[0, 2, 3]), 13, False)
    assert not isinstance(last, int) and last.session is None and cache.get(sid) is None
    sid = cache.create(False, True, parts(3))
    closing = new_context(cache, request(sid, -1, [0]), 13, False)
    assert not isinstance(closing, int) and not closing.create and cache.get(sid) is None
    # before Fetch v7 there are no sessions
    old = new_context(cache, request(0, 0, [0]), 6, False)
    assert not isinstance(old, int) and not old.create
