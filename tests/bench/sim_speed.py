"""The simulator's speed against an earlier revision, measured alternately on the bench's month.

    python -m tests.bench.sim_speed [--baseline 56b7d95] [--rounds 3] [--nodes 1000] [--days 30]
                                    [--max-slowdown 0.25]

Runs `python -m controller.sim` (the Azure Packing 2020 requests stretched to 60 % of the pool's
vCPUs, nodes of 16 vCPUs and 64 GiB, backfill enabled at its defaults, VM-level work) in three
phases, alternated round after round so that the shared host's load falls on all of them alike:

- `baseline`: the --baseline revision (checked out in a temporary git worktree; by default the
  last commit before issue 24, "after the restructuring of the books");
- `ideal`: this tree with --agents ideal (the new placement, no agent modelling);
- `modelled`: this tree with --agents modelled (what the simulator now runs by default).

What is timed: each run's `wall_seconds` from its summary.json (Simulation.run(): the event loop
from the first report to the figures; reading and stretching the trace are not timed), and the
process's CPU seconds beside it. Prints every run's figures, the medians, and the ratios of the
medians (ideal / baseline: the price of the new rule, which also makes more events to run, since
packing preempts more: each run's events and events per second are printed beside; modelled /
ideal: the price of the modelling). Beside them, the wall milliseconds per VM made (backfill VMs
launched plus on-demand requests; both revisions report them), so that the cost of each VM's life
can be told apart from the number of lives the placement makes; it is reported, not a goal. Exits 1 if modelled / ideal exceeds 1 + --max-slowdown (the issue: at most 25 % for
the new modelling) or ideal / baseline does (no slower than before, with the same margin for
this host's noise); the JSON says which.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = "azure_packing_2020/vm_entry_list_5000.csv.gz"


def sim_command(tree: Path, out: Path, args: argparse.Namespace, agents: str | None) -> list[str]:
    command = [sys.executable, "-m", "controller.sim", "--requests", str(args.traces / TRACE), "--format", "azure",
               "--load", "0.6", "--nodes", str(args.nodes), "--days", str(args.days), "--backfill", "enabled=true",
               "--quiet", "--out", str(out)]
    return command + (["--agents", agents] if agents else [])


def vms_made(figures: dict) -> int:
    """VMs the run made: backfill VMs launched and on-demand requests (both revisions report them)."""
    return int(figures["backfill_vms_launched"]) + int(figures["requests_total"])


def run_once(tree: Path, args: argparse.Namespace, agents: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="gleaner-speed-") as out:
        started = time.perf_counter()
        before = os.times()
        subprocess.run(sim_command(tree, Path(out), args, agents), cwd=tree, check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(tree)))
        after = os.times()
        summary = json.loads((Path(out) / "summary.json").read_text())
    figures = summary["figures"]
    return dict(wall_s=figures["wall_seconds"], cpu_s=round(after.children_user - before.children_user +
                                                             after.children_system - before.children_system, 3),
                process_s=round(time.perf_counter() - started, 3), preemptions=figures["preemptions"],
                rejected=figures["requests_rejected"], vms=vms_made(figures), events=figures.get("sim_events"),
                events_per_s=figures.get("sim_events_per_s"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="56b7d95", help="git revision to compare with (default 56b7d95)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--max-slowdown", type=float, default=0.25)
    p.add_argument("--traces", type=Path, default=Path(os.environ.get("GLEANER_TRACES", ROOT.parent / "shared" /
                                                                       "traces")))
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    with tempfile.TemporaryDirectory(prefix="gleaner-baseline-") as where:
        baseline = Path(where) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            phases = {"baseline": (baseline, None), "ideal": (ROOT, "ideal"), "modelled": (ROOT, "modelled")}
            runs: dict[str, list[dict]] = {name: [] for name in phases}
            for round_number in range(args.rounds):
                order = list(phases) if round_number % 2 == 0 else list(reversed(phases))
                for name in order:
                    runs[name].append(run_once(*phases[name][:1], args, phases[name][1]))
                    print(f"round {round_number + 1} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    median = {name: statistics.median(r["wall_s"] for r in rows) for name, rows in runs.items()}
    per_vm = {name: statistics.median(r["wall_s"] / r["vms"] * 1e3 for r in rows) for name, rows in runs.items()}
    ratios = dict(ideal_vs_baseline=round(median["ideal"] / median["baseline"], 3),
                  modelled_vs_ideal=round(median["modelled"] / median["ideal"], 3),
                  ideal_vs_baseline_per_vm=round(per_vm["ideal"] / per_vm["baseline"], 3))
    limit = 1 + args.max_slowdown
    met = dict(modelling=ratios["modelled_vs_ideal"] <= limit, no_slower=ratios["ideal_vs_baseline"] <= limit)
    print(json.dumps(dict(baseline=args.baseline, nodes=args.nodes, days=args.days, runs=runs,
                          median_wall_s=median,
                          median_ms_per_vm={k: round(v, 4) for k, v in per_vm.items()}, ratios=ratios, limit=limit, met=met), indent=2))
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
