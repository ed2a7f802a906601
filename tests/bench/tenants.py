"""`python -m tests.bench.tenants`: tenants in the simulator (issue 26): PhoenixCloud's bounds and
RHIC's goal-driven sizing run by the live controller's books (controller/sim/tenants.py) on
traces with several owners. Prints one JSON object; exit 1 when a goal fails.

What is run and measured (simulated time; the pool is NODES nodes of 16 vCPUs and 64 GiB, the
modelled agents, each run with its own seed):

- per-tenant runs (``per_tenant``), DAYS days each, every figure of
  controller/sim/tenant_figures.py per tenant, with ``lower_bound_violations`` and
  ``upper_bound_violations`` (goal 0 for each, summed over the runs):
  - ``azure``: the Azure Packing 2020 sample stretched to LOAD of the pool's vCPUs; it has no
    owners, so its VMs go by hash of their id to two on-demand tenants (shares 0.5 and 0.3, the
    rest to the built-in default tenant); two batch tenants share backfill by PSF (``bulk``:
    SDSC-SP2's jobs that fit a 4-vCPU VM, stretched to JOBS_LOAD; ``science``: a goal run of the
    kind below, starting at 6 h);
  - ``swf``: SDSC-SP2's jobs as on-demand VMs (procs vCPUs, 4 GiB each), stretched to LOAD, by
    SWF user: the two users with the most requests in the run are tenants of their own, a third tenant takes 0.4 of the
    other users' jobs by hash, the rest default; batch tenant ``bulk`` with CTC-SP2's jobs.
- goal runs (``goal_runs``): the azure setting, a batch tenant ``science`` with lower bound
  LOWER_VCPUS and W = WORK_VCPU_HOURS vCPU-hours of 1-vCPU jobs of 600 s, started at each of
  STARTS (each with its own agents' seed, from --seed-base) with its deadline at 1.5 and 3 x W /
  LOWER_VCPUS (the time W takes on its lower bound alone), and at the time its jobs take on the
  residual the books predict for it at its start alone (whole jobs in waves:
  tenant_config.on_residual_s): 3 x len(STARTS) runs per set of seeds, SEED_SETS sets
  (--seed-sets; set k's seeds start at --seed-base + 100 k), the figures pooled over all the
  runs and given per set beside (``per_seed_set``). Each run simulates to its start plus twice
  its deadline's span. Beside each run, RHIC's yardstick, an exhaustive search in hindsight
  (hindsight_search): the same run with the tenant's dedicated vCPUs pinned from its start, for
  the least that meets the deadline (None: none within its lower bound does). Figures:
  - ``deadline_met_share``: the share of the runs some pinned size meets whose last job finished
    by the deadline (goal >= 0.95; RHIC met 19 of its 24); ``deadline_met_share_all_runs`` and
    ``runs_no_size_meets`` beside it;
  - ``finish_error_at_half``: per run, at half its elapsed time the books' latest projected finish,
    |projected - actual| / (actual - start); the bench's figure is the mean over the runs that
    finished (goal <= 0.10), with the largest beside it;
  - ``dedicated_over_hindsight``: the dedicated vCPU-hours the books bought over the search's
    (d x its run's time to finish), summed over the runs some size meets (goal <= 1.10; when the
    search needed none anywhere, the goal holds only if none was bought either);
    ``model_hindsight_dedicated_vcpu_hours``, tenant_figures' model of the least (goals.project
    over the residual the run saw), beside it.
- ``wall_seconds``: the wall time of the whole bench (traces read once; --processes goal runs at
  once, 2 by default; the default 8 sets of seeds took 451 s on this project's 2-core machines).

Backfill in every run: 1-vCPU, 4 GiB VMs (one job each), retry_seconds 60 (the launcher's period
when nothing asks for a fill; goals are sized by their own job every 60 s, as live) and
interruption=terminate (a hibernated VM's jobs stand still while it
sleeps, up to hibernate_wait_seconds: a deadline cannot wait for that).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.config import ControllerConfig, ledger_settings
from controller.core.records import BackfillConfig
from controller.sim import traces
from controller.sim.engine import DAY, HOUR, SimSettings
from controller.sim.tenants import TenantSimulation, assign_requests, tenants_config
from controller.sim.workload import stretch_to_load

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
if not SHARED.exists():
    SHARED = Path("/work/shared/traces")
AZURE = SHARED / "azure_packing_2020" / "vm_entry_list_5000.csv.gz"
SDSC = SHARED / "swf" / "SDSC-SP2-1998-4.2-cln.swf.gz"
CTC = SHARED / "swf" / "CTC-SP2-1996-3.1-cln.swf.gz"

NODES = 40
DAYS = 2.0
LOAD = 0.6
JOBS_LOAD = 0.5
LOWER_VCPUS = 64
WORK_VCPU_HOURS = 128.0
STARTS = tuple(h * HOUR for h in (6, 14, 22, 30, 2, 10, 18, 26))   # 24 goal runs, as RHIC's evaluation had
MIB_PER_VCPU = 4096
VM_VCPUS, VM_MIB = 1, 4096   # backfill and dedicated VMs: one 1-vCPU job each (smaller VMs fit the gaps on-demand VMs leave)
BACKFILL = BackfillConfig(enabled=True, vcpus=VM_VCPUS, memory_mb=VM_MIB, retry_seconds=60, interruption="terminate")
SEED_SETS = 8          # sets of goal runs judged together (--seed-sets)
SEED_SET_STEP = 100    # set k's seeds start at --seed-base + 100 k (len(STARTS) of them)
MAX_SEED_SETS = 100
GOALS = dict(lower_bound_violations=0, upper_bound_violations=0, deadline_met_share=0.95,
             finish_error_at_half=0.10, dedicated_over_hindsight=1.10)


def bounds(lower: int, upper: int) -> dict[str, Any]:
    return dict(lower=dict(vcpus=lower, memory_mib=lower * MIB_PER_VCPU),
                upper=dict(vcpus=upper, memory_mib=upper * MIB_PER_VCPU))


def science(start_s: float, deadline: dict[str, Any]) -> dict[str, Any]:
    """The goal-driven batch tenant: W vCPU-hours of 1-vCPU jobs of 600 s from start_s."""
    return dict(name="science", kind="batch", **bounds(LOWER_VCPUS, 256), start_s=start_s,
                backfill=dict(vcpus=VM_VCPUS, memory_mb=VM_MIB),
                goal=dict(kind="deadline", work_vcpu_hours=WORK_VCPU_HOURS, **deadline),
                work=dict(vcpu_hours=WORK_VCPU_HOURS, procs=1, runtime_s=600))


def azure_tenants(goal_tenant: dict[str, Any]) -> dict[str, Any]:
    return dict(rbt=1.5, urr=0.8, assign=dict(on_demand_key="owner", batch_key="swf_user"), tenants=[
        dict(name="web", kind="on_demand", **bounds(96, 256), share=0.5),
        dict(name="api", kind="on_demand", **bounds(64, 160), share=0.3),
        dict(name="bulk", kind="batch", **bounds(32, 256), share=1.0, backfill=dict(vcpus=VM_VCPUS, memory_mb=VM_MIB)),
        goal_tenant,
        dict(name="backfill", kind="batch", **bounds(0, 0), backfill=dict(enabled=False))])


def swf_tenants(top_users: list[str]) -> dict[str, Any]:
    return dict(rbt=1.5, urr=0.8, assign=dict(on_demand_key="swf_user", batch_key="swf_user"), tenants=[
        dict(name="lab1", kind="on_demand", **bounds(96, 256), owners=[top_users[0]]),
        dict(name="lab2", kind="on_demand", **bounds(64, 192), owners=[top_users[1]]),
        dict(name="dept", kind="on_demand", **bounds(64, 256), share=0.4),
        dict(name="bulk", kind="batch", **bounds(32, 256), share=1.0, backfill=dict(vcpus=VM_VCPUS, memory_mb=VM_MIB)),
        dict(name="backfill", kind="batch", **bounds(0, 0), backfill=dict(enabled=False))])


def shaped(items: list, load: float) -> list:
    return stretch_to_load(items, DAYS * DAY, load, NODES * 16)[0]


def run(config: dict[str, Any], requests: list, jobs: list, days: float, seed: int,
        fmt: str = "csv", swf_path: Path | None = None, pinned: dict[str, int] | None = None) -> dict[str, Any]:
    """One simulation with tenants; its summary (figures, per-tenant figures). `pinned`: tenants
    whose dedicated vCPUs are held fixed in place of their goal's sizing (the hindsight search)."""
    tenants = tenants_config(config, "bench")
    mine = assign_requests(requests, tenants, fmt, swf_path)
    settings = SimSettings(nodes=NODES, days=days, progress_seconds=0.0, agents="modelled", seed=seed)
    sim = TenantSimulation(tenants, mine, settings, BACKFILL, ledger_settings(ControllerConfig()), trace_jobs=jobs,
                           pinned_dedicated=pinned)
    return sim.run()


