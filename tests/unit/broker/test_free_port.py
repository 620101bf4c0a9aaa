"""Test brokers get ports outside the kernel's ephemeral range, so a broker killed and started again on its port
never finds it taken by an outgoing connection (or a client's TCP self-connect) made while it was down."""

from __future__ import annotations

import socket

from oncelog.testing.broker_process import _ephemeral_ports, free_port


def test_free_port_is_outside_the_ephemeral_range_and_bindable() -> None:
    lo, hi = _ephemeral_ports()
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # random, not one fixed port
    for port in ports:
        assert not lo <= port <= hi, (port, lo, hi)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # still free
