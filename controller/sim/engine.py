"""A discrete-event simulation of the controller: the same Ledger (controller/core/ledger.py) as
the live controller, so the same placement, victim choice, backfill plan, volunteer selection
and reserves, driven by a simulated clock; only the agents are simulated.

This module holds the event loop and the carrying-out of the ledger's effects. The simulated
world (settings, nodes, VMs, agents' reports, scripted steps, backfill work) is
controller/sim/world.py; the results are made by controller/sim/figures.py; the checks at
leases' deadlines are controller/sim/deadlines.py.

How the live controller is mirrored (controller/service.py and controller/cli.py):

- Every effect the ledger returns is carried out in order: a Write goes to an in-memory Store
  (its rows, and its audit events counted by kind); a Launch and a Stop go to the simulated
  agents (an AgentModel, controller/sim/agents.py, which says when and how each is answered):
  at a launch's answer the VM exists on its node (if it succeeded) and ``ledger.launch_done`` is
  called; at a stop's the VM is gone and ``ledger.stop_done`` is called. The ideal agents (the
  default) answer every launch ``launch_seconds`` later and every stop ``stop_seconds`` later
  capped by its grace; the modelled ones fail some launches and draw the times.
- ``ledger.fill`` runs right after any Write carrying one of the ledger's FILL_EVENTS (a release,
  a stop, a preemption...), and ``retry_seconds`` after the last fill when nothing asked for one
  meanwhile, as the live launcher's one scheduler job does.
- ``ledger.select(evaluation=True)`` runs every ``selection_interval_seconds`` (backfill enabled).
- Reports: a node reports when its VMs change (its foreground CPU being its on-demand vCPUs), or,
  with demand series, every ``report_seconds`` as well (all nodes in one event). The agent model
  says how late a change's report arrives (NodeReports: at once for the ideal agents, at the
  node's next report tick for the modelled ones). Node failures are
  not modelled, so the ledger's suspect/down timers are set far beyond the run.
- ``ledger.tick`` runs when a lease's deadline falls due (one event per deadline a Write sets,
  checked in O(1)), and once an hour as a safety net.

Workload: on-demand requests (traces.OnDemandRequest) are asked of the ledger at their arrival;
a placed one is released (force) ``lifetime`` seconds after its VM started. Backfill work
(BackfillWork) is VM-level by default: a VM's work is its runtime x vCPUs, lost when it is
preempted; or task-level (controller/sim/jobs.py): VMs run jobs from a trace and a stop loses
only the running jobs' progress. With ``guest_work_channel`` the backfill guests also say when
they turn busy or idle (task-level: a job starting while none runs, and no job left), as the
guest's virtio-serial channel does, and the agents' reports carry it (SimVm.work_state,
work_for_s).

Results: ``summary()`` (the header with the inputs' digests and every setting, and the figures),
``vm_rows()`` (one row per VM) and ``timeline_rows()`` (utilization by role and the lost work so
far, per bucket of simulated time), made by controller/sim/figures.py; the CLI writes them as
summary.json, vms.csv and timeline.csv, and controller/sim/plots.py draws them.

Scripted steps (``Scripted``) sit beside the trace: a node that joins later than the start (it
reports first then) and the release of a request's VM, as an admin would. The parity test drives
the same steps through the live controller and through this engine.

Balancer's reserves (static, hinted, predictive, the wait window) are the ledger's own
(controller.core.reserves, ``reserve_settings`` and ``hints``); a request queued for room gets a
tick at its deadline. Extension point, not built yet: ``ReservePlanner`` (per-node reserves set at
each evaluation).
"""
from __future__ import annotations

import gc
import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..core.ledger import shows_idle
from ..core.backfill_plan import RECYCLE_IDLE_SHARE, recycles_when_idle
from ..core.records import (DRAINED, VICTIM, Ask, Audit, BackfillConfig, Launch, Lease, LeaseError, LedgerSettings,
                            Policy, RequestRecord, Reserve, Size, Stop, Write)
