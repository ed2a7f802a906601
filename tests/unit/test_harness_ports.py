"""The test harness's listening ports (tests/agentproc.py free_port) come from outside the
kernel's ephemeral range, so no connection's source port can take one before its daemon binds."""
from __future__ import annotations

import socket
from pathlib import Path

from tests.agentproc import PORTS, free_port


def test_free_ports_are_bindable_and_outside_the_ephemeral_range():
    low, _high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = {free_port() for _ in range(50)}
    assert all(PORTS[0] <= p < PORTS[1] < low for p in ports)
    assert len(ports) > 40   # random picks, not one port over and over
    for port in list(ports)[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
