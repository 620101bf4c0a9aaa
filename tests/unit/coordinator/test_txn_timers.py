"""Transaction timeouts and transactional-id expiry as timers keyed by deadline (hardening issue, defect 5).

Before: the broker scanned every transactional id every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``
(10 s) for timed-out transactions and every hour for expired ids. Now every replay schedules the id's deadline on its
shard (``TransactionShard.timeouts`` / ``expirations``) and the coordinator fires only what is due.
"""

from __future__ import annotations

import asyncio

from oncelog.coordinator.transaction.state import TxnState
from oncelog.testing import MockClock

from .txn_fakes import FakeLog, load_all, make_coordinator


def test_transaction_timeout_and_id_expiration_are_timers_at_their_deadlines() -> None:
    async def main() -> None:
        clock, log = MockClock(), FakeLog()
        coord = make_coordinator(log=log, clock=clock, transactional_id_expiration_ms=60_000)
        await load_all(coord, log)
        told: list[int] = []
        coord.on_timer = told.append
        _, pid, epoch = await coord.init_producer_id("slow", 1_000)
        created = clock.wall_ms()
        assert coord.next_deadline() == created + 60_000  # an idle (Empty) id expires 60 s after its last update
        clock.advance(10)
        await coord.add_partitions("slow", pid, epoch, [("t", 0)])
        started = clock.wall_ms()
        # Ongoing: the expiration is cancelled, the timeout is the earliest deadline (start + timeout < now)
        assert coord.next_deadline() == started + 1_001 and told[-1] == started + 1_001
        clock.advance(1_000)
        assert await coord.fire_timers() == []
        clock.advance(1)
        assert await coord.fire_timers() == ["slow"]
        await coord.wait_idle()
        shard = coord.runtime.shard(coord.partition_for("slow"))
        assert shard is not None and shard.txns["slow"].state is TxnState.COMPLETE_ABORT
        completed = shard.txns["slow"].txn_last_update_timestamp
        assert coord.next_deadline() == completed + 60_000
        clock.advance(completed + 60_000 - 1 - clock.wall_ms())
        assert await coord.fire_timers() == []
        clock.advance(1)
        assert await coord.fire_timers() == ["slow"]
        assert coord.next_deadline() is None and "slow" not in shard.txns
        await coord.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_due_timeout_of_a_transaction_with_a_write_in_flight_is_looked_at_again() -> None:
    async def main() -> None:
        clock, log = MockClock(), FakeLog()
        coord = make_coordinator(log=log, clock=clock)
        await load_all(coord, log)
        _, pid, epoch = await coord.init_producer_id("t1", 1_000)
        await coord.add_partitions("t1", pid, epoch, [("t", 0)])
        shard = coord.runtime.shard(coord.partition_for("t1"))
        assert shard is not None
        md = shard.txns["t1"]
        clock.advance(1_001)
        md.pending_state = TxnState.PREPARE_COMMIT  # an EndTxn write in flight
        assert await coord.abort_timed_out_transactions() == []
        assert shard.timeouts.deadline("t1") == clock.wall_ms() + 1_000
        md.pending_state = None  # ...that failed: nothing was replayed
        clock.advance(1_000)
        assert await coord.abort_timed_out_transactions() == ["t1"]
        await coord.wait_idle()
        await coord.close()

    asyncio.run(asyncio.wait_for(main(), 10))
