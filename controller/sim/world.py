"""The simulated world the engine (controller/sim/engine.py) drives the ledger against: a run's
settings (SimSettings), the nodes, their VMs and the reports their agents send (SimNode, SimVm,
Report), the scripted steps beside the trace (Scripted), what backfill VMs do and how their work
is counted (BackfillWork, VmLevelWork; task-level work is controller/sim/jobs.py), the in-memory
store the ledger's Writes go to (Store), and the per-node sums of the room leases hold (HeldRoom).
"""
from __future__ import annotations

import itertools
import math
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from ..core.backfill_plan import RECYCLE_IDLE_SHARE, recycles_when_idle
from ..core.books import NodeState
from ..core.ledger import Ledger
from ..core.records import (HOLDS_ALL, HOLDS_MEMORY, BackfillConfig, Lease, LedgerSettings, RequestRecord, Reserve,
                            Size, Write)
from ..core.reserve_settings import Hint, ReserveSettings
from .traces import DemandSeries, NodeGroup

HOUR = 3600.0
DAY = 86400.0
FAR = 1e15            # suspect/down timers beyond any run: node failures are not simulated
KEPT_DETAILS = frozenset({"vm.preempted", "vm.hibernated", "request.rejected", "request.expired", "vm.stop_expired",
                          "vm.launch_failed", "vm.unexpected", "vm.conflict", "vm.lost"})


@dataclass(frozen=True)
class SimSettings:
    """A run's settings: the pool, how long it runs, how long the simulated agents take, and how
    often the controller's periodic jobs and the progress lines come."""
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
    # backfill guests know when their VM will be recycled (the agent's gleaner.retire_after, set from
    # duration_seconds) and take no new job in the last tenth of their run time (their own clock,
    # time hibernated not counted), so a recycle does not cut a job they could have left alone;
    # off: they take jobs to the end, as guests that are not told (job-level work only)
    guest_retires: bool = True
    # On: an on-demand VM is released `lifetime` after its placement plus launch_seconds (its
    # launch without victims to wait for), not after its own launch: the release comes when it
    # would without backfill, so that runs with and without backfill differ by placement alone
    # (tests/bench/simulate.py; a launch that waited for victims lives that much shorter).
    release_on_schedule: bool = False
    # the simulated agents (controller/sim/agents.py): "ideal" (every launch and stop succeeds in
    # the fixed times above, reports arrive at the instant, CPU figures are exact) or "modelled"
    # (failures, measured time distributions, report lag, sampled CPU); agent_params: the
    # modelled agents' parameters changed from their defaults, as (name, value) pairs; seed: what
    # every draw of theirs is hashed with
    agents: str = "ideal"
    agent_params: tuple[tuple[str, float], ...] = ()
    seed: int = 0
    # hibernation (interruption = "hibernate"): the ideal agents' save and restore times (the
    # modelled agents draw theirs), and the disk each node's agent lets saved VMs use
    # (hibernate_budget_mib, 0: as much as the node's memory)
    save_seconds: float = 1.8
    restore_seconds: float = 0.65
    hibernate_budget_mib: int = 0

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

    def launch_time(self, lease_id: str) -> float:
        """Seconds from a Launch to its answer: launch_seconds x (1 +- launch_jitter/2), the same
        for a lease id in every run."""
        if not self.launch_jitter:
            return self.launch_seconds
        spread = (zlib.crc32(lease_id.encode()) & 0xFFFF) / 0xFFFF - 0.5   # -0.5..0.5, the same every run
        return self.launch_seconds * (1 + self.launch_jitter * spread)


def sim_ledger_settings(base: LedgerSettings | None = None) -> LedgerSettings:
    """The ledger's settings for a simulation: node failures are not modelled, so a node is never
    suspect or down however long it stays silent (nodes report only when their VMs change)."""
    return replace(base or LedgerSettings(), suspect_after=FAR, down_after=2 * FAR)


