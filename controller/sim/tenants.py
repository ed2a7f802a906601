"""Tenants in the simulator (issue 26, item 5): PhoenixCloud's bounds and RHIC's goal-driven sizing
run by the same books as the live controller (controller.core.bounds, batch_fill, goal_sizing),
with tenants, their bounds, backfill settings and goals from a file (`--tenants FILE`).

The file (TOML, or JSON when its name ends in .json)::

    rbt = 1.5                  # the pool's booking threshold (default 1)
    urr = 0.8                  # the usage rate reference (default 1)
    [assign]
    on_demand_key = "auto"     # what a request's owner is: owner | swf_user | swf_group | auto
    batch_key = "swf_user"     # what a --backfill-jobs job's owner is: swf_user | swf_group
    seed = 0                   # hashed with each request or job id for the shares
    [[tenants]]
    name = "web"
    kind = "on_demand"         # or batch
    lower = {vcpus = 96, memory_mib = 393216}
    upper = {vcpus = 256, memory_mib = 1048576}
    owners = ["3", "24"]       # the trace owners that are this tenant's
    share = 0.4                # of the requests (or jobs) no owners list takes
    # batch tenants only:
    start_s = 0                # its backfill, work and goal begin then (before: its backfill is off)
    backfill = {vcpus = 4, memory_mb = 16384, max_instances = 40}
    goal = {kind = "deadline", work_vcpu_hours = 128, deadline_s = 36000}
    work = {vcpu_hours = 128, procs = 1, runtime_s = 600}

How a request (or job) finds its tenant, first rule that applies:

1. its owner is in a tenant's `owners` (of its kind). The owner is, for on-demand requests, the
   trace's owner (`on_demand_key = "owner"`: the CSV's owner column; Azure's is only its priority,
   azure-p0) or the SWF job's user or group (swf_user, swf_group: field 12 or 13, by the job's id,
   a tiled copy's too); `auto` is swf_user for SWF traces and owner otherwise. For --backfill-jobs
   jobs, the SWF user or group (batch_key);
2. a synthetic share: sha256 of "seed:id" (the request's or job's id, as tiled) read as a number
   in [0, 1) picks a tenant by the cumulative `share`s of the tenants of its kind, in file order;
   a trace without owners (Azure: every VM is azure-p0) is divided this way;
3. else the built-in tenant of its kind: `default` for on-demand requests (unbounded), the
   built-in `backfill` tenant for jobs (run only if the pool-wide backfill is on; set a tenant
   named "backfill" in the file, e.g. with backfill = {enabled = false}, to change it).

A batch tenant's backfill VMs (and its dedicated VMs, which the books request for its goal) run
that tenant's jobs only: one queue per batch tenant (controller/sim/jobs.py each); `work` adds a
bag of jobs of `procs` vCPUs and `runtime_s` seconds making `vcpu_hours` in all, submitted at
start_s (the last one shorter so they add up exactly). A goal's progress is the tenant's completed
job vCPU-seconds (run time x procs), told to the books' ProgressBook every TICK_S as each of its
running backfill VMs' agents would report it: done of total, total being the goal's W in
vCPU-seconds (W x 3600). A goal may give `deadline_after_s` (after start_s) or
`deadline_on_residual = true` (start_s plus the time W takes on the residual the books predict for
the tenant at start_s: its backfill and its grant) instead of `deadline_s`.

Every draw stays seeded per request or job (the hash above), so runs with and without tenants see
the same trace. Without --tenants, nothing here runs. The per-tenant figures are
controller/sim/tenant_figures.py's.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gleaner_common.ids import InvalidField

from ..core.goal_sizing import goal_from_dict
from ..core.goals import Progress
from ..core.records import BACKFILL_TENANT, DEFAULT_TENANT, ZERO, BackfillConfig, Size, TenantRecord
from ..core.tenancy import TENANT_BACKFILL_KEYS, Tenant, TenancySettings, admit, check_size, show
from . import swf
from .engine import Simulation
from .jobs import JobLevelWork, Run
from .tenant_figures import TICK_S, TenantBook, predicted_residual
from .trace_base import Job, OnDemandRequest
from .world import SimVm, VmLevelWork

ON_DEMAND_KEYS = ("auto", "owner", "swf_user", "swf_group")
BATCH_KEYS = ("swf_user", "swf_group")
SIM_GOAL_KEYS = ("deadline_after_s", "deadline_on_residual")


class TenantsError(ValueError):
    """The tenants file is wrong: the message names the file, the key and what is allowed."""


@dataclass(frozen=True)
class TenantSpec:
    name: str
    kind: str                                  # on_demand | batch
    lower: Size
    upper: Size
    owners: frozenset[str] = frozenset()
    share: float = 0.0
    start_s: float = 0.0
    backfill: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    goal: Mapping[str, Any] | None = None
    work: Mapping[str, Any] | None = None

    @property
    def batch(self) -> bool:
        return self.kind == "batch"


@dataclass(frozen=True)
class TenantsConfig:
    tenants: tuple[TenantSpec, ...]
    rbt: float = 1.0
    urr: float = 1.0
    on_demand_key: str = "auto"
    batch_key: str = "swf_user"
    seed: int = 0
    source: str = "tenants"

    @property
    def settings(self) -> TenancySettings:
        return TenancySettings(self.rbt, self.urr)

    def named(self, name: str) -> TenantSpec | None:
        return next((t for t in self.tenants if t.name == name), None)


# ------------------------------------------------------------------------------- the file

def load_tenants(path: Path | str) -> TenantsConfig:
    """The tenants file, checked; TenantsError names the file, the key and the value."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TenantsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TenantsError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    return tenants_config(data, str(path))


