"""Task-level backfill work (issue 10, item 1): backfill VMs run jobs from an HTC/HPC job trace,
as Nimbus' backfill VMs ran Condor workers, and a stopped VM loses only its running jobs' progress.

- One shared queue, first in first out by submit time. A job needs `procs` vCPUs; a VM runs jobs
  side by side while their procs fit its vCPUs. A VM with free vCPUs takes the earliest queued job
  that fits them (a job too big for the free room does not hold back smaller ones behind it); a
  job arriving goes to the VM whose free vCPUs fit it most tightly (ties: the VM free longest).
- A job runs for its trace run time. When its VM is asked to stop (preempted, drained for a
  reserve, recycled), the guest's workers vacate at once: each running job's progress since it
  started is lost and it goes back to the queue at its place by submit time (no checkpoints).
  A VM being stopped takes no new job.
- A VM hibernated (interruption = "hibernate") keeps its running jobs: each stands still at the
  progress it had when the save was asked, and goes on from there when the VM is resumed. Only
  if the VM is discarded (it waited past the limit) is that progress lost and the job queued again.
- A VM whose guest retires (SimSettings.guest_retires) takes no new job once its run time reaches
  the last tenth of its longest life: its running jobs finish, then it idles and is recycled
  (the ledger recycles a VM idle in that tenth), instead of being cut at the end.
- Jobs needing more vCPUs than a backfill VM has can never run: they are counted, not queued.
- Submit times are shifted so the first job a backfill VM can run arrives at the start of the run.
- With the guest work channel (SimSettings.guest_work_channel), a VM's guest says "idle" when it
  boots or its last job ends, and "busy" when a job starts and no other runs (one line is the
  whole VM's state: in a VM of several vCPUs a new job beside a running one says nothing), as a
  guest on the virtio-serial port does (docs/agent.md, the work channel).

Job-seconds count a job's run time once, whatever its procs (the VM-level figures beside them
count vCPU-seconds). Pure: time comes from the simulation's events.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.ledger import IDLE_CPU_CORES
from .traces import Job
from .world import SimVm, VmLevelWork

Schedule = Callable[[float, Callable[[Any], None], Any], None]


@dataclass(eq=False)
class Run:
    """Job `rank` (its place in the queue's order) running in a VM since `started`; `live` turns
    False when it is vacated, so its finish event, still in the simulation's heap, does nothing."""
    rank: int
    job: Job
    vm: str
    started: float
    live: bool = True


class JobLevelWork(VmLevelWork):
    """BackfillWork where backfill VMs pull jobs from a shared queue (see the module's doc).
    The VM-level figures stay in the summary; the job figures are added beside them."""

    turns_idle = True   # a worker with no job

    def __init__(self, jobs: Sequence[Job], vm_vcpus: int | None = None) -> None:
        super().__init__()
        ordered = sorted(jobs, key=lambda j: j.submit)   # stable: ties keep file order
        fitting = [j for j in ordered if vm_vcpus is None or j.procs <= vm_vcpus]
        self.too_big = len(ordered) - len(fitting)
        # the first job that can run arrives at the start: a job arrives at its submit - shift (the
        # jobs themselves are not copied: --compare runs several queues on the same jobs)
        self.shift = fitting[0].submit if fitting else 0.0
        self.jobs = fitting
        self.schedule: Schedule | None = None
        self.arrived = 0
        self.queued: dict[int, list[int]] = {}   # procs -> heap of ranks (index in self.jobs: FIFO order)
        self.free: dict[str, int] = {}                       # VMs that take jobs -> free vCPUs
        self.by_free: dict[int, dict[str, None]] = {}        # free vCPUs -> those VMs, free longest first
        self.running: dict[str, list[Run]] = {}
        self.frozen: dict[str, list[tuple[int, float]]] = {}   # hibernated VM -> its jobs (rank, seconds run)
        self.retiring: set[str] = set()   # VMs that take no new job (vm_retiring) until they end
        self.completed = 0
        self.requeues = 0
        self.done_seconds = 0.0
        self.lost_seconds = 0.0
        self.busy_vcpu_seconds = 0.0   # procs x time run, finished or lost (utilization_working)
        self.lost_to_preemption = 0.0
        self.cpu_changed: Callable[[SimVm], None] | None = None

    # -- BackfillWork ----------------------------------------------------------------------------

    def start(self, schedule: Schedule) -> None:
        self.schedule = schedule
        if self.jobs:
            schedule(self._arrival(0), self._arrive, 0)

    def watch_cpu(self, changed: Callable[[SimVm], None]) -> None:
        self.cpu_changed = changed

    def vm_started(self, vm: SimVm, now: float) -> None:
        super().vm_started(vm, now)
        self.running[vm.name] = []
        self._set_free(vm.name, vm.vcpus)
        vm.cpu_cores = 0.0   # a worker waiting for a job; the engine's report after the launch shows it
        if self.says_work:
            vm.work_state, vm.work_since = "idle", now   # its worker is up, with no job yet
        self._pull(vm.name, now)

    def vm_stopping(self, vm: SimVm, now: float, preempted: bool) -> None:
        self._vacate(vm.name, now, preempted)

    def vm_retiring(self, vm: SimVm, now: float) -> None:
        if vm.name not in self.running and vm.name not in self.frozen:
            return   # ended, or being stopped
        self.retiring.add(vm.name)
        self._set_free(vm.name, None)

    def vm_ended(self, vm: SimVm, now: float, preempted: bool) -> None:
        super().vm_ended(vm, now, preempted)
        self.retiring.discard(vm.name)
        frozen = self.frozen.pop(vm.name, None)
        if frozen is not None:   # discarded while hibernated: its jobs' progress is lost now
            self.running[vm.name] = [Run(rank, self.jobs[rank], vm.name, now - ran, live=False) for rank, ran in frozen]
            self._set_free(vm.name, 0)
        self._vacate(vm.name, now, preempted)   # nothing left when its stop was asked first

    def vm_hibernated(self, vm: SimVm, now: float) -> None:
        super().vm_hibernated(vm, now)
        self._set_free(vm.name, None)   # it takes no job while it sleeps
        runs = self.running.pop(vm.name, [])
        for run in runs:
            run.live = False   # its finish event, still in the heap, does nothing
        self.frozen[vm.name] = [(run.rank, now - run.started) for run in runs]

    def vm_resumed(self, vm: SimVm, now: float) -> None:
        super().vm_resumed(vm, now)
        frozen = self.frozen.pop(vm.name, [])
        self.running[vm.name] = []
        assert self.schedule is not None
        for rank, ran in frozen:   # each job goes on where it stood
            job = self.jobs[rank]
            run = Run(rank, job, vm.name, now - ran)
            self.running[vm.name].append(run)
            self.schedule(run.started + job.runtime, self._finish, run)
        if vm.name not in self.retiring:
            self._set_free(vm.name, vm.vcpus - sum(self.jobs[rank].procs for rank, _ran in frozen))
            self._pull(vm.name, now)
        self._cpu(vm.name, now)

    def summary(self, end: float, lost_vcpu_seconds: float, preemptions: int) -> dict[str, Any]:
        figures = super().summary(end, lost_vcpu_seconds, preemptions)
        in_progress = sum(end - r.started for runs in self.running.values() for r in runs) + \
            sum(ran for jobs in self.frozen.values() for _rank, ran in jobs)   # hibernated: kept, not lost
        done = self.done_seconds + in_progress   # still running at the end: not lost
        total = done + self.lost_seconds
        busy = self.busy_vcpu_seconds + sum((end - r.started) * r.job.procs
                                            for runs in self.running.values() for r in runs) + \
            sum(ran * self.jobs[rank].procs for jobs in self.frozen.values() for rank, ran in jobs)
        figures.update(
            backfill_working_vcpu_seconds=busy,   # jobs running, not idle workers
            backfill_jobs_arrived=self.arrived,
            backfill_jobs_completed=self.completed,
            backfill_jobs_running_at_end=sum(len(runs) for runs in self.running.values()),
            backfill_jobs_queued_at_end=sum(len(q) for q in self.queued.values()),
            backfill_jobs_too_big=self.too_big,
            backfill_job_requeues=self.requeues,
            backfill_job_seconds_done=round(done, 3),
            backfill_job_seconds_lost=round(self.lost_seconds, 3),
            backfill_job_seconds_lost_to_preemption=round(self.lost_to_preemption, 3),
            backfill_job_lost_share=round(self.lost_seconds / total, 6) if total else None,
            # what preemptions threw away (a victim terminated, or discarded after its sleep), apart
            # from jobs a VM's recycling at the end of its duration_seconds cut short
            backfill_job_lost_to_preemption_share=round(self.lost_to_preemption / total, 6) if total else None,
        )
        return figures

    # -- the queue -------------------------------------------------------------------------------

    def _arrive(self, index: int) -> None:
        now = self._arrival(index)
        while index < len(self.jobs) and self._arrival(index) <= now:
            self.arrived += 1
            self._place(index, now)
            index += 1
        if index < len(self.jobs):
            assert self.schedule is not None
            self.schedule(self._arrival(index), self._arrive, index)

    def _arrival(self, index: int) -> float:
        """When the job of this rank arrives in the run."""
        return self.jobs[index].submit - self.shift

    def _place(self, rank: int, now: float) -> None:
        """A job new to the queue (arrived or vacated): to the tightest free VM, or queued.
        Every queued job is one no free VM fits, so placing it first jumps no queue."""
        procs = self.jobs[rank].procs
        for free in sorted(f for f, vms in self.by_free.items() if f >= procs and vms):
            self._run(rank, next(iter(self.by_free[free])), now)
            return
        heapq.heappush(self.queued.setdefault(procs, []), rank)

    def _pull(self, vm: str, now: float) -> None:
        """Fill a VM's free vCPUs with the earliest queued jobs that fit them."""
        while True:
            free = self.free.get(vm, 0)
            heads = [(q[0], procs) for procs, q in self.queued.items() if q and procs <= free]
            if not heads:
                return
            _, procs = min(heads)
            self._run(heapq.heappop(self.queued[procs]), vm, now)

    def _run(self, rank: int, vm: str, now: float) -> None:
        job = self.jobs[rank]
        run = Run(rank, job, vm, now)
        self.running[vm].append(run)
        self._set_free(vm, self.free[vm] - job.procs)
        assert self.schedule is not None
        self.schedule(now + job.runtime, self._finish, run)
        self._cpu(vm, now, started=True)

    def _finish(self, run: Run) -> None:
        if not run.live:
            return   # vacated: its VM was stopped before it finished
        now = run.started + run.job.runtime
        self.running[run.vm].remove(run)
        self.completed += 1
        self.done_seconds += run.job.runtime
        self.busy_vcpu_seconds += run.job.runtime * run.job.procs
        if run.vm not in self.retiring:
            self._set_free(run.vm, self.free[run.vm] + run.job.procs)
            self._pull(run.vm, now)
        self._cpu(run.vm, now)

    def _cpu(self, vm: str, now: float, started: bool = False) -> None:
        """A VM's cpu_cores: the vCPUs its jobs use; the watcher hears when it turns idle or busy.
        With the guest work channel, what its guest says of the whole VM: "busy" when a job
        `started` and none else runs, "idle" when it has none left; the watcher then hears each
        time the guest says something."""
        sim_vm = self.alive.get(vm)
        if sim_vm is None:
            return
        runs = self.running[vm]
        cores = float(sum(run.job.procs for run in runs))
        turned = (cores >= IDLE_CPU_CORES) != (sim_vm.cpu_cores >= IDLE_CPU_CORES)
        sim_vm.cpu_cores = cores
        if self.says_work:
            turned = False
            if started and len(runs) == 1:   # its first running job: busy since now
                sim_vm.work_state, sim_vm.work_since, turned = "busy", now, True
            elif not runs and sim_vm.work_state != "idle":
                sim_vm.work_state, sim_vm.work_since, turned = "idle", now, True
        if turned and self.cpu_changed is not None:
            self.cpu_changed(sim_vm)

    def _vacate(self, vm: str, now: float, preempted: bool) -> None:
        """The VM takes no more jobs; its running jobs lose their progress and queue again."""
        if vm not in self.running:
            return
        self._set_free(vm, None)
        runs = self.running.pop(vm, [])
        for run in runs:
            run.live = False
            lost = now - run.started
            self.lost_seconds += lost
            self.busy_vcpu_seconds += lost * run.job.procs
            if preempted:
                self.lost_to_preemption += lost
            self.requeues += 1
        for run in sorted(runs, key=lambda r: r.rank):
            self._place(run.rank, now)

    def _set_free(self, vm: str, free: int | None) -> None:
        """Move a VM between the free-vCPU buckets (None: it takes no jobs any more)."""
        old = self.free.pop(vm, None)
        if old is not None:
            self.by_free[old].pop(vm, None)
        if free is not None:
            self.free[vm] = free
            self.by_free.setdefault(free, {})[vm] = None
