"""The fetcher's side of an incremental fetch session (KIP-227; Kafka's ``FetchSessionHandler``), one per broker.

Each round the fetcher says which partitions it wants and with what parameters; :meth:`FetchSessionHandler.build`
turns that into the request's ``session_id`` / ``session_epoch``, the partitions to list and those to forget:

- no session yet (or after an error): a full fetch, epoch 0, every partition listed (the broker answers a session
  id, or 0 when it keeps none: then every fetch stays full);
- in a session: the session's id and next epoch; listed are only the partitions that are new or whose fetch
  parameters changed (fetch offset, log start offset, leader epochs, max bytes), forgotten the ones no longer wanted.

:meth:`FetchSessionHandler.handle_response` checks the answer: a session error (FETCH_SESSION_ID_NOT_FOUND after an
eviction or a broker restart, INVALID_FETCH_SESSION_EPOCH after a lost answer, FETCH_SESSION_TOPIC_ID_ERROR) or a
request that got no answer makes the next fetch a full one, which closes the old session on the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from oncelog.protocol.errors import ErrorCode
from oncelog.protocol.messages.fetch_request import FetchPartition, FetchTopic, ForgottenTopic
from oncelog.protocol.messages.fetch_response import FetchResponse

__all__ = ["Entry", "FetchSessionHandler", "Key", "SESSION_ERRORS", "SessionRequest"]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
_MAX_EPOCH = 2**31 - 1

SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                            ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR})

#: a partition of a session: (topic id, partition) when fetching by topic id, (topic name, partition) before v13
Key = tuple[uuid.UUID | str, int]
#: a partition to fetch: (topic name, topic id, parameters)
Entry = tuple[str, uuid.UUID, FetchPartition]


@dataclass(slots=True)
class SessionRequest:
    """What :meth:`FetchSessionHandler.build` puts in a Fetch request."""

    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten: list[ForgottenTopic]
    full: bool


def _same(a: FetchPartition, b: FetchPartition) -> bool:
    return a is b or (a.fetch_offset == b.fetch_offset and a.log_start_offset == b.log_start_offset
            and a.partition_max_bytes == b.partition_max_bytes and a.current_leader_epoch == b.current_leader_epoch
            and a.last_fetched_epoch == b.last_fetched_epoch)


class FetchSessionHandler:
    """The session state of one fetcher with one broker."""

    def __init__(self, use_topic_ids: bool) -> None:
        self.use_topic_ids = use_topic_ids
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request: 0 asks for a new session (a full fetch)
        self._wanted: dict[Key, Entry] = {}  # what the fetcher wants now
        self._sent: dict[Key, Entry] = {}  # what the broker's session holds
        self._changed: set[Key] = set()  # keys of _wanted that may differ from _sent
        self.full_fetches = 0
        self.incremental_fetches = 0

    def _key(self, topic: str, topic_id: uuid.UUID, partition: int) -> Key:
        return (topic_id if self.use_topic_ids else topic, partition)

    def build(self, wanted: list[Entry]) -> SessionRequest:
        """The next request for the partitions in ``wanted`` (topic name, topic id, parameters)."""
        by_key = {self._key(t, tid, p.partition): (t, tid, p) for t, tid, p in wanted}
        changed: dict[Key, Entry | None] = {k: None for k in self._wanted.keys() - by_key.keys()}
        changed.update(by_key)
        return self.build_changes(changed)

    def build_changes(self, changed: dict[Key, Entry | None]) -> SessionRequest:
        """The next request after the changes ``changed`` to what is wanted (an entry: wanted with these
        parameters; None: no longer wanted); what is not in it is wanted as before. A fetcher that knows what moved
        pays only for that, however many partitions its session holds."""
        wanted = self._wanted
        for k, entry in changed.items():
            if entry is None:
                wanted.pop(k, None)
            else:
                wanted[k] = entry
            self._changed.add(k)
        if self.epoch == INITIAL_EPOCH:
            self._sent = dict(wanted)
            self._changed.clear()
            self.full_fetches += 1
            return SessionRequest(self.session_id, INITIAL_EPOCH, _group(wanted.values()), [], True)
        send: list[Entry] = []
        forgotten: dict[uuid.UUID | str, ForgottenTopic] = {}
        sent = self._sent
        for k in self._changed:
            entry = wanted.get(k)
            old = sent.get(k)
            if entry is None:
                if old is not None:
                    del sent[k]
                    f = forgotten.get(k[0])
                    if f is None:
                        f = forgotten[k[0]] = ForgottenTopic(topic=old[0], topic_id=old[1], partitions=[])
                    f.partitions.append(k[1])
            elif old is None or not _same(old[2], entry[2]):
                sent[k] = entry
                send.append(entry)
        self._changed.clear()
        self.incremental_fetches += 1
        return SessionRequest(self.session_id, self.epoch, _group(send), list(forgotten.values()), False)

    def handle_response(self, sent: SessionRequest, response: FetchResponse) -> bool:
        """Move the session on after an answer to ``sent``; False when the answer is a session error (nothing in it
        to process; the next fetch is a full one)."""
        if response.error_code in SESSION_ERRORS or (not sent.full and response.session_id != self.session_id):
            if response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID  # nothing to close
            self.reset()
            return False
        if sent.full:
            self.session_id = response.session_id
            self.epoch = INITIAL_EPOCH if response.session_id == INVALID_SESSION_ID else 1
        else:
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        return True

    def reset(self) -> None:
        """The next fetch is a full one (it also closes the current session on the broker, if it still exists)."""
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self._changed.clear()


def _group(parts: Iterable[Entry]) -> list[FetchTopic]:
    topics: dict[uuid.UUID | str, FetchTopic] = {}
    for t, tid, p in parts:
        ft = topics.get(tid if tid.int else t)
        if ft is None:
            ft = topics[tid if tid.int else t] = FetchTopic(topic=t, topic_id=tid, partitions=[])
        ft.partitions.append(p)
    return list(topics.values())
