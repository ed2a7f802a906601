"""`python -m controller.sim`: run the controller's ledger against a request trace on simulated
nodes and print (and with --out, write) the figures. See controller/sim/engine.py for what is
simulated and controller/sim/workload.py for how a short trace fills --days."""
from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import json
import sys
from pathlib import Path
from typing import Any

from gleaner_common.config import ConfigError
from gleaner_common.ids import InvalidField

from .. import checks
from ..config import ControllerConfig, ledger_settings, load_config
from ..core.records import BackfillConfig, Policy
from ..core.reserves import validate_hint
from ..core.reserve_settings import HOUR, Hint, PredictiveMode, ReserveError, ReserveSettings
from . import traces
from .agents import MODELS, AgentParamError, ModelledParams
from .engine import DAY, SimSettings, Simulation
from .jobs import JobLevelWork
from .plots import PlotsUnavailable
from .progress import ProgressBar
from .workload import stretch_to_load

AZURE_DEFAULT_LOAD = 0.6
# The --compare table's rows: (label, summary figure, how it prints: FORMATS). Rows every
# compared run leaves empty (the job figures of VM-level runs) are left out.
COMPARED = (
    ("utilization (allocated vCPUs)", "utilization", "percent"),
    ("  of which on-demand", "utilization_on_demand", "percent"),
    ("  of which backfill", "utilization_backfill", "percent"),
    ("utilization working (Nimbus)", "utilization_working", "percent"),
    ("requests placed", "requests_placed", "count"),
    ("requests rejected", "requests_rejected", "count"),
    ("  rejected due to backfill", "rejected_due_to_backfill", "count"),
    ("requests queued for room", "requests_queued", "count"),
    ("on-demand wait p50", "wait_p50_s", "seconds"),
    ("on-demand wait p99", "wait_p99_s", "seconds"),
    ("backfill VMs drained", "backfill_drained", "count"),
    ("preemptions", "preemptions", "count"),
    ("preemptions per 100 VM-hours", "preemptions_per_100_vm_hours", "number"),
    ("backfill survival 1 h", "backfill_survival_1h", "percent"),
    ("backfill survival 1 day", "backfill_survival_1d", "percent"),
    ("VM-level lost work share", "vm_level_lost_share", "percent"),
    ("VM-level goodput", "vm_level_goodput_vcpu_hours", "vcpu_hours"),
    ("jobs completed", "backfill_jobs_completed", "count"),
    ("job time done", "backfill_job_seconds_done", "hours"),
    ("job time lost", "backfill_job_seconds_lost", "hours"),
    ("job time lost share", "backfill_job_lost_share", "percent"),
    ("simulated events", "sim_events", "count"),
    ("wall time", "wall_seconds", "seconds"),
)
FORMATS = {
    "percent": lambda v: f"{100 * v:.2f} %",          # a share of 1
    "count": lambda v: f"{v:,}",
    "number": lambda v: f"{v:,.2f}",
    "seconds": lambda v: f"{v:,.1f} s" if v >= 10 else f"{v:.2f} s",
    "hours": lambda v: f"{_hours(v / 3600)} h",       # from seconds
    "vcpu_hours": lambda v: f"{_hours(v)} vCPU-h",
}


def _hours(h: float) -> str:
    return f"{h:,.0f}" if h >= 100 else f"{h:.2f}"