def sim_ledger(settings: LedgerSettings | None, backfill: BackfillConfig, reserves: Mapping[str, Reserve] | None,
               reserve_settings: ReserveSettings, hints: Sequence[Hint]) -> Ledger:
    """The live controller's Ledger for a simulation: its settings as sim_ledger_settings makes
    them, and ids numbered from 1 in the order they are made (the same in every run)."""
    numbers = itertools.count(1)
    return Ledger(sim_ledger_settings(settings), backfill, dict(reserves or {}),
                  lambda prefix: f"{prefix}-{next(numbers)}", reserve_settings=reserve_settings, hints=hints)


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
                 "cpu_sampled", "image", "noticed", "work_state", "work_since", "clock", "slept", "asleep_since")

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
        self.slept = 0.0                          # seconds it spent hibernated
        self.asleep_since: float | None = None    # hibernated since then (None: awake)

    def runtime(self, now: float) -> float:
        """Seconds it ran: from its launch, without its time hibernated."""
        until = self.asleep_since if self.asleep_since is not None else now
        return until - self.launched_at - self.slept

    @property
    def work_for_s(self) -> float:
        """Seconds since the guest last said work_state, as its agent times it: read when the
        ledger reads the report (0.0 while it said nothing)."""
        clock = self.clock
        if not self.work_state or clock is None:
            return 0.0
        return max(clock.now - self.work_since, 0.0)


class SimNode:
    """A node and its agent: its VMs, and its foreground CPU (its demand series, else its
    on-demand VMs' vCPUs)."""
    __slots__ = ("node_id", "address", "cpus", "memory_mib", "images", "vms", "on_demand_vcpus", "series",
                 "reported_at", "reported_foreground", "settling")

    def __init__(self, node_id: str, cpus: int, memory_mib: int, images: tuple[str, ...]) -> None:
        self.node_id = node_id
        self.address = f"{node_id}:7451"   # its agent's, as its reports give it
        self.cpus = cpus
        self.memory_mib = memory_mib
        self.images = images
        self.vms: dict[str, SimVm] = {}
        self.on_demand_vcpus = 0
        self.series: DemandSeries | None = None
        self.reported_at: float | None = None   # its last whole report (its foreground sample)
        self.reported_foreground: float | None = None   # ... and the figure it gave
        self.settling = False   # a report is due once the prediction's window holds the new figure

    def foreground(self, now: float) -> float:
        """The node's foreground CPU as its agent reports it: its demand series, else its on-demand vCPUs."""
        return self.demand(now) if self.series is not None else float(self.on_demand_vcpus)

    def demand(self, now: float) -> float:
        """Its demand series' CPU at `now`, in cores."""
        series = self.series
        assert series is not None
        times = series.times
        if not len(times):
            return 0.0
        span = float(times[-1] - times[0]) or 1.0
        t = times[0] + (now % span)   # the series repeats over a longer run
        i = max(int(times.searchsorted(t, side="right")) - 1, 0)
        return float(series.cpu[i]) * self.cpus


def pool_nodes(settings: SimSettings, images: tuple[str, ...], demand: Sequence[DemandSeries]) -> dict[str, SimNode]:
    """The pool's nodes by id (n0, n1... zero-padded to the same width), in the order of the
    settings' groups; with demand series, node i follows series i modulo their number."""
    width = len(str(settings.nodes))
    sizes = [(g.cpus, g.memory_mib) for g in settings.node_groups() for _ in range(g.count)]
    nodes = {f"n{i:0{width}d}": SimNode(f"n{i:0{width}d}", cpus, memory, images)
             for i, (cpus, memory) in enumerate(sizes)}
    if demand:
        for i, node in enumerate(nodes.values()):
            node.series = demand[i % len(demand)]
    return nodes


AGENT_SAMPLE_SECONDS = 2.0   # a live agent's report interval (nodeagent's report_seconds default)


def held_samples(node: SimNode, now: float, interval: float, window: int) -> int:
    """How many periodic reports the node's agent sent since its last simulated whole report (at
    most the prediction's window: older ones no longer count), and mark this one sent."""
    last, node.reported_at = node.reported_at, now
    if last is None or interval <= 0:
        return 0
    return min(int((now - last) / interval), max(window, 0))


class Report:
    """An agent's report (controller.core.ledger.ReportLike)."""
    __slots__ = ("node_id", "agent_address", "cpus", "memory_mib", "foreground_cpu_cores", "images",
                 "min_memory_mib", "agent_version", "vms", "held_samples", "hibernation_budget_bytes")

    def __init__(self, node: SimNode, foreground: float, held_samples: int = 0) -> None:
        self.node_id = node.node_id
        self.agent_address = node.address
        self.cpus = node.cpus
        self.memory_mib = node.memory_mib
        self.foreground_cpu_cores = foreground
        self.images = node.images
        self.min_memory_mib = 32
        self.agent_version = "sim"
        self.vms = list(node.vms.values())
        # the periodic samples its agent took since its last simulated report, at the foreground
        # figure of that report: a live agent reports every few seconds, and the controller's
        # prediction of foreground demand is a moving average over its reports
        self.held_samples = held_samples
        self.hibernation_budget_bytes = 0   # disk its agent lets saved VMs use (the engine sets it)


