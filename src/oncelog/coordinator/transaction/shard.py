"""The in-memory state of one ``__transaction_state`` partition, changed only by replaying its records.

``replay`` is the single way state changes, live or at start-up. A live record completes the pending transit of
the metadata that prepared it (the transit carries what the log lacks, such as the last producer epoch); a record
with no matching pending transit (loading) replaces the metadata with what the record says; a tombstone removes
the transactional id.

Timers (wall-clock ms, as the timestamps in the records): every replay that changes a transactional id schedules its
deadlines: ``timeouts`` at the end of an Ongoing transaction's timeout (start + transaction.timeout.ms; a KIP-939
transaction has none) and ``expirations`` when an idle Empty/Complete* id reaches transactional.id.expiration.ms
(last update + expiration). Any other state cancels them. The coordinator pops what is due
(``TransactionCoordinator.abort_timed_out_transactions`` / ``expire_transactional_ids``); nothing scans the ids.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..timers import DeadlineTimers
from .metadata import TransactionMetadata, TxnTransitMetadata
from .records import decode_key, decode_value
from .state import TxnState

__all__ = ["TransactionShard"]

log = logging.getLogger("oncelog.coordinator.transaction")

DEFAULT_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms


class TransactionShard:
    def __init__(self, partition: int, pid_index: dict[int, str] | None = None,
                 expiration_ms: int = DEFAULT_EXPIRATION_MS, on_timer: Callable[[int], None] | None = None) -> None:
        self.partition = partition
        self.expiration_ms = expiration_ms
        #: transactional id -> wall ms after which its Ongoing transaction has timed out
        self.timeouts: DeadlineTimers[str] = DeadlineTimers(on_timer)
        #: transactional id -> wall ms at which the idle id expires
        self.expirations: DeadlineTimers[str] = DeadlineTimers(on_timer)
        self.txns: dict[str, TransactionMetadata] = {}
        # metadata created by InitProducerId whose first record is not durable yet (not visible to anyone else)
        self.creating: dict[str, TransactionMetadata] = {}
        # producer id -> transactional id, shared by every shard of a coordinator
        self.pid_index: dict[int, str] = pid_index if pid_index is not None else {}
        self.last_offset = -1
        # (key, value, transactional id, transit) of the record the operation in flight is writing: its replay
        # then skips decoding what was just encoded (see ``expect``)
        self._hint: tuple[bytes, bytes, str, TxnTransitMetadata] | None = None

    def expect(self, key: bytes, value: bytes | None, txn_id: str, transit: TxnTransitMetadata) -> None:
        """The live operation is writing (key, value), the encoding of ``transit`` for ``txn_id``. When exactly
        these bytes objects are replayed and ``transit`` is still that id's pending transit, replay uses it
        instead of decoding the record — the same outcome, since a matching record completes the pending transit
        anyway. Anything else (loading, another record, a failed append) takes the decoding path."""
        self._hint = (key, value, txn_id, transit) if value is not None else None

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self.txns.get(transactional_id)

    def next_deadline(self) -> int | None:
        """The earliest timeout or expiration (wall ms), None when none is scheduled."""
        deadlines = [d for d in (self.timeouts.next_deadline(), self.expirations.next_deadline()) if d is not None]
        return min(deadlines, default=None)

    def schedule(self, txn_id: str, md: TransactionMetadata | None) -> None:
        """Schedule (or cancel) the timers of ``txn_id`` for its metadata as it is now."""
        if md is not None and md.state is TxnState.ONGOING and not md.is_distributed_two_phase_commit_txn():
            # timed out once start + timeout < now (Kafka's check is strict)
            self.timeouts.schedule(txn_id, md.txn_start_timestamp + md.txn_timeout_ms + 1)
        else:
            self.timeouts.cancel(txn_id)
        if md is not None and md.state.expiration_allowed:
            self.expirations.schedule(txn_id, md.txn_last_update_timestamp + self.expiration_ms)
        else:
            self.expirations.cancel(txn_id)

    def _unindex(self, md: TransactionMetadata) -> None:
        if self.pid_index.get(md.producer_id) == md.transactional_id:
            del self.pid_index[md.producer_id]

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """``__transaction_state`` holds no transactional batches, so no marker ever ends one here."""

    def replay(self, key: bytes | None, value: bytes | None, offset: int, producer_id: int = -1,
               producer_epoch: int = -1) -> None:
        self.last_offset = max(self.last_offset, offset)
        if key is None:
            return
        hint, self._hint = self._hint, None
        md: TransactionMetadata | None
        if hint is not None and key is hint[0] and value is hint[1]:
            txn_id = hint[2]
            md = self.txns.get(txn_id) or self.creating.get(txn_id)
            if md is not None and md.pending_transit is hint[3]:
                old_pid = md.producer_id
                md.complete_transition(hint[3])
                self._keep(txn_id, md, old_pid)
                return
        txn_id_or_none = decode_key(key)
        if txn_id_or_none is None:
            return  # another record type / key version: not ours
        txn_id = txn_id_or_none
        md = self.txns.get(txn_id) or self.creating.get(txn_id)
        if value is None:
            self.creating.pop(txn_id, None)
            old = self.txns.pop(txn_id, None)
            if old is not None:
                self._unindex(old)
            self.schedule(txn_id, None)
            return
        t = decode_value(value)
        pending = md.pending_transit if md is not None else None
        if md is not None and pending is not None and pending.state is t.state \
                and pending.producer_id == t.producer_id and pending.producer_epoch == t.producer_epoch:
            old_pid = md.producer_id
            md.complete_transition(pending)
        else:
            if md is not None and md.pending_state is not None:
                log.warning("%s: record %s at offset %d does not match the pending transition %s; taking the "
                            "record", txn_id, t.state.display_name, offset, md.pending_state.display_name)
            old_pid = md.producer_id if md is not None else -1
            md = TransactionMetadata.from_transit(txn_id, t)
        self._keep(txn_id, md, old_pid)

    def _keep(self, txn_id: str, md: TransactionMetadata, old_pid: int) -> None:
        if md.state is TxnState.DEAD:  # a Dead value (not a tombstone) also removes the id
            self.creating.pop(txn_id, None)
            self.txns.pop(txn_id, None)
            if old_pid >= 0 and self.pid_index.get(old_pid) == txn_id:
                del self.pid_index[old_pid]
            self.schedule(txn_id, None)
            return
        self.creating.pop(txn_id, None)
        self.txns[txn_id] = md
        self.schedule(txn_id, md)
        if old_pid != md.producer_id and old_pid >= 0 and self.pid_index.get(old_pid) == txn_id:
            del self.pid_index[old_pid]
        self.pid_index[md.producer_id] = txn_id