AGENT_FLAGS = {name: "--" + name.replace("_", "-") for name in ModelledParams.RANGES}
AGENT_FLAGS["report_seconds"] = "--agent-report-seconds"   # --report-seconds is the demand series' period
AGENT_HELP = dict(
    launch_failure="the share of launches that fail",
    launch_p50_seconds="median seconds from a Launch to the agent's answer",
    launch_p99_seconds="99th percentile of the same",
    backfill_launch_p50_seconds="median seconds of a backfill VM's launch (0, with its p99 0: as any launch)",
    backfill_launch_p99_seconds="99th percentile of the same",
    stop_p50_seconds="median seconds of a clean shutdown (longer than the grace: destroyed at the grace)",
    stop_p99_seconds="99th percentile of the same",
    report_seconds="the agents' report interval: a VM's change reaches the controller up to this late (0: "
                   "at once)",
    cpu_idle_cores="an idle guest's CPU figure in cores",
    cpu_busy_share="a busy vCPU's figure as a share of a core",
    cpu_noise_cores="standard deviation of a CPU sample in cores",
    save_p50_seconds="median seconds to save a hibernated VM's state (interruption=hibernate)",
    save_p99_seconds="99th percentile of the same",
    restore_p50_seconds="median seconds to restore a hibernated VM",
    restore_p99_seconds="99th percentile of the same",
    calls_per_node="agent calls to one node at once (the controller's agent_calls_per_node; one kept for "
                   "stops and on-demand launches, served first)",
    agent_parallel_stops="how many stops a node's agent works on at once, the others waiting in turn "
                         "(0: all it is sent)",
    fill_delay_seconds="seconds from what asks for a fill (a VM gone, a node come) to the fill, which "
                       "serves whatever asks meanwhile (the controller's launcher thread)")


class SimUsage(Exception):
    pass