SCRIPTED_ACTIONS = ("join", "release")


@dataclass(frozen=True)
class Scripted:
    """A step at a set time beside the trace. `join`: the node `arg` reports first at `at` (not at
    the start), as an agent started then would; `release`: the VM of request `arg` is released
    without force, as `gleanctl release` does (nothing if it has none or ended meanwhile)."""
    at: float
    action: str      # join | release
    arg: str


def joining_later(script: Sequence[Scripted], nodes: Mapping[str, SimNode]) -> set[str]:
    """The nodes the script has join later (silent until then), once its steps are checked."""
    for step in script:
        if step.action not in SCRIPTED_ACTIONS:
            raise ValueError(f"scripted step {step}: the action is one of {', '.join(SCRIPTED_ACTIONS)}")
        if step.action == "join" and step.arg not in nodes:
            raise ValueError(f"scripted step {step}: no node {step.arg!r} (the nodes are {min(nodes)}.."
                             f"{max(nodes)})")
    return {step.arg for step in script if step.action == "join"}


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

    def vm_hibernated(self, vm: SimVm, now: float) -> None:
        """Its save was asked: its work stands still, kept, until it is resumed or discarded."""

    def vm_resumed(self, vm: SimVm, now: float) -> None:
        """It runs again, its work where it stood."""

    def vm_retiring(self, vm: SimVm, now: float) -> None:
        """Its guest's run time reached the last tenth of its longest life: it takes no new work."""

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
        # victims on notice -> since when: their vCPUs went to the on-demand VM beside them, so
        # they run on but do not count as working (utilization_working)
        self.on_notice: dict[str, float] = {}
        self.notice_vcpu_seconds = 0.0

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
        # it works on until it is gone (its runtime counts to then, as the audit log's lost work
        # does), but a victim on notice no longer has its vCPUs
        if vm.noticed:
            self.on_notice.setdefault(vm.name, now)

    def vm_hibernated(self, vm: SimVm, now: float) -> None:
        vm.asleep_since = now
        noticed = self.on_notice.pop(vm.name, None)   # asleep, it holds no vCPUs at all
        if noticed is not None:
            self.notice_vcpu_seconds += (now - noticed) * vm.vcpus

    def vm_resumed(self, vm: SimVm, now: float) -> None:
        if vm.asleep_since is not None:
            slept = now - vm.asleep_since
            vm.slept += slept
            vm.work_since += slept   # its agent's work clock does not count the time it slept
            vm.asleep_since = None
        vm.noticed = False

    def vm_retiring(self, vm: SimVm, now: float) -> None:
        pass   # busy from launch to end: nothing to leave

    def vm_ended(self, vm: SimVm, now: float, preempted: bool) -> None:
        self.alive.pop(vm.name, None)
        noticed = self.on_notice.pop(vm.name, None)
        if noticed is not None:
            self.notice_vcpu_seconds += (now - noticed) * vm.vcpus
        runtime = vm.runtime(now)
        self.vm_seconds += runtime
        self.vcpu_seconds += runtime * vm.vcpus
        self.runtimes.append((vm.launched_at, runtime))

    def summary(self, end: float, lost_vcpu_seconds: float, preemptions: int) -> dict[str, Any]:
        vm_seconds, vcpu_seconds, notice = self.vm_seconds, self.vcpu_seconds, self.notice_vcpu_seconds
        runtimes = list(self.runtimes)
        for vm in self.alive.values():   # still running (or hibernated) at the end: their work so far is done
            runtime = vm.runtime(end)
            vm_seconds += runtime
            vcpu_seconds += runtime * vm.vcpus
            runtimes.append((vm.launched_at, runtime))
            if vm.name in self.on_notice:
                notice += (end - self.on_notice[vm.name]) * vm.vcpus

        def survival(span: float) -> float | None:
            # Of the VMs launched at least `span` before the end (the others could not have),
            # the share that ran at least that long.
            eligible = [r for launched, r in runtimes if launched <= end - span]
            return round(sum(r >= span for r in eligible) / len(eligible), 4) if eligible else None

        hours = vm_seconds / HOUR
        return dict(
            backfill_vms_launched=self.started,
            backfill_vm_hours=round(hours, 3),
            # vCPU-seconds backfill spent working (here: its VMs' lives, less the victims' notice,
            # when their vCPUs were the on-demand VM's), for utilization_working
            backfill_working_vcpu_seconds=vcpu_seconds - notice,
            # the work as VM-level accounting counts it (a stop loses the VM's whole runtime x
            # vCPUs, as the audit log does), whatever the VMs ran: named apart from the job figures
            vm_level_work_vcpu_hours=round(vcpu_seconds / HOUR, 3),
            vm_level_lost_vcpu_hours=round(lost_vcpu_seconds / HOUR, 3),
            vm_level_lost_share=round(lost_vcpu_seconds / vcpu_seconds, 6) if vcpu_seconds else None,
            vm_level_goodput_vcpu_hours=round((vcpu_seconds - lost_vcpu_seconds) / HOUR, 3),
            preemptions=preemptions,
            preemptions_per_100_vm_hours=round(100 * preemptions / hours, 4) if hours else None,
            backfill_survival_1h=survival(HOUR),
            backfill_survival_1d=survival(DAY),
        )


