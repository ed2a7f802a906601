"""Levers on lost work under the placement promise (issue 24), on a week of 100 nodes.

    python -m tests.bench.placement_levers [--nodes 100] [--days 7] [--backfill-jobs swf/FILE.swf.gz]
                                           [--only NAME[,NAME...]]

The workload is tests/bench/simulate.py's (Azure requests at 60 % of the pool's vCPUs, serial jobs
of an SWF trace in the backfill VMs at 50 %, the modelled agents, releases on schedule). Each
entry is one run; the variants that are not the product's are made here by replacing one pure
function of the core for the run (named in the entry), so that what is measured is exactly that
change:

- `most_recent`, `idle_first`: the product, by termination policy;
- `tie_equal_allocation_*`: the tie rule the issue first gave (backfill chooses among any
  best-fit nodes of equal on-demand allocation, not only empty ones): it breaks the promise
  (`rejected_beyond_no_backfill` > 0), and is here to show by how much and what it saves;
- `holes_*_T`: no new backfill on a node whose on-demand VMs hold at least T of its memory (the
  holes beside on-demand VMs are where packing sends the next requests): lost work against
  utilization, the frontier;
- `soft_{day,week}_*`: Balancer's soft predictive reserve (in the product), its nodes chosen as
  the product does (`current`), kept until they are free (`sticky`), or where on-demand lands
  next, the most on-demand first (`packing`).

Prints one JSON object: per entry the rejections (and those beyond the run without backfill, one
by one), utilization and utilization_working, job time lost, preemptions and the wait p99.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from controller.core import filling, policy, reserves
from controller.core.records import BackfillConfig, Policy
from controller.core.reserve_settings import PredictiveMode, ReserveSettings
from controller.sim import traces
from controller.sim.cli import jobs_at_load
from controller.sim.engine import DAY, SimSettings
from controller.sim.workload import stretch_to_load
from tests.bench import simulate as bench

FIGURES = ("rejected", "rejected_beyond_no_backfill", "utilization", "utilization_working", "job_lost_share",
           "preemptions", "on_demand_wait_p99_s")


@contextmanager
def replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def no_backfill_beside_on_demand(share: float) -> Callable:
    """plan_backfill that leaves out the nodes whose on-demand VMs hold at least `share` of their memory."""
    real = filling.plan_backfill

    def plan(pool, config, targets=None, cpu_room=None):
        if targets is not None:
            position = pool.columns.position
            targets = [t for t in targets if t not in position or pool.nodes[position[t]].on_demand_memory_mib <
                       share * pool.nodes[position[t]].capacity.memory_mib]
        return real(pool, config, targets, cpu_room)
    return plan


def soft_reserve_in_order(order: str) -> Callable:
    """soft_reserved with its nodes taken `sticky` (kept ones first, whatever runs there) or by
    `packing` (the most on-demand first, kept ones first among equals)."""
    def soft(pool, target, kept):
        c, nodes = pool.columns, pool.nodes
        kept_rows = {i for i in (c.position.get(n) for n in kept) if i is not None}
        share = reserves.on_demand_share
        if order == "sticky":
            def key(i): return (i not in kept_rows, int(c.backfill_vms[i]), -share(nodes[i]), nodes[i].node_id)
        else:
            def key(i): return (-round(share(nodes[i]), 3), i not in kept_rows, int(c.backfill_vms[i]), nodes[i].node_id)
        ordered = sorted(np.flatnonzero(c.up).tolist(), key=key)
        chosen = reserves._cheapest_until(((share(nodes[i]), nodes[i]) for i in ordered), target.nodes, target.idle)
        return reserves._reserved(chosen, (), target.nodes, [share(n) for n in chosen])
    return soft


def entries() -> dict[str, tuple[Policy, ReserveSettings, list[tuple[Any, str, Any]]]]:
    """Name -> (policy, reserve settings, the replacements (module, name, value) for the run)."""
    runs: dict[str, tuple[Policy, ReserveSettings, list]] = {}
    for policy_ in (Policy.MOST_RECENT, Policy.IDLE_FIRST):
        p = policy_.value
        runs[p] = (policy_, ReserveSettings(), [])
        runs[f"tie_equal_allocation_{p}"] = (policy_, ReserveSettings(),
                                             [(policy, "_holds_on_demand", lambda c, row: False)])
        for share in (0.75, 0.5, 0.25, 1e-9):
            runs[f"holes_{p}_{share:g}"] = (policy_, ReserveSettings(),
                                           [(filling, "plan_backfill", no_backfill_beside_on_demand(share))])
        for mode in (PredictiveMode.DAY, PredictiveMode.WEEK):
            soft = ReserveSettings(predictive=mode, drain=False)
            runs[f"soft_{mode.value}_current_{p}"] = (policy_, soft, [])
            for order in ("sticky", "packing"):
                runs[f"soft_{mode.value}_{order}_{p}"] = (policy_, soft,
                                                         [(reserves, "soft_reserved", soft_reserve_in_order(order))])
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--traces", type=Path, default=bench.TRACES)
    p.add_argument("--backfill-jobs", default=bench.JOBS)
    p.add_argument("--only", type=lambda v: [x for x in v.split(",") if x], default=[])
    args = p.parse_args(argv)
    runs = entries()
    unknown = set(args.only) - set(runs)
    if unknown:
        p.error(f"--only: unknown {', '.join(sorted(unknown))}; known: {', '.join(runs)}")
    settings = SimSettings(nodes=args.nodes, days=args.days, progress_seconds=0, release_on_schedule=True,
                           agents="modelled")
    requests, _ = stretch_to_load(traces.azure_requests(args.traces / bench.AZURE), args.days * DAY, 0.6,
                                  settings.pool_vcpus)
    jobs, _ = jobs_at_load(traces.swf_jobs(args.traces / args.backfill_jobs), 1, args.days * DAY, bench.JOBS_LOAD,
                           settings.pool_vcpus)
    base = bench.run_one(bench.NO_BACKFILL, requests, settings, BackfillConfig(enabled=False), {}, {}, jobs=jobs)
    out: dict[str, Any] = dict(nodes=args.nodes, days=args.days, backfill_jobs=args.backfill_jobs)
    for name, (policy_, reserve_settings, replacements) in runs.items():
        if args.only and name not in args.only:
            continue
        started = time.perf_counter()
        with _all_replaced(replacements):
            result = bench.run_one(name, requests, settings, BackfillConfig(enabled=True, termination_policy=policy_),
                                   {}, {}, reserve_settings=reserve_settings, jobs=jobs)
        result = bench.against_baseline(result, base, base["outcomes"])
        out[name] = {k: result[k] for k in FIGURES}
        print(f"{name}: {out[name]} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=2))
    return 0


@contextmanager
def _all_replaced(replacements: list[tuple[Any, str, Any]]) -> Iterator[None]:
    if not replacements:
        yield
        return
    (module, name, value), *rest = replacements
    with replaced(module, name, value), _all_replaced(rest):
        yield


if __name__ == "__main__":
    sys.exit(main())
