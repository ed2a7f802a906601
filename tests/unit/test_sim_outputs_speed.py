"""idle_first's cost in the simulator (issue 24, item 4): its CPU notes read only the VMs that
turned (Simulation.cpu_notes_of_turned_only) and a change of its clocks alone rebuilds only the
node's ladder (Views.clock_rebuilds_light). Both change no decision: small runs of the shipped
week's workload (the Azure requests at 60 % of the pool, SDSC-SP2 jobs of at most 2,089 s at
50 %) under idle_first, task-level with and without the guests' work channel, with foreground
demand series, and VM-level, give the same per-VM table (every placement, victim and launch, with
its times) and the same audit events by kind with the speed-ups on and off.

At 56b7d95 (before the speed-ups) these runs gave the same digests as with them (checked by hand
with `python -m tests.unit.test_sim_outputs_speed`, which prints them).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from controller.core.views import Views
from controller.sim import cli
from controller.sim.engine import Simulation
from tests.bench import simulate as simulate_bench

REPO = Path(__file__).resolve().parents[2]
# beside the repository, as on every machine of the project (as tests/unit/test_sim.py finds them)
SHARED = Path(os.environ.get("GLEANER_TRACES", simulate_bench.TRACES))
REQUESTS = REPO / "controller" / "sim" / "examples" / "azure-on-demand.csv.gz"

BASE = ["--nodes", "12", "--days", "1", "--requests", str(REQUESTS), "--format", "csv", "--load", "0.6", "--quiet"]
JOBS = ["--backfill-jobs", "{shared}/swf/SDSC-SP2-1998-4.2-cln.swf.gz", "--backfill-jobs-load", "0.5",
        "--backfill-jobs-max-runtime", "2089"]
IDLE_FIRST = ["--backfill", "enabled=true", "termination_policy=idle_first", "interruption=terminate"]
RUNS = {
    "idle_first_tasks": IDLE_FIRST + JOBS,
    "idle_first_tasks_channel": IDLE_FIRST + JOBS + ["--guest-work-channel"],
    "idle_first_tasks_demand": IDLE_FIRST + JOBS + [
        "--demand", "{shared}/bitbrains_rnd/bitbrains_rnd_2013-7_first7d_100vms.tar.gz"],
    "idle_first_vm_level": IDLE_FIRST,
}


def fingerprint(name: str, out: Path) -> str:
    """The digest of one run's per-VM table and audit events by kind."""
    argv = BASE + [a.format(shared=SHARED) for a in RUNS[name]] + ["--out", str(out / name)]
    assert cli.main(argv) == 0
    vms = (out / name / "vms.csv").read_bytes()
    events = json.loads((out / name / "summary.json").read_text())["events"]
    assert events.get("vm.preempted", 0) > 0   # the runs preempt: victims' clocks are read
    return hashlib.sha256(vms + json.dumps(events, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(RUNS))
def test_idle_first_speed_ups_keep_every_decision(name, tmp_path, monkeypatch, capsys):
    if not SHARED.exists():
        pytest.fail(f"the shared traces are missing ({SHARED})", pytrace=False)
    fast = fingerprint(name, tmp_path / "fast")
    monkeypatch.setattr(Simulation, "cpu_notes_of_turned_only", False)
    monkeypatch.setattr(Views, "clock_rebuilds_light", False)
    assert fingerprint(name, tmp_path / "whole") == fast


if __name__ == "__main__":   # print the digests of the code checked out
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        digests = {name: fingerprint(name, Path(tmp)) for name in RUNS}
    print(json.dumps(digests, indent=4))