from ..core.reserve_settings import Hint, ReserveSettings
from ..effects import carry_out, fill_wanted
from .agents import AgentModel, LaunchAnswer, NodeReports, StopAnswer, agent_model, resample
from .deadlines import DeadlineChecks
from .figures import Allocation, Timeline, reason_group, summary, summary_figures, summary_header, vm_rows
from .traces import DemandSeries, OnDemandRequest
from .hibernation import HIBERNATION_EVENTS, SimHibernation
from .world import (DAY, HOUR, KEPT_DETAILS, BackfillWork, HeldRoom, Report, ReservePlanner, Scripted, SimNode,
                    SimSettings, SimVm, Store, VmLevelWork, AGENT_SAMPLE_SECONDS, held_samples, joining_later,
                    last_tenth_at, pool_nodes, sim_ledger)

# The names other modules and the tests import from here (their homes: world.py, figures.py, deadlines.py)
__all__ = ["DAY", "HOUR", "SAFETY_TICK_S", "DeadlineChecks", "Scripted", "SimSettings", "SimVm", "Simulation",
           "Store", "Timeline", "VmLevelWork", "last_tenth_at"]

SAFETY_TICK_S = 3600.0

# The cyclic collector's young collections during a run: at Python's default (every 700 objects
# allocated and not yet freed) they walked the books and each decision's pool (a tuple of every
# node's view) again and again, about 5 % of a run's time; a run makes next to no cyclic garbage
# (none in a day of the bench's workload), and refcounting frees the rest.
GC_YOUNG_ALLOCATIONS = 100_000


