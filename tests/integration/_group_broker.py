"""``python _group_broker.py serve ...``: the oncelog CLI with the group coordinator started by the broker.

Used by test_groups.py until ``Broker.start/stop`` call ``start_group_coordinator/stop_group_coordinator``
themselves; once they do, this launcher changes nothing.
"""

from __future__ import annotations

import inspect

from oncelog.broker import server
from oncelog.broker.coordinators.groups import start_group_coordinator, stop_group_coordinator


def wired() -> bool:
    return "start_group_coordinator" in inspect.getsource(server)


if not wired():
    _start, _stop = server.Broker.start, server.Broker.stop

    async def start(self: server.Broker) -> None:
        await _start(self)
        await start_group_coordinator(self)

    async def stop(self: server.Broker) -> None:
        await stop_group_coordinator(self)
        await _stop(self)

    server.Broker.start = start  # type: ignore[method-assign]
    server.Broker.stop = stop  # type: ignore[method-assign]

if __name__ == "__main__":
    import sys

    from oncelog.cli.main import main

    sys.exit(main())
