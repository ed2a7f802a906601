"""The simulator's results do not move when its code is made faster.

A short run of the bench's workload (the Azure trace stretched to 60 % of the pool's vCPUs) per
termination policy and reserve mode, each reduced to a fingerprint: the summary (less its wall
times), the audit events by kind, and digests of the per-VM table (every placement, victim and
launch with its times), of the timeline, of the audit details the simulator keeps (preemptions,
rejections and their reasons...) and of the live leases at the end. tests/data/sim_regression.json
holds the fingerprints the code gave before a speed-up (recorded at 4b402cf); a change that only
makes the code faster gives the same ones.
A change that means to alter a decision writes them afresh, and says so in its commit:

    python -m tests.unit.test_sim_regression --write [--nodes N --days D --out FILE]

With other --nodes/--days (and --out) the same module makes a larger check by hand: write the
fingerprints before a change, then compare after it with --check FILE.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from controller.config import ControllerConfig, ledger_settings
from controller.sim import traces
from controller.sim.engine import DAY, SimSettings, Simulation
from controller.sim.workload import stretch_to_load
from tests.bench import simulate as bench
from tests.unit.test_sim import AZURE as TRACE, azure  # noqa: F401  (the shared trace; azure is its fixture)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sim_regression.json"

NODES, DAYS = 60, 1.0
# most_recent is the default of the runs recorded at 4b402cf (victims terminated); default hibernates
SETTINGS = ("most_recent", "any", "least_loss", "reserve_static", "reserve_hint", "reserve_predictive_day",
            "reserve_wait", "idle_first", "default")
WALL = ("wall_seconds", "sim_events_per_s")


def digest(rows: Any) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def fingerprints(nodes: int = NODES, days: float = DAYS, names: tuple[str, ...] = SETTINGS) -> dict[str, Any]:
    requests, _ = stretch_to_load(traces.azure_requests(TRACE), days * DAY, 0.6, nodes * 16)
    runs = bench.settings_compared(nodes, days)
    out: dict[str, Any] = dict(nodes=nodes, days=days)
    for name in names:
        run = runs[name]
        sim = Simulation(requests, SimSettings(nodes=nodes, days=days, progress_seconds=0.0), run["backfill"],
                         ledger_settings(ControllerConfig()), reserves=run["reserves"],
                         reserve_settings=run.get("reserve_settings", bench.ReserveSettings()),
                         hints=run.get("hints", ()))
        summary = sim.run()
        out[name] = dict(figures={k: v for k, v in summary["figures"].items() if k not in WALL},
                         events=summary["events"], vm_rows=digest(sim.vm_rows()),
                         timeline=digest(sim.timeline_rows()), details=digest(sim.store.details),
                         leases=digest(sorted((l.lease_id, l.node_id, l.state, l.end_reason)
                                              for l in sim.ledger.leases.values())))
    return out


def test_the_simulator_gives_the_fingerprints_it_gave_before(azure):
    expected = json.loads(GOLDEN.read_text())
    got = fingerprints(expected["nodes"], expected["days"], tuple(k for k in expected if k not in ("nodes", "days")))
    for name in got:
        assert got[name] == expected[name], name




def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=NODES)
    p.add_argument("--days", type=float, default=DAYS)
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--out", type=Path, default=GOLDEN)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the fingerprints to --out")
    mode.add_argument("--check", type=Path, help="compare with the fingerprints in this file")
    args = p.parse_args(argv)
    got = fingerprints(args.nodes, args.days, tuple(args.settings.split(",")))
    if args.write:
        args.out.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return 0
    expected = json.loads(args.check.read_text())
    differ = [k for k in got if got[k] != expected.get(k)]
    print(json.dumps(dict(same=not differ, differ=differ, compared=sorted(got))))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