def agent_settings(args: argparse.Namespace) -> dict[str, Any]:
    """SimSettings' agents, agent_params and seed (and the ideal agents' times) from the flags,
    checked: a parameter of the other model, or out of its range, is a SimUsage naming it."""
    given = {name: getattr(args, f"agent_{name}") for name in AGENT_FLAGS
             if getattr(args, f"agent_{name}") is not None}
    ideal_times = {flag: value for flag, value in (("--launch-seconds", args.launch_seconds),
                                                   ("--stop-seconds", args.stop_seconds)) if value is not None}
    if args.agents == "ideal" and given:
        raise SimUsage(f"{AGENT_FLAGS[next(iter(given))]} sets the modelled agents: it needs --agents modelled")
    if args.agents != "ideal" and ideal_times:
        raise SimUsage(f"{next(iter(ideal_times))} is the ideal agents' fixed time: it needs --agents ideal "
                       f"(the modelled agents' times: --launch-p50-seconds, --stop-p50-seconds...)")
    for flag, value in ideal_times.items():
        if not 0 <= value <= 3600:
            raise SimUsage(f"{flag} {value:g}: allowed 0 to 3600")
    try:
        ModelledParams.of(given.items())
    except AgentParamError as exc:
        raise SimUsage(f"{AGENT_FLAGS.get(exc.name, exc.name)}: {exc}") from None
    return dict(agents=args.agents, agent_params=tuple(sorted(given.items())), seed=args.seed,
                launch_seconds=5.0 if args.launch_seconds is None else args.launch_seconds,
                stop_seconds=5.0 if args.stop_seconds is None else args.stop_seconds)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m controller.sim",
        description="Trace-driven simulation of the Gleaner controller: the live controller's ledger (placement, "
                    "victim choice, backfill plan, volunteer selection, reserves) on simulated nodes whose agents "
                    "launch and stop VMs in configurable times.")
    p.add_argument("--nodes", type=int, help="simulated nodes (default 100)")
    p.add_argument("--node-cpus", type=int, help="vCPUs per node (default 16)")
    p.add_argument("--node-memory-mib", type=int, help="memory per node in MiB (default 65536)")
    p.add_argument("--pool", type=Path, metavar="FILE.csv",
                   help="nodes of several sizes instead of --nodes, --node-cpus and --node-memory-mib: a CSV of "
                        "count,cpus,memory_mib rows (controller/sim/traces.py), the nodes numbered in file order")
    p.add_argument("--days", type=float, default=1.0, help="simulated days (default 1)")
    p.add_argument("--requests", type=Path, required=True, help="on-demand request trace (plain or gzipped)")
    p.add_argument("--format", choices=("azure", "swf", "csv"), default="azure",
                   help="azure: Azure Packing 2020 vm_entry_list (priority 0 rows are the on-demand VMs); swf: "
                        "Standard Workload Format jobs as VMs of procs vCPUs and 4 GiB per vCPU; csv: Gleaner's "
                        "request CSV (controller/sim/traces.py)")
    p.add_argument("--load", type=float, default=None,
                   help=f"stretch and tile the trace so on-demand VMs ask for this share of the pool's vCPUs on "
                        f"average over --days: arrivals are scaled (lifetimes kept) and the copy is repeated with "
                        f"traces.scale_time and traces.tile (controller/sim/workload.py). Default "
                        f"{AZURE_DEFAULT_LOAD} for azure, whose sample is a 16-minute burst that tiled as it is "
                        f"would swamp any pool; for swf and csv the trace runs as it is unless --load is given")
    p.add_argument("--backfill", nargs="*", default=[], metavar="KEY=VALUE",
                   help="backfill settings as for `gleanctl backfill set` (enabled=true, max_instances, image, "
                        "memory_mb, vcpus, duration_seconds, termination_policy, retry_seconds, grace_seconds, interruption=terminate|hibernate, "
                        "hibernate_wait_seconds); "
                        "the controller's defaults otherwise (backfill disabled)")
    p.add_argument("--backfill-jobs", type=Path, metavar="FILE.swf",
                   help="task-level backfill: backfill VMs run the jobs of this SWF trace (plain or gzipped) from "
                        "one queue, first in first out by submit time, as many side by side as fit a VM's vCPUs; "
                        "a stopped VM's running jobs lose their progress and queue again (controller/sim/jobs.py). "
                        "Submit times are shifted so the first job that fits a backfill VM arrives at the start. "
                        "Default: VM-level work (runtime x vCPUs, all lost on preemption)")
    p.add_argument("--backfill-jobs-max-runtime", type=float, metavar="SECONDS",
                   help="with --backfill-jobs: only the jobs that run at most this long (e.g. 2089, the longest "
                        "of Nimbus' Condor jobs)")
    p.add_argument("--backfill-jobs-load", type=float, metavar="LOAD",
                   help="with --backfill-jobs: stretch and tile the jobs that fit a backfill VM so they ask for "
                        "this share of the pool's vCPUs on average over --days, as --load does for on-demand "
                        "requests (e.g. 0.5: a queue that rarely runs dry). Default: the jobs as they are")
    p.add_argument("--backfill-jobs-queues", metavar="N[,N...]",
                   help="with --backfill-jobs: only the jobs of these SWF queues (field 15), e.g. 4,5 for "
                        "SDSC-SP2's low and standby queues")
    p.add_argument("--guest-work-channel", action="store_true",
                   help="backfill guests say on the work channel (a virtio-serial port) when they turn busy "
                        "or idle, and the agents report it (ReportedVm.work_state, work_for_s): idle_first's "
                        "clock is then the guests' word, not the CPU figures'. Task-level VMs say busy when a "
                        "job starts while none runs and idle with no job; VM-level ones busy from launch. "
                        "Default: they say nothing (older guests); --compare can set it per run "
                        "(work_channel=true|false)")
    p.add_argument("--no-guest-retire", dest="guest_retires", action="store_false",
                   help="with --backfill-jobs: backfill guests take jobs to the end of their VM's life, as guests "
                        "that do not read gleaner.retire_after. Default: they take no new job in the last tenth "
                        "of their run time, so the recycle at duration_seconds cuts fewer jobs; --compare can "
                        "set it per run (retire=true|false)")
    p.add_argument("--config", type=Path, help="controller TOML: its notice, headroom, timeouts, selection, "
                                               "prediction and [reserves] settings")
    p.add_argument("--agents", choices=tuple(MODELS), default="modelled",
                   help="the simulated agents (controller/sim/agents.py). modelled (default): launches fail "
                        "now and then, launch and shutdown times are lognormal (measured medians and 99th "
                        "percentiles), a VM's change reaches the controller at its node's next report, CPU "
                        "figures are noisy samples; the flags below set its parameters. ideal: every launch "
                        "and stop succeeds in --launch-seconds and --stop-seconds, reports arrive at the "
                        "instant, CPU figures are exact (the simulator before agent models)")
    p.add_argument("--seed", type=int, default=0,
                   help="what the modelled agents' draws are hashed with (default 0); each draw is per VM "
                        "and per request, so runs with and without backfill see the same ones")
    for name, flag in AGENT_FLAGS.items():
        low, high = ModelledParams.RANGES[name]
        p.add_argument(flag, type=float, dest=f"agent_{name}", metavar=name.rpartition("_")[2].upper()
                       if name.endswith(("seconds", "cores")) else "VALUE",
                       help=f"--agents modelled: {AGENT_HELP[name]} (default {getattr(ModelledParams(), name):g}, "
                            f"{low:g} to {high:g})")
    p.add_argument("--launch-seconds", type=float, default=None,
                   help="--agents ideal: a launch takes this long (default 5)")
    p.add_argument("--stop-seconds", type=float, default=None,
                   help="--agents ideal: a clean shutdown takes this long, capped by the stop's grace (default 5)")
    p.add_argument("--demand", type=Path, help="foreground CPU demand per node (bitbrains tar.gz or alibaba "
                                               "machine_usage.csv); nodes then report every --report-seconds")
    p.add_argument("--demand-format", choices=("bitbrains", "alibaba"), default="bitbrains")
    p.add_argument("--report-seconds", type=float, default=60.0, help="report period with --demand (default 60)")
    p.add_argument("--hint", action="append", default=[], metavar="NODES:IN_HOURS:FOR_HOURS",
                   help="a reserve hint in simulated time: NODES nodes needed IN_HOURS after the start for "
                        "FOR_HOURS (as `gleanctl reserve hint`); repeatable")
    p.add_argument("--compare", help="SETTING[,SETTING...]: run each on the same trace and print one table. A "
                                     "setting is a termination policy (" + ", ".join(x.value for x in Policy) +
                                     ") or a reserve mode over the --config's [reserves]: static=N, "
                                     "predictive=day|week|month, wait=SECONDS, hint=NODES:IN_HOURS:FOR_HOURS, "
                                     "drain=true|false (false: a soft reserve), the agents agents=ideal|modelled, the guests' work channel "
                                     "work_channel=true|false (--guest-work-channel), the guests' retiring retire=true|false "
                                     "(--no-guest-retire), or several joined with "
                                     "'+' (static=12+wait=600, predictive=day+drain=false, "
                                     "idle_first+work_channel=true)")
    p.add_argument("--out", type=Path, help="directory for summary.json, vms.csv (one row per VM) and timeline.csv "
                                            "(utilization and lost work over time); one subdirectory per policy "
                                            "with --compare")
    p.add_argument("--plots", action="store_true", help="with --out: draw utilization.png, lost_work.png, "
                                                        "wait_cdf.png and survival.png there, and with --compare "
                                                        "compare.png beside the settings' directories "
                                                        "(controller/sim/plots.py)")
    p.add_argument("--max-wall-seconds", type=float, default=0.0,
                   help="stop a run after this much wall time; its figures cover the days simulated")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--tenants", type=Path, metavar="FILE",
                   help="tenants (TOML, or JSON for a .json name): their kind, bounds, backfill settings, goals and "
                        "how the trace's owners map to them (controller/sim/tenants.py, docs/simulator.md "
                        "'Tenants'); the summary then has per-tenant figures")
    return p.parse_args(argv)


