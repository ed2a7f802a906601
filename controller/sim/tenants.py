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
job vCPU-seconds (run time x procs), told to the books' ProgressBook every TICK_S as the agents of
its running backfill and dedicated VMs would report it: done of total, total being the goal's W in
vCPU-seconds (W x 3600). A goal may give `deadline_after_s` (after start_s) or
`deadline_on_residual = true` (start_s plus the time W takes on the residual the books predict for
the tenant at start_s: its backfill and its grant) instead of `deadline_s`.

Every draw stays seeded per request or job (the hash above), so runs with and without tenants see
the same trace. Without --tenants, nothing here runs. The file and the mapping are
controller/sim/tenant_config.py's; the per-tenant figures are
controller/sim/tenant_figures.py's.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.goal_sizing import GOAL_INTERVAL_S
from ..core.goals import Sizing
from ..core.records import BACKFILL_TENANT, BackfillConfig, Size, TenantRecord, is_dedicated, says_progress
from .engine import Simulation
from .jobs import JobLevelWork, Run
from .tenant_config import (TenantsConfig, TenantsError, TenantSpec, assign_jobs, assign_requests, bag_of_jobs,
                            check_admission, load_tenants, records, share_point, tenant_for, tenants_config)
from .tenant_figures import TICK_S, TenantBook, predicted_residual
from .trace_base import Job, OnDemandRequest
from .world import SimVm, VmLevelWork


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
                 trace_jobs: Sequence[Job] = (), pinned_dedicated: Mapping[str, int] | None = None,
                 **kwargs: Any) -> None:
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
        if pinned_dedicated:
            self._pin_dedicated(dict(pinned_dedicated))

    def _pin_dedicated(self, pinned: dict[str, int]) -> None:
        """A what-if for a hindsight search (RHIC's exhaustive search): each pinned goal-driven
        tenant holds that many dedicated vCPUs from its start and every volunteer it is granted,
        in place of its goal's sizing; the books' own request path places the dedicated VMs."""
        ledger = self.ledger
        sized = ledger._size

        def size(tenant, goal, now: float) -> list:
            vcpus = pinned.get(tenant.name)
            if vcpus is None:
                return sized(tenant, goal, now)
            ledger.sizings[tenant.name] = Sizing(tenant.upper.vcpus, vcpus, math.inf, True,
                                                 f"pinned: {vcpus} dedicated vCPUs and every volunteer")
            return ledger._dedicated_to(tenant.name, vcpus, now)[0]   # its effects
        ledger._size = size

    def _vm_tenant(self, vm: SimVm) -> str:
        return self.ledger.tenant_of_lease(self.store.leases[vm.lease_id])

    def run(self) -> dict[str, Any]:
        self.at(TICK_S, self._tenant_tick)
        self.at(GOAL_INTERVAL_S, self._size_goals)
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
        self.apply(self.ledger.size_goals(self.now))   # as `gleanctl tenant set NAME goal=...` does
        self.apply(self.ledger.fill(self.now))

    def set_tenant_records(self, tenant_records: Sequence[TenantRecord]) -> None:
        """The books' tenants set anew now (as `gleanctl tenant set` would), the figures told."""
        self.ledger.set_tenants(tenant_records)
        self.tenant_book.bounds_changed(self.now)

    def _tenant_tick(self, _arg: Any = None) -> None:
        self._report_progress()
        self.tenant_book.tick(self.now, self.allocated.on_demand + self.allocated.backfill, self.settings.pool_vcpus)
        self.at(self.now + TICK_S, self._tenant_tick)

    def _size_goals(self, _arg: Any = None) -> None:
        """The controller's goals job: every GOAL_INTERVAL_S (controller/cli.py)."""
        self.apply(self.ledger.size_goals(self.now))
        self.at(self.now + GOAL_INTERVAL_S, self._size_goals)

    def _report_progress(self) -> None:
        """Each goal-driven tenant's completed vCPU-seconds, as the agents of its running backfill
        and dedicated VMs report them (controller.core.matching._note_progress does the same with
        a live report)."""
        ledger = self.ledger
        for name, goal in ledger.tenant_goals.items():
            queue = self.work.queues.get(name)
            if not isinstance(queue, TenantJobs):
                continue
            total = int(goal.work_vcpu_hours * 3600)
            done = min(int(queue.done_vcpu_seconds), total)
            said = False
            for vm in queue.alive.values():
                lease = ledger.leases.get(vm.lease_id)
                if lease is not None and vm.asleep_since is None and says_progress(lease):
                    ledger.progress.note(vm.lease_id, name, done, total, 0.0, self.now)
                    said = True
            if said:
                held = ledger.tenant_held(name).vcpus
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
        if answer.ok and is_dedicated(lease) and lease.vm_name not in self.dedicated:
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


__all__ = ["TICK_S", "TenantJobs", "TenantSimulation", "TenantSpec", "TenantWork", "TenantsConfig", "TenantsError",
           "assign_jobs", "assign_requests", "bag_of_jobs", "check_admission", "load_tenants", "predicted_residual",
           "records", "share_point", "tenant_for", "tenant_work", "tenants_config"]
