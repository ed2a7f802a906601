"""The simulator's scripted steps (engine.Scripted): nodes that join late and releases by request
id, and the parity sequence (tests/parity.py) through the simulator alone. The live half of the
parity test is tests/integration/test_parity.py."""
from __future__ import annotations

import pytest

from controller.core.records import BackfillConfig
from controller.sim.engine import Scripted, SimSettings, Simulation
from controller.sim.traces import OnDemandRequest
from tests import parity


def small(days_seconds: float = 1000.0, nodes: int = 2) -> SimSettings:
    return SimSettings(nodes=nodes, node_cpus=4, node_memory_mib=4096, days=days_seconds / 86400,
                       progress_seconds=0.0)


def test_the_parity_sequence_through_the_simulator_gives_the_worked_out_outcome():
    _sim, got = parity.run_sim(16, 8192)
    assert got == parity.EXPECTED


def test_a_node_that_joins_late_gets_backfill_only_from_then():
    sim = Simulation([], small(), BackfillConfig(enabled=True, vcpus=4, interruption="terminate"), script=[Scripted(500.0, "join", "n1")])
    sim.run()
    by_node = {}
    for lease in sim.store.leases.values():
        by_node.setdefault(lease.node_id, []).append(lease.created_at)
    assert by_node["n0"] == [0.0]
    assert by_node["n1"] == [500.0]   # its first report is a node.joined: the launcher runs at once
    assert sim.store.events["node.joined"] == 2


def test_a_scripted_release_ends_the_requests_vm_and_backfill_takes_the_room_back():
    requests = [OnDemandRequest(100.0, 4, 512, None, "me", "r1")]
    sim = Simulation(requests, small(nodes=1), BackfillConfig(enabled=True, vcpus=4, interruption="terminate"),
                     script=[Scripted(300.0, "release", "r1"), Scripted(400.0, "release", "r1"),
                             Scripted(400.0, "release", "never-asked")])
    sim.run()
    (od,) = [l for l in sim.store.leases.values() if l.role == "on_demand"]
    assert od.state == "ended" and 300.0 <= od.ended_at < 320.0 and od.end_reason.startswith("released")
    assert sim.released == 1    # the second release of r1 and the unknown request do nothing
    backfill = sorted(l.created_at for l in sim.store.leases.values() if l.role == "backfill")
    # back once the prediction of foreground demand has forgotten the VM (its window of 30
    # periodic reports, 60 s) and the launcher runs again (every retry_seconds, 300 s), as live
    assert backfill[0] == 0.0 and 360.0 <= backfill[-1] <= 300.0 + 60.0 + 300.0 and len(backfill) == 2


@pytest.mark.parametrize("step, message", [
    (Scripted(0.0, "leave", "n0"), "the action is one of join, release"),
    (Scripted(0.0, "join", "n7"), "no node 'n7'"),
])
def test_bad_scripted_steps_are_refused(step, message):
    with pytest.raises(ValueError, match=message):
        Simulation([], small(), script=[step])