def backfill_config(items: list[str]) -> BackfillConfig:
    changes = dict(checks.parse_backfill_setting(item) for item in items)
    return checks.backfill(BackfillConfig(), changes)


def parse_hint(text: str, pool_nodes: int, existing: list[Hint], lead_seconds: float) -> Hint:
    """NODES:IN_HOURS:FOR_HOURS, in simulated time from the start, checked as the controller checks one."""
    try:
        nodes, in_hours, for_hours = text.split(":")
        hint = Hint(int(nodes), float(in_hours) * HOUR, (float(in_hours) + float(for_hours)) * HOUR,
                    f"hint{len(existing) + 1}")
    except ValueError:
        raise SimUsage(f"--hint {text!r}: expected NODES:IN_HOURS:FOR_HOURS, e.g. 12:6:2") from None
    try:
        return validate_hint(hint, 0.0, pool_nodes, existing, lead_seconds)
    except ReserveError as exc:
        raise SimUsage(f"--hint {text!r}: {exc}") from None


def variant(name: str, backfill: BackfillConfig, reserves: ReserveSettings, hints: list[Hint],
            pool_nodes: int, settings: SimSettings | None = None
            ) -> tuple[BackfillConfig, ReserveSettings, list[Hint], SimSettings | None]:
    """One --compare setting over the base settings: a policy, reserve changes or the guests' work
    channel, joined by '+'."""
    hints = list(hints)
    for part in name.split("+"):
        key, _, value = part.partition("=")
        try:
            if not value and key in POLICIES:
                backfill = dataclasses.replace(backfill, termination_policy=Policy(key))
            elif key == "static" and value:
                reserves = dataclasses.replace(reserves, static_nodes=_number(int, part, "a whole number of nodes")
                                               ).validate()
            elif key == "predictive" and value:
                if value not in MODES:
                    raise SimUsage(f"--compare {part!r}: predictive takes one of {', '.join(MODES)}, not {value!r}")
                reserves = dataclasses.replace(reserves, predictive=PredictiveMode(value)).validate()
            elif key == "wait" and value:
                reserves = dataclasses.replace(reserves, wait_seconds=_number(float, part, "seconds")).validate()
            elif key == "hint":
                hints.append(parse_hint(value, pool_nodes, hints, reserves.lead_seconds))
            elif key == "drain":
                reserves = dataclasses.replace(reserves, drain=checks.parse_setting(part, {"drain": bool})[1]).validate()
            elif key == "agents" and settings is not None:
                if value not in MODELS:
                    raise SimUsage(f"--compare {part!r}: agents is one of {', '.join(MODELS)}, not {value!r}")
                settings = dataclasses.replace(settings, agents=value)
            elif key == "work_channel" and settings is not None:
                settings = dataclasses.replace(settings, guest_work_channel=checks.parse_setting(
                    part, {"work_channel": bool})[1])
            elif key == "retire" and settings is not None:
                settings = dataclasses.replace(settings, guest_retires=checks.parse_setting(part, {"retire": bool})[1])
            else:
                raise SimUsage(f"--compare {part!r}: not a policy ({', '.join(POLICIES)}) nor static=N, "
                               f"predictive=day|week|month, wait=SECONDS, hint=NODES:IN_HOURS:FOR_HOURS, "
                               f"drain=true|false, work_channel=true|false, retire=true|false, agents=ideal|modelled")
        except (ValueError, ReserveError) as exc:
            raise SimUsage(f"--compare {part!r}: {exc}") from None
    return backfill, reserves, hints, settings