def per_tenant_runs(azure: list, sdsc_requests: list, sdsc_jobs: list, ctc_jobs: list) -> list[dict[str, Any]]:
    out = []
    summary = run(azure_tenants(science(STARTS[0], dict(deadline_after_s=3 * WORK_VCPU_HOURS / LOWER_VCPUS * HOUR))),
                  azure, sdsc_jobs, DAYS, seed=100)
    out.append(dict(trace="azure", tenants=summary["tenants"], **_violations(summary)))
    users = _top_users(SDSC, sdsc_requests)
    summary = run(swf_tenants(users), sdsc_requests, ctc_jobs, DAYS, seed=101, fmt="swf", swf_path=SDSC)
    out.append(dict(trace="swf", top_users=users, tenants=summary["tenants"], **_violations(summary)))
    return out


def _violations(summary: dict[str, Any]) -> dict[str, int]:
    return dict(lower_bound_violations=summary["figures"]["lower_bound_violations"],
                upper_bound_violations=summary["figures"]["upper_bound_violations"])


def _top_users(path: Path, requests: list) -> list[str]:
    """The two users with the most requests in the run (the shaped trace, tiled copies too)."""
    user = {job.job_id: job.user for job in traces.swf_jobs(path)}
    counts: dict[int, int] = {}
    for request in requests:
        who = user[request.request_id.partition("#")[0]]
        counts[who] = counts.get(who, 0) + 1
    return [str(u) for u, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:2]]


