"""A discrete-event simulation of the controller: the same Ledger (controller/core/ledger.py) as
the live controller, so the same placement, victim choice, backfill plan, volunteer selection
and reserves, driven by a simulated clock; only the agents are simulated.

How the live controller is mirrored (controller/service.py and controller/cli.py):

- Every effect the ledger returns is carried out in order: a Write goes to an in-memory Store
  (its rows, and its audit events counted by kind); a Launch completes ``launch_seconds`` later
  (the VM then exists on its node and ``ledger.launch_done`` is called); a Stop completes after
  ``stop_seconds`` capped by its grace (the VM is gone and ``ledger.stop_done`` is called).
- ``ledger.fill`` runs every backfill ``retry_seconds`` and right after any Write carrying one of
  the ledger's FILL_EVENTS (a release, a stop, a preemption...), as the live launcher does.
- ``ledger.select(evaluation=True)`` runs every ``selection_interval_seconds`` (backfill enabled).
- Reports: a node reports when its VMs change (its foreground CPU being its on-demand vCPUs), or,
  with demand series, every ``report_seconds`` as well (all nodes in one event). Node failures are
  not modelled, so the ledger's suspect/down timers are set far beyond the run.
- ``ledger.tick`` runs when a lease's deadline falls due (one event per deadline a Write sets,
  checked in O(1)), and once an hour as a safety net.

Workload: on-demand requests (traces.OnDemandRequest) are asked of the ledger at their arrival;
a placed one is released (force) ``lifetime`` seconds after its VM started. Backfill work
(BackfillWork below) is VM-level by default: a VM's work is its runtime x vCPUs, lost when it is
preempted; or task-level (controller/sim/jobs.py): VMs run jobs from a trace and a stop loses
only the running jobs' progress. With ``guest_work_channel`` the backfill guests also say when
they turn busy or idle (task-level: a job starting while none runs, and no job left), as the
guest's virtio-serial channel does, and the agents' reports carry it (SimVm.work_state,
work_for_s).

Results: ``summary()`` (the header with the inputs' digests and every setting, and the figures),
``vm_rows()`` (one row per VM) and ``timeline_rows()`` (utilization by role and the lost work so
far, per bucket of simulated time); the CLI writes them as summary.json, vms.csv and
timeline.csv, and controller/sim/plots.py draws them.

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
import re
import time
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from ..core.ledger import Ledger, shows_idle
from ..core.backfill_plan import RECYCLE_IDLE_SHARE, recycles_when_idle
from ..core.records import (DRAINED, HOLDS_ALL, HOLDS_MEMORY, VICTIM, Ask, Audit, BackfillConfig, Launch, Lease,
                            LeaseError, LedgerSettings, Policy, RequestRecord, Reserve, Size, Stop, Write)
from ..core.reserve_settings import Hint, ReserveSettings
from ..effects import carry_out, fill_wanted
from .traces import DemandSeries, NodeGroup, OnDemandRequest

HOUR = 3600.0
DAY = 86400.0
FAR = 1e15            # suspect/down timers beyond any run: node failures are not simulated
SAFETY_TICK_S = 3600.0
KEPT_DETAILS = frozenset({"vm.preempted", "request.rejected", "request.expired", "vm.stop_expired",
                          "vm.launch_failed", "vm.unexpected", "vm.conflict", "vm.lost"})


@dataclass(frozen=True)
class SimSettings:
    nodes: int = 100
    node_cpus: int = 16
    node_memory_mib: int = 65536
    # nodes of several sizes, numbered in this order (traces.pool_groups); `nodes` is then their
    # count, and node_cpus and node_memory_mib are not read. Empty: `nodes` nodes of one size.
    pool: tuple[NodeGroup, ...] = ()
    days: float = 1.0
    launch_seconds: float = 5.0       # from the Launch call to the agent's answer
    launch_jitter: float = 0.2        # launches take launch_seconds x (1 +- jitter/2), fixed per lease id:
                                      # VMs of one fill do not all start at the same instant
    stop_seconds: float = 5.0         # a clean shutdown; capped by the stop's grace
    selection_interval_seconds: float = 60.0
    report_seconds: float = 60.0      # periodic reports, only with demand series
    on_demand_image: str = "tiny"
    progress_seconds: float = 5.0     # wall seconds between progress updates (0: none)
    timeline_seconds: float = 0.0     # width of the timeline's buckets (0: the run / 720, at least a minute)
    max_wall_seconds: float = 0.0     # stop early after this much wall time (0: never); the summary says so
    # backfill guests say on the work channel when they turn busy (a job starts while none runs)
    # or idle, and the agents report it (ReportedVm.work_state, work_for_s); off: they say
    # nothing, as older guests
    guest_work_channel: bool = False

    def __post_init__(self) -> None:
        if self.pool and self.nodes != sum(g.count for g in self.pool):
            raise ValueError(f"nodes is {self.nodes} but the pool's groups have {sum(g.count for g in self.pool)}")

    @property
    def duration(self) -> float:
        return self.days * DAY

    def node_groups(self) -> tuple[NodeGroup, ...]:
        return self.pool or (NodeGroup(self.nodes, self.node_cpus, self.node_memory_mib),)

    @property
    def pool_vcpus(self) -> int:
        return sum(g.count * g.cpus for g in self.node_groups())


def sim_ledger_settings(base: LedgerSettings | None = None) -> LedgerSettings:
    """The ledger's settings for a simulation: node failures are not modelled, so a node is never
    suspect or down however long it stays silent (nodes report only when their VMs change)."""
    return replace(base or LedgerSettings(), suspect_after=FAR, down_after=2 * FAR)


# -- the store --------------------------------------------------------------------------------------

@dataclass
class Store:
    """The rows the ledger's Writes would put in SQLite, and its audit events counted by kind
    (the details kept for the kinds in KEPT_DETAILS)."""
    leases: dict[str, Lease] = field(default_factory=dict)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    events: Counter = field(default_factory=Counter)
    details: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)

    def apply(self, write: Write) -> None:
        for lease in write.created:
            self.leases[lease.lease_id] = lease
        for lease in write.updated:
            self.leases[lease.lease_id] = lease
        for record in write.requests:
            self.requests[record.request_id] = record
        for event in write.events:
            self.events[event.kind] += 1
            if event.kind in KEPT_DETAILS:
                self.details.setdefault(event.kind, []).append(event.detail)


# -- simulated nodes and agents ---------------------------------------------------------------------

class SimVm:
    """A VM as an agent reports it (controller.core.ledger.ReportedVmLike). `clock`: what has the
    simulated time (`now`), read for work_for_s when the ledger reads a report."""
    __slots__ = ("name", "lease_id", "node_id", "role", "vcpus", "memory_mib", "launched_at", "cpu_cores",
                 "cpu_sampled", "image", "noticed", "work_state", "work_since", "clock")

    def __init__(self, lease: Lease, now: float, clock: Any = None) -> None:
        self.name = lease.vm_name
        self.lease_id = lease.lease_id
        self.node_id = lease.node_id
        self.role = lease.role
        self.vcpus = lease.vcpus
        self.memory_mib = lease.memory_mib
        self.launched_at = now
        self.cpu_cores = float(lease.vcpus)
        self.cpu_sampled = True
        self.image = lease.image
        self.noticed = False   # a victim on notice: its vCPUs went to the VM that preempted it
        # what its guest last said on the work channel ("" nothing: SimSettings.guest_work_channel
        # off), and when (BackfillWork.guest_channel)
        self.work_state = ""
        self.work_since = now
        self.clock = clock

    @property
    def work_for_s(self) -> float:
        """Seconds since the guest last said work_state, as its agent times it: read when the
        ledger reads the report (0.0 while it said nothing)."""
        clock = self.clock
        if not self.work_state or clock is None:
            return 0.0
        return max(clock.now - self.work_since, 0.0)


class SimNode:
    __slots__ = ("node_id", "address", "cpus", "memory_mib", "images", "vms", "on_demand_vcpus", "series")

    def __init__(self, node_id: str, cpus: int, memory_mib: int, images: tuple[str, ...]) -> None:
        self.node_id = node_id
        self.address = f"{node_id}:7451"   # its agent's, as its reports give it
        self.cpus = cpus
        self.memory_mib = memory_mib
        self.images = images
        self.vms: dict[str, SimVm] = {}
        self.on_demand_vcpus = 0
        self.series: DemandSeries | None = None


class Report:
    """An agent's report (controller.core.ledger.ReportLike)."""
    __slots__ = ("node_id", "agent_address", "cpus", "memory_mib", "foreground_cpu_cores", "images",
                 "min_memory_mib", "agent_version", "vms")

    def __init__(self, node: SimNode, foreground: float) -> None:
        self.node_id = node.node_id
        self.agent_address = node.address
        self.cpus = node.cpus
        self.memory_mib = node.memory_mib
        self.foreground_cpu_cores = foreground
        self.images = node.images
        self.min_memory_mib = 32
        self.agent_version = "sim"
        self.vms = list(node.vms.values())


