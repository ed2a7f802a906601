"""The trace-driven simulator on a month of a 1,000-node pool, once per setting compared.

    python -m tests.bench.simulate [--nodes 1000] [--days 30] [--load 0.6] [--jobs 1] [--timed-runs 3]
                                   [--max-wall-seconds 0] [--traces DIR] [--quiet]
                                   [--backfill-jobs swf/FILE.swf.gz] [--backfill-jobs-load 0.5]

Prints one JSON object (and each run's progress every 30 s on stderr, unless --quiet). The workload: the on-demand VMs of the Azure Packing 2020 sample
(`azure_packing_2020/vm_entry_list_5000.csv.gz` in --traces, ../shared/traces beside the
repository by default), stretched and tiled so that they ask for --load of the pool's vCPUs on
average over the run (controller/sim/workload.py, as `python -m controller.sim` does for this
trace); nodes of 16 vCPUs and 64 GiB. Backfill work is task-level: backfill VMs run the serial
jobs of an HTC/HPC trace (--backfill-jobs, SDSC SP2 by default) stretched and tiled to ask for
--backfill-jobs-load of the pool's vCPUs, and a preemption loses the running jobs' progress
(controller/sim/jobs.py), as Nimbus' Condor workers did. Each entry also carries the VM-level
figures of the same run (`vm_level_lost_share`: a stopped VM loses its whole runtime x vCPUs, as the
audit log counts it). The controller knows nothing of jobs but whether a worker idles: that
changes its decisions only where a VM idles in the last tenth of its longest life (recycled
then), and idle_first's order. Each setting runs the same requests and jobs through
controller.sim.engine.Simulation:

- default: backfill enabled, everything else at the controller's defaults (BackfillConfig and
  ControllerConfig: victims hibernated under most_recent, 1-vCPU 128-MiB backfill VMs, prediction
  on, no reserve); `hibernate` is the default's own run, not a second one;
- no_backfill: backfill off, the on-demand requests alone: the baseline of what is rejected
  whatever backfill does (requests larger than any node, or no room among on-demand VMs); each
  entry's `rejected_beyond_no_backfill` is its rejections past it;
- one entry per termination policy, victims terminated (interruption = terminate, where victim
  choice decides what is lost: most_recent is terminate's default);
  idle_first_work_channel: idle_first with the backfill guests saying on the work channel when
  each job starts and when they idle (SimSettings.guest_work_channel), its clock each job's start;
- one entry per reserve mode: reserve_static, 12 whole nodes kept from backfill (Balancer's
  figure, as per-node reserves); reserve_balancer_static, Balancer's R = 12 (the on-demand pool's
  size: nodes on-demand VMs use count); reserve_hint, a hint of 12 nodes each day from 08:00 for
  10 hours (drained lead_seconds ahead); reserve_predictive_day and reserve_predictive_week, the
  peak demand of the same 6-hour slot over the last day or week (`_soft`: the same without
  draining, drain = false: the reserve's nodes only take no new backfill); reserve_wait, a wait window of
  600 s before a request with no room is rejected (controller/core/reserves.py); the reserve
  entries terminate their victims, as when they were measured;
- hibernate (the default): victims are saved to their node's disk and resumed there, oldest first,
  when the launcher gives the node room again (the default wait limit; hibernate_wait_1d: a 1-day
  limit); a job loses its progress only when its VM is discarded. Backfill guests retire: they
  take no new job in the last tenth of their run time (gleaner.retire_after), so the recycle at
  duration_seconds cuts fewer jobs; hibernate_no_retire is the default with guests that take jobs
  to the end.
  Its goal (`hibernate_job_lost_under_1pct`, issue 25): job time lost, all causes, under 1 %
  (`job_lost_share`; `to_preemption` beside it: victims terminated, and saved VMs discarded,
  without the jobs the recycle at duration_seconds cut), beside how long saved VMs slept
  (resume_delay_p50_s, _p99_s), how many were
  discarded, the jobs completed, and the disk the saved VMs used (the p99 over nodes of each
  node's peak).

The simulated agents are the modelled ones by default (--agents, controller/sim/agents.py:
launch failures, launch and shutdown times drawn from the lifecycle bench's measures, report lag,
sampled CPU; every draw per VM and per request, so the no_backfill baseline's on-demand VMs see
the same draws as every other entry's); --agents ideal gives the fixed times of earlier sessions.
Foreground demand is the on-demand VMs' vCPUs unless --demand names a per-node CPU series in
--traces (alibaba_2018/machine_usage.csv.gz, or a Bitbrains tar.gz with --demand-format
bitbrains); every node then also reports every --demand-report-seconds.

What is timed: `wall_s` and `sim_events_per_s` are those of more runs of the default settings
with VM-level work (`default_vm_level`: the controller's decisions alone, the run earlier
sessions timed; its VMs never idle, so past 6.3 days it recycles none early), --timed-runs of
them back to back (3 by default), the wall time of Simulation.run() (the event loop from the
first report to the summary's figures): `wall_s` is their median (of an even count, the lower
middle one), `wall_s_runs` every one, `default_vm_level` the median run's entry (the runs make
the same decisions: only their times differ); reading the traces and stretching them are not
timed. The task-level `default` has its own `wall_s` (its jobs' events come on top). Each entry has its own
`wall_s`. With --jobs 2 the settings after the default run two at a time, so their wall times
are each other's neighbours' as well. `bench_wall_s` is the whole command. --max-wall-seconds
stops each run after that much wall time: the entry then says `complete: false` and covers the
days it reached (`simulated_days`). This shared 2-core host is often busy with other work:
`cpu_s` (the process's CPU time over the run) says how much of the wall time was the run's own.

The issue's goals are restated under `goals`, each with the figure measured and whether it was met:
utilization as Nimbus measured it (`utilization_working`: vCPUs running an on-demand VM or a job)
and lost work as the share of job progress thrown away (`job_lost_share`), of the default run;
no rejection because of backfill both at the moment of the rejection (`measured`: backfill held
room the request would have fit in) and against no_backfill (`beyond_no_backfill`: backfill also
shapes where on-demand VMs go, and so what room is left for the next ones).
How lost work depends on the jobs' length (shorter jobs lose less) is measured with the
simulator's --backfill-jobs-max-runtime on smaller runs (docs/simulator.md): at this scale the
short jobs of the trace, stretched to the same load, would be tens of millions.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from controller.config import ControllerConfig, ledger_settings
from controller.core.records import Reserve
from controller.core.records import HIBERNATE, BackfillConfig, Policy
from controller.core.reserve_settings import HOUR, Hint, PredictiveMode, ReserveSettings
from controller.sim import traces
from controller.sim.agents import MODELS, agent_model
from controller.sim.cli import jobs_at_load
from controller.sim.engine import DAY, SimSettings, Simulation
from controller.sim.jobs import JobLevelWork
from controller.sim.progress import ProgressBar
from controller.sim.workload import stretch_to_load

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
AZURE = "azure_packing_2020/vm_entry_list_5000.csv.gz"
RESERVED_NODES = 12               # Balancer: a reserve of 12 nodes ended on-demand rejections
NIMBUS_UTILIZATION = 0.8382
JOB_LOST_GOAL = 0.043   # the month's job time lost under the earlier placement rule (issue 24)
HIBERNATE_LOST_GOAL = 0.01   # issue 25: job time lost (all causes) under 1 % with hibernation, default wait limit
SERVED_GOAL = 0.99999   # on-demand vCPU-time with backfill (delay added back) over without, to rounding
NO_BACKFILL = "no_backfill"   # the baseline entry: the same requests with backfill off
# Task-level backfill: the serial jobs of the SDSC SP2 trace (mean run time about 2 h), stretched
# and tiled to ask for half the pool's vCPUs on average, so the HTC queue rarely runs dry, as
# Nimbus' Condor queue did not while its evaluation lasted.
JOBS = "swf/SDSC-SP2-1998-4.2-cln.swf.gz"
JOBS_LOAD = 0.5
DEMAND = "alibaba_2018/machine_usage.csv.gz"   # per-machine CPU series (--demand)


def terminating(policy: Policy = BackfillConfig().termination_policy) -> BackfillConfig:
    """Backfill enabled with victims terminated (interruption = terminate) under `policy`."""
    return BackfillConfig(enabled=True, interruption="terminate", termination_policy=policy)


def settings_compared(nodes: int, days: float = 30.0) -> dict[str, dict[str, Any]]:
    """Name -> the backfill config, per-node reserves and Balancer's reserves of each setting (the
    default first)."""
    width = len(str(nodes))   # the simulator's node ids: n0000 ... n0999
    reserved = {node_id: Reserve(node_id, whole_node=True)
                for node_id in (f"n{i:0{width}d}" for i in range(min(RESERVED_NODES, nodes)))}
    runs: dict[str, dict[str, Any]] = {"default": dict(backfill=BackfillConfig(enabled=True), reserves={}),
                                       NO_BACKFILL: dict(backfill=BackfillConfig(enabled=False), reserves={})}
    # victim choice matters where a victim's work is lost: the policies are compared terminating
    for policy in Policy:
        runs[policy.value] = dict(backfill=terminating(policy), reserves={})
    runs["idle_first_work_channel"] = dict(backfill=terminating(Policy.IDLE_FIRST),
                                           reserves={}, sim=dict(guest_work_channel=True))
    # hibernation (issue 25, the default: "hibernate" is the default's own run): a 1-day wait limit
    runs["hibernate_wait_1d"] = dict(backfill=BackfillConfig(enabled=True, interruption=HIBERNATE,
                                                             hibernate_wait_seconds=86400), reserves={})
    # the default with guests that do not retire (take jobs to the end of their VM's life): what the
    # recycle at duration_seconds cuts without gleaner.retire_after
    runs["hibernate_no_retire"] = dict(backfill=BackfillConfig(enabled=True), reserves={},
                                       sim=dict(guest_retires=False))
    # the reserves were measured terminating their victims (what a reserve changes is on-demand's room)
    runs["reserve_static"] = dict(backfill=terminating(), reserves=reserved)
    on = terminating()
    hints = [Hint(min(RESERVED_NODES, nodes), d * DAY + 8 * HOUR, d * DAY + 18 * HOUR, f"day{d}")
             for d in range(int(days) + 1)]
    for name, settings, run_hints in (
            ("reserve_balancer_static", ReserveSettings(static_nodes=RESERVED_NODES), []),
            ("reserve_hint", ReserveSettings(), hints),
            ("reserve_predictive_day", ReserveSettings(predictive=PredictiveMode.DAY), []),
            ("reserve_predictive_week", ReserveSettings(predictive=PredictiveMode.WEEK), []),
            ("reserve_predictive_day_soft", ReserveSettings(predictive=PredictiveMode.DAY, drain=False), []),
            ("reserve_predictive_week_soft", ReserveSettings(predictive=PredictiveMode.WEEK, drain=False), []),
            ("reserve_wait", ReserveSettings(wait_seconds=600), [])):
        runs[name] = dict(backfill=on, reserves={}, reserve_settings=settings, hints=run_hints)
    return runs


def run_one(name: str, requests: list, sim_settings: SimSettings, backfill: BackfillConfig,
            reserves: dict[str, Reserve], inputs: dict[str, Any],
            reserve_settings: ReserveSettings = ReserveSettings(), hints: list[Hint] | None = None,
            jobs: list[traces.Job] | None = None, sim: dict[str, Any] | None = None,
            demand: list[traces.DemandSeries] | None = None) -> dict[str, Any]:
    """One setting's run; task-level (backfill VMs run `jobs`) unless jobs is None. `sim`: changes
    to the simulator's settings for this run (the guests' work channel)."""
    if sim:
        sim_settings = dataclasses.replace(sim_settings, **sim)
    work = JobLevelWork(jobs, backfill.vcpus) if jobs is not None else None
    sim = Simulation(requests, sim_settings, backfill, ledger_settings(ControllerConfig()), reserves=reserves,
                     inputs=inputs, progress=ProgressBar(label=name) if sim_settings.progress_seconds else None,
                     reserve_settings=reserve_settings, hints=hints or (), work=work, demand=demand)
    cpu = time.process_time()
    summary = sim.run()
    cpu = time.process_time() - cpu
    result = entry(summary["figures"], cpu, reserved_nodes=len(reserves))
    result.update(guest_work_channel=sim_settings.guest_work_channel, outcomes=request_outcomes(sim))
    if reserve_settings != ReserveSettings() or hints:
        result.update(reserve_settings=reserve_settings.as_dict(), hints=len(hints or ()))
    return result


def request_outcomes(sim: Simulation) -> dict[str, frozenset[str]]:
    """The ids of the requests the run placed (a lease was booked for them) and of those it
    rejected: what the per-request comparison with the run without backfill reads."""
    placed, rejected, started = set(), set(), {}
    leases = sim.store.leases
    for record in sim.store.requests.values():
        if record.outcome == "rejected":
            rejected.add(record.request_id)
        elif record.lease_id:
            placed.add(record.request_id)
            lease = leases.get(record.lease_id)
            if lease is not None and lease.launched_at is not None:   # (seconds to its launch, vCPUs)
                started[record.request_id] = (lease.launched_at - lease.created_at, lease.vcpus)
    return dict(placed=frozenset(placed), rejected=frozenset(rejected), started=started,
                area=sim.settings.pool_vcpus * sim.end)


def entry(f: dict[str, Any], cpu_s: float, reserved_nodes: int) -> dict[str, Any]:
    """The figures the bench prints for one run."""
    return dict(
        utilization=f["utilization"], utilization_on_demand=f["utilization_on_demand"],
        utilization_backfill=f["utilization_backfill"], vm_level_lost_share=f["vm_level_lost_share"],
        rejected=f["requests_rejected"], rejected_due_to_backfill=f["rejected_due_to_backfill"],
        rejected_larger_than_node=f["rejected_larger_than_node"], requests=f["requests_arrived"],
        queued=f["requests_queued"], backfill_drained=f["backfill_drained"],
        on_demand_wait_p50_s=f["wait_p50_s"], on_demand_wait_p99_s=f["wait_p99_s"],
        preemptions=f["preemptions"], preemptions_per_100_vm_hours=f["preemptions_per_100_vm_hours"],
        vm_level_goodput_vcpu_hours=f["vm_level_goodput_vcpu_hours"],
        backfill_survival_1h=f["backfill_survival_1h"], backfill_survival_1d=f["backfill_survival_1d"],
        utilization_working=f["utilization_working"], job_lost_share=f.get("backfill_job_lost_share"),
        job_lost_to_preemption_share=f.get("backfill_job_lost_to_preemption_share"),
        jobs_completed=f.get("backfill_jobs_completed"), job_requeues=f.get("backfill_job_requeues"),
        jobs_queued_at_end=f.get("backfill_jobs_queued_at_end"),
        reserved_nodes=reserved_nodes, simulated_days=f["simulated_days"], complete=not f["stopped_early"],
        sim_events=f["sim_events"], wall_s=f["wall_seconds"], cpu_s=round(cpu_s, 3),
        sim_events_per_s=f["sim_events_per_s"], **hibernation(f))


def hibernation(f: dict[str, Any]) -> dict[str, Any]:
    """A hibernate entry's own figures (none for the others)."""
    keys = ("hibernations", "hibernated_resumed", "hibernated_discarded", "hibernated_at_end", "resume_delay_p50_s",
            "resume_delay_p99_s", "hibernated_disk_peak_mib_p99_node", "hibernated_disk_peak_mib_max",
            "discarded_work_vcpu_hours")
    return {k: f[k] for k in keys if k in f}


