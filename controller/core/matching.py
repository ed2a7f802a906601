"""An agent's report against the books: node liveness and load, its VMs matched to their leases
(confirmed, recovered, adopted, stopped when their lease ended), and unfinished business asked
again when a node (re)joins.
"""
from __future__ import annotations

import itertools

from collections import OrderedDict
from collections.abc import Sequence

from .books import NodeState
from .bucket import Bucket
from .progress import ProgressBook
from .records import (DISCARDING, HIBERNATED, NOT_YET_LAUNCHED, RESUMING, VICTIM, ZERO, Audit, Effect, Launch, Lease,
                      ReportedVmLike, ReportLike, Resume, Size, Stop, VmRole, Write, launch_time, replace, says_progress)


class SavedVm:
    """A hibernated VM as a report lists it (NodeReport.hibernated), read as a reported VM that
    runs nowhere: no CPU, its work clock stopped, `hibernated` true."""
    __slots__ = ("name", "lease_id", "vcpus", "memory_mib", "launched_at", "image", "work_state", "work_for_s")
    role = "backfill"   # only backfill VMs are hibernated (controller.checks refuses any other)
    cpu_cores = 0.0
    cpu_sampled = False
    hibernated = True

    def __init__(self, vm) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(vm, name))


def reported_vms(report: ReportLike) -> Sequence:
    """The report's VMs: those running, then those it lists hibernated (an agent that does not
    hibernate lists none)."""
    saved = getattr(report, "hibernated", None)
    return report.vms if not saved else [*report.vms, *map(SavedVm, saved)]


