"""The simulated agents' hibernation (issue 25): a victim saved to its node's disk instead of shut
down, resumed there when the launcher gives its node room again, discarded past the wait limit.

The engine (Simulation) carries a Stop whose lease ends "hibernated" here (Stop.hibernate), and
every Resume. A save is asked as a stop is (an instant victim's once the on-demand launch is
answered); from the call the VM is paused: it holds no vCPUs and its jobs stand still
(BackfillWork.vm_hibernated). Its answer comes after the agents' save time; then the VM leaves
its node's running VMs and its memory is free. Each node's agent lets saved VMs use at most
SimSettings.hibernate_budget_mib of disk (a VM's state counted at its memory, as the books count
it) and refuses a save past it; the books then terminate the victim. A discarded VM (the books'
forced stop of a hibernated lease) loses its work then: the ledger's vm.discarded event says how
much.
"""
from __future__ import annotations

from typing import Any

from ..core.records import Lease, Resume, Stop
from .agents import LaunchAnswer, StopAnswer
from .figures import percentile
from .world import SimNode, SimVm

HIBERNATION_EVENTS = frozenset({"vm.hibernated", "vm.resumed", "vm.discarded"})


class SimHibernation:
    """Simulation's part for hibernation: its saved VMs, their disk, and their figures."""

    def _init_hibernation(self) -> None:
        self.asleep: dict[str, SimVm] = {}      # lease -> its VM, saved (or being saved)
        self.saved_mib: dict[str, int] = {}     # node -> disk its saved VMs use
        self.saved_peak_mib: dict[str, int] = {}
        self.hibernations = self.discarded = 0
        self.slept: list[float] = []            # resumed VMs' time asleep
        self.discarded_work = 0.0

    def budget_mib(self, node: SimNode) -> int:
        return self.settings.hibernate_budget_mib or node.memory_mib

    def _saving(self, stop: Stop) -> None:
        """A victim's save asked: paused at once, saved after the agents' save time (or refused
        when its node's budget is spent)."""
        lease = stop.lease
        node = self.nodes[lease.node_id]
        vm = node.vms.get(lease.vm_name)
        if vm is None or lease.lease_id in self.asleep:
            self.at(self.now, self._stopped, (lease, StopAnswer(0.0, "not_found")))
            return
        used = self.saved_mib.get(node.node_id, 0)
        if used + vm.memory_mib > self.budget_mib(node):
            error = f"hibernation budget spent ({used} of {self.budget_mib(node)} MiB used)"
            self.at(self.now, self._stopped, (lease, StopAnswer(0.0, "", ok=False, error=error)))
            return
        self.saved_mib[node.node_id] = used = used + vm.memory_mib
        self.saved_peak_mib[node.node_id] = max(self.saved_peak_mib.get(node.node_id, 0), used)
        self._vcpus_given_up(vm)   # paused: its vCPUs are free from the call
        self.asleep[lease.lease_id] = vm
        self.work.vm_hibernated(vm, self.now)
        answer = self.agents.hibernate(lease, self.now)
        self.at(self.now + answer.seconds, self._saved, (lease, answer))

    def _saved(self, arg: tuple[Lease, StopAnswer]) -> None:
        lease, answer = arg
        node = self.nodes[lease.node_id]
        node.vms.pop(lease.vm_name, None)
        self.apply(self.ledger.stop_done(lease.lease_id, answer.outcome, True, answer.seconds, "", self.now))
        self.reports.changed(node.node_id, self.now, whole=True)

    def _discarding(self, lease: Lease) -> SimVm | None:
        """A stop of a saved VM: its state is deleted and its work lost (the ledger's event counts it)."""
        vm = self.asleep.pop(lease.lease_id, None)
        if vm is not None:
            self._unsaved(lease.node_id, vm)
            self.work.vm_ended(vm, self.now, preempted=True)
        return vm

    def _unsaved(self, node_id: str, vm: SimVm) -> None:
        self.saved_mib[node_id] = self.saved_mib.get(node_id, 0) - vm.memory_mib

    def resume(self, resume: Resume) -> None:
        lease = resume.lease
        if lease.lease_id not in self.asleep:
            answer = LaunchAnswer(0.0, False, "no saved state for this VM")
        else:
            answer = self.agents.resume(lease, self.now)
        self.at(self.now + answer.seconds, self._resumed, (lease, answer))

    def _resumed(self, arg: tuple[Lease, LaunchAnswer]) -> None:
        lease, answer = arg
        state = self.ledger.leases.get(lease.lease_id)
        vm = self.asleep.get(lease.lease_id)
        if not answer.ok or vm is None or state is None or state.state not in ("resuming", "cancelling"):
            self.apply(self.ledger.resume_done(lease.lease_id, False, answer.error or "not resumed", self.now))
            return
        del self.asleep[lease.lease_id]
        node = self.nodes[lease.node_id]
        self._unsaved(node.node_id, vm)
        node.vms[vm.name] = vm
        self.allocated.integrate(self.now)
        self.allocated.backfill += vm.vcpus
        self.work.vm_resumed(vm, self.now)
        if self.work.turns_idle:
            self._run_time_checked(vm)
        self.apply(self.ledger.resume_done(lease.lease_id, True, "", self.now))
        self.reports.changed(node.node_id, self.now, whole=True)

    def _hibernation_event(self, kind: str, detail: Any) -> None:
        if kind == "vm.hibernated":
            self.hibernations += 1
            self.preemptions += 1   # a victim all the same: only its work is kept
        elif kind == "vm.resumed":
            self.slept.append(float(detail.get("slept_s", 0.0)))
        else:   # vm.discarded: its work is lost now
            lost = detail.get("work_lost_vcpu_seconds", 0.0)
            self.discarded += 1
            self.discarded_work += lost
            self.lost_vcpu_seconds += lost
            self.timeline.lost_work(self.now, lost)

    def hibernation_figures(self) -> dict[str, Any]:
        """The figures of a run with hibernation (empty when nothing was hibernated)."""
        if not self.hibernations:
            return {}
        peaks = [float(self.saved_peak_mib.get(n, 0)) for n in self.nodes]
        return dict(
            hibernations=self.hibernations, hibernated_resumed=len(self.slept),
            hibernated_discarded=self.discarded, hibernated_at_end=len(self.asleep),
            resume_delay_p50_s=percentile(self.slept, 50), resume_delay_p99_s=percentile(self.slept, 99),
            hibernated_disk_peak_mib_p99_node=percentile(peaks, 99), hibernated_disk_peak_mib_max=max(peaks),
            discarded_work_vcpu_hours=round(self.discarded_work / 3600, 3))
