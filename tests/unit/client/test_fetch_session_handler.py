"""The fetcher's side of a fetch session (KIP-227): full, then incremental requests, and recovery from errors."""

from __future__ import annotations

import uuid

from oncelog.client.fetch_session import FetchSessionHandler
from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition
from oncelog.protocol.messages.fetch_response import FetchResponse

TID = uuid.uuid4()


def want(offsets: dict[int, int]) -> list[tuple[str, uuid.UUID, FetchPartition]]:
    return [("t", TID, FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1024))
            for p, o in offsets.items()]


def listed(req: object) -> dict[int, int]:
    return {p.partition: p.fetch_offset for t in req.topics for p in t.partitions}  # type: ignore[attr-defined]


def test_full_then_incremental_lists_only_what_changed() -> None:
    h = FetchSessionHandler(use_topic_ids=True)
    first = h.build(want({0: 0, 1: 0, 2: 0}))
    assert first.full and (first.session_id, first.session_epoch) == (0, 0) and listed(first) == {0: 0, 1: 0, 2: 0}
    assert h.handle_response(first, FetchResponse(session_id=77))
    idle = h.build(want({0: 0, 1: 0, 2: 0}))
    assert not idle.full and (idle.session_id, idle.session_epoch) == (77, 1)
    assert idle.topics == [] and idle.forgotten == []
    assert h.handle_response(idle, FetchResponse(session_id=77))
    moved = h.build(want({0: 5, 1: 0}))  # 0 moved on, 2 is no longer wanted
    assert moved.session_epoch == 2 and listed(moved) == {0: 5}
    assert [(f.topic_id, f.partitions) for f in moved.forgotten] == [(TID, [2])]


def test_session_errors_and_lost_answers_start_again_in_full() -> None:
    for code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
        h = FetchSessionHandler(use_topic_ids=True)
        first = h.build(want({0: 0, 1: 0}))
        h.handle_response(first, FetchResponse(session_id=9))
        inc = h.build(want({0: 0, 1: 0}))
        assert not h.handle_response(inc, FetchResponse(error_code=code, session_id=0))
        again = h.build(want({0: 0, 1: 0}))
        # a full fetch listing everything; it names the old session (closing it) unless the broker has none
        old = 0 if code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND else 9
        assert again.full and (again.session_id, again.session_epoch) == (old, 0) and listed(again) == {0: 0, 1: 0}
        assert h.handle_response(again, FetchResponse(session_id=10))
        assert h.build(want({0: 0, 1: 0})).session_epoch == 1
    h = FetchSessionHandler(use_topic_ids=True)
    h.handle_response(h.build(want({0: 0})), FetchResponse(session_id=3))
    h.build(want({0: 0}))
    h.reset()  # the request got no answer
    assert h.build(want({0: 0})).full


def test_no_session_from_the_broker_keeps_fetching_in_full() -> None:
    h = FetchSessionHandler(use_topic_ids=False)
    first = h.build(want({0: 0}))
    assert h.handle_response(first, FetchResponse(session_id=0))
    second = h.build(want({0: 0}))
    assert second.full and listed(second) == {0: 0} and second.topics[0].topic == "t"