POLICIES = tuple(policy.value for policy in Policy)
MODES = tuple(mode.value for mode in PredictiveMode)


def _number(kind: type, part: str, unit: str) -> Any:
    """The number after '=' in a --compare setting, or SimUsage naming what it should be."""
    key, _, value = part.partition("=")
    try:
        return kind(value)
    except ValueError:
        raise SimUsage(f"--compare {part!r}: {key} takes {unit}, not {value!r}") from None


def read_requests(path: Path, fmt: str) -> list[traces.OnDemandRequest]:
    if fmt == "azure":
        return traces.azure_requests(path)
    if fmt == "swf":
        return traces.swf_requests(path)
    return traces.csv_requests(path)


def read_demand(path: Path, fmt: str) -> list[traces.DemandSeries]:
    return traces.bitbrains_series(path) if fmt == "bitbrains" else traces.alibaba_series(path)


def pool_settings(args: argparse.Namespace) -> SimSettings:
    """The pool: --pool's groups, or --nodes nodes of one size (the defaults where not given)."""
    sizes = {"nodes": args.nodes, "node_cpus": args.node_cpus, "node_memory_mib": args.node_memory_mib}
    given = [f"--{name.replace('_', '-')}" for name, value in sizes.items() if value is not None]
    if args.pool:
        if given:
            raise SimUsage(f"--pool gives the nodes and their sizes: drop {', '.join(given)}")
        groups = tuple(traces.pool_groups(args.pool))   # a TraceError names the file and line
        return SimSettings(nodes=sum(g.count for g in groups), pool=groups)
    for name, value in sizes.items():
        if value is not None and value < 1:
            raise SimUsage(f"--{name.replace('_', '-')} must be at least 1")
    return SimSettings(**{name: value for name, value in sizes.items() if value is not None})