DEADLINES = (("1.5x_lower", dict(deadline_after_s=1.5 * WORK_VCPU_HOURS / LOWER_VCPUS * HOUR)),
             ("3x_lower", dict(deadline_after_s=3.0 * WORK_VCPU_HOURS / LOWER_VCPUS * HOUR)),
             ("on_residual", dict(deadline_on_residual=True)))


def goal_run(azure: list, jobs: list, start: float, which: str, deadline: dict[str, Any], seed: int) -> dict[str, Any]:
    """One goal run; its science tenant's goal figures, and the hindsight search's beside them."""
    goal = _science_goal(azure, jobs, start, deadline, seed)
    summary_figures = goal.pop("violations")
    # tenant_figures' hindsight is a model (goals.project over the residual the run saw, at its
    # measured rate): kept beside, not judged; the judged one is the search below
    model = dict(model_hindsight_dedicated_vcpu_hours=goal.pop("hindsight_dedicated_vcpu_hours"),
                 model_hindsight_over_held_dedicated_vcpu_hours=goal.pop("hindsight_over_held_dedicated_vcpu_hours"))
    search = hindsight_search(azure, jobs, start, deadline, seed)
    return dict(start_h=start / HOUR, deadline=which, seed=seed, **goal, **search, **model, **summary_figures)


def _science_goal(azure: list, jobs: list, start: float, deadline: dict[str, Any], seed: int,
                  pinned: int | None = None) -> dict[str, Any]:
    span = deadline.get("deadline_after_s", 3 * WORK_VCPU_HOURS / LOWER_VCPUS * HOUR)
    summary = run(azure_tenants(science(start, deadline)), azure, jobs, (start + 2 * span) / DAY, seed,
                  pinned=None if pinned is None else {"science": pinned})
    return dict(summary["tenants"]["science"]["goal"], violations=_violations(summary))