SCRIPTED_ACTIONS = ("join", "release")


@dataclass(frozen=True)
class Scripted:
    """A step at a set time beside the trace. `join`: the node `arg` reports first at `at` (not at
    the start), as an agent started then would; `release`: the VM of request `arg` is released
    without force, as `gleanctl release` does (nothing if it has none or ended meanwhile)."""
    at: float
    action: str      # join | release
    arg: str


# -- extension points -------------------------------------------------------------------------------

class BackfillWork(Protocol):
    """What backfill VMs do, and how their work is counted: VM-level (VmLevelWork, the default)
    or task-level (controller/sim/jobs.py: jobs from a trace run inside backfill VMs)."""

    turns_idle: bool   # its VMs may idle (then what watch_cpu is given is ever called)

    def start(self, schedule: Callable[[float, Callable[[Any], None], Any], None]) -> None:
        """Before the first event: `schedule(at, callback, arg)` puts its own events on the clock."""

    def vm_started(self, vm: SimVm, now: float) -> None: ...

    def vm_stopping(self, vm: SimVm, now: float, preempted: bool) -> None:
        """A stop was asked of the VM (`preempted`: as a victim or drained for a reserve)."""

    def vm_ended(self, vm: SimVm, now: float, preempted: bool) -> None: ...

    def watch_cpu(self, changed: Callable[[SimVm], None]) -> None:
        """Call `changed(vm)` when a VM's cpu_cores turns idle or busy (crosses the ledger's
        IDLE_CPU_CORES), or its guest says something on the work channel, as its agent's next
        report would show (the engine passes on what its policy reads)."""

    def guest_channel(self) -> None:
        """Before the first event, with SimSettings.guest_work_channel: backfill guests say on the
        work channel when they turn busy or idle (SimVm.work_state and work_since)."""

    def summary(self, end: float, lost_vcpu_seconds: float, preemptions: int) -> dict[str, Any]: ...