def goals(default: dict[str, Any], entries: dict[str, dict[str, Any]], month: bool,
          hibernating: dict[str, bool]) -> dict[str, Any]:
    """The issue's goals. The promise, over every entry: no request that the run without
    backfill placed is rejected, and on-demand is served at least as much. Utilization and lost
    work as Nimbus measured them (cycles running an on-demand VM or an HTC job; the running jobs'
    progress a preemption throws away), from the task-level default run; the job loss goal is
    the month's (4.3 %, what the earlier rule lost there)."""
    with_backfill = {name: e for name, e in entries.items() if name != NO_BACKFILL and "same_run_as" not in e}
    beyond = {name: e["rejected_beyond_no_backfill"] for name, e in with_backfill.items()}
    served = {name: e["on_demand_served_with_delay_vs_no_backfill"] for name, e in with_backfill.items()}
    return dict(
        promise=dict(rejected_beyond_no_backfill=beyond, on_demand_served_vs_no_backfill=served,
                     met=all(v == 0 for v in beyond.values()) and
                     all(v is not None and v >= SERVED_GOAL for v in served.values()),
                     note=f"every entry with backfill: 0 requests rejected that the run without backfill placed, "
                          f"and its on-demand vCPU-time, with what launches waiting for their victims lost "
                          f"(on_demand_delay_vcpu_hours) added back, at least {SERVED_GOAL} of that run's (releases "
                          f"come on schedule, so the delay shortens a VM's life; the raw share is "
                          f"on_demand_served_vs_no_backfill)"),
        utilization_at_least_nimbus=dict(measured=default["utilization_working"], goal=NIMBUS_UTILIZATION,
                                         met=(default["utilization_working"] or 0) >= NIMBUS_UTILIZATION,
                                         allocated=default["utilization"]),
        job_lost_at_most_before=dict(measured=default["job_lost_share"], goal=JOB_LOST_GOAL,
                                     met=default["job_lost_share"] is not None and
                                     default["job_lost_share"] <= JOB_LOST_GOAL,
                                     applies=month, vm_level=default["vm_level_lost_share"],
                                     note="the goal is the month's (1,000 nodes, 30 days); elsewhere for reading"),
        preemptions=default["preemptions"], on_demand_wait_p99_s=default["on_demand_wait_p99_s"],
        hibernate_job_lost_under_1pct={name: dict(measured=e["job_lost_share"],
                                                  met=e["job_lost_share"] is not None
                                                  and e["job_lost_share"] < HIBERNATE_LOST_GOAL,
                                                  applies=hibernating[name],
                                                  to_preemption=e["job_lost_to_preemption_share"],
                                                  resume_delay_p99_s=e.get("resume_delay_p99_s"),
                                                  discarded=e.get("hibernated_discarded"),
                                                  jobs_completed=e["jobs_completed"])
                                       for name, e in with_backfill.items() if name in hibernating},
    )