class ReportMatching:
    """Stage: reports against the books. Owns the refused adoptions and the clean-up retries;
    adds nodes, books recoveries and adoptions through the kernel."""

    def _init_matching(self) -> None:
        # VM names whose adoption the store refused (their lease id or name clashes with a lease it
        # keeps): never adopted again, still counted on their node. Bounded, oldest out.
        self.refused: OrderedDict[str, str] = OrderedDict()
        self._redrive_nodes: set[str] = set()   # nodes with unfinished business when the books were loaded
        self._cleanup_at: dict[str, float] = {}  # VM name -> when to ask again to stop a VM whose lease ended
        self._adoptions: dict[str, Bucket] = {}   # node -> the adoptions it may still make
        self._cleanups_pruned_at = 0.0
        self.progress = ProgressBook()   # what batch tenants' guests say of their job (progress.py)

    def _lease_ended(self, lease_id: str) -> None:
        self.progress.forget(lease_id)
        super()._lease_ended(lease_id)

    def report(self, report: ReportLike, now: float) -> list[Effect]:
        """One agent report: node liveness and load, and its VMs against the books."""
        effects: list[Effect] = []
        node = self.nodes.get(report.node_id)
        if node is None:
            node = self._add_node(report.node_id, report.agent_address, Size(report.cpus, report.memory_mib),
                                  self.settings.prediction_window)
            node.redrive = node.node_id in self._redrive_nodes
            self._images_changed()
            effects.append(self._node_event("node.joined", node, address=report.agent_address, cpus=report.cpus,
                                            memory_mib=report.memory_mib))
        elif node.state != "up":
            effects.append(self._node_event("node.rejoined" if node.state == "down" else "node.up", node,
                                            silent_s=round(now - node.last_report, 1)))
            node.redrive = node.state == "down"   # what was asked of it while it was down is asked again
            node.state = "up"
        capacity = node.capacity
        if node.address != report.agent_address or capacity.vcpus != report.cpus or \
                capacity.memory_mib != report.memory_mib:
            node.address, node.capacity = report.agent_address, Size(report.cpus, report.memory_mib)
            self._touch(node.node_id)
        node.last_report = now
        node.agent_version = report.agent_version
        # an agent that hibernates says how much disk it lets saved VMs use (older agents: none)
        node.hibernation_budget_mib = int(getattr(report, "hibernation_budget_bytes", 0) or 0) >> 20
        # A simulated agent reports only when something changes: it says how many of its periodic
        # samples (at the last figure) came between (a live agent's report is one sample: none)
        held = getattr(report, "held_samples", 0)
        if held:
            node.fg_samples.extend(itertools.repeat(node.foreground_cpu, held))
        node.foreground_cpu = report.foreground_cpu_cores
        node.fg_samples.append(report.foreground_cpu_cores)
        self._node_reported(node.node_id)
        if node.min_memory_mib != report.min_memory_mib or len(node.images) != len(report.images) \
                or not node.images.issuperset(report.images):
            node.images, node.min_memory_mib = frozenset(report.images), report.min_memory_mib
            self._images_changed()
        vms = reported_vms(report)   # this runs for every report of every node
        signature = tuple([vm.name for vm in vms])
        backfill_cpu = on_demand_cpu = 0.0
        said = None   # the VMs whose guest said `progress DONE TOTAL` (older agents: none)
        for vm in vms:
            if vm.role == "backfill":
                backfill_cpu += vm.cpu_cores
            else:
                on_demand_cpu += vm.cpu_cores
            if getattr(vm, "progress_total", 0):
                if said is None:
                    said = []
                said.append(vm)
        node.backfill_cpu, node.on_demand_cpu = backfill_cpu, on_demand_cpu
        if said is not None:
            self._note_progress(node.node_id, said, now)
        if self._tracks_cpu:
            effects += self._recycle_idle(self._note_cpu(report, now), now)
        elif self._backfill.enabled:
            effects += self._recycle_idle(self._idle_near_end(report, now), now)
        version = self.lease_version.get(node.node_id, 0)
        unexplained = node.unexplained
        if signature != node.signature or version != node.seen_version or now < node.check_until \
                or (unexplained is not ZERO and unexplained != ZERO) \
                or self._reacting_on.get(node.node_id) or node.stray_saved:   # until gone, or confirmed
            effects += self._match_vms(node, vms, now, signature)
            node.signature, node.seen_version = signature, self.lease_version.get(node.node_id, 0)
        if node.redrive:
            node.redrive = False
            effects += self._redrive(node.node_id, now)
        return [e for e in effects if not isinstance(e, Write) or e] if effects else effects

    def _note_progress(self, node_id: str, said: Sequence, now: float) -> None:
        """The guests' progress statements (bounded by controller.checks), each filed under the
        tenant the books give its VM's lease, then each such tenant's progress and history read
        with the vCPUs it holds now. Only a batch tenant's VMs speak: its backfill VMs and its
        goal's dedicated VMs (which run the same job: without their word, a job run on dedicated
        VMs alone would never be heard to progress or end). Any other VM says nothing, whatever
        role its report gives it: the lease's role is the books' word."""
        named = self._named_on.get(node_id, {})
        tenants = set()
        for vm in said:
            lease = named.get(vm.name)
            if lease is None or not says_progress(lease):
                continue
            tenant = self.tenant_of_lease(lease)
            self.progress.note(lease.lease_id, tenant, vm.progress_done, vm.progress_total,
                               getattr(vm, "progress_for_s", 0.0), now)
            tenants.add(tenant)
        for tenant in tenants:
            held = self.tenant_held(tenant).vcpus
            self.progress.sample(tenant, held, now)

    def _node_event(self, kind: str, node: NodeState, **detail) -> Write:
        self._node_came_or_went()
        self._touch(node.node_id)
        return Write(events=(Audit(kind, node.node_id, detail=detail),))

    def _match_vms(self, node: NodeState, reported: Sequence[ReportedVmLike], now: float,
                   reported_names: Sequence[str] | None = None) -> list[Effect]:
        """Reported VMs against this node's leases: confirm, recover, adopt, or notice what is gone.
        `reported_names`: the reported VMs' names, in order, if the caller has them."""
        effects: list[Effect] = []
        named = self._named_on.get(node.node_id, {})
        if not self._reacting_on.get(node.node_id) and (node.unexplained is ZERO or node.unexplained == ZERO):
            names = set(reported_names) if reported_names is not None else {vm.name for vm in reported}
            if len(names) == len(reported) and names <= named.keys() and \
                    all(named[n].state in NOT_YET_LAUNCHED for n in named.keys() - names):
                # The common report: each VM is one of this node's leases, none in a state a report
                # showing it acts on, and the leases whose VM it does not show are not launched yet:
                # the loops below would do nothing.
                node.check_until = 0.0
                return effects
        mine = dict(named)   # as they were before this report (matching re-books some)
        seen, unexplained, young, strays = set(), ZERO, False, 0
        budget = self._adoption_budget(node.node_id, now)
        may_adopt, deferred = min(budget.tokens, self.settings.adoptions_per_report), 0
        for vm in reported:
            seen.add(vm.name)
            lease = mine.get(vm.name)
            if lease is not None:
                if lease.ending == HIBERNATED and lease.state in VICTIM and getattr(vm, "hibernated", False):
                    effects += self._hibernated(lease, now, 0.0, "its node reports it saved")   # the answer was lost
                elif lease.state == "lost":
                    recovered = self._book(replace(lease, state="running", deadline=None), now)
                    effects.append(Write(updated=(recovered,), events=(Audit(
                        "vm.recovered", node.node_id, lease.lease_id, dict(vm=vm.name)),)))
                elif lease.state == "cancelling":
                    effects += self._stop_cancelled(lease, now, launched=vm.launched_at or now)
                continue
            size = Size(vm.vcpus, vm.memory_mib)
            asleep = getattr(vm, "hibernated", False)   # a saved VM takes disk, not room
            if vm.name in self.retired:
                if not asleep:
                    unexplained += size   # it ended in our books but still runs: it still takes room
                strays += asleep   # matched again until its clean-up deleted it
                effects += self._clean_up(node, vm, now)
                continue
            if asleep:   # saved and unknown: not adopted (it would be booked running), left to its agent
                strays += 1
                effects.append(self._unexplained(node, vm, "vm.unknown_hibernated", "a hibernated Gleaner VM "
                                                 "the controller has no lease for; not adopted"))
                continue
            if vm.name not in self.refused and may_adopt < 1:
                deferred += 1   # counted as room taken until a later report adopts it
                unexplained += size
                continue
            write, adopted = self._adopt_or_refuse(node, vm, now)
            effects.append(write)
            if adopted:
                may_adopt -= 1
                budget.take(1, now)
            else:
                unexplained += size
        if deferred and self._say_once(f"vm.adoption_deferred:{node.node_id}:{int(now // 3600)}"):
            effects.append(Write(events=(Audit("vm.adoption_deferred", node.node_id, detail=dict(
                vms=deferred, per_report=self.settings.adoptions_per_report,
                per_hour=self.settings.adoptions_per_hour,
                reason="its report named more unknown VMs than a report may adopt; later reports adopt the "
                       "rest, and until then they count as room taken")),)))
        for lease in mine.values():
            if lease.vm_name in seen:
                continue
            age = now - launch_time(lease)
            if lease.state == "running" and age < self.settings.lost_after:
                young = True
            elif lease.state == "running":
                lost = self._book(replace(lease, state="lost", deadline=now + self.settings.lost_expiry), now)
                effects.append(Write(updated=(lost,), events=(Audit("vm.lost", node.node_id, lease.lease_id, dict(
                    vm=lease.vm_name, reason="its agent no longer reports it")),)))
            elif lease.state == "lost":
                effects.append(self._end(lease, "ended", "lost: the node came back without it", now, kind="vm.gone"))
            elif lease.state in ("stopping", DISCARDING) or lease.state in VICTIM:
                if self._answer_due(lease, now):
                    young = True   # look again next report, even if it is unchanged
                else:
                    effects += self._stopped(lease, now, dict(stopped="gone", seconds=0.0,
                                                              detail="its node no longer reports it"))
        if unexplained != node.unexplained:
            freed = unexplained.memory_mib < node.unexplained.memory_mib
            node.unexplained = unexplained
            self._touch(node.node_id)
            if freed:   # a VM no lease explained is gone: a lease waiting for memory may start now
                effects += self._start_waiting(node.node_id, now)
        node.check_until = now + self.settings.lost_after if young else 0.0
        node.stray_saved = strays
        return effects

    def _prune_cleanups(self, now: float) -> None:
        """Forget the clean-up retries of VMs no report has shown for retire_seconds past their
        next ask (they are gone): the map holds what still runs, not every VM ever cleaned up.
        At most once per retire_seconds, so a tick stays cheap."""
        retire = self.settings.retire_seconds
        if now - self._cleanups_pruned_at < retire:
            return
        self._cleanups_pruned_at = now
        for name in [n for n, at in self._cleanup_at.items() if at < now - retire]:
            del self._cleanup_at[name]

    def _adoption_budget(self, node_id: str, now: float) -> Bucket:
        """This node's adoptions: adoptions_per_hour, refilled over the hour (one agent cannot fill
        the store); a report takes at most adoptions_per_report of them."""
        per_hour = self.settings.adoptions_per_hour
        bucket = self._adoptions.get(node_id)
        if bucket is None:
            bucket = self._adoptions[node_id] = Bucket(per_hour / 3600, per_hour, now)
        bucket.wait(0, now)   # refilled to now
        return bucket

    def _clean_up(self, node: NodeState, vm: ReportedVmLike, now: float) -> list[Effect]:
        """A VM of ours whose lease ended still runs: no VM runs outside the books, so it is stopped
        (forced; its lease's end already said what it lost), asked again every retry_seconds."""
        ended, when = self.retired[vm.name]
        if ended.node_id != node.node_id or now - when < self.settings.retire_seconds / 6 or \
                now < self._cleanup_at.get(vm.name, 0.0):
            return []   # another node's VM is not ours to stop here; a VM just stopped may still show
        self._cleanup_at[vm.name] = now + self.settings.retry_seconds
        return [self._unexplained(node, vm, "vm.unexpected", f"its lease {ended.lease_id} ended ({ended.state}: "
                                  f"{ended.end_reason}) but the agent still runs it; the controller stops it"),
                self._ask_stop(ended, 0, force=True)]

    def _unexplained(self, node: NodeState, vm: ReportedVmLike, kind: str, reason: str) -> Write:
        if not self._say_once(f"{kind}:{node.node_id}:{vm.name}"):
            return Write()
        return Write(events=(Audit(kind, node.node_id, vm.lease_id, dict(vm=vm.name, reason=reason)),))

    def _adopt_or_refuse(self, node: NodeState, vm: ReportedVmLike, now: float) -> tuple[Write, bool]:
        """A VM no lease of this node names: adopt it onto this node, unless it names a lease of
        another node or one that ended (a node never moves or takes another's lease)."""
        if vm.name in self.refused:
            return self._unexplained(node, vm, "vm.conflict", f"not adopted: {self.refused[vm.name]}"), False
        other = self.leases.get(vm.lease_id) if vm.lease_id else None
        named = other.node_id if other is not None else self.retired_ids.get(vm.lease_id) if vm.lease_id else None
        clash = next((on[vm.name] for on in self._named_on.values() if vm.name in on), None) \
            if named is None else None   # per node, not per lease: a flood of adoptions stays cheap
        if named is not None or clash is not None:
            what = f"it names lease {vm.lease_id} of node {named}" if named is not None else \
                f"lease {clash.lease_id} of node {clash.node_id} has a VM of that name"
            return self._unexplained(node, vm, "vm.conflict", f"{what}; not adopted, that lease is left as it is"), False
        role = VmRole.BACKFILL if vm.role == "backfill" else VmRole.ON_DEMAND
        lease = Lease(vm.lease_id or self.new_id("ad"), role.value, node.node_id, vm.name, vm.vcpus, vm.memory_mib,
                      vm.image or "unknown", "adopted", "running", now, launched_at=vm.launched_at or now)
        self._book(lease, now)
        return Write(created=(lease,), events=(Audit("vm.adopted", node.node_id, lease.lease_id, dict(
            vm=vm.name, role=role.value, reason="a Gleaner VM the controller had no lease for")),)), True

    def adoption_refused(self, lease: Lease, reason: str, now: float) -> list[Effect]:
        """The store refused an adopted lease (its id or VM name clashes with one it keeps): its VM
        is never adopted again and counts on its node as one no lease explains. The lease may be
        booked (the books took it before the store refused) or not (the books were rebuilt)."""
        self.refused[lease.vm_name] = reason
        if len(self.refused) > 4096:
            self.refused.popitem(last=False)
        if lease.lease_id in self.leases:
            self._unbook(lease)
            node = self.nodes.get(lease.node_id)
            if node is not None:
                node.unexplained += lease.size
        return [Write(events=(Audit("vm.conflict", lease.node_id, lease.lease_id, dict(
            vm=lease.vm_name, reason=f"not adopted: {reason}")),))]

    def _redrive(self, node_id: str, now: float) -> list[Effect]:
        """Unfinished business on a node that (re)joined: ask again what was asked before. A victim
        on notice is asked to stop once the node's launch is answered, as when it was booked
        (Stop.after_launch): pressed together, libvirt holds the launch up behind the shutdown."""
        launches: list[Effect] = []
        stops: list[Effect] = []
        for lease in list(self.by_node.get(node_id, {}).values()):
            if lease.state == "starting":
                launches.append(Launch(lease))   # the agent launches by name: a second ask is harmless
            elif lease.state == "cancelling":
                stops.append(self._ask_stop(lease, 0, force=True))   # launched or not, it must not run
            elif lease.state == RESUMING:
                launches.append(Resume(lease))   # the agent resumes by name: a second ask is harmless
            elif lease.state in ("stopping", DISCARDING) or lease.state in VICTIM:
                grace = self.settings.notice_seconds if lease.state == "on_notice" else self.backfill.grace_seconds
                stops.append(self._ask_stop(lease, max(min(grace, int((lease.deadline or now) - now)), 0),
                                            after_launch=lease.state == "on_notice"))
        # on-demand first: the service and the simulator chain after_launch stops to a node's first launch
        launches.sort(key=lambda launch: launch.lease.role != "on_demand")
        effects = launches + stops
        if effects:
            effects.insert(0, Write(events=(Audit("node.redriven", node_id, detail=dict(
                launches=sum(isinstance(e, Launch) for e in effects), stops=sum(isinstance(e, Stop) for e in effects),
                resumes=sum(isinstance(e, Resume) for e in effects))),)))
        return effects + self._start_waiting(node_id, now)
