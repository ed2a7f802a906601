"""Idleness: which backfill VMs are idle (the guest's word on its work channel, else its CPU
figures), idle_first's work clock per VM, and recycling a VM found idle near the end of its life.
"""
from __future__ import annotations

from collections.abc import Collection

from .backfill_plan import recycles_when_idle
from .records import (BackfillConfig, Effect, Lease, Policy, ReportedVmLike, ReportLike, launch_time, run_time)
from .snapshot import IDLE


# idle_first: a backfill VM using less CPU than this (cores, over the agent's last sample),
# whatever its size, is idle: a worker between jobs (a CPU-bound job keeps a whole core busy; an
# idle tiny guest under TCG uses about 0.01 core)
IDLE_CPU_CORES = 0.25
# idle_first: a guest's "busy" clock (now - work_for_s) moves by report lag from one report to the
# next; within this many seconds of the clock kept, the same spell goes on (its view stays as it is)
GUEST_CLOCK_TOLERANCE_S = 2.0


def shows_idle(vm: ReportedVmLike) -> bool:
    """A VM idle by its own word (the work channel) or, if it said nothing, its own CPU figure
    (before the node's load is weighed: _cpu_idle)."""
    return vm.work_state == "idle" or (not vm.work_state and vm.cpu_sampled and vm.cpu_cores < IDLE_CPU_CORES)


def _cpu_idle(vm: ReportedVmLike, left: float, backfill_vcpus: int) -> bool:
    """A backfill VM idle by its CPU figure: under IDLE_CPU_CORES, unless its share of what the
    foreground `left` the node's `backfill_vcpus` (by vCPUs) is under that too (a starved VM)."""
    return vm.cpu_cores < IDLE_CPU_CORES and left * vm.vcpus >= IDLE_CPU_CORES * backfill_vcpus