def read_jobs(args: argparse.Namespace, backfill: BackfillConfig, inputs: dict[str, Any],
              pool_vcpus: int) -> list[traces.Job]:
    """The --backfill-jobs trace (none: VM-level work), noted in the inputs."""
    for option in ("queues", "load", "max_runtime"):
        if getattr(args, f"backfill_jobs_{option}") is not None and not args.backfill_jobs:
            raise SimUsage(f"--backfill-jobs-{option.replace('_', '-')} needs --backfill-jobs")
    if not args.backfill_jobs:
        return []
    if not backfill.enabled:
        raise SimUsage("--backfill-jobs needs backfill enabled (--backfill enabled=true): no VM would run them")
    try:
        queues = [int(q) for q in args.backfill_jobs_queues.split(",")] if args.backfill_jobs_queues else None
    except ValueError:
        raise SimUsage(f"--backfill-jobs-queues {args.backfill_jobs_queues!r}: expected N[,N...]") from None
    jobs = traces.swf_jobs(args.backfill_jobs, queues)
    if args.backfill_jobs_max_runtime is not None:
        if not args.backfill_jobs_max_runtime > 0:
            raise SimUsage(f"--backfill-jobs-max-runtime must be more than 0, got {args.backfill_jobs_max_runtime}")
        jobs = [j for j in jobs if j.runtime <= args.backfill_jobs_max_runtime]
        inputs.update(backfill_jobs_max_runtime=args.backfill_jobs_max_runtime)
    inputs.update(backfill_jobs=str(args.backfill_jobs), backfill_jobs_sha256=traces.digest(args.backfill_jobs),
                  backfill_jobs_queues=queues, trace_jobs=len(jobs))
    if args.backfill_jobs_load is not None:
        if not args.backfill_jobs_load > 0:
            raise SimUsage(f"--backfill-jobs-load must be more than 0, got {args.backfill_jobs_load}")
        jobs, period = jobs_at_load(jobs, backfill.vcpus, args.days * DAY, args.backfill_jobs_load, pool_vcpus)
        inputs.update(backfill_jobs_load=args.backfill_jobs_load, backfill_jobs_tile_period_s=round(period, 3))
    return jobs


def jobs_at_load(jobs: list[traces.Job], vm_vcpus: int, run_s: float, load: float,
                 pool_vcpus: int) -> tuple[list[traces.Job], float]:
    """The jobs a backfill VM of `vm_vcpus` can run, stretched and tiled to offer `load` of the
    pool's vCPUs (controller/sim/workload.py); with their tile period in seconds."""
    fitting = [j for j in jobs if j.procs <= vm_vcpus]
    if not fitting:
        raise SimUsage(f"no job of the trace fits a backfill VM of {vm_vcpus} vCPU(s)")
    return stretch_to_load(fitting, run_s, load, pool_vcpus)