def hindsight_search(azure: list, jobs: list, start: float, deadline: dict[str, Any], seed: int) -> dict[str, Any]:
    """RHIC's yardstick, an exhaustive search in hindsight: the same run (same trace, same seed)
    with the tenant's dedicated vCPUs pinned at d from its start and every volunteer granted,
    for the least whole d in 0..LOWER_VCPUS whose run meets the deadline (found by bisection:
    more dedicated capacity never finishes later; each probe is a whole simulation). Its cost is
    d x (its finish - start): those VMs released as its last job ends. None: not even
    d = LOWER_VCPUS met it."""
    probes: dict[int, dict[str, Any]] = {}

    def met(d: int) -> bool:
        if d not in probes:
            probes[d] = _science_goal(azure, jobs, start, deadline, seed, pinned=d)
        return bool(probes[d]["met"])
    best = least_meeting(met, LOWER_VCPUS)
    cost = None if best is None else best * (probes[best]["finished_s"] - start) / HOUR   # released at its finish
    return dict(hindsight_dedicated_vcpus=best, hindsight_dedicated_vcpu_hours=None if cost is None else round(cost, 3),
                hindsight_probes={d: bool(p["met"]) for d, p in sorted(probes.items())})


def least_meeting(met: Callable[[int], bool], high: int) -> int | None:
    """The least d in 0..high with met(d), by bisection (met is taken as monotone: more dedicated
    capacity never finishes later); None when not even met(high). Asks met(0) first: most runs
    need none."""
    low = 0
    if met(low):
        return low
    if not met(high):
        return None
    while high - low > 1:   # met(high), not met(low)
        middle = (low + high) // 2
        low, high = (low, middle) if met(middle) else (middle, high)
    return high


_TRACES: tuple[list, list] = ([], [])   # the goal runs' traces, read once before the worker processes fork


def _goal_case(case: tuple[float, str, dict[str, Any], int]) -> dict[str, Any]:
    start, which, deadline, seed = case
    return goal_run(*_TRACES, start, which, deadline, seed)


def judge(per_tenant: list[dict[str, Any]], goals: list[dict[str, Any]]) -> dict[str, Any]:
    """The bench's figures from the runs, and which goals failed."""
    met = [g["met"] for g in goals]
    errors = [g["finish_error_at_half"] for g in goals if g["finish_error_at_half"] is not None]
    # the runs some pinned size met: a run no size meets has no hindsight to be measured against
    known = [g for g in goals if g["hindsight_dedicated_vcpu_hours"] is not None]
    bought = sum(g["dedicated_vcpu_hours"] for g in known)
    hindsight = sum(g["hindsight_dedicated_vcpu_hours"] for g in known)
    ratio = bought / hindsight if hindsight > 0 else (1.0 if bought == 0 else None)
    model = sum(g["model_hindsight_dedicated_vcpu_hours"] or 0.0 for g in known)
    figures = dict(
        lower_bound_violations=sum(r["lower_bound_violations"] for r in per_tenant + goals),
        upper_bound_violations=sum(r["upper_bound_violations"] for r in per_tenant + goals),
        # over the runs whose deadline some size within the tenant's bounds meets (the search);
        # a deadline none meets tests no sizing: counted beside
        deadline_met_share=round(sum(bool(g["met"]) for g in known) / len(known), 4) if known else None,
        deadline_met_share_all_runs=round(sum(bool(m) for m in met) / len(met), 4) if met else None,
        finish_error_at_half=round(statistics.fmean(errors), 4) if errors else None,
        finish_error_at_half_max=round(max(errors), 4) if errors else None,
        dedicated_over_hindsight=None if ratio is None else round(ratio, 4),
        dedicated_bought_vcpu_hours=round(bought, 3), hindsight_dedicated_vcpu_hours=round(hindsight, 3),
        runs_no_size_meets=len(goals) - len(known),
        # beside it, not judged: tenant_figures' model of the least (its doc says how)
        model_hindsight_dedicated_vcpu_hours=round(model, 3))
    failed = [k for k, v in GOALS.items() if not _meets(k, figures[k], v)]
    return dict(figures=figures, goals=GOALS, failed=failed)