def against_baseline(result: dict[str, Any], baseline: dict[str, Any],
                     base: dict[str, frozenset[str]] | None) -> dict[str, Any]:
    """A run beside the same requests with backfill off: `rejected_beyond_no_backfill`, the
    requests that run placed and this one rejected, one by one (not a difference of totals,
    which a request placed here and rejected there would hide); the on-demand vCPU-time it served
    as a share of what that run served; and, for reading, the difference of the totals."""
    served = baseline["utilization_on_demand"]
    outcomes = result.pop("outcomes", None)
    if not (result["complete"] and baseline["complete"]) or outcomes is None or base is None:
        return dict(result, rejected_beyond_no_backfill=None, on_demand_served_vs_no_backfill=None)
    beyond = sorted(base["placed"] & outcomes["rejected"])
    # on-demand vCPU-time lost to launches that waited for their victims (seconds later than the
    # same request's launch without backfill): what the served share may lack, and no more
    delay = sum(max(seconds - base["started"][r][0], 0.0) * vcpus for r, (seconds, vcpus) in
                outcomes["started"].items() if r in base["started"])
    delay_share = delay / outcomes["area"] if outcomes["area"] else 0.0
    served_with_delay = round((result["utilization_on_demand"] + delay_share) / served, 6) if served else None
    return dict(result, rejected_beyond_no_backfill=len(beyond), rejected_beyond_examples=beyond[:5],
                on_demand_delay_vcpu_hours=round(delay / 3600, 3),
                on_demand_served_with_delay_vs_no_backfill=served_with_delay,
                placed_beyond_no_backfill=len(base["rejected"] & outcomes["placed"]),
                rejected_difference_of_totals=result["rejected"] - baseline["rejected"],
                on_demand_served_vs_no_backfill=round(result["utilization_on_demand"] / served, 6) if served else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--load", type=float, default=0.6, help="on-demand share of the pool's vCPUs (default 0.6)")
    p.add_argument("--jobs", type=int, default=1, help="settings run at once after the default run (default 1)")
    p.add_argument("--max-wall-seconds", type=float, default=0.0, help="stop each run after this long (0: never)")
    p.add_argument("--traces", type=Path, default=Path(os.environ.get("GLEANER_TRACES", TRACES)))
    p.add_argument("--backfill-jobs", default=JOBS, help=f"the HTC job trace backfill VMs run, in --traces "
                                                          f"(default {JOBS})")
    p.add_argument("--backfill-jobs-load", type=float, default=JOBS_LOAD,
                   help=f"share of the pool's vCPUs the jobs ask for on average (default {JOBS_LOAD})")
    p.add_argument("--timed-runs", type=int, default=3, help="VM-level default runs timed (default 3; the median)")
    p.add_argument("--agents", choices=tuple(MODELS), default="modelled",
                   help="the simulated agents (controller/sim/agents.py; default modelled: launch failures, "
                        "measured launch and shutdown times, report lag, sampled CPU; ideal: fixed times)")
    p.add_argument("--seed", type=int, default=0, help="the modelled agents' draws' seed (default 0)")
    p.add_argument("--demand", help="foreground CPU demand per node from this series in --traces (e.g. "
                                    f"{DEMAND}), node i following series i; default: the on-demand VMs' vCPUs")
    p.add_argument("--demand-format", choices=("bitbrains", "alibaba"), default="alibaba")
    p.add_argument("--demand-report-seconds", type=float, default=300.0,
                   help="with --demand: every node reports its foreground this often (default 300; every "
                        "report of every node is an event: 60 s makes a month of 1,000 nodes 43 million)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--settings", type=lambda v: [x for x in v.split(",") if x], default=[],
                   help="SETTING[,SETTING...]: only these beside default and no_backfill (default: all)")
    args = p.parse_args(argv)
    if not 1 <= args.demand_report_seconds <= 86400:
        p.error(f"--demand-report-seconds must be 1 to 86400, got {args.demand_report_seconds:g}")
    if args.timed_runs < 1:
        p.error(f"--timed-runs must be at least 1, got {args.timed_runs}")
    started = time.perf_counter()
    path = args.traces / AZURE
    sim_settings = SimSettings(nodes=args.nodes, days=args.days, progress_seconds=0.0 if args.quiet else 30.0,
                               max_wall_seconds=args.max_wall_seconds, agents=args.agents, seed=args.seed,
                               report_seconds=args.demand_report_seconds,
                               release_on_schedule=True)
    requests, period = stretch_to_load(traces.azure_requests(path), args.days * DAY, args.load,
                                       sim_settings.pool_vcpus)
    inputs = dict(requests=AZURE, requests_sha256=traces.digest(path), load=args.load, tile_period_s=round(period, 3),
                  agents=args.agents, seed=args.seed)
    demand: list[traces.DemandSeries] = []
    if args.demand:
        demand_path = args.traces / args.demand
        demand = (traces.alibaba_series if args.demand_format == "alibaba" else traces.bitbrains_series)(demand_path)
        inputs.update(demand=args.demand, demand_format=args.demand_format, demand_sha256=traces.digest(demand_path),
                      demand_series=len(demand), demand_report_seconds=args.demand_report_seconds)
    jobs_path = args.traces / args.backfill_jobs
    jobs, jobs_period = jobs_at_load(traces.swf_jobs(jobs_path), BackfillConfig().vcpus, args.days * DAY,
                                     args.backfill_jobs_load, sim_settings.pool_vcpus)
    task_inputs = dict(inputs, backfill_jobs=args.backfill_jobs, backfill_jobs_sha256=traces.digest(jobs_path),
                       backfill_jobs_load=args.backfill_jobs_load, backfill_jobs_tile_period_s=round(jobs_period, 3),
                       jobs=len(jobs))
    runs = settings_compared(args.nodes, args.days)
    if args.settings:
        unknown = set(args.settings) - set(runs) - {BackfillConfig().interruption}   # the default's own run
        if unknown:
            p.error(f"--settings: unknown {', '.join(sorted(unknown))}; known: {', '.join(runs)}")
        runs = {name: run for name, run in runs.items() if name in set(args.settings) | {"default", NO_BACKFILL}}
    # name -> whether the hibernation goal applies to it (the default wait limit and guests; others are for reading)
    hibernating = {name: run["backfill"].hibernate_wait_seconds == BackfillConfig().hibernate_wait_seconds
                   and not run.get("sim") for name, run in runs.items() if run["backfill"].hibernates}
    timings = sorted((run_one("default (VM-level)", requests, sim_settings, inputs=inputs, demand=demand,
                              **runs["default"])
                      for _ in range(args.timed_runs)), key=lambda r: r["wall_s"])
    timed = dict(timings[(len(timings) - 1) // 2], wall_s_runs=[r["wall_s"] for r in timings])   # the median run
    timed.pop("outcomes", None)
    results = {"default": run_one("default", requests, sim_settings, inputs=task_inputs, jobs=jobs, demand=demand,
                                  **runs.pop("default"))}
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        futures = {name: pool.submit(run_one, name, requests, sim_settings, inputs=task_inputs, jobs=jobs,
                                     demand=demand, **run)
                   for name, run in runs.items()}
        results.update((name, future.result()) for name, future in futures.items())
    base = results[NO_BACKFILL].get("outcomes")
    results = {name: against_baseline(result, results[NO_BACKFILL], base) for name, result in results.items()}
    results[BackfillConfig().interruption] = dict(results["default"], same_run_as="default")
    default = results["default"]
    month = args.days >= 30 and args.nodes >= 1000
    out = dict(sim_events_per_s=timed["sim_events_per_s"], wall_s=timed["wall_s"], wall_s_runs=timed["wall_s_runs"],
               default_vm_level=timed,
               bench_wall_s=round(time.perf_counter() - started, 3), nodes=args.nodes, days=args.days,
               node_cpus=sim_settings.node_cpus, node_memory_mib=sim_settings.node_memory_mib, inputs=task_inputs,
               agents=agent_model(sim_settings).describe(),
               goals=goals(default, results, month, hibernating), **results)
    print(json.dumps(out, indent=2, default=sorted))
    hibernate_met = all(g["met"] for g in out["goals"]["hibernate_job_lost_under_1pct"].values() if g["applies"])
    return 0 if out["goals"]["promise"]["met"] and hibernate_met else 1


if __name__ == "__main__":
    sys.exit(main())