def build(args: argparse.Namespace) -> tuple[list[traces.OnDemandRequest], dict[str, Any], SimSettings,
                                             BackfillConfig, ControllerConfig, list[traces.DemandSeries],
                                             list[traces.Job]]:
    pool = pool_settings(args)
    if not args.days > 0:
        raise SimUsage("--days must be more than 0")
    backfill = backfill_config(args.backfill)
    config = load_config(args.config) if args.config else ControllerConfig()
    requests = read_requests(args.requests, args.format)
    inputs: dict[str, Any] = dict(requests=str(args.requests), requests_format=args.format,
                                  requests_sha256=traces.digest(args.requests), trace_requests=len(requests))
    if args.pool:
        inputs.update(pool=str(args.pool), pool_sha256=traces.digest(args.pool))
    load = args.load if args.load is not None else (AZURE_DEFAULT_LOAD if args.format == "azure" else None)
    if load is not None:
        if not load > 0:
            raise SimUsage("--load must be more than 0")
        requests, period = stretch_to_load(requests, args.days * DAY, load, pool.pool_vcpus)
        inputs.update(load=load, tile_period_s=round(period, 3))
    if args.config:
        inputs.update(config=str(args.config), config_sha256=traces.digest(args.config))
    demand: list[traces.DemandSeries] = []
    if args.demand:
        demand = read_demand(args.demand, args.demand_format)
        inputs.update(demand=str(args.demand), demand_format=args.demand_format,
                      demand_sha256=traces.digest(args.demand))
    jobs = read_jobs(args, backfill, inputs, pool.pool_vcpus)
    settings = dataclasses.replace(pool, days=args.days, **agent_settings(args),
                                   selection_interval_seconds=config.selection_interval_seconds,
                                   report_seconds=args.report_seconds, progress_seconds=0.0 if args.quiet else 5.0,
                                   max_wall_seconds=args.max_wall_seconds,
                                   guest_work_channel=args.guest_work_channel, guest_retires=args.guest_retires)
    return requests, inputs, settings, backfill, config, demand, jobs


def with_tenants(args: argparse.Namespace, requests: list[traces.OnDemandRequest], inputs: dict[str, Any],
                 backfill: BackfillConfig) -> tuple[list[traces.OnDemandRequest], Any]:
    """--tenants: the file read and the requests given their tenants (none: as they were)."""
    if args.tenants is None:
        return requests, None
    from .tenants import assign_requests, load_tenants   # tenants load only when asked for
    tenants = load_tenants(args.tenants)
    if any(t.batch for t in tenants.tenants) and not backfill.enabled:
        raise SimUsage(f"--tenants {args.tenants}: batch tenants need backfill enabled (--backfill enabled=true)")
    inputs.update(tenants=str(args.tenants), tenants_sha256=traces.digest(args.tenants))
    return assign_requests(requests, tenants, args.format, args.requests), tenants


def run_one(requests, inputs, settings, backfill, config, demand, reserves: ReserveSettings | None = None,
            hints: list[Hint] | None = None, jobs: list[traces.Job] | None = None, tenants: Any = None) -> Simulation:
    if tenants is not None:
        from .tenants import TenantSimulation
        sim = TenantSimulation(tenants, requests, settings, backfill, ledger_settings(config), demand=demand,
                               inputs=inputs, trace_jobs=jobs or (),
                               progress=ProgressBar() if settings.progress_seconds else None,
                               reserve_settings=config.reserves if reserves is None else reserves, hints=hints or ())
        sim.run()
        return sim
    # A fresh queue per run: --compare runs several on the same jobs.
    work = JobLevelWork(jobs, backfill.vcpus) if jobs else None
    sim = Simulation(requests, settings, backfill, ledger_settings(config), demand=demand, inputs=inputs, work=work,
                     progress=ProgressBar() if settings.progress_seconds else None,
                     reserve_settings=config.reserves if reserves is None else reserves, hints=hints or ())
    sim.run()
    return sim


