"""``AsyncAdmin``: the admin client on the running event loop (``async with AsyncAdmin({...}) as admin: ...``).

Its operations are grouped by what they act on: :mod:`.topics` (topics, partitions, configs: the controller and
the partition leaders), :mod:`.transactions` (transactions and producers: the transaction coordinators and the
leaders), :mod:`.groups` (consumer groups and their offsets: the group coordinators), all on :mod:`.base` (the
configuration, connections and request routing). Every method raises :class:`~oncelog.client.errors.KafkaError`
naming the topic/partition/group/transaction when the broker refuses; the values returned are in :mod:`.results`.
"""

from __future__ import annotations

from .groups import GroupAdmin
from .transactions import TransactionAdmin

__all__ = ["AsyncAdmin"]


class AsyncAdmin(TransactionAdmin, GroupAdmin):
    """Admin client on the running event loop. ``async with AsyncAdmin({...}) as admin: ...``."""