def last_tenth_at(launched: float, duration_seconds: int) -> float:
    """The first instant at which a VM launched at `launched` counts as in the last tenth of its
    life (recycles_when_idle), to the last bit: a sum in floats may round below it."""
    at = launched + duration_seconds * (1.0 - RECYCLE_IDLE_SHARE)
    while recycles_when_idle(math.nextafter(at, -math.inf) - launched, duration_seconds):
        at = math.nextafter(at, -math.inf)
    while not recycles_when_idle(at - launched, duration_seconds):
        at = math.nextafter(at, math.inf)
    return at


# -- what the leases hold per node ------------------------------------------------------------------

class HeldRoom:
    """What the leases hold per node, kept from the Writes as the ledger counts it (Lease.held):
    per node, what leases other than backfill hold and how many backfill leases hold room. Read
    when a request is rejected (the summary's rejected_due_to_backfill). A lease written is only
    noted (hold); the sums take in each noted lease's last version when they are read (a lease is
    written several times between two rejections, and the sums depend on its last version only)."""

    def __init__(self, nodes: Sequence[SimNode]) -> None:
        self.holding: dict[str, tuple[int, str, int, int]] = {}   # lease -> (node's row, role, vCPUs, MiB)
        self.noted: dict[str, Lease] = {}   # lease -> its last version written, not yet in the sums
        self.node_ids = [n.node_id for n in nodes]
        self.row_of = {node_id: i for i, node_id in enumerate(self.node_ids)}
        # per row: what leases other than backfill hold, and the backfill leases holding room; in
        # arrays of int64 that numpy reads without a copy (backfill_held_room) and hold writes an
        # item at a time as fast as a list
        self.fixed_vcpus = array("q", bytes(8 * len(nodes)))
        self.fixed_memory = array("q", bytes(8 * len(nodes)))
        self.backfill_held = array("q", bytes(8 * len(nodes)))
        self.node_cpus = np.array([n.cpus for n in nodes], dtype=np.int64)
        self.node_memory = np.array([n.memory_mib for n in nodes], dtype=np.int64)

    def hold(self, lease: Lease) -> None:
        """Note a lease written: the sums take it in when they are next read (_settle)."""
        self.noted[lease.lease_id] = lease

    def _settle(self) -> None:
        """The noted leases into the sums."""
        for lease in self.noted.values():
            self._held(lease)
        self.noted.clear()

    def _held(self, lease: Lease) -> None:
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

    def backfill_held_room(self, want: Size, nodes: Mapping[str, NodeState]) -> bool:
        """Whether some up node (`nodes`: the ledger's books) would have held the request had every
        backfill VM on it (running, starting or stopping) been free: a rejection while backfill
        held room that would fit."""
        # Every node at once in numpy, then the exact test on the few that pass: a node's capacity
        # in the books is the one its reports give (this engine's), and room outside any lease
        # (unexplained) only takes room away, so no node this leaves out could pass.
        if self.noted:
            self._settle()
        held, vcpus, memory = (np.frombuffer(a, dtype=np.int64)
                               for a in (self.backfill_held, self.fixed_vcpus, self.fixed_memory))
        rows = np.flatnonzero((held > 0) & (self.node_cpus - vcpus >= want.vcpus)
                              & (self.node_memory - memory >= want.memory_mib))
        for row in rows.tolist():
            node = nodes.get(self.node_ids[row])
            if node is None or node.state != "up":
                continue
            capacity, unexplained = node.capacity, node.unexplained
            if want.vcpus <= capacity.vcpus - unexplained.vcpus - self.fixed_vcpus[row] and \
                    want.memory_mib <= capacity.memory_mib - unexplained.memory_mib - self.fixed_memory[row]:
                return True
        return False