def goal_cases(seed_base: int, seed_sets: int,
               starts: tuple[float, ...]) -> list[tuple[float, str, dict[str, Any], int]]:
    """The goal runs: every start and deadline, in `seed_sets` sets of agents' seeds (set k's start
    i runs with seed seed_base + SEED_SET_STEP k + i). One set's 24 runs judged a lever by a few
    of them: a run's dedicated capacity moves by tens of vCPU-hours with its agents' seed
    (docs/simulator.md, "A dedicated VM kept until it has run a task, judged on sixteen seed sets")."""
    return [(start, which, deadline, seed_base + SEED_SET_STEP * k + i)
            for k in range(seed_sets) for i, start in enumerate(starts) for which, deadline in DEADLINES]


def per_seed_set(goals: list[dict[str, Any]], seed_base: int) -> dict[str, dict[str, Any]]:
    """The judged figures of each set of seeds on its own (keyed by its first seed), to show how
    far they spread around the pooled ones."""
    sets: dict[int, list[dict[str, Any]]] = {}
    for goal in goals:
        first = seed_base + (goal["seed"] - seed_base) // SEED_SET_STEP * SEED_SET_STEP
        sets.setdefault(first, []).append(goal)
    keys = ("deadline_met_share", "finish_error_at_half", "dedicated_over_hindsight", "dedicated_bought_vcpu_hours",
            "hindsight_dedicated_vcpu_hours")
    return {str(first): {k: judge([], runs)["figures"][k] for k in keys} for first, runs in sorted(sets.items())}


def _meets(key: str, value: float | None, goal: float) -> bool:
    if value is None:
        return False
    return value >= goal if key == "deadline_met_share" else value <= goal


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="also write the JSON object here")
    p.add_argument("--quick", action="store_true", help="one start time, no per-tenant runs (a smoke run)")
    p.add_argument("--seed-base", type=int, default=0, help="the goal runs' agent seeds start here (default 0)")
    p.add_argument("--seed-sets", type=int, default=SEED_SETS,
                   help=f"sets of goal runs, each with its own agents' seeds (set k: --seed-base + {SEED_SET_STEP} k on; "
                        f"default {SEED_SETS}): the figures are pooled over them, and given per set beside")
    p.add_argument("--processes", type=int, default=2, help="goal runs at once (default 2)")
    args = p.parse_args(argv)
    if not 1 <= args.seed_sets <= MAX_SEED_SETS:
        p.error(f"--seed-sets must be 1 to {MAX_SEED_SETS}, not {args.seed_sets}")
    started = time.perf_counter()
    azure = shaped(traces.azure_requests(AZURE), LOAD)
    sdsc_jobs = shaped([j for j in traces.swf_jobs(SDSC) if j.procs <= BACKFILL.vcpus], JOBS_LOAD)
    per_tenant: list[dict[str, Any]] = []
    if not args.quick:
        sdsc_requests = shaped(traces.swf_requests(SDSC, MIB_PER_VCPU), LOAD)
        ctc_jobs = shaped([j for j in traces.swf_jobs(CTC) if j.procs <= BACKFILL.vcpus], JOBS_LOAD)
        per_tenant = per_tenant_runs(azure, sdsc_requests, sdsc_jobs, ctc_jobs)
    seed_sets = 1 if args.quick else args.seed_sets
    cases = goal_cases(args.seed_base, seed_sets, STARTS[:1] if args.quick else STARTS)
    global _TRACES
    _TRACES = (azure, sdsc_jobs)
    with multiprocessing.get_context("fork").Pool(max(1, args.processes)) as pool:   # each case is independent
        goals = pool.map(_goal_case, cases)
    verdict = judge(per_tenant, goals)
    out = dict(bench="tenants", nodes=NODES, days=DAYS, load=LOAD, jobs_load=JOBS_LOAD, lower_vcpus=LOWER_VCPUS,
               work_vcpu_hours=WORK_VCPU_HOURS, seed_sets=seed_sets,
               **verdict["figures"], goals=verdict["goals"], failed=verdict["failed"],
               passed=not verdict["failed"], per_seed_set=per_seed_set(goals, args.seed_base), goal_runs=goals,
               per_tenant=per_tenant,
               wall_seconds=round(time.perf_counter() - started, 1))
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if out["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
