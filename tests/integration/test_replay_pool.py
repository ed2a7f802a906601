"""Replay end to end (issue 24, item 3): a small live pool records itself, and the simulator,
fed the recording with the agents' recorded answers, makes the same decisions one by one.

The live pool (tests/replay_pool.py): a real controller process with [record] on, and three
real agent processes on libvirt's test:/// driver (no QEMU, no domain of the local libvirtd),
mutual TLS, reporting every 0.5 s. Backfill fills every node; then four requests, two of each
size, preempt backfill on both paths (instant: the new VM's memory fits beside its victims;
after_victims: it needs theirs), and their releases make backfill refill the room. The
comparison (controller/sim/replay_compare.py): each request's placement (outcome, node, path)
and its victims (by stable key). The bench (tests/bench/replay.py) does the same on a larger
pool over minutes, and the prediction.
"""
from __future__ import annotations

import pytest

from controller.recording import read_recording
from controller.sim.replay import load, replay
from controller.sim.replay_compare import compare, decisions
from tests.replay_pool import LivePool, ScriptRequest, sizes_for

pytestmark = pytest.mark.libvirt


def test_a_recorded_test_pool_replays_to_the_same_placements_and_victims(test_env):
    pool = LivePool(test_env, nodes=3, name="rpl")
    try:
        pool.start()
        sizes = sizes_for(*pool.node_size())
        pool.fill_with_backfill()
        script = [ScriptRequest(0.5, "rpl-1", *sizes.small, hold=6.0),
                  ScriptRequest(2.0, "rpl-2", *sizes.large, hold=4.0),
                  ScriptRequest(3.5, "rpl-3", *sizes.small, hold=5.0),
                  ScriptRequest(5.0, "rpl-4", *sizes.large, hold=3.0)]
        outcomes = pool.play(script)
        assert set(outcomes.values()) == {"placed"}, outcomes
        pool.settle()
    finally:
        pool.stop()   # the controller closes its recording as it stops
    lines = read_recording(pool.recording)
    live = decisions(lines)
    assert {d.path for d in live.values()} == {"instant", "after_victims"}
    assert all(d.victims for d in live.values())
    assert any(line["kind"] == "stop_answer" for line in lines) and lines[-1]["kind"] != "stopped"

    recording = load(pool.recording)
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.items == 8
    assert result.differences == [], result.differences
    assert all(c["live"] == c["replay"] for c in result.backfill_made.values()), result.backfill_made
    refills = [line for line in replayed if line["kind"] == "lease" and line["role"] == "backfill"
               and line["t"] > recording.requests[0]["t"]]
    assert refills, "the releases were not refilled"