def tenants_config(data: Mapping[str, Any], source: str = "tenants") -> TenantsConfig:
    """A TenantsConfig from the file's table (see the module's doc)."""
    if not isinstance(data, Mapping):
        raise TenantsError(f"{source}: expected a table of rbt, urr, assign and tenants")
    _unknown(data, ("rbt", "urr", "assign", "tenants"), source)
    assign = data.get("assign", {})
    if not isinstance(assign, Mapping):
        raise TenantsError(f"{source}: assign: expected a table of on_demand_key, batch_key, seed")
    _unknown(assign, ("on_demand_key", "batch_key", "seed"), f"{source}: assign")
    on_key, batch_key = assign.get("on_demand_key", "auto"), assign.get("batch_key", "swf_user")
    if on_key not in ON_DEMAND_KEYS:
        raise TenantsError(f"{source}: assign.on_demand_key {on_key!r}: one of {', '.join(ON_DEMAND_KEYS)}")
    if batch_key not in BATCH_KEYS:
        raise TenantsError(f"{source}: assign.batch_key {batch_key!r}: one of {', '.join(BATCH_KEYS)}")
    seed = assign.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TenantsError(f"{source}: assign.seed {seed!r}: a whole number")
    rows = data.get("tenants")
    if not isinstance(rows, list) or not rows:
        raise TenantsError(f"{source}: tenants: expected a list of tenants ([[tenants]] tables), at least one")
    specs = tuple(_spec(row, f"{source}: tenants[{i}]") for i, row in enumerate(rows))
    names = [s.name for s in specs]
    for name in set(names):
        if names.count(name) > 1:
            raise TenantsError(f"{source}: tenant name {name!r} is given {names.count(name)} times")
    for kind in ("on_demand", "batch"):
        shares = sum(s.share for s in specs if s.kind == kind)
        if shares > 1 + 1e-9:
            raise TenantsError(f"{source}: the {kind} tenants' shares add up to {shares:g}; at most 1")
    try:
        settings = TenancySettings(data.get("rbt", 1.0), data.get("urr", 1.0))
    except InvalidField as exc:
        raise TenantsError(f"{source}: {exc}") from None
    return TenantsConfig(specs, settings.rbt, settings.urr, on_key, batch_key, seed, source)