class ReservePlanner(Protocol):
    """Balancer's reserves (hinted or predicted per time-of-day slot), not built yet: called at
    each evaluation interval; a mapping returned replaces the ledger's reserves."""

    def reserves(self, now: float, ledger: Ledger) -> Mapping[str, Reserve] | None: ...


class VmLevelWork:
    """Backfill work at VM level: a VM's work is its runtime x vCPUs; a preemption loses all of
    it (the ledger's vm.preempted event says how much)."""

    turns_idle = False   # busy from launch to end

    def __init__(self) -> None:
        self.vm_seconds = 0.0
        self.vcpu_seconds = 0.0
        self.started = 0
        self.runtimes: list[tuple[float, float]] = []   # (launched, runtime) of ended VMs
        self.alive: dict[str, SimVm] = {}
        self.says_work = False   # its guests speak on the work channel (guest_channel)

    def start(self, schedule: Callable[[float, Callable[[Any], None], Any], None]) -> None:
        pass   # a VM's work needs no events of its own

    def watch_cpu(self, changed: Callable[[SimVm], None]) -> None:
        pass   # its VMs are busy from launch to end (cpu_cores = vCPUs)

    def guest_channel(self) -> None:
        self.says_work = True

    def vm_started(self, vm: SimVm, now: float) -> None:
        self.started += 1
        self.alive[vm.name] = vm
        if self.says_work:   # busy from its launch to its end
            vm.work_state, vm.work_since = "busy", now

    def vm_stopping(self, vm: SimVm, now: float, preempted: bool) -> None:
        pass   # it works on until it is gone (its runtime counts to then)

    def vm_ended(self, vm: SimVm, now: float, preempted: bool) -> None:
        self.alive.pop(vm.name, None)
        runtime = now - vm.launched_at
        self.vm_seconds += runtime
        self.vcpu_seconds += runtime * vm.vcpus
        self.runtimes.append((vm.launched_at, runtime))

    def summary(self, end: float, lost_vcpu_seconds: float, preemptions: int) -> dict[str, Any]:
        vm_seconds, vcpu_seconds = self.vm_seconds, self.vcpu_seconds
        runtimes = list(self.runtimes)
        for vm in self.alive.values():   # still running at the end: their work so far is done
            vm_seconds += end - vm.launched_at
            vcpu_seconds += (end - vm.launched_at) * vm.vcpus
            runtimes.append((vm.launched_at, end - vm.launched_at))

        def survival(span: float) -> float | None:
            # Of the VMs launched at least `span` before the end (the others could not have),
            # the share that ran at least that long.
            eligible = [r for launched, r in runtimes if launched <= end - span]
            return round(sum(r >= span for r in eligible) / len(eligible), 4) if eligible else None

        hours = vm_seconds / HOUR
        return dict(
            backfill_vms_launched=self.started,
            backfill_vm_hours=round(hours, 3),
            backfill_work_vcpu_hours=round(vcpu_seconds / HOUR, 3),
            # vCPU-seconds backfill spent working (here: its VMs' whole lives), for utilization_working
            backfill_working_vcpu_seconds=vcpu_seconds,
            lost_work_vcpu_hours=round(lost_vcpu_seconds / HOUR, 3),
            lost_work_share=round(lost_vcpu_seconds / vcpu_seconds, 6) if vcpu_seconds else None,
            backfill_goodput_vcpu_hours=round((vcpu_seconds - lost_vcpu_seconds) / HOUR, 3),
            preemptions=preemptions,
            preemptions_per_100_vm_hours=round(100 * preemptions / hours, 4) if hours else None,
            backfill_survival_1h=survival(HOUR),
            backfill_survival_1d=survival(DAY),
        )


# -- what happened over time -----------------------------------------------------------------------