@contextmanager
def young_collections_every(allocations: int) -> Iterator[None]:
    """The cyclic collector's young-generation threshold raised to `allocations` for a while
    (restored after; a collector turned off stays off)."""
    threshold = gc.get_threshold()
    if threshold[0]:
        gc.set_threshold(max(threshold[0], allocations), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


class SimulationResults:
    """What a run gives (Simulation's figures, per-VM rows and timeline), from the state the event
    loop keeps: apart so that the loop's class stays readable."""

    def summary(self) -> dict[str, Any]:
        """summary.json: the header (the inputs' digests and every setting), the figures, the
        audit events by kind and notes (controller/sim/figures.py)."""
        ledger, store = self.ledger, self.store
        header = summary_header(self.inputs, self.settings, self.timeline.bucket, ledger.settings, ledger.backfill,
                                ledger.reserves, ledger.reserve_settings, self.hints, len(self.demand))
        header["agents"] = self.agents.describe()
        figures = summary_figures(
            pool_vcpus=self.settings.pool_vcpus, end=self.end, od_area=self.allocated.on_demand_area,
            bf_area=self.allocated.backfill_area,
            requests_total=len(self.requests), arrived=self.arrived, ignored_after_end=self.ignored_after_end,
            records=store.requests.values(), rejections=self.rejections,
            rejected_larger_than_node=self.rejected_larger_than_node,
            rejected_due_to_backfill=self.rejected_due_to_backfill, released=self.released, queued=self.queued,
            drained=self.drained, waits=self.waits, preempted=(*store.details.get("vm.preempted", ()), *store.details.get("vm.hibernated", ())),
            work=self.work.summary(self.end, self.lost_vcpu_seconds, self.preemptions),
            events=self.events_run + self.checks_dropped, wall=self.wall,
            stopped_early=self.stopped_early_at is not None)
        figures.update(self.hibernation_figures())
        return summary(header, figures, store.events)

    def vm_rows(self) -> list[dict[str, Any]]:
        """One row per lease (figures.vm_rows): what the per-VM CSV holds."""
        return vm_rows(self.store.leases.values(), self.by_lease, self.end)

    def timeline_rows(self) -> list[dict[str, Any]]:
        """The timeline's rows (Timeline.rows) up to the run's end."""
        return self.timeline.rows(self.end, self.settings.pool_vcpus)


class CpuReports:
    """How the agents' CPU figures reach the ledger between whole reports (Simulation's): a VM
    that turned idle or busy, or idles near the end of its life. Apart so that the loop's class
    stays readable."""

    def _cpu_changed(self, vm: SimVm) -> None:
        """A VM turned idle or busy (or its guest said so): its node reports once the event that
        did it is over (NodeReports), or after the model's report lag."""
        self.cpu_turned.setdefault(vm.node_id, set()).add(vm.name)
        self.reports.changed(vm.node_id, self.now, whole=False)

    def _last_tenth(self, vm: SimVm) -> None:
        """A backfill VM's age enters the last tenth of its longest life (its run time is there
        too unless it slept: then later, by its time asleep)."""
        if self.nodes[vm.node_id].vms.get(vm.name) is vm and vm.lease_id in self.ledger.leases:
            self._run_time_checked(vm)

    def _run_time_checked(self, vm: SimVm) -> None:
        """Once an awake VM's run time is in the last tenth of its longest life (the ledger counts
        it so, and so does its guest's clock, which stands still while it is saved): its guest
        retires (SimSettings.guest_retires: it takes no new job), and if it idles, its agent's
        next report shows it idle there (an agent reports every few seconds), which recycles it.
        Before that, it is checked again then (asleep: when it resumes, Hibernation._resumed)."""
        left = self.ledger.backfill.duration_seconds * (1.0 - RECYCLE_IDLE_SHARE) - vm.runtime(self.now)
        if left > 0:
            self.at(max(self.now + left, math.nextafter(self.now, math.inf)), self._run_time_due, (vm, vm.slept))
            return
        if self.settings.guest_retires:
            self.work.vm_retiring(vm, self.now)
        if shows_idle(vm):
            self._cpu_changed(vm)

    def _run_time_due(self, arg: tuple[SimVm, float]) -> None:
        vm, slept = arg
        awake = self.nodes[vm.node_id].vms.get(vm.name) is vm
        if awake and vm.slept == slept and vm.lease_id in self.ledger.leases:   # else it slept since: checked anew
            self._run_time_checked(vm)

    def _idle_near_end(self, vm: SimVm) -> None:
        """A VM's work turned, under a policy other than idle_first: its node reports only if the
        VM turned idle in the last tenth of its longest life, which the ledger then recycles (the
        same report at each turn would change nothing else these policies read)."""
        if shows_idle(vm) and recycles_when_idle(vm.runtime(self.now), self.ledger.backfill.duration_seconds):
            self._cpu_changed(vm)

    def _cpu_report(self, node_id: str) -> None:
        """Only the VMs' CPU and what their guests say: a whole report would also add a
        foreground sample, and so shorten the prediction window (in samples) that volunteer
        selection reads."""
        turned = self.cpu_turned.pop(node_id, None)
        node = self.nodes[node_id]
        if not self.agents.exact_cpu:
            resample(node.vms.values(), self.now)
        # idle_first's clocks read only the VMs that turned: the others' would not move, as the
        # node's load and its backfill VMs are those of its last whole report (each launch and stop
        # reports the node), unless its load follows a demand series or sampled CPU figures may
        # have moved (then every VM is read)
        only = turned if self.cpu_notes_of_turned_only and node.series is None and self.agents.exact_cpu else None
        self.apply(self.ledger.note_cpu(Report(node, node.foreground(self.now)), self.now, only))


class Simulation(SimulationResults, CpuReports, SimHibernation):
    """One run: the live ledger driven by the trace's requests and the simulated agents on a
    simulated clock (the module's doc says how); run() returns the summary, vm_rows() and
    timeline_rows() the rest of the results."""

    # CPU notes name the VMs that turned (False: every VM of the node, as before;
    # tests/unit/test_sim_outputs_speed.py runs both and finds the same decisions)
    cpu_notes_of_turned_only = True

    def __init__(self, requests: Sequence[OnDemandRequest], settings: SimSettings = SimSettings(),
                 backfill: BackfillConfig = BackfillConfig(), ledger_settings: LedgerSettings | None = None,
                 reserves: Mapping[str, Reserve] | None = None, demand: Sequence[DemandSeries] | None = None,
                 work: BackfillWork | None = None, reserve_planner: ReservePlanner | None = None,
                 inputs: Mapping[str, str] | None = None, reserve_settings: ReserveSettings = ReserveSettings(),
                 hints: Sequence[Hint] = (), script: Sequence[Scripted] = (),
                 progress: Callable[[float, str], None] | None = None, agents: AgentModel | None = None) -> None:
        """`progress(done, detail)` is called every settings.progress_seconds of wall time with the
        share of simulated time done (ProgressBar draws it). `agents`: by default settings.agents'."""
        self.settings = settings
        self.end = settings.duration
        self.requests = [r for r in requests if r.at < self.end]
        self.ignored_after_end = len(requests) - len(self.requests)
        self.inputs = dict(inputs or {})
        self.ledger = sim_ledger(ledger_settings, backfill, reserves, reserve_settings, hints)
        self.hints = tuple(hints)
        self.store = Store()
        self.work: BackfillWork = work or VmLevelWork()
        self.reserve_planner = reserve_planner
        self.demand = list(demand or ())
        self.progress = progress
        self.nodes = pool_nodes(settings, tuple(sorted({settings.on_demand_image, backfill.image})), self.demand)
        self.script = sorted(script, key=lambda step: step.at)
        self.absent = joining_later(self.script, self.nodes)   # nodes that join later: silent until then
        self.agents = agents or agent_model(settings)
        # the agents' periodic reports between two simulated ones (each a foreground sample)
        params = getattr(self.agents, "params", None)
        self.sample_seconds = getattr(params, "report_seconds", 0.0) or AGENT_SAMPLE_SECONDS
        self.agents.bind(settings, list(self.nodes))
        self.vm_class = self.agents.vm_class("backfill")   # what a backfill VM reports its CPU through
        # when a node whose VM changed reports (the model's report lag)
        self.reports = NodeReports(self.agents, self.at, lambda node_id: self.report(self.nodes[node_id]),
                                   self._cpu_report)
        self.now = 0.0
        self.heap: list = []
        self.seq = itertools.count()
        self.running: tuple[float, int] = (0.0, -1)   # (time, sequence) of the event being run
        self.deadlines = DeadlineChecks(self.heap, self._deadline)
        self.events_run = 0
        self.checks_dropped = 0   # deadline checks dropped as moot (DeadlineChecks): events too, not run
        self.fill_at: float | None = None     # a fill asked for and not yet run
        self.filled_at: float | None = None   # when the last fill ran (the periodic one counts from it)
        self._answer_at: dict[str, float] = {}   # lease -> when its launch asked in this apply is answered
        self.cpu_turned: dict[str, set[str]] = {}   # node -> its VMs that turned idle or busy since its last report
        # what the requests became
        self.by_lease: dict[str, OnDemandRequest] = {}
        self.placed_at: dict[str, float] = {}   # lease -> when its request was placed (release_on_schedule)
        self.unanswered: dict[str, OnDemandRequest] = {}   # request id -> a request not yet placed or rejected
        self.arrived = self.queued = self.released = self.drained = 0
        self.waits: list[float] = []   # placed requests' waits, arrival to launch
        self.rejections: Counter = Counter()   # by reason_group
        self.rejected_due_to_backfill = self.rejected_larger_than_node = 0
        self.lost_vcpu_seconds = 0.0
        self.preemptions = 0
        self._init_hibernation()
        self.timeline = Timeline(self.end, settings.timeline_seconds)
        self.allocated = Allocation(self.timeline)   # vCPUs allocated by role, integrated over time
        self.wall = 0.0
        self.stopped_early_at: float | None = None
        self.held = HeldRoom(list(self.nodes.values()))   # per node, from the Writes (rejected_due_to_backfill)

    # -- the clock ----------------------------------------------------------------------------------

    def at(self, when: float, callback: Callable, arg: Any = None) -> None:
        heapq.heappush(self.heap, (when, next(self.seq), callback, arg))

    def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        backfill = self.ledger.backfill
        for node in self.nodes.values():
            if node.node_id not in self.absent:
                self.report(node)
        for step in self.script:
            self.at(step.at, self._scripted, step)
        if self.requests:
            self.at(self.requests[0].at, self._arrive, 0)
        if backfill.enabled:
            self.at(0.0, self._periodic_fill)
            self.at(self.settings.selection_interval_seconds, self._evaluate)
        if self.demand:
            self.at(self.settings.report_seconds, self._report_all)
        self.at(SAFETY_TICK_S, self._safety_tick)
        self.work.start(self.at)
        if self.settings.guest_work_channel:
            self.work.guest_channel()
        # idle_first reads every turn of a VM's work; the other policies only a VM turning idle
        # near the end of its life (recycled then)
        self.work.watch_cpu(self._cpu_changed if backfill.termination_policy is Policy.IDLE_FIRST
                            else self._idle_near_end)
        gc.freeze()
        try:
            with young_collections_every(GC_YOUNG_ALLOCATIONS):
                self._run_events(started)
            self.now = self.end
            self.allocated.integrate(self.now)
            self.wall = time.perf_counter() - started
        finally:
            gc.unfreeze()   # else this simulation (a reference cycle) outlives its last use in the process
        finish = getattr(self.progress, "finish", None)
        if finish is not None:
            finish()
        return self.summary()

    def _run_events(self, started: float) -> None:
        """The events in time order up to the end (or the wall-time limit)."""
        heap, end, checks = self.heap, self.end, self.deadlines
        next_progress = started + self.settings.progress_seconds
        deadline = started + self.settings.max_wall_seconds if self.settings.max_wall_seconds else math.inf
        join_at = checks.next_join
        while True:
            when = heap[0][0] if heap else math.inf
            if when >= join_at and join_at <= end:   # the deadline checks due from then on first
                self.checks_dropped += checks.join_next(self.ledger.leases, end)
                join_at = checks.next_join
                continue
            if when > end:
                break
            when, seq, callback, arg = heapq.heappop(heap)
            self.now = when
            self.running = (when, seq)
            callback(arg)
            self.events_run += 1
            if not self.events_run & 1023:
                if not self.events_run & 0xFFFF:
                    # The books and the store only grow: what lived through 65,536 events is
                    # frozen too (refcounting still frees it), so a collection does not walk
                    # the whole run's records again and again
                    gc.freeze()
                wall = time.perf_counter()
                if wall >= deadline:
                    self.stopped_early_at = self.end = when
                    self.checks_dropped += checks.settle(when, before=self.running)
                    return
                if self.progress and self.settings.progress_seconds and wall >= next_progress:
                    next_progress = wall + self.settings.progress_seconds
                    self.progress(when / end, f"day {when / DAY:.2f} of {end / DAY:g}, {self.events_run} events run, "
                                              f"{wall - started:.0f} s wall, {self.preemptions} preemptions")
        self.checks_dropped += checks.settle(end)

    # -- carrying out the ledger's effects ----------------------------------------------------------

    def apply(self, effects: list) -> None:
        """The ledger's effects, carried out as the service does (controller.effects)."""
        if not effects:
            return   # most reports change nothing
        if carry_out(effects, self):
            self.ask_fill()
        self._answer_at.clear()

    def ask_fill(self) -> None:
        """A fill asked, as request_fill: the launcher's delay on (one on its way serves what asks)."""
        if fill_wanted(self.ledger.backfill.enabled, len(self.ledger.waiting)) and self.fill_at is None:
            self.fill_at = self.now + self.agents.fill_delay
            self.at(self.fill_at, self._fill)

    # The carrier (controller.effects.Carrier): the rows in memory, and the simulated agents.

    def commit(self, writes: Sequence[Write]) -> None:
        store, hold = self.store, self.held.hold
        for write in writes:   # Store.apply, inline: nothing below reads the store
            for lease in write.created + write.updated:
                store.leases[lease.lease_id] = lease
                hold(lease)
                if lease.deadline is not None:
                    self.deadlines.add(lease.deadline, next(self.seq), lease.lease_id, self.running)
            for record in write.requests:
                store.requests[record.request_id] = record
                if record.request_id in self.unanswered:
                    self._answered(record)

    def logged(self, event: Audit) -> None:
        kind = event.kind
        store = self.store
        store.events[kind] += 1
        if kind in KEPT_DETAILS:
            store.details.setdefault(kind, []).append(event.detail)
        if kind == "vm.preempted" or kind == "vm.drained":   # a reserve's drain loses work too
            lost = event.detail.get("work_lost_vcpu_seconds", 0.0)
            if kind == "vm.preempted":
                self.preemptions += 1
            else:
                self.drained += 1
            self.lost_vcpu_seconds += lost
            self.timeline.lost_work(self.now, lost)
        elif kind in HIBERNATION_EVENTS:
            self._hibernation_event(kind, event.detail)
        elif kind == "request.queued":   # its window closes then: a tick rejects it
            self.queued += 1
            self.at(event.detail["deadline"], self._safety_tick, False)

    def launch(self, launch: Launch) -> None:
        answer = self.agents.launch(launch.lease, self.now)
        answered = self.now + answer.seconds
        self._answer_at.setdefault(launch.lease.lease_id, answered)
        self.at(answered, self._launched, (launch.lease, answer))

    def stop(self, stop: Stop, after: Launch | None) -> None:
        if after is None:
            self._stopping(stop)
        else:   # asked once the node's launch is answered (after _launched)
            self.at(self._answer_at[after.lease.lease_id], self._stopping, stop)

    def _launched(self, arg: tuple[Lease, LaunchAnswer]) -> None:
        lease, answer = arg
        if not answer.ok:   # the agent rolled the launch back: no VM, the node's report is as it was
            self.apply(self.ledger.launch_done(lease.lease_id, False, answer.error, self.now))
            return
        node = self.nodes[lease.node_id]
        if lease.vm_name not in node.vms:
            vm = node.vms[lease.vm_name] = (SimVm if lease.role == "on_demand" else self.vm_class)(
                lease, self.now, self)
            self.allocated.integrate(self.now)
            if vm.role == "on_demand":
                node.on_demand_vcpus += vm.vcpus
                self.allocated.on_demand += vm.vcpus
            else:
                self.allocated.backfill += vm.vcpus
                self.work.vm_started(vm, self.now)
                if self.work.turns_idle:
                    self.at(last_tenth_at(self.now, self.ledger.backfill.duration_seconds), self._last_tenth, vm)
        self.apply(self.ledger.launch_done(lease.lease_id, True, "", self.now))
        request = self.by_lease.get(lease.lease_id)
        if request is not None and self.ledger.leases.get(lease.lease_id, lease).state == "running":
            self.waits.append(self.now - request.at)
            if request.lifetime is not None:
                ends = self.now + request.lifetime if not self.settings.release_on_schedule else \
                    max(self.placed_at.pop(lease.lease_id) + self.settings.launch_seconds + request.lifetime, self.now)
                if ends < self.end:
                    self.at(ends, self._release, lease.lease_id)
        self.reports.changed(node.node_id, self.now, whole=True)

    def _stopping(self, stop: Stop) -> None:
        if stop.hibernate:
            self._saving(stop)
            return
        lease = stop.lease
        if self.asleep and lease.lease_id in self.asleep:
            self._discarding(lease)
        node = self.nodes[lease.node_id]
        vm = node.vms.get(lease.vm_name)
        if vm is not None and lease.state == "on_notice":
            self._vcpus_given_up(vm)   # it runs at the volunteer class: its vCPUs are the new VM's
        if vm is not None and vm.role == "backfill":   # told once noticed: it works no more from now
            self.work.vm_stopping(vm, self.now, lease.state in VICTIM or lease.end_reason.startswith(DRAINED))
        answer = self.agents.stop(lease, stop.grace_seconds, stop.force, self.now)
        self.at(self.now + answer.seconds, self._stopped, (lease, answer))

    def _vcpus_given_up(self, vm: SimVm) -> None:
        """A backfill VM's vCPUs go to its preemptor (on notice, or being saved): not backfill's, once."""
        if not vm.noticed:
            self.allocated.integrate(self.now)
            vm.noticed = True
            self.allocated.backfill -= vm.vcpus

    def _stopped(self, arg: tuple[Lease, StopAnswer]) -> None:
        lease, answer = arg
        seconds, outcome = answer.seconds, answer.outcome
        if not answer.ok:   # the VM runs on; the ledger asks again after its retry time
            self.apply(self.ledger.stop_done(lease.lease_id, outcome, False, seconds, answer.error, self.now))
            return
        node = self.nodes[lease.node_id]
        vm = node.vms.pop(lease.vm_name, None)
        if vm is None:
            outcome = "not_found"
        else:
            self.allocated.integrate(self.now)
            if vm.role == "on_demand":
                node.on_demand_vcpus -= vm.vcpus
                self.allocated.on_demand -= vm.vcpus
            else:
                if not vm.noticed:
                    self.allocated.backfill -= vm.vcpus
                self.work.vm_ended(vm, self.now, preempted=lease.state in VICTIM or
                                   lease.end_reason.startswith(DRAINED))
        self.apply(self.ledger.stop_done(lease.lease_id, outcome, True, seconds, "", self.now))
        if vm is not None:
            self.reports.changed(node.node_id, self.now, whole=True)

    def report(self, node: SimNode) -> None:
        self.cpu_turned.pop(node.node_id, None)   # a whole report reads every VM
        if not self.agents.exact_cpu:
            resample(node.vms.values(), self.now)
        window = self.ledger.settings.prediction_window
        held = held_samples(node, self.now, self.sample_seconds, window)
        foreground = node.foreground(self.now)
        if foreground != node.reported_foreground and node.reported_foreground is not None and not node.settling:
            # a live agent's next reports carry the new figure: once they fill the prediction's
            # window, the controller predicts it (one report then stands for them all)
            node.settling = True
            self.at(self.now + window * self.sample_seconds, self._settled, node)
        node.reported_foreground = foreground
        report = Report(node, foreground, held)
        report.hibernation_budget_bytes = self.budget_mib(node) << 20
        self.apply(self.ledger.report(report, self.now))

    # -- the controller's periodic jobs -------------------------------------------------------------

    def _fill(self, _arg: Any = None) -> None:
        self.fill_at = None
        self.filled_at = self.now
        self.apply(self.ledger.fill(self.now))

    def _periodic_fill(self, _arg: Any) -> None:
        """Live, periodic and asked fills are one APScheduler interval job (an ask moves its next run to
        now, each run the next to it + retry_seconds): this runs after retry_seconds unfilled, or is the asked one."""
        retry = self.ledger.backfill.retry_seconds
        if self.fill_at is not None:
            self.at(self.fill_at + retry, self._periodic_fill)
        elif self.filled_at is not None and self.now < self.filled_at + retry:
            self.at(self.filled_at + retry, self._periodic_fill)
        else:
            self._fill()
            self.at(self.now + retry, self._periodic_fill)

    def _evaluate(self, _arg: Any) -> None:
        if self.reserve_planner is not None:
            reserves = self.reserve_planner.reserves(self.now, self.ledger)
            if reserves is not None:
                self.ledger.set_reserves(reserves)
        self.apply(self.ledger.select(self.now, evaluation=True))
        self.at(self.now + self.settings.selection_interval_seconds, self._evaluate)

    def _settled(self, node: SimNode) -> None:
        node.settling = False
        if node.node_id not in self.absent:
            self.report(node)

    def _report_all(self, _arg: Any) -> None:
        for node in self.nodes.values():
            if node.node_id not in self.absent:
                self.report(node)
        self.at(self.now + self.settings.report_seconds, self._report_all)

    def _deadline(self, lease_id: str) -> None:
        lease = self.ledger.leases.get(lease_id)
        if lease is not None and lease.deadline is not None and lease.deadline <= self.now:
            self.apply(self.ledger.tick(self.now))

    def _safety_tick(self, again: Any = True) -> None:
        self.apply(self.ledger.tick(self.now))
        if again is not False:   # False: a one-off tick at a waiting request's deadline
            self.at(self.now + SAFETY_TICK_S, self._safety_tick)

    # -- the workload -------------------------------------------------------------------------------

    def _arrive(self, index: int) -> None:
        request = self.requests[index]
        self.arrived += 1
        if index + 1 < len(self.requests):
            self.at(self.requests[index + 1].at, self._arrive, index + 1)
        ask = Ask(request.vcpus, request.memory_mib, self.settings.on_demand_image, request.owner,
                  request.request_id)
        self.unanswered[request.request_id] = request
        self.apply(self.ledger.request(ask, self.now))

    def _answered(self, record: RequestRecord) -> None:
        """A request's record as the ledger wrote it: rejected (at once or at the end of its wait),
        or booked on a lease (whose launch ends its wait)."""
        request = self.unanswered[record.request_id]
        if record.outcome == "rejected":
            del self.unanswered[record.request_id]
            self.rejections[reason_group(record.reason)] += 1
            if not any(g.cpus >= request.vcpus and g.memory_mib >= request.memory_mib
                       for g in self.settings.node_groups()):
                self.rejected_larger_than_node += 1
            elif self.held.backfill_held_room(Size(request.vcpus, request.memory_mib), self.ledger.nodes):
                self.rejected_due_to_backfill += 1
        elif record.lease_id:
            del self.unanswered[record.request_id]
            self.by_lease[record.lease_id] = request
            if self.settings.release_on_schedule:
                self.placed_at[record.lease_id] = self.now

    def _release(self, lease_id: str, force: bool = True) -> None:
        """Release a lease: forced at its request's lifetime's end; else scripted (`gleanctl release`)."""
        try:
            _lease, effects = self.ledger.release(lease_id, force, self.now)
        except LeaseError:
            return   # it ended otherwise meanwhile
        self.released += 1
        self.apply(effects)

    def _scripted(self, step: Scripted) -> None:
        if step.action == "join":
            self.absent.discard(step.arg)
            self.report(self.nodes[step.arg])
            return
        record = self.store.requests.get(step.arg)
        if record is not None and record.lease_id:
            self._release(record.lease_id, force=False)