def _unknown(table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    extra = sorted(set(table) - set(allowed))
    if extra:
        raise TenantsError(f"{where}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}")


SPEC_KEYS = ("name", "kind", "lower", "upper", "owners", "share", "start_s", "backfill", "goal", "work")


def _spec(row: Any, where: str) -> TenantSpec:
    if not isinstance(row, Mapping):
        raise TenantsError(f"{where}: expected a table")
    _unknown(row, SPEC_KEYS, where)
    name, kind = row.get("name"), str(row.get("kind", "")).replace("-", "_")
    lower, upper = _size(row.get("lower"), f"{where}.lower"), _size(row.get("upper"), f"{where}.upper")
    try:
        Tenant(name, kind, lower, upper)   # the core's checks: the name, the kind, the sizes
    except InvalidField as exc:
        raise TenantsError(f"{where}: {exc}") from None
    if not lower.fits_in(upper):
        raise TenantsError(f"{where}: lower bound {show(lower)} is past the upper bound {show(upper)}")
    share = row.get("share", 0.0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise TenantsError(f"{where}.share {share!r}: a number from 0 to 1")
    owners = row.get("owners", [])
    if not isinstance(owners, list):
        raise TenantsError(f"{where}.owners {owners!r}: a list of owner names or numbers")
    start = row.get("start_s", 0.0)
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not 0 <= start < 1e9:
        raise TenantsError(f"{where}.start_s {start!r}: seconds from 0 to 1e9")
    spec = TenantSpec(name, kind, lower, upper, frozenset(str(o) for o in owners), float(share), float(start),
                      dict(row.get("backfill") or {}), row.get("goal"), row.get("work"))
    if kind != "batch":
        for key in ("backfill", "goal", "work"):
            if row.get(key) is not None:
                raise TenantsError(f"{where}.{key}: only a batch tenant has one ({name!r} is {kind})")
        if start:
            raise TenantsError(f"{where}.start_s: only a batch tenant has one ({name!r} is {kind})")
        return spec
    _check_batch(spec, where)
    return spec


def _size(value: Any, where: str) -> Size:
    if not isinstance(value, Mapping) or set(value) != {"vcpus", "memory_mib"}:
        raise TenantsError(f"{where}: expected {{vcpus = N, memory_mib = N}}, got {value!r}")
    try:
        return check_size(Size(value["vcpus"], value["memory_mib"]), where.rpartition(": ")[2])
    except InvalidField as exc:
        raise TenantsError(f"{where}: {exc}") from None


def _check_batch(spec: TenantSpec, where: str) -> None:
    extra = sorted(set(spec.backfill) - set(TENANT_BACKFILL_KEYS))
    if extra:
        raise TenantsError(f"{where}.backfill: unknown key(s) {', '.join(extra)}; allowed: "
                           f"{', '.join(TENANT_BACKFILL_KEYS)}")
    if spec.goal is not None:
        if not isinstance(spec.goal, Mapping):
            raise TenantsError(f"{where}.goal: expected a table")
        try:
            goal_from_dict(_goal_at(spec.goal, spec.start_s, 0.0))
        except InvalidField as exc:
            raise TenantsError(f"{where}.goal: {exc}") from None
    if spec.work is not None:
        work = spec.work
        if not isinstance(work, Mapping):
            raise TenantsError(f"{where}.work: expected a table")
        _unknown(work, ("vcpu_hours", "procs", "runtime_s"), f"{where}.work")
        for key, low, high in (("vcpu_hours", 1e-6, 1e7), ("procs", 1, 1024), ("runtime_s", 1.0, 1e7)):
            value = work.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise TenantsError(f"{where}.work.{key} {value!r}: a number from {low:g} to {high:g}")
        if work["procs"] != int(work["procs"]):
            raise TenantsError(f"{where}.work.procs {work['procs']!r}: a whole number")


def _goal_at(goal: Mapping[str, Any], start_s: float, residual_vcpus: float) -> dict[str, Any]:
    """The goal as the books take it: a deadline relative to the start (deadline_after_s) or on
    the predicted residual (deadline_on_residual) made absolute."""
    out = {k: v for k, v in goal.items() if k not in SIM_GOAL_KEYS}
    if goal.get("deadline_after_s") is not None:
        out["deadline_s"] = start_s + goal["deadline_after_s"]
    elif goal.get("deadline_on_residual"):
        work = goal.get("work_vcpu_hours", 0)
        hours = work / residual_vcpus if residual_vcpus > 0 else 1e6
        out["deadline_s"] = start_s + hours * 3600.0 if residual_vcpus > 0 else start_s + 1e9
    return out


def check_admission(config: TenantsConfig, capacity: Size) -> None:
    """PhoenixCloud's admission of the file's tenants into an empty pool of `capacity` (the sum of
    upper bounds within capacity x RBT, the lower bounds within what is idle: all of it)."""
    tenants = [Tenant(s.name, s.kind, s.lower, s.upper) for s in config.tenants]
    verdict = admit([], tenants, capacity, capacity, config.settings)
    if not verdict.admitted:
        raise TenantsError(f"{config.source}: the tenants are not admitted to a pool of {show(capacity)}: "
                           f"{verdict.reason}")


# ------------------------------------------------------------------------------- the mapping

def share_point(seed: int, item_id: str) -> float:
    """A request's or job's place in [0, 1) for the shares: sha256 of "seed:id", seeded per item."""
    digest = hashlib.sha256(f"{seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def tenant_for(owner: str | None, item_id: str, specs: Sequence[TenantSpec], seed: int, fallback: str) -> str:
    """The tenant of one request or job among `specs` (those of its kind): by owner, else by share,
    else `fallback` (the module's doc, the rules in order)."""
    if owner is not None:
        for spec in specs:
            if owner in spec.owners:
                return spec.name
    point, upto = share_point(seed, item_id), 0.0
    for spec in specs:
        upto += spec.share
        if spec.share > 0 and point < upto:
            return spec.name
    return fallback


def _base_id(item_id: str) -> str:
    """A tiled copy's id without its copy number (traces.tile: <id>#<k>)."""
    return item_id.partition("#")[0]


def swf_owners(path: Path | str, key: str) -> dict[str, str]:
    """SWF job id -> its user or group (key swf_user or swf_group), for SWF on-demand requests."""
    field = "user" if key == "swf_user" else "group"
    return {job.job_id: str(getattr(job, field)) for job in swf.swf_jobs(path)}


def assign_requests(requests: Sequence[OnDemandRequest], config: TenantsConfig, fmt: str = "csv",
                    swf_path: Path | str | None = None) -> list[OnDemandRequest]:
    """The requests with their tenant as owner (the books take a request's owner as its tenant)."""
    key = config.on_demand_key
    if key == "auto":
        key = "swf_user" if fmt == "swf" else "owner"
    if key != "owner" and fmt != "swf":
        raise TenantsError(f"{config.source}: assign.on_demand_key {key!r} needs an SWF trace (--format swf)")
    owners = swf_owners(swf_path, key) if key != "owner" and swf_path is not None else {}
    specs = [s for s in config.tenants if s.kind == "on_demand"]

    def owner(request: OnDemandRequest) -> str | None:
        return request.owner if key == "owner" else owners.get(_base_id(request.request_id))

    return [dataclasses.replace(r, owner=tenant_for(owner(r), r.request_id, specs, config.seed, DEFAULT_TENANT))
            for r in requests]


def assign_jobs(jobs: Sequence[Job], config: TenantsConfig) -> dict[str, list[Job]]:
    """The --backfill-jobs jobs by batch tenant (SWF user or group, else share, else the built-in)."""
    field = "user" if config.batch_key == "swf_user" else "group"
    specs = [s for s in config.tenants if s.batch]
    out: dict[str, list[Job]] = {}
    for job in jobs:
        owner = getattr(job, field)
        name = tenant_for(None if owner < 0 else str(owner), job.job_id, specs, config.seed, BACKFILL_TENANT)
        out.setdefault(name, []).append(job)
    return out


def bag_of_jobs(spec: TenantSpec, at: float) -> list[Job]:
    """A tenant's `work`: jobs of `procs` vCPUs and `runtime_s` making `vcpu_hours`, all submitted at `at`."""
    if not spec.work:
        return []
    procs, runtime = int(spec.work["procs"]), float(spec.work["runtime_s"])
    left = float(spec.work["vcpu_hours"]) * 3600.0
    jobs: list[Job] = []
    while left > 1e-6:
        seconds = min(runtime, left / procs)
        jobs.append(Job(at, seconds, procs, f"{spec.name}-w{len(jobs)}", 0))
        left -= seconds * procs
    return jobs


def records(config: TenantsConfig, now: float, started: Mapping[str, float] | None = None) -> list[TenantRecord]:
    """The tenants as the store holds them, at `now`: a batch tenant before its start_s has its
    backfill off; a tenant in `started` (name -> the residual the books predicted for it at its
    start) has its goal, its deadline made absolute."""
    out = []
    for spec in config.tenants:
        backfill, goal = dict(spec.backfill), None
        if spec.batch and now < spec.start_s:
            backfill["enabled"] = False
        elif spec.goal is not None and started and spec.name in started:
            goal = json.dumps(_goal_at(spec.goal, spec.start_s, started[spec.name]))
        out.append(TenantRecord(spec.name, spec.kind, spec.lower.vcpus, spec.lower.memory_mib, spec.upper.vcpus,
                                spec.upper.memory_mib, 0.0, json.dumps(backfill) if backfill else None, goal))
    return out


# ------------------------------------------------------------------------------- the work

class TenantJobs(JobLevelWork):
    """One batch tenant's job queue: JobLevelWork with its completed vCPU-seconds (the goal's
    progress) and when its last job finished."""

    def __init__(self, jobs: Sequence[Job], vm_vcpus: int, shift: float) -> None:
        super().__init__(jobs, vm_vcpus)
        self.shift = shift
        self.done_vcpu_seconds = 0.0
        self.finished_at: float | None = None
        self.on_finished: Callable[[float], None] | None = None

    def _finish(self, run: Run) -> None:
        live = run.live
        super()._finish(run)
        if not live:
            return
        self.done_vcpu_seconds += run.job.runtime * run.job.procs
        if self.completed == len(self.jobs) and self.finished_at is None:
            self.finished_at = run.started + run.job.runtime
            if self.on_finished is not None:
                self.on_finished(self.finished_at)


JOB_COUNTS = ("backfill_jobs_arrived", "backfill_jobs_completed", "backfill_jobs_running_at_end",
              "backfill_jobs_queued_at_end", "backfill_jobs_too_big", "backfill_job_requeues",
              "backfill_job_seconds_done", "backfill_job_seconds_lost", "backfill_job_seconds_lost_to_preemption")


class TenantWork:
    """BackfillWork split by batch tenant: each VM's work goes to its tenant's queue (TenantJobs),
    or VM-level (VmLevelWork) for a tenant without jobs. `tenant_of(vm)` names a VM's tenant."""

    def __init__(self, queues: Mapping[str, VmLevelWork], tenant_of: Callable[[SimVm], str] | None = None) -> None:
        self.queues = dict(queues)
        self.vm_level = VmLevelWork()   # the tenants without jobs of their own
        self.tenant_of = tenant_of
        self.of_vm: dict[str, VmLevelWork] = {}
        self.turns_idle = any(q.turns_idle for q in self.queues.values())

    def _every(self) -> list[VmLevelWork]:
        return [*self.queues.values(), self.vm_level]

    def start(self, schedule) -> None:
        for queue in self._every():
            queue.start(schedule)

    def watch_cpu(self, changed) -> None:
        for queue in self._every():
            queue.watch_cpu(changed)

    def guest_channel(self) -> None:
        for queue in self._every():
            queue.guest_channel()

    def vm_started(self, vm: SimVm, now: float) -> None:
        assert self.tenant_of is not None
        queue = self.queues.get(self.tenant_of(vm), self.vm_level)
        self.of_vm[vm.name] = queue
        queue.vm_started(vm, now)

    def _route(self, name: str, vm: SimVm, now: float, *extra: Any) -> None:
        queue = self.of_vm.get(vm.name)
        if queue is not None:
            getattr(queue, name)(vm, now, *extra)

    def vm_stopping(self, vm: SimVm, now: float, preempted: bool) -> None:
        self._route("vm_stopping", vm, now, preempted)

    def vm_ended(self, vm: SimVm, now: float, preempted: bool) -> None:
        self._route("vm_ended", vm, now, preempted)
        self.of_vm.pop(vm.name, None)

    def vm_hibernated(self, vm: SimVm, now: float) -> None:
        self._route("vm_hibernated", vm, now)

    def vm_resumed(self, vm: SimVm, now: float) -> None:
        self._route("vm_resumed", vm, now)

    def vm_retiring(self, vm: SimVm, now: float) -> None:
        self._route("vm_retiring", vm, now)

    def summary(self, end: float, lost_vcpu_seconds: float, preemptions: int) -> dict[str, Any]:
        """The pool's figures: VM-level over every tenant's VMs, the job figures summed."""
        merged = VmLevelWork()
        parts = [(q, q.summary(end, lost_vcpu_seconds, preemptions)) for q in self._every()]
        for queue, _ in parts:
            merged.started += queue.started
            merged.vm_seconds += queue.vm_seconds
            merged.vcpu_seconds += queue.vcpu_seconds
            merged.notice_vcpu_seconds += queue.notice_vcpu_seconds
            merged.runtimes += queue.runtimes
            merged.alive.update(queue.alive)
            merged.on_notice.update(queue.on_notice)
        figures = merged.summary(end, lost_vcpu_seconds, preemptions)
        figures["backfill_working_vcpu_seconds"] = sum(p["backfill_working_vcpu_seconds"] for _, p in parts)
        jobs = [p for q, p in parts if isinstance(q, JobLevelWork)]
        if jobs:
            for key in JOB_COUNTS:
                figures[key] = round(sum(p[key] for p in jobs), 3)
            done, lost = figures["backfill_job_seconds_done"], figures["backfill_job_seconds_lost"]
            figures["backfill_job_lost_share"] = round(lost / (done + lost), 6) if done + lost else None
            figures["backfill_job_lost_to_preemption_share"] = \
                round(figures["backfill_job_seconds_lost_to_preemption"] / (done + lost), 6) if done + lost else None
        return figures


def tenant_work(config: TenantsConfig, backfill: BackfillConfig, trace_jobs: Sequence[Job] = ()) -> TenantWork:
    """Each batch tenant's queue: its share of the trace's jobs and its own bag of work, on VMs of
    its backfill size; the trace's submit times shifted as JobLevelWork shifts them (the first job
    that fits the pool's backfill VM at the start) for every tenant alike."""
    fitting = sorted((j for j in trace_jobs if j.procs <= backfill.vcpus), key=lambda j: j.submit)
    shift = fitting[0].submit if fitting else 0.0
    by_tenant = assign_jobs(trace_jobs, config)
    queues: dict[str, VmLevelWork] = {}
    names = [s.name for s in config.tenants if s.batch]
    if BACKFILL_TENANT not in names:
        names.append(BACKFILL_TENANT)
    for name in names:
        spec = config.named(name)
        vcpus = int((spec.backfill if spec else {}).get("vcpus", backfill.vcpus))
        jobs = list(by_tenant.get(name, ()))
        if spec is not None:
            jobs += bag_of_jobs(spec, spec.start_s + shift)
        if jobs:
            queues[name] = TenantJobs(jobs, vcpus, shift)
    return TenantWork(queues)


# ------------------------------------------------------------------------------- the simulation

class TenantSimulation(Simulation):
    """A Simulation whose books have the file's tenants. Its hooks, all here: the tenants' records
    at the start and at each batch tenant's start_s; a tick every TICK_S that tells the books each
    goal-driven tenant's progress and samples the figures; the books' usage read after every
    Write (the figures' time-weighted shares and the upper-bound check); rejections and queued
    requests read as they are logged (the lower-bound check); and a batch tenant's dedicated VMs
    (on-demand VMs the books request for its goal) run its jobs as its backfill VMs do."""

    def __init__(self, tenants: TenantsConfig, requests: Sequence[OnDemandRequest], *args: Any,
                 trace_jobs: Sequence[Job] = (), **kwargs: Any) -> None:
        backfill = args[1] if len(args) > 1 else kwargs.get("backfill", BackfillConfig())
        work = tenant_work(tenants, backfill, trace_jobs)
        super().__init__(requests, *args, work=work, **kwargs)
        self.tenancy = tenants
        check_admission(tenants, Size(self.settings.pool_vcpus, sum(n.memory_mib for n in self.nodes.values())))
        self.ledger.tenancy_settings = tenants.settings
        self.started: dict[str, float] = {}   # goal-driven tenants started -> the residual predicted then
        self.ledger.set_tenants(records(tenants, 0.0))
        work.tenant_of = self._vm_tenant
        self.dedicated: set[str] = set()   # names of dedicated VMs running
        self.tenant_book = TenantBook(tenants, self.ledger, self.end)
        for queue_name, queue in work.queues.items():
            if isinstance(queue, TenantJobs):
                queue.on_finished = lambda at, name=queue_name: self.tenant_book.finished(name, at)

    def _vm_tenant(self, vm: SimVm) -> str:
        return self.ledger.tenant_of_lease(self.store.leases[vm.lease_id])

    def run(self) -> dict[str, Any]:
        self.at(TICK_S, self._tenant_tick)
        for spec in self.tenancy.tenants:
            if spec.batch and (spec.start_s > 0 or spec.goal is not None):
                self.at(spec.start_s, self._tenant_start, spec.name)
        return super().run()

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        figures = self.tenant_book.figures(self.end, self.store, self.work)
        out["tenants"] = figures["tenants"]
        out["figures"].update(lower_bound_violations=figures["lower_bound_violations"],
                              upper_bound_violations=figures["upper_bound_violations"])
        return out

    # -- the tenants' clock --------------------------------------------------------------------------

    def _tenant_start(self, name: str) -> None:
        """A batch tenant starts: its backfill on first (so the books' residual for it is known),
        then its goal, with a deadline made absolute from what the books predict now."""
        self.set_tenant_records(records(self.tenancy, self.now, self.started))
        self.started[name] = predicted_residual(self.ledger, name, self.now)
        self.set_tenant_records(records(self.tenancy, self.now, self.started))
        self.tenant_book.started(name, self.now, self.started[name], self.ledger.tenant_goals.get(name))
        self.apply(self.ledger.fill(self.now))

    def set_tenant_records(self, tenant_records: Sequence[TenantRecord]) -> None:
        """The books' tenants set anew now (as `gleanctl tenant set` would), the figures told."""
        self.ledger.set_tenants(tenant_records)
        self.tenant_book.bounds_changed(self.now)

    def _tenant_tick(self, _arg: Any = None) -> None:
        self._report_progress()
        self.tenant_book.tick(self.now, self.allocated.on_demand + self.allocated.backfill, self.settings.pool_vcpus)
        self.at(self.now + TICK_S, self._tenant_tick)

    def _report_progress(self) -> None:
        """Each goal-driven tenant's completed vCPU-seconds, as its running backfill VMs' agents
        report them (controller.core.matching._note_progress does the same with a live report)."""
        ledger = self.ledger
        for name, goal in ledger.tenant_goals.items():
            queue = self.work.queues.get(name)
            if not isinstance(queue, TenantJobs):
                continue
            total = int(goal.work_vcpu_hours * 3600)
            done = min(int(queue.done_vcpu_seconds), total)
            said = False
            for vm in queue.alive.values():
                if vm.role == "backfill" and vm.asleep_since is None and vm.lease_id in ledger.leases:
                    ledger.progress.note(vm.lease_id, name, done, total, 0.0, self.now)
                    said = True
            if said:
                held = ledger.backfill_usage.get(name, ZERO).vcpus + ledger.tenant_usage.get(name, ZERO).vcpus
                ledger.progress.sample(name, held, self.now)

    # -- the hooks into the engine -----------------------------------------------------------------

    def commit(self, writes) -> None:
        super().commit(writes)
        self.tenant_book.observe(self.now)

    def logged(self, event) -> None:
        super().logged(event)
        if event.kind in ("request.rejected", "request.queued"):
            self.tenant_book.refused(self.now, event.kind, event.detail, self.store)

    def _launched(self, arg) -> None:
        super()._launched(arg)
        lease, answer = arg
        if answer.ok and lease.role == "on_demand" and lease.request_id.startswith("goal-") \
                and lease.vm_name not in self.dedicated:
            vm = self.nodes[lease.node_id].vms.get(lease.vm_name)
            if vm is not None and vm.lease_id == lease.lease_id:
                self.dedicated.add(lease.vm_name)
                self.work.vm_started(vm, self.now)

    def _stopping(self, stop) -> None:
        lease = stop.lease
        if lease.vm_name in self.dedicated:
            vm = self.nodes[lease.node_id].vms.get(lease.vm_name)
            if vm is not None:
                self.work.vm_stopping(vm, self.now, False)
        super()._stopping(stop)

    def _stopped(self, arg) -> None:
        lease, answer = arg
        vm = self.nodes[lease.node_id].vms.get(lease.vm_name) if lease.vm_name in self.dedicated else None
        super()._stopped(arg)
        if vm is not None and answer.ok and lease.vm_name not in self.nodes[lease.node_id].vms:
            self.dedicated.discard(lease.vm_name)
            self.work.vm_ended(vm, self.now, False)


def progress_of(goal_work_vcpu_hours: float, done_vcpu_seconds: float) -> Progress:
    """A goal's progress in the simulator's unit (vCPU-seconds): done of W x 3600."""
    total = goal_work_vcpu_hours * 3600.0
    return Progress(min(done_vcpu_seconds, total), total)


__all__ = ["TICK_S", "TenantSimulation", "TenantSpec", "TenantsConfig", "TenantsError", "assign_jobs",
           "assign_requests", "bag_of_jobs", "check_admission", "load_tenants", "predicted_residual", "records",
           "share_point", "tenant_for", "tenants_config"]