class Timeline:
    """Allocated vCPU-seconds (on-demand, backfill) and backfill work lost, per bucket of simulated
    time: what the plots draw. The totals are the summary's own (the same integration, split at
    bucket edges)."""

    def __init__(self, duration: float, bucket_seconds: float = 0.0) -> None:
        self.bucket = bucket_seconds or max(60.0, duration / 720)
        count = max(math.ceil(duration / self.bucket), 1)
        self.on_demand = [0.0] * count
        self.backfill = [0.0] * count
        self.lost = [0.0] * count

    def allocated(self, start: float, stop: float, on_demand: int, backfill: int) -> None:
        """on_demand and backfill vCPUs were allocated from start to stop."""
        while start < stop:
            i = min(int(start // self.bucket), len(self.on_demand) - 1)
            edge = stop if i == len(self.on_demand) - 1 else min(stop, (i + 1) * self.bucket)
            if edge <= start:   # rounding at a bucket's edge: the rest goes to this bucket
                edge = stop
            self.on_demand[i] += on_demand * (edge - start)
            self.backfill[i] += backfill * (edge - start)
            start = edge

    def lost_work(self, at: float, vcpu_seconds: float) -> None:
        self.lost[min(int(at // self.bucket), len(self.lost) - 1)] += vcpu_seconds

    def rows(self, end: float, pool_vcpus: int) -> list[dict[str, Any]]:
        """One row per bucket up to `end`: its start, utilization by role over the bucket (the
        last one may be cut short by the end) and the lost work so far, in vCPU-hours."""
        rows, lost = [], 0.0
        for i in range(min(math.ceil(end / self.bucket), len(self.on_demand))):
            span = (min((i + 1) * self.bucket, end) - i * self.bucket) * pool_vcpus
            lost += self.lost[i]
            rows.append(dict(start_s=i * self.bucket, utilization_on_demand=round(self.on_demand[i] / span, 6),
                             utilization_backfill=round(self.backfill[i] / span, 6),
                             lost_work_vcpu_hours=round(lost / HOUR, 3)))
        return rows


# -- the checks at leases' deadlines ----------------------------------------------------------------

DEADLINE_BUCKET_S = 30.0


class DeadlineChecks:
    """The check at each deadline a Write sets (Simulation._deadline: the ledger ticks if the lease
    is still due then), kept out of the event heap until the bucket of time its deadline falls in
    comes, and dropped then if it can no longer do anything: its lease is gone, or has no deadline
    due by then. Most are (a launch or stop is answered seconds after its Write, its deadline is a
    minute or more away), and they were a third of a run's events, each pushed on the heap and
    popped for nothing.

    Exactly the checks that would have ticked still do, in their place: a check keeps the
    sequence number it was given, and one dropped joins the heap after all if a Write gives its
    lease a deadline at or before it while it is still ahead (the only way it could become due).
    ``settle`` counts the dropped checks as the events they were (the summary's sim_events)."""

    def __init__(self, heap: list, check: Callable[[str], None], bucket_seconds: float = DEADLINE_BUCKET_S) -> None:
        self.heap = heap
        self.check = check
        self.width = bucket_seconds
        self.waiting: dict[int, list[tuple[float, int, str]]] = {}   # bucket -> its checks not yet on the heap
        self.joined = -1   # every bucket up to this one has joined the heap
        # lease -> (deadline, sequence) of its checks the last bucket to join dropped: they may be
        # revived until the clock passes them
        self.dropped: dict[str, list[tuple[float, int]]] = {}
        self.dropped_count = 0   # the checks in `dropped`

    @property
    def next_join(self) -> float:
        """When the next bucket starts: its checks join the heap before any event from then on."""
        return (self.joined + 1) * self.width

    def add(self, deadline: float, seq: int, lease_id: str, running: tuple[float, int]) -> None:
        """A check at `deadline` for the lease whose deadline it is; `running`: (time, sequence) of
        the event being run (a dropped check behind it is past)."""
        if self.dropped:
            self._revive(lease_id, deadline, running)
        if deadline == math.inf:
            return   # never due (on the heap it was never reached either)
        bucket = int(deadline // self.width)
        if bucket <= self.joined:
            heapq.heappush(self.heap, (deadline, seq, self.check, lease_id))
        else:
            self.waiting.setdefault(bucket, []).append((deadline, seq, lease_id))

    def _revive(self, lease_id: str, deadline: float, running: tuple[float, int]) -> None:
        checks = self.dropped.get(lease_id)
        if not checks:
            return
        kept = []
        for at, seq in checks:
            if deadline <= at and (at, seq) > running:
                heapq.heappush(self.heap, (at, seq, self.check, lease_id))
                self.dropped_count -= 1
            else:
                kept.append((at, seq))
        self.dropped[lease_id] = kept

    def join_next(self, leases: Mapping[str, Lease], end: float) -> int:
        """The next bucket's checks join the heap, but those whose lease (as `leases` books it now)
        is gone or has no deadline due by then. Returns the checks up to `end` the previous bucket
        dropped for good (the clock is past them)."""
        settled = self.settle(end)
        self.joined += 1
        dropped: dict[str, list[tuple[float, int]]] = {}
        for at, seq, lease_id in self.waiting.pop(self.joined, ()):
            lease = leases.get(lease_id)
            if lease is not None and lease.deadline is not None and lease.deadline <= at:
                heapq.heappush(self.heap, (at, seq, self.check, lease_id))
            else:
                dropped.setdefault(lease_id, []).append((at, seq))
                self.dropped_count += 1
        self.dropped = dropped
        return settled

    def settle(self, end: float, before: tuple[float, int] | None = None) -> int:
        """Forget the dropped checks: how many were due up to `end` (and, if given, before the
        event at (time, sequence) `before`), the events they would have been."""
        if before is None and self.next_join <= end:
            count = self.dropped_count   # all of them: their bucket ends before `end`
        else:
            count = sum(1 for checks in self.dropped.values() for at, seq in checks
                        if at <= end and (before is None or (at, seq) < before))
        self.dropped, self.dropped_count = {}, 0
        return count


# -- the simulation ---------------------------------------------------------------------------------

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


def last_tenth_at(launched: float, duration_seconds: int) -> float:
    """The first instant at which a VM launched at `launched` counts as in the last tenth of its
    life (recycles_when_idle), to the last bit: a sum in floats may round below it."""
    at = launched + duration_seconds * (1.0 - RECYCLE_IDLE_SHARE)
    while recycles_when_idle(math.nextafter(at, -math.inf) - launched, duration_seconds):
        at = math.nextafter(at, -math.inf)
    while not recycles_when_idle(at - launched, duration_seconds):
        at = math.nextafter(at, math.inf)
    return at


def reason_group(reason: str) -> str:
    """A rejection reason without its numbers and after the first colon, to group them by."""
    return re.sub(r"\d+(?:\.\d+)?", "N", reason).split(":")[0].strip()


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


class Simulation:
    def __init__(self, requests: Sequence[OnDemandRequest], settings: SimSettings = SimSettings(),
                 backfill: BackfillConfig = BackfillConfig(), ledger_settings: LedgerSettings | None = None,
                 reserves: Mapping[str, Reserve] | None = None, demand: Sequence[DemandSeries] | None = None,
                 work: BackfillWork | None = None, reserve_planner: ReservePlanner | None = None,
                 inputs: Mapping[str, str] | None = None, reserve_settings: ReserveSettings = ReserveSettings(),
                 hints: Sequence[Hint] = (), script: Sequence[Scripted] = (),
                 progress: Callable[[float, str], None] | None = None) -> None:
        """`progress(done, detail)` is called every settings.progress_seconds of wall time with the
        share of simulated time done (ProgressBar draws it)."""
        self.settings = settings
        self.end = settings.duration
        self.requests = [r for r in requests if r.at < self.end]
        self.ignored_after_end = len(requests) - len(self.requests)
        self.inputs = dict(inputs or {})
        numbers = itertools.count(1)
        self.ledger = Ledger(sim_ledger_settings(ledger_settings), backfill, dict(reserves or {}),
                             lambda prefix: f"{prefix}-{next(numbers)}", reserve_settings=reserve_settings,
                             hints=hints)
        self.hints = tuple(hints)
        self.store = Store()
        self.work: BackfillWork = work or VmLevelWork()
        self.reserve_planner = reserve_planner
        self.demand = list(demand or ())
        self.progress = progress
        images = tuple(sorted({settings.on_demand_image, backfill.image}))
        width = len(str(settings.nodes))
        sizes = [(g.cpus, g.memory_mib) for g in settings.node_groups() for _ in range(g.count)]
        self.nodes = {f"n{i:0{width}d}": SimNode(f"n{i:0{width}d}", cpus, memory, images)
                      for i, (cpus, memory) in enumerate(sizes)}
        if self.demand:
            for i, node in enumerate(self.nodes.values()):
                node.series = self.demand[i % len(self.demand)]
        self.script = sorted(script, key=lambda step: step.at)
        self.absent = self._check_script(self.script)   # nodes that join later: silent until then
        self.now = 0.0
        self.heap: list = []
        self.seq = itertools.count()
        self.running: tuple[float, int] = (0.0, -1)   # (time, sequence) of the event being run
        self.deadlines = DeadlineChecks(self.heap, self._deadline)
        self.events_run = 0
        self.checks_dropped = 0   # deadline checks dropped as moot (DeadlineChecks): events too, not run
        self.fill_at: float | None = None     # a fill asked for and not yet run
        self._answer_at: dict[str, float] = {}   # lease -> when its launch asked in this apply is answered
        self.cpu_reports: set[str] = set()    # nodes to report at once: a VM there turned idle or busy
        # what the requests became
        self.by_lease: dict[str, OnDemandRequest] = {}
        self.unanswered: dict[str, OnDemandRequest] = {}   # request id -> a request not yet placed or rejected
        self.queued = 0
        self.drained = 0
        self.waits: list[float] = []
        self.rejections: Counter = Counter()
        self.rejected_due_to_backfill = 0
        self.rejected_larger_than_node = 0
        self.released = 0
        self.arrived = 0
        # time-weighted allocation
        self.od_alloc = 0
        self.bf_alloc = 0
        self.od_area = 0.0
        self.bf_area = 0.0
        self.area_at = 0.0
        self.lost_vcpu_seconds = 0.0
        self.preemptions = 0
        self.timeline = Timeline(self.end, settings.timeline_seconds)
        self.wall = 0.0
        self.stopped_early_at: float | None = None
        # what the leases hold per node, kept from the Writes (for rejected_due_to_backfill)
        self.holding: dict[str, tuple[int, str, int, int]] = {}   # lease -> (node's row, role, vCPUs, MiB)
        self.node_ids = list(self.nodes)
        self.row_of = {node_id: i for i, node_id in enumerate(self.node_ids)}
        # per row: what leases other than backfill hold, and the backfill leases holding room; in
        # arrays of int64 that numpy reads without a copy (_backfill_held_room) and _hold writes an
        # item at a time as fast as a list
        self.fixed_vcpus = array("q", bytes(8 * len(self.nodes)))
        self.fixed_memory = array("q", bytes(8 * len(self.nodes)))
        self.backfill_held = array("q", bytes(8 * len(self.nodes)))
        self.node_cpus = np.array([n.cpus for n in self.nodes.values()], dtype=np.int64)
        self.node_memory = np.array([n.memory_mib for n in self.nodes.values()], dtype=np.int64)

    def _check_script(self, script: Sequence[Scripted]) -> set[str]:
        for step in script:
            if step.action not in SCRIPTED_ACTIONS:
                raise ValueError(f"scripted step {step}: the action is one of {', '.join(SCRIPTED_ACTIONS)}")
            if step.action == "join" and step.arg not in self.nodes:
                raise ValueError(f"scripted step {step}: no node {step.arg!r} (the nodes are {min(self.nodes)}.."
                                 f"{max(self.nodes)})")
        return {step.arg for step in script if step.action == "join"}

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
            self._integrate()
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
        fill = carry_out(effects, self)
        if self._answer_at:
            self._answer_at.clear()
        if fill and fill_wanted(self.ledger.backfill.enabled, len(self.ledger.waiting)) and self.fill_at is None:
            self.fill_at = self.now
            self.at(self.now, self._fill)

    # The carrier (controller.effects.Carrier): the rows in memory, and the simulated agents.

    def commit(self, writes: Sequence[Write]) -> None:
        store = self.store
        for write in writes:   # Store.apply, inline: nothing below reads the store
            for lease in write.created + write.updated:
                store.leases[lease.lease_id] = lease
                self._hold(lease)
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
        elif kind == "request.queued":   # its window closes then: a tick rejects it
            self.queued += 1
            self.at(event.detail["deadline"], self._safety_tick, False)

    def launch(self, launch: Launch) -> None:
        answered = self.now + self._launch_seconds(launch.lease.lease_id)
        self._answer_at.setdefault(launch.lease.lease_id, answered)
        self.at(answered, self._launched, launch.lease)

    def stop(self, stop: Stop, after: Launch | None) -> None:
        if after is None:
            self._stopping(stop)
        else:   # asked once the node's launch is answered (after _launched)
            self.at(self._answer_at[after.lease.lease_id], self._stopping, stop)

    def _launch_seconds(self, lease_id: str) -> float:
        s = self.settings
        if not s.launch_jitter:
            return s.launch_seconds
        spread = (zlib.crc32(lease_id.encode()) & 0xFFFF) / 0xFFFF - 0.5   # -0.5..0.5, the same every run
        return s.launch_seconds * (1 + s.launch_jitter * spread)

    def _hold(self, lease: Lease) -> None:
        """Keep per-node sums of what the leases hold, as the ledger counts it (Lease.held)."""
        state = lease.state   # what it holds (Lease.held), without a Size per lease
        vcpus, memory = (lease.vcpus, lease.memory_mib) if state in HOLDS_ALL else \
            (0, lease.memory_mib) if state in HOLDS_MEMORY else (0, 0)
        old = self.holding.get(lease.lease_id)
        if old is not None:
            if old[2] == vcpus and old[3] == memory and old[1] == lease.role:
                # holds what it held (most changes of state: a launch answered, a stop asked); a
                # lease's node never changes after it is made (the row is not compared)
                return
            del self.holding[lease.lease_id]
            self._count_held(old, -1)
        if vcpus or memory:
            held = self.holding[lease.lease_id] = (self.row_of[lease.node_id], lease.role, vcpus, memory)
            self._count_held(held, 1)

    def _count_held(self, held: tuple[int, str, int, int], sign: int) -> None:
        row, role, vcpus, memory = held
        if role == "backfill":
            self.backfill_held[row] += sign
        else:
            self.fixed_vcpus[row] += sign * vcpus
            self.fixed_memory[row] += sign * memory

    def _launched(self, lease: Lease) -> None:
        node = self.nodes[lease.node_id]
        if lease.vm_name not in node.vms:
            vm = node.vms[lease.vm_name] = SimVm(lease, self.now, self)
            self._integrate()
            if vm.role == "on_demand":
                node.on_demand_vcpus += vm.vcpus
                self.od_alloc += vm.vcpus
            else:
                self.bf_alloc += vm.vcpus
                self.work.vm_started(vm, self.now)
                if self.work.turns_idle:
                    self.at(last_tenth_at(self.now, self.ledger.backfill.duration_seconds), self._last_tenth, vm)
        self.apply(self.ledger.launch_done(lease.lease_id, True, "", self.now))
        request = self.by_lease.get(lease.lease_id)
        if request is not None and self.ledger.leases.get(lease.lease_id, lease).state == "running":
            self.waits.append(self.now - request.at)
            if request.lifetime is not None and self.now + request.lifetime < self.end:
                self.at(self.now + request.lifetime, self._release, lease.lease_id)
        self.report(node)

    def _stopping(self, stop: Stop) -> None:
        lease = stop.lease
        node = self.nodes[lease.node_id]
        vm = node.vms.get(lease.vm_name)
        if vm is not None and vm.role == "backfill":
            self.work.vm_stopping(vm, self.now, lease.state in VICTIM or lease.end_reason.startswith(DRAINED))
        if vm is not None and lease.state == "on_notice" and not vm.noticed:
            self._integrate()
            vm.noticed = True     # it runs at the volunteer class: its vCPUs are the new VM's
            self.bf_alloc -= vm.vcpus
        if stop.force:
            seconds, outcome = 0.0, "destroyed_forced"
        elif self.settings.stop_seconds <= stop.grace_seconds:
            seconds, outcome = self.settings.stop_seconds, "clean_shutdown"
        else:
            seconds, outcome = float(stop.grace_seconds), "destroyed_after_grace"
        self.at(self.now + seconds, self._stopped, (lease, outcome, seconds))

    def _stopped(self, arg: tuple[Lease, str, float]) -> None:
        lease, outcome, seconds = arg
        node = self.nodes[lease.node_id]
        vm = node.vms.pop(lease.vm_name, None)
        if vm is None:
            outcome = "not_found"
        else:
            self._integrate()
            if vm.role == "on_demand":
                node.on_demand_vcpus -= vm.vcpus
                self.od_alloc -= vm.vcpus
            else:
                if not vm.noticed:
                    self.bf_alloc -= vm.vcpus
                self.work.vm_ended(vm, self.now, preempted=lease.state in VICTIM or
                                   lease.end_reason.startswith(DRAINED))
        self.apply(self.ledger.stop_done(lease.lease_id, outcome, True, seconds, "", self.now))
        if vm is not None:
            self.report(node)

    def report(self, node: SimNode) -> None:
        self.apply(self.ledger.report(Report(node, self._foreground(node)), self.now))

    def _foreground(self, node: SimNode) -> float:
        """The node's foreground CPU as its agent reports it: its demand series, else its on-demand vCPUs."""
        return self._demand(node) if node.series is not None else float(node.on_demand_vcpus)

    def _demand(self, node: SimNode) -> float:
        series = node.series
        assert series is not None
        times = series.times
        if not len(times):
            return 0.0
        span = float(times[-1] - times[0]) or 1.0
        t = times[0] + (self.now % span)   # the series repeats over a longer run
        i = max(int(times.searchsorted(t, side="right")) - 1, 0)
        return float(series.cpu[i]) * node.cpus

    def _integrate(self) -> None:
        dt = self.now - self.area_at
        if dt > 0:
            self.od_area += self.od_alloc * dt
            self.bf_area += self.bf_alloc * dt
            self.timeline.allocated(self.area_at, self.now, self.od_alloc, self.bf_alloc)
            self.area_at = self.now

    # -- the controller's periodic jobs -------------------------------------------------------------

    def _fill(self, _arg: Any = None) -> None:
        self.fill_at = None
        self.apply(self.ledger.fill(self.now))

    def _periodic_fill(self, _arg: Any) -> None:
        self._fill()
        self.at(self.now + self.ledger.backfill.retry_seconds, self._periodic_fill)

    def _evaluate(self, _arg: Any) -> None:
        if self.reserve_planner is not None:
            reserves = self.reserve_planner.reserves(self.now, self.ledger)
            if reserves is not None:
                self.ledger.set_reserves(reserves)
        self.apply(self.ledger.select(self.now, evaluation=True))
        self.at(self.now + self.settings.selection_interval_seconds, self._evaluate)

    def _report_all(self, _arg: Any) -> None:
        for node in self.nodes.values():
            if node.node_id not in self.absent:
                self.report(node)
        self.at(self.now + self.settings.report_seconds, self._report_all)

    def _cpu_changed(self, vm: SimVm) -> None:
        """A VM turned idle or busy (or its guest said so): its node reports once the event that
        did it is over."""
        if vm.node_id not in self.cpu_reports:
            self.cpu_reports.add(vm.node_id)
            self.at(self.now, self._cpu_report, vm.node_id)

    def _last_tenth(self, vm: SimVm) -> None:
        """A backfill VM enters the last tenth of its longest life: if it idles then, its agent's
        next report shows it idle there (an agent reports every few seconds), which recycles it."""
        if self.nodes[vm.node_id].vms.get(vm.name) is vm and vm.lease_id in self.ledger.leases and shows_idle(vm):
            self._cpu_changed(vm)

    def _idle_near_end(self, vm: SimVm) -> None:
        """A VM's work turned, under a policy other than idle_first: its node reports only if the
        VM turned idle in the last tenth of its longest life, which the ledger then recycles (the
        same report at each turn would change nothing else these policies read)."""
        if shows_idle(vm) and recycles_when_idle(self.now - vm.launched_at, self.ledger.backfill.duration_seconds):
            self._cpu_changed(vm)

    def _cpu_report(self, node_id: str) -> None:
        """Only the VMs' CPU and what their guests say: a whole report would also add a
        foreground sample, and so shorten the prediction window (in samples) that volunteer
        selection reads."""
        self.cpu_reports.discard(node_id)
        node = self.nodes[node_id]
        self.apply(self.ledger.note_cpu(Report(node, self._foreground(node)), self.now))

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
            elif self._backfill_held_room(Size(request.vcpus, request.memory_mib)):
                self.rejected_due_to_backfill += 1
        elif record.lease_id:
            del self.unanswered[record.request_id]
            self.by_lease[record.lease_id] = request

    def _backfill_held_room(self, want: Size) -> bool:
        """Whether some up node would have held the request had every backfill VM on it (running,
        starting or stopping) been free: a rejection while backfill held room that would fit."""
        # Every node at once in numpy, then the exact test on the few that pass: a node's capacity
        # in the books is the one its reports give (this engine's), and room outside any lease
        # (unexplained) only takes room away, so no node this leaves out could pass.
        held, vcpus, memory = (np.frombuffer(a, dtype=np.int64)
                               for a in (self.backfill_held, self.fixed_vcpus, self.fixed_memory))
        rows = np.flatnonzero((held > 0) & (self.node_cpus - vcpus >= want.vcpus)
                              & (self.node_memory - memory >= want.memory_mib))
        nodes = self.ledger.nodes
        for row in rows.tolist():
            node = nodes.get(self.node_ids[row])
            if node is None or node.state != "up":
                continue
            capacity, unexplained = node.capacity, node.unexplained
            if want.vcpus <= capacity.vcpus - unexplained.vcpus - self.fixed_vcpus[row] and \
                    want.memory_mib <= capacity.memory_mib - unexplained.memory_mib - self.fixed_memory[row]:
                return True
        return False

    def _release(self, lease_id: str) -> None:
        try:
            _lease, effects = self.ledger.release(lease_id, True, self.now)
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
        if record is None or not record.lease_id:
            return
        try:
            _lease, effects = self.ledger.release(record.lease_id, False, self.now)
        except LeaseError:
            return   # it ended otherwise meanwhile
        self.released += 1
        self.apply(effects)

    # -- results ------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        s = self.settings
        capacity = s.pool_vcpus * self.end
        outcomes = Counter(r.outcome for r in self.store.requests.values())
        answered = sum(v for k, v in outcomes.items() if k != "pending")
        figures = dict(
            utilization=round((self.od_area + self.bf_area) / capacity, 6) if capacity else None,
            utilization_on_demand=round(self.od_area / capacity, 6) if capacity else None,
            utilization_backfill=round(self.bf_area / capacity, 6) if capacity else None,
            requests_total=len(self.requests),
            requests_arrived=self.arrived,
            requests_ignored_after_end=self.ignored_after_end,
            requests_answered=answered,
            requests_placed=outcomes.get("placed", 0),
            requests_rejected=outcomes.get("rejected", 0),
            requests_failed=outcomes.get("failed", 0),
            requests_pending=outcomes.get("pending", 0),
            rejection_reasons=dict(sorted(self.rejections.items())),
            rejected_larger_than_node=self.rejected_larger_than_node,
            rejected_due_to_backfill=self.rejected_due_to_backfill,
            requests_released=self.released,
            requests_queued=self.queued,
            backfill_drained=self.drained,
            wait_p50_s=percentile(self.waits, 50),
            wait_p99_s=percentile(self.waits, 99),
            preempted_paths=dict(Counter(d.get("path", "") for d in self.store.details.get("vm.preempted", ()))),
        )
        figures.update(self.work.summary(self.end, self.lost_vcpu_seconds, self.preemptions))
        working = figures.pop("backfill_working_vcpu_seconds")
        events = self.events_run + self.checks_dropped
        figures["utilization_working"] = round((self.od_area + working) / capacity, 6) if capacity else None
        figures.update(simulated_days=round(self.end / DAY, 6), stopped_early=self.stopped_early_at is not None,
                       sim_events=events, wall_seconds=round(self.wall, 3),
                       sim_events_per_s=round(events / self.wall) if self.wall else None)
        return dict(
            header=dict(inputs=self.inputs, sim=self._sim_header(), timeline_seconds=self.timeline.bucket,
                        ledger=asdict(self.ledger.settings),
                        backfill=self.ledger.backfill.as_dict(),
                        reserves={k: asdict(v) for k, v in self.ledger.reserves.items()},
                        reserve_settings=self.ledger.reserve_settings.as_dict(),
                        hints=[asdict(h) for h in self.hints],
                        demand_series=len(self.demand)),
            figures=figures,
            events=dict(sorted(self.store.events.items())),
            notes=[
                "requests larger than every node are rejected by the ledger itself (no node can host them); "
                "they are counted in rejected_larger_than_node",
                "rejected_due_to_backfill counts rejections made while some node's backfill VMs (running, "
                "starting or stopping) held room that would have fit the request; placement counts running "
                "backfill as free, and a request held up by backfill starting or stopping waits for it (up to "
                "those VMs' deadlines), so one is counted only when that wait ran out or the queue was full",
                "utilization_working: as Nimbus counts it, vCPUs running an on-demand VM or backfill work "
                "(task-level: a job, whether it later finished or was lost; VM-level: the backfill VM itself) "
                "over total vCPUs, integrated over time",
                "utilization: allocated vCPUs over total vCPUs, integrated over time; a backfill VM on notice "
                "counts no vCPUs (they went to the on-demand VM beside it)",
                "waits: from arrival to the launch answer, placed requests only (a request that waited for "
                "room within the reserves' wait window counts its time in the queue)",
                "lost work counts backfill VMs drained for a reserve (backfill_drained) as well as preempted ones",
                "survival after T: of the backfill VMs launched at least T before the end, the share that ran "
                "at least T",
            ],
        )

    def _sim_header(self) -> dict[str, Any]:
        """The settings as run: with a pool of groups, without the one size it does not read."""
        sim = asdict(self.settings)
        if self.settings.pool:
            del sim["node_cpus"], sim["node_memory_mib"]
        return sim

    def vm_rows(self) -> list[dict[str, Any]]:
        """One row per lease: what the per-VM CSV holds. wait_s: an on-demand VM's wait from its
        request's arrival to its launch; runtime_s: from launch to its end (or the run's end);
        preempted: a backfill VM stopped to make room (its runtime x vCPUs was lost)."""
        rows = []
        for l in sorted(self.store.leases.values(), key=lambda l: (l.created_at, l.lease_id)):
            request = self.by_lease.get(l.lease_id)
            launched = l.launched_at
            rows.append(dict(
                lease_id=l.lease_id, role=l.role, node=l.node_id, vcpus=l.vcpus, memory_mib=l.memory_mib,
                launched=launched, ended=l.ended_at, state=l.state, end_reason=l.end_reason, request_id=l.request_id,
                wait_s=round(launched - request.at, 3) if request is not None and launched is not None else None,
                runtime_s=round((l.ended_at if l.ended_at is not None else self.end) - launched, 3)
                if launched is not None else None,
                preempted=l.role == "backfill" and l.end_reason.startswith("preempted")))
        return rows

    def timeline_rows(self) -> list[dict[str, Any]]:
        """The timeline's rows (Timeline.rows) up to the run's end."""
        return self.timeline.rows(self.end, self.settings.pool_vcpus)