def write_outputs(sim: Simulation, summary: dict[str, Any], out: Path, plots: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_csv(out / "vms.csv", sim.vm_rows())
    write_csv(out / "timeline.csv", sim.timeline_rows())
    if plots:
        from .plots import plot_run   # matplotlib loads only for plots
        plot_run(out)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["lease_id"])
        writer.writeheader()
        writer.writerows(rows)


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Columns two spaces apart: the first (the labels) to the left, the figures to the right."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    lines = ["  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
             .rstrip() for line in [header, *rows]]
    return "\n".join(lines)


def value(v: Any, kind: str = "") -> str:
    """A figure as the table prints it (FORMATS[kind]); "-" for none."""
    if v is None:
        return "-"
    if kind in FORMATS and isinstance(v, (int, float)) and not isinstance(v, bool):
        return FORMATS[kind](v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def compare_table(results: list[tuple[str, dict[str, Any]]]) -> str:
    """The --compare table: a row per figure (COMPARED), a column per setting."""
    rows = [[label] + [value(s["figures"].get(key), kind) for _, s in results]
            for label, key, kind in COMPARED if any(s["figures"].get(key) is not None for _, s in results)]
    return format_table(rows, ["figure"] + [name for name, _ in results])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        requests, inputs, settings, backfill, config, demand, jobs = build(args)
        requests, tenants = with_tenants(args, requests, inputs, backfill)
        hints: list[Hint] = []
        for text in args.hint:
            hints.append(parse_hint(text, settings.nodes, hints, config.reserves.lead_seconds))
        names = [n.strip() for n in args.compare.split(",") if n.strip()] if args.compare else \
            [backfill.termination_policy.value]
        runs = [(name, *variant(name, backfill, config.reserves, hints, settings.nodes, settings)) for name in names]
    except (SimUsage, checks.SettingError, InvalidField, ConfigError, traces.TraceError, OSError) as exc:
        print(f"controller.sim: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:   # a policy name not known
        print(f"controller.sim: {exc}", file=sys.stderr)
        return 2
    if args.plots and not args.out:
        print("controller.sim: --plots needs --out (the plots are drawn from the files written there)",
              file=sys.stderr)
        return 2
    results, run_dirs = [], []
    for name, run_backfill, reserves, run_hints, run_settings in runs:
        sim = run_one(requests, inputs, run_settings, run_backfill, config, demand, reserves, run_hints, jobs, tenants)
        summary = sim.summary()
        summary["header"]["setting"] = name   # what the plots' titles name
        results.append((name, summary))
        if args.out:
            run_dirs.append((name, args.out / name.replace("/", "_") if args.compare else args.out))
            try:
                write_outputs(sim, summary, run_dirs[-1][1], args.plots)
            except PlotsUnavailable as exc:
                print(f"controller.sim: {exc}", file=sys.stderr)
                return 2
        # A run's books, store and job queue (hundreds of MB on a week of short jobs) go before the
        # next run starts: a simulation is a reference cycle, which only a full collection frees
        del sim
        gc.collect()
    if args.compare:
        if args.out:
            (args.out).mkdir(parents=True, exist_ok=True)
            (args.out / "compare.json").write_text(json.dumps(dict(results), indent=2) + "\n")
            if args.plots:
                from .plots import plot_compare   # matplotlib loads only for plots
                plot_compare(args.out, run_dirs)
        print(compare_table(results))
    else:
        print(json.dumps(results[0][1]["figures"], indent=2))
        if tenants is not None:
            print(json.dumps(results[0][1]["tenants"], indent=2))
    return 0