class Idleness:
    """Stage: idleness and idle_first's work clock. Owns the clocks; recycles through the
    lifecycle's stop."""

    def _init_idleness(self, backfill: BackfillConfig) -> None:
        # idle_first's clock per running backfill lease (VmView.busy_since): kept from the reports
        # only while the policy is idle_first
        self._tracks_cpu = backfill.termination_policy is Policy.IDLE_FIRST
        self._busy_since: dict[str, float] = {}
        self._guest_clock: set[str] = set()   # leases whose clock their guest set (else the CPU figures)

    def _lease_ended(self, lease_id: str) -> None:
        self._busy_since.pop(lease_id, None)
        self._guest_clock.discard(lease_id)
        super()._lease_ended(lease_id)

    def _backfill_changed(self, config: BackfillConfig) -> None:
        """idle_first's clocks are kept only while it is the policy: a change to or from it views
        every backfill lease afresh (with or without them)."""
        tracks = config.termination_policy is Policy.IDLE_FIRST
        if tracks != self._tracks_cpu:
            self._tracks_cpu = tracks
            self._busy_since.clear()
            self._guest_clock.clear()
            for lease in [l for l in self.leases.values() if l.role == "backfill"]:
                self._view_again(lease)
        super()._backfill_changed(config)

    def note_cpu(self, report: ReportLike, now: float, only: Collection[str] | None = None) -> list[Effect]:
        """The part of a report idle_first reads (each VM's CPU and what its guest says), without
        the rest: the simulator gives it when a VM turns idle or busy between the reports that
        carry the node's load (under the other policies, when one turns idle near the end of its
        life). Its effects: the VMs it shows idle near the end of their life, recycled.
        `only`: the names of the VMs whose CPU or word changed since the node's last report (the
        simulator knows them); idle_first's clocks then read those alone. Exact when the node's
        load and its backfill VMs are as its last report gave them: the other VMs' clocks would
        stay as they are."""
        if report.node_id not in self.nodes:
            return []
        return self._recycle_idle(self._note_cpu(report, now, only) if self._tracks_cpu else
                                  self._idle_near_end(report, now), now)

    def _idle_near_end(self, report: ReportLike, now: float) -> list[Lease]:
        """The running backfill VMs a report shows idle in the last tenth of their longest life,
        by the rule idle_first's clock reads (_note_cpu): the guest's word, else the CPU figures.
        For every report under the other policies: most show no VM idle, and cost one pass."""
        vms = report.vms
        # first the VMs whose own word or figure is idle (in most reports none: done then)
        quiet = [vm for vm in vms if vm.role == "backfill" and shows_idle(vm)]
        named = self._named_on.get(report.node_id)
        if not quiet or not named:
            return []
        duration = self.backfill.duration_seconds
        backfill_vcpus = sum(vm.vcpus for vm in vms if vm.role == "backfill")
        left = report.cpus - report.foreground_cpu_cores
        idle = []
        for vm in quiet:
            lease = named.get(vm.name)
            if lease is None or lease.role != "backfill" or lease.state != "running" or \
                    not recycles_when_idle(run_time(lease, now), duration):
                continue
            if vm.work_state == "idle" or _cpu_idle(vm, left, backfill_vcpus):
                idle.append(lease)
        return idle

    def _recycle_idle(self, seen_idle: list[Lease], now: float) -> list[Effect]:
        """Stop the backfill VMs a report shows idle in the last tenth of their longest life
        (policy.recycles_when_idle): their work is done, and they would be recycled soon anyway."""
        config = self.backfill
        if not seen_idle or not config.enabled:
            return []
        effects: list[Effect] = []
        for lease in seen_idle:
            runtime = run_time(lease, now)   # as its guest's clock and the recycle at duration_seconds count it
            if lease.state == "running" and recycles_when_idle(runtime, config.duration_seconds):
                effects += self._stop(lease, config.grace_seconds, now,
                                      f"recycled when idle after {runtime:.0f} s, in the last tenth of its "
                                      f"longest life ({config.duration_seconds} s)")
        return effects

    def _note_cpu(self, report: ReportLike, now: float, only: Collection[str] | None = None) -> list[Lease]:
        """idle_first's clock from a report. What the guest says of its work comes first: "idle"
        is idle (nothing at risk); "busy" is busy since now - work_for_s, never before the VM's
        launch (a guest cannot look older than it is: a false "busy" keeps at most most_recent's
        place for its age), and a clock within GUEST_CLOCK_TOLERANCE_S of the busy clock kept is
        the same spell seen through report lag (kept as it is, the view untouched). A guest that said
        nothing (""): the CPU figures. A backfill VM using under IDLE_CPU_CORES is idle; one busy
        since a report showed it idle is busy since now (the first report that shows it busy).
        Unless its share of what the foreground leaves the node's backfill VMs (shared by vCPUs)
        is under IDLE_CPU_CORES: a low figure may then be a starved VM, and counts as busy.
        Returns the leases the report shows idle (for _recycle_idle). `only`: note_cpu's."""
        named = self._named_on.get(report.node_id)
        seen_idle: list[Lease] = []
        if not named:
            return seen_idle
        vms = report.vms
        backfill_vcpus = -1   # summed once a VM's CPU figure is low enough to need it (_cpu_idle)
        left = report.cpus - report.foreground_cpu_cores   # for the backfill VMs
        busy_since, guest_clock = self._busy_since, self._guest_clock
        for vm in (vms if only is None else [vm for vm in vms if vm.name in only]):
            lease = named.get(vm.name)
            if lease is None or lease.role != "backfill" or lease.state != "running":
                continue
            lease_id = lease.lease_id
            was = busy_since.get(lease_id)
            said = vm.work_state
            if said == "busy":
                since = now - vm.work_for_s
                launched = launch_time(lease)
                if since < launched:
                    since = launched
                if was is not None and was != IDLE and abs(since - was) <= GUEST_CLOCK_TOLERANCE_S:
                    since = was
                guest_clock.add(lease_id)
            elif said == "idle":
                since = IDLE
                guest_clock.add(lease_id)
            elif not vm.cpu_sampled:
                continue   # no figure: the clock stands (not known at all: since the launch)
            else:
                if vm.cpu_cores < IDLE_CPU_CORES and backfill_vcpus < 0:
                    backfill_vcpus = sum(vm.vcpus for vm in vms if vm.role == "backfill")
                if _cpu_idle(vm, left, backfill_vcpus):
                    since = IDLE
                elif was is None:   # no figure before: it may have been busy since its launch
                    since = launch_time(lease)
                else:
                    since = now if was == IDLE else was
                if since != was:
                    guest_clock.discard(lease_id)   # the figures set it (a clock they keep stays the guest's)
            if since != was:
                busy_since[lease_id] = since
                self._view_clock(lease)
            if since == IDLE:
                seen_idle.append(lease)
        return seen_idle
