"""The pool's books as a pure state machine: leases, requests, nodes.

Every input is a call with the time passed in (an agent's report, an on-demand request, a
release, an agent's answer to a launch or stop, a tick); every output is a list of effects as
data. A Write (rows to insert or update and audit events, one transaction) always comes before
the calls it authorises (Launch, Stop). The service and the simulator carry the effects out
by the same rules (controller.effects). Nothing here reads a clock,
opens a socket or a file.

The lease states, what each holds and its deadline are in controller.core.records.

A victim on notice keeps its memory but not its vCPUs: it runs at the volunteer class (cpu.idle),
so a foreground vCPU gets a CPU the moment it wants one. A lost VM keeps its room: it may come
back. So when the node's memory, less a headroom,
holds the new VM beside its victims, the new VM starts at once and the victims get a notice
period to shut down cleanly ("instant" path); otherwise it waits for their memory ("after
victims" path). A stop counts as done when the agent confirms it or the node's report no
longer shows the VM; a failed stop is retried until its deadline, never taken as done. A VM a
node reports that no live lease explains (one that ended, or clashes with another lease) still
counts against its node, so the books never promise what the node does not have: a lease
waiting for its victims' memory starts only once they are confirmed stopped (a victim whose stop
expired unconfirmed may still run), and never while its node runs more than the books explain.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from .policy import (IDLE, Decision, NodeArrays, NodeView, Pool, Preempt, Reject, VictimLadder, VmView, _fitting,
                     place_on_demand, plan_backfill, recycles_when_idle, room_after_transit, rows_where)
from .reserves import (DemandHistory, ReserveTarget, late_hint_note, live_hints, may_wait, on_demand_share,
                       plan_for_pool, reserve_target, validate_hint, wait_decision)
from .reserve_settings import Hint, PredictiveMode, ReserveSettings
from .selection import BestFirst, Selection, node_potential_productivity, potential_productivity, select_volunteers
from .selection_rows import RowValues, SelectionRows
from .records import (BLANK_LEASE, DRAINED, HOLDS_ALL, HOLDS_MEMORY, IN_TRANSIT, NO_RESERVE, NOT_YET_LAUNCHED,
                      REACTS, STOP_UNCONFIRMED, STOPS, TERMINAL, VICTIM, ZERO, Ask, Audit, BackfillConfig, Effect,
                      Launch, Lease, LeaseError, LedgerSettings, Policy, ReportedVmLike, ReportLike, RequestRecord,
                      Reserve, Size, Stop, VmRole, Write, launch_time, replace, stable_seed, stop_event, work)

# idle_first: a backfill VM using less CPU than this (cores, over the agent's last sample),
# whatever its size, is idle: a worker between jobs (a CPU-bound job keeps a whole core busy; an
# idle tiny guest under TCG uses about 0.01 core)
IDLE_CPU_CORES = 0.25
# idle_first: a guest's "busy" clock (now - work_for_s) moves by report lag from one report to the
# next; within this many seconds of the clock kept, the same spell goes on (its view stays as it is)
GUEST_CLOCK_TOLERANCE_S = 2.0
ROLES = {role.value: role for role in VmRole}   # VmRole(value), without the enum's lookup per call
MAX_LAUNCH_BACKOFF_SECONDS = 300.0
AUDIT_NODES = 50          # node ids an audit event lists at most


@dataclass
class NodeState:
    node_id: str
    address: str
    capacity: Size
    state: str = "up"                  # up | suspect | down
    last_report: float = 0.0
    fg_samples: deque = field(default_factory=deque)
    foreground_cpu: float = 0.0
    backfill_cpu: float = 0.0
    signature: tuple = ()
    seen_version: int = -1
    check_until: float = 0.0
    agent_version: str = ""
    images: frozenset[str] = frozenset()
    min_memory_mib: int = 0
    unexplained: Size = ZERO           # VMs the node runs that no live lease explains
    redrive: bool = False              # unfinished leases here wait for this node's next report


_SIZES: dict[tuple[int, int], Size] = {}


def shared_size(vcpus: int, memory_mib: int) -> Size:
    """Size(vcpus, memory_mib), one instance per value (a Size is immutable, and a pool's VMs
    come in a few sizes): the books make one per booking."""
    size = _SIZES.get((vcpus, memory_mib))
    if size is None:
        if len(_SIZES) >= 1024:
            _SIZES.clear()
        size = _SIZES[(vcpus, memory_mib)] = Size(vcpus, memory_mib)
    return size


class _VmsByNode(Mapping):
    """The pool's VMs per node, as the policies read them, without copying them per decision."""

    def __init__(self, views: dict[str, list[VmView]]) -> None:
        self._views = views

    def __getitem__(self, node_id: str) -> Sequence[VmView]:
        return self._views[node_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)


class _NodeVms:
    """A node's VMs as the policies see them (VmViews of the leases that hold room, in the books'
    order) and their sums, kept as leases are booked: a rebuild of the node's view reads these
    rather than walking every lease of the node (policy.summed's figures, exactly)."""
    __slots__ = ("views", "vcpus", "memory", "pinned_vcpus", "pinned_memory", "backfill_vcpus", "backfill_vms",
                 "on_demand_memory", "victims_changed")

    def __init__(self) -> None:
        self.views: dict[str, VmView] = {}   # lease id -> its view
        self.vcpus = self.memory = self.pinned_vcpus = self.pinned_memory = 0
        self.backfill_vcpus = self.backfill_vms = self.on_demand_memory = 0
        self.victims_changed = True   # the victims' ladder must be read afresh from the views

    def add(self, vm: VmView) -> None:
        self.views[vm.vm_id] = vm
        self._count(vm, 1)

    def remove(self, lease_id: str) -> None:
        vm = self.views.pop(lease_id, None)
        if vm is not None:
            self._count(vm, -1)

    def _count(self, vm: VmView, sign: int) -> None:
        vcpus, memory = vm.size.vcpus * sign, vm.size.memory_mib * sign
        self.vcpus += vcpus
        self.memory += memory
        if vm.role is VmRole.BACKFILL:
            self.backfill_vcpus += vcpus
            self.backfill_vms += sign
            if vm.preemptible:   # a victim: it counts in the ladder, not in what is pinned
                self.victims_changed = True
                return
        else:
            self.on_demand_memory += memory
        self.pinned_vcpus += vcpus
        self.pinned_memory += memory

    def summed(self, bare: NodeView, unexplained: Size, last: NodeView | None, by_busy: bool = False) -> NodeView:
        """policy.summed(bare, the views, unexplained), from the kept sums; the victims' figures
        are those of `last` (the node's previous view) unless its victims changed since."""
        if self.victims_changed or last is None:
            victims = [vm for vm in self.views.values() if vm.role is VmRole.BACKFILL and vm.preemptible]
            times = [vm.launched_at for vm in victims]
            newest, oldest = (max(times), min(times)) if times else (None, None)
            ladder = VictimLadder.of(victims, by_busy)   # idle_first's ladders are by its clock
            self.victims_changed = False
        else:
            newest, oldest, ladder = last.newest_victim_at, last.oldest_victim_at, last.victim_ladder
        allocated, pinned = Size(self.vcpus, self.memory), Size(self.pinned_vcpus, self.pinned_memory)
        if unexplained is not ZERO and unexplained != ZERO:   # room taken outside any lease (rare)
            allocated, pinned = unexplained + allocated, unexplained + pinned
        return replace(bare, allocated=allocated, pinned=pinned,
                       newest_victim_at=newest, backfill_vcpus=self.backfill_vcpus, backfill_vms=self.backfill_vms,
                       on_demand_memory_mib=self.on_demand_memory, oldest_victim_at=oldest, victim_ladder=ladder)


# -- the ledger ------------------------------------------------------------------------------------

class Ledger:
    def __init__(self, settings: LedgerSettings, backfill: BackfillConfig, reserves: Mapping[str, Reserve],
                 new_id: Callable[[str], str], leases: Iterable[Lease] = (),
                 requests: Iterable[RequestRecord] = (), ended: Iterable[Lease] = (),
                 reserve_settings: ReserveSettings = ReserveSettings(), hints: Iterable[Hint] = (),
                 history: DemandHistory | None = None, reserved_nodes: Iterable[str] = ()) -> None:
        """`new_id(prefix)` makes lease ids (random in the service, counted in the simulator).
        Live leases and pending requests from the store are unfinished business: each lease's node
        re-drives it (launch or stop again) when it next reports; a pending request without a
        lease waits for room again from when it was made (its window may be over: the next retry
        rejects it). `ended` are the most recently ended leases: a VM a node still runs under one
        of them is stopped, not adopted. `reserve_settings`, `hints` and `history` are Balancer's
        reserves (controller.core.reserves): with the defaults nothing is reserved; `reserved_nodes`
        are the nodes they kept free when the controller stopped."""
        self.settings = settings
        self._backfill = backfill
        # idle_first's clock per running backfill lease (VmView.busy_since): kept from the reports
        # only while the policy is idle_first
        self._tracks_cpu = backfill.termination_policy is Policy.IDLE_FIRST
        self._busy_since: dict[str, float] = {}
        self._guest_clock: set[str] = set()   # leases whose clock their guest set (else the CPU figures)
        self.reserves: dict[str, Reserve] = dict(reserves)
        self.reserve_settings = reserve_settings.validate()
        self.hints: list[Hint] = list(hints)
        slots = (reserve_settings.slot_seconds, reserve_settings.utc_offset_seconds)
        # A history kept with other slots cannot be read by these: it starts afresh.
        self.history = history if history is not None and \
            (history.slot_seconds, history.utc_offset_seconds) == slots else DemandHistory(*slots)
        # kept free of backfill by the reserves (as written at the last change: a soft reserve stays)
        self.reserved_nodes: frozenset[str] = frozenset(reserved_nodes)
        # Requests that found no room, oldest first: request_id -> (the ask, when it was queued,
        # when its wait ends).
        self.waiting: OrderedDict[str, tuple[Ask, float, float]] = OrderedDict()
        self._od_share: dict[str, float] = {}   # up node -> its on-demand share (the demand's running sum)
        self._od_total = 0.0
        self._books_version = 0                 # counts changes to any node's books
        self._waiting_seen = -1                 # ... as the last retry of the waiting requests saw them
        self.new_id = new_id
        self.nodes: dict[str, NodeState] = {}
        self.leases: dict[str, Lease] = {}
        self._timed: dict[str, Lease] = {}   # the leases with a deadline, in the order of self.leases
        self._waiting_on: dict[str, int] = {}   # node -> its leases in state waiting
        self._in_transit: dict[str, int] = {}   # node -> its backfill leases IN_TRANSIT
        self._reacting_on: dict[str, int] = {}  # node -> its leases a report showing their VM acts on (REACTS)
        self.by_node: dict[str, dict[str, Lease]] = {}
        self.requests: dict[str, RequestRecord] = {}   # unresolved, and recently resolved (bounded)
        # Ended leases, bounded: a VM still reported under one of them is not ours to adopt, and
        # still takes room on its node.
        self.retired: OrderedDict[str, tuple[Lease, float]] = OrderedDict()   # vm name -> (its ended lease, when)
        self.retired_ids: OrderedDict[str, str] = OrderedDict()             # lease id -> its node
        self.said: OrderedDict[str, None] = OrderedDict()                   # audit events said once
        # Victims whose stop expired unconfirmed: their VM may still run, so the lease waiting for
        # their memory never starts (its own deadline ends it). Rebuilt from the store on a restart
        # (the victims' ended rows, below); dropped with the request they blocked.
        self.unconfirmed: set[str] = set()
        # VM names whose adoption the store refused (their lease id or name clashes with a lease it
        # keeps): never adopted again, still counted on their node. Bounded, oldest out.
        self.refused: OrderedDict[str, str] = OrderedDict()
        self.retry_at: dict[str, float] = {}   # lease -> when to try its failed stop again
        # node -> (until, failures in a row): a node whose launches fail gets no backfill for a
        # while, doubling, so a broken image or agent is not asked again at once, forever.
        self.launch_backoff: dict[str, tuple[float, int]] = {}
        self.stop_calls: set[str] = set()       # leases whose stop was asked and not yet answered
        self.gone_since: dict[str, float] = {}  # ... and that a report already showed gone
        self.started_at: float | None = None
        self._unable_cache: dict[tuple[str, int], frozenset[str]] = {}
        self.lease_version: dict[str, int] = {}
        self._node_views: dict[str, NodeView] = {}
        self._vm_views: dict[str, list[VmView]] = {}
        self._vms_on: dict[str, _NodeVms] = {}   # node -> its leases' views and their sums, kept by _book
        # node -> VM name -> its live lease, in by_node's order (a VM name names one live lease: the
        # store refuses a second, and so does adoption): what a report's VMs are matched against
        self._named_on: dict[str, dict[str, Lease]] = {}
        self._bare_views: dict[str, tuple[tuple, NodeView]] = {}          # node -> (its key, view without sums)
        self._dirty: set[str] = set()
        self._selection_rows = SelectionRows()   # volunteer selection's inputs, row by row
        self._rebuilt: set[str] = set()          # nodes whose view was rebuilt since the last selection
        self._reported: set[str] = set()         # nodes that reported since the last selection
        self._best_first = BestFirst()           # the selection when every node fits, kept row by row
        self._columns = NodeArrays([])           # the views as columns, row by row
        self._view_rows: list[NodeView] = []     # the views in the columns' rows (self._node_views' order)
        self._lent: list[weakref.ref] = []       # snapshots' twins of the columns (NodeArrays.lend)
        self._backfill_roomy: set[str] = set()   # nodes where a backfill VM of the size below fits
        self._backfill_roomy_size = backfill.size
        self.selected: tuple[str, ...] = ()
        self._selected_by_p = False   # the last selection was every node with P > 0, best first
        # Nodes with backfill room the last plans gave no VM, unchanged since (their view and P):
        # the plan would give them none again. For the backfill config and tracking in _idle_for.
        self._backfill_idle: set[str] = set()
        self._idle_for: tuple[BackfillConfig, bool] | None = None
        self._idle_ids: list[str] | None = None   # the selection's rows and P when it last looked
        self._idle_p = np.zeros(0)
        self._p_rows: tuple[list[str], int, np.ndarray] | None = None   # the last P, its rows and slot size
        self.productivity: Mapping[str, float] = {}
        self.predicted: Mapping[str, float] = {}
        self.churn = 0
        ended = list(ended)
        for lease in ended:
            self._retire(lease, lease.ended_at or 0.0)
        for lease in leases:
            self._book(lease, now=0.0)
        for record in requests:
            if record.outcome == "pending":
                self.requests[record.request_id] = record
                if record.lease_id is None:   # it waited for room when the controller stopped
                    until = record.wait_until if record.wait_until is not None else \
                        record.created_at + self.reserve_settings.wait_seconds   # a row from before wait_until
                    self.waiting[record.request_id] = (Ask(record.vcpus, record.memory_mib, record.image,
                                                           record.owner, record.request_id), record.created_at, until)
        self._redrive_nodes = {l.node_id for l in self.leases.values() if l.state in STOPS | {"starting", "waiting"}}
        waited_for = {r.request_id for r in self.requests.values() if r.outcome == "pending" and r.lease_id}
        self.unconfirmed = {l.lease_id for l in ended if l.state == "failed" and l.request_id in waited_for
                            and l.role == "backfill" and l.end_reason.startswith(STOP_UNCONFIRMED)}

    # -- the books --------------------------------------------------------------------------------

    def _book(self, lease: Lease, now: float) -> Lease:
        lease_id, node_id, state = lease.lease_id, lease.node_id, lease.state
        old = self.leases.pop(lease_id, None)
        if old is not None:
            old_node, old_state = old.node_id, old.state
            by_node = self.by_node.get(old_node)
            if by_node is not None:
                by_node.pop(lease_id, None)
            self._vms_on[old_node].remove(lease_id)
            self._named_on[old_node].pop(old.vm_name, None)
            if old_node != node_id:   # its own node is touched below (versions are only compared)
                self._touch(old_node)
            if old.deadline is not None:
                self._timed.pop(lease_id, None)
            if old_state == "waiting":
                self._waiting_on[old_node] -= 1
            if old_state in IN_TRANSIT and old.role == "backfill":
                left = self._in_transit.pop(old_node) - 1
                if left:
                    self._in_transit[old_node] = left
            if old_state in REACTS:
                self._reacting_on[old_node] -= 1
        if state in TERMINAL:
            self._retire(lease, now)
            self._busy_since.pop(lease_id, None)
            self._guest_clock.discard(lease_id)
            self.retry_at.pop(lease_id, None)
            self.stop_calls.discard(lease_id)
            self.gone_since.pop(lease_id, None)
        else:
            self.leases[lease_id] = lease
            self.by_node.setdefault(node_id, {})[lease_id] = lease
            self._named_on.setdefault(node_id, {})[lease.vm_name] = lease
            self._view_lease(lease)
            if lease.deadline is not None:
                self._timed[lease_id] = lease
            if state == "waiting":
                self._waiting_on[node_id] = self._waiting_on.get(node_id, 0) + 1
            if state in IN_TRANSIT and lease.role == "backfill":
                self._in_transit[node_id] = self._in_transit.get(node_id, 0) + 1
            if state in REACTS:
                self._reacting_on[node_id] = self._reacting_on.get(node_id, 0) + 1
        self._touch(node_id)
        return lease

    def _view_lease(self, lease: Lease) -> None:
        """Count a lease just booked in its node's VMs (none if it holds nothing now)."""
        vms = self._vms_on.get(lease.node_id)
        if vms is None:
            vms = self._vms_on[lease.node_id] = _NodeVms()
        state = lease.state   # what it holds (Lease.held), without a Size unless it holds some
        if state in HOLDS_ALL:
            vcpus, memory = lease.vcpus, lease.memory_mib
        elif state in HOLDS_MEMORY:
            vcpus, memory = 0, lease.memory_mib
        else:
            return
        if vcpus == 0 and memory == 0:
            return
        # VmView(...) without the frozen dataclass's __init__ (a field at a time): one per booking
        vm = object.__new__(VmView)
        vm.__dict__.update(vm_id=lease.lease_id, node_id=lease.node_id, role=ROLES[lease.role],
                           size=shared_size(vcpus, memory), launched_at=lease.launched_at or lease.created_at,
                           preemptible=lease.role == "backfill" and state == "running")
        if self._tracks_cpu and lease.role == "backfill":
            vm.__dict__["busy_since"] = self._busy_since.get(lease.lease_id)
        vms.add(vm)

    @property
    def backfill(self) -> BackfillConfig:
        """The backfill settings. idle_first's clocks are kept only while it is the policy, so
        setting a change to or from it views every backfill lease afresh (with or without them)."""
        return self._backfill

    @backfill.setter
    def backfill(self, config: BackfillConfig) -> None:
        self._backfill = config
        tracks = config.termination_policy is Policy.IDLE_FIRST
        if tracks != self._tracks_cpu:
            self._tracks_cpu = tracks
            self._busy_since.clear()
            self._guest_clock.clear()
            for lease in [l for l in self.leases.values() if l.role == "backfill"]:
                self._view_again(lease)

    def _view_again(self, lease: Lease, touch: bool = True) -> None:
        """View a lease afresh (idle_first's clock changed). `touch`: the books changed too; a
        clock alone changes no lease nor what preemption can free, so only the node's view is
        rebuilt (no re-matching of its next report, no retry of waiting requests)."""
        vms = self._vms_on.get(lease.node_id)
        if vms is not None and lease.lease_id in vms.views:
            vms.remove(lease.lease_id)
            self._view_lease(lease)
            if touch:
                self._touch(lease.node_id)
            else:
                self._dirty.add(lease.node_id)

    def note_cpu(self, report: ReportLike, now: float) -> list[Effect]:
        """The part of a report idle_first reads (each VM's CPU and what its guest says), without
        the rest: the simulator gives it when a VM turns idle or busy between the reports that
        carry the node's load (under the other policies, when one turns idle near the end of its
        life). Its effects: the VMs it shows idle near the end of their life, recycled."""
        if report.node_id not in self.nodes:
            return []
        return self._recycle_idle(self._note_cpu(report, now) if self._tracks_cpu else
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
                    not recycles_when_idle(now - launch_time(lease), duration):
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
            runtime = now - launch_time(lease)
            if lease.state == "running" and recycles_when_idle(runtime, config.duration_seconds):
                effects += self._stop(lease, config.grace_seconds, now,
                                      f"recycled when idle after {runtime:.0f} s, in the last tenth of its "
                                      f"longest life ({config.duration_seconds} s)")
        return effects

    def _note_cpu(self, report: ReportLike, now: float) -> list[Lease]:
        """idle_first's clock from a report. What the guest says of its work comes first: "idle"
        is idle (nothing at risk); "busy" is busy since now - work_for_s, never before the VM's
        launch (a guest cannot look older than it is: a false "busy" keeps at most most_recent's
        place for its age), and a clock within GUEST_CLOCK_TOLERANCE_S of the busy clock kept is
        the same spell seen through report lag (kept as it is, the view untouched). A guest that said
        nothing (""): the CPU figures. A backfill VM using under IDLE_CPU_CORES is idle; one busy
        since a report showed it idle is busy since now (the first report that shows it busy).
        Unless its share of what the foreground leaves the node's backfill VMs (shared by vCPUs)
        is under IDLE_CPU_CORES: a low figure may then be a starved VM, and counts as busy.
        Returns the leases the report shows idle (for _recycle_idle)."""
        named = self._named_on.get(report.node_id)
        seen_idle: list[Lease] = []
        if not named:
            return seen_idle
        vms = report.vms
        backfill_vcpus = sum(vm.vcpus for vm in vms if vm.role == "backfill")
        left = report.cpus - report.foreground_cpu_cores   # for the backfill VMs
        busy_since, guest_clock = self._busy_since, self._guest_clock
        for vm in vms:
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
                self._view_again(lease, touch=False)
            if since == IDLE:
                seen_idle.append(lease)
        return seen_idle

    def _retire(self, lease: Lease, now: float) -> None:
        self.retired[lease.vm_name] = (lease, now)
        self.retired_ids[lease.lease_id] = lease.node_id
        for table in (self.retired, self.retired_ids):
            while len(table) > 100_000:
                table.popitem(last=False)

    def _say_once(self, key: str) -> bool:
        """True the first time `key` comes (bounded memory): for audit events that could repeat per report."""
        if key in self.said:
            return False
        self.said[key] = None
        while len(self.said) > 100_000:
            self.said.popitem(last=False)
        return True

    def _touch(self, node_id: str) -> None:
        self._books_version += 1
        self._dirty.add(node_id)
        self.lease_version[node_id] = self.lease_version.get(node_id, 0) + 1

    def reserve_for(self, node_id: str) -> Reserve:
        return self.reserves.get(node_id) or self.reserves.get("*") or Reserve(node_id)

    def set_reserves(self, reserves: Mapping[str, Reserve]) -> None:
        self.reserves = dict(reserves)
        self._dirty.update(self.nodes)

    def _refresh_views(self) -> None:
        if not self._dirty:
            return   # nothing changed since the last refresh (often: a decision right after another)
        regroup = False   # a node came or went: the columns are built afresh, in the views' order
        for node_id in sorted(self._dirty):   # the views' order, the pool's, is the same in every process
            node = self.nodes.get(node_id)
            self._backfill_idle.discard(node_id)   # its view changes: the plan reads it again
            if node is None:
                regroup = regroup or node_id in self._node_views
                self._node_views.pop(node_id, None)
                self._vm_views.pop(node_id, None)
                self._bare_views.pop(node_id, None)
                self._backfill_roomy.discard(node_id)
                self._od_total -= self._od_share.pop(node_id, 0.0)
                continue
            books = self._vms_on.get(node_id) or _NodeVms()
            vms = list(books.views.values())
            reserve = self.reserves.get(node_id) or self.reserves.get("*") or NO_RESERVE   # reserve_for's
            self._vm_views[node_id] = vms
            # The node's view less its sums: kept while what it holds is the same (most rebuilds
            # are for a change of VMs alone)
            key = (node.capacity, node.state == "up", reserve.vcpus, reserve.memory_mib,
                   reserve.whole_node or node_id in self.reserved_nodes)
            bare = self._bare_views.get(node_id)
            if bare is None or bare[0] != key:
                bare = self._bare_views[node_id] = (key, NodeView(node_id, key[0], key[1], Size(key[2], key[3]),
                                                                  key[4]))
            view = self._node_views[node_id] = books.summed(bare[1], node.unexplained, self._node_views.get(node_id),
                                                            self._tracks_cpu)
            self._note_backfill_room(view)
            share = on_demand_share(view) if view.up else 0.0   # the demand history's sample, kept summed
            self._od_total += share - self._od_share.get(node_id, 0.0)
            self._od_share[node_id] = share
            row = self._columns.position.get(node_id)
            if row is None:
                regroup = True
            elif not regroup:
                if self._lent:
                    self._own_columns()
                self._columns.set_row(row, view)
                self._view_rows[row] = view
        if regroup:
            self._view_rows = list(self._node_views.values())
            self._columns = NodeArrays(self._view_rows)
            self._lent = []
        self._rebuilt |= self._dirty
        self._dirty.clear()

    def _note_backfill_room(self, view: NodeView) -> None:
        """Keep the set of nodes with room for a backfill VM of the size it was kept for
        (fitting_count(backfill_room(view), size), in plain ints)."""
        size = self._backfill_roomy_size
        if view.up and not view.backfill_excluded:
            capacity, reserve, allocated = view.capacity, view.reserve, view.allocated
            fits = _fitting(capacity.vcpus - reserve.vcpus - allocated.vcpus,
                            capacity.memory_mib - reserve.memory_mib - allocated.memory_mib,
                            size.vcpus, size.memory_mib)
        else:
            fits = 0
        if fits:
            self._backfill_roomy.add(view.node_id)
        else:
            self._backfill_roomy.discard(view.node_id)

    def _nodes_with_backfill_room(self, size: Size) -> set[str]:
        """The nodes where at least one backfill VM of `size` fits (views up to date)."""
        if size != self._backfill_roomy_size:
            self._backfill_roomy_size = size
            self._backfill_roomy.clear()
            for view in self._node_views.values():
                self._note_backfill_room(view)
        return self._backfill_roomy

    def _own_columns(self) -> None:
        """Before a row of the columns changes: copy them if a snapshot that reads them is still alive."""
        if any(lent() is not None for lent in self._lent):
            self._columns = self._columns.copy()
        self._lent = []

    def snapshot(self, now: float) -> Pool:
        self._refresh_views()
        columns = self._columns.lend()   # no copy: _own_columns copies them if they change under it
        if len(self._lent) >= 64:   # many snapshots and no change between them: keep the live ones only
            self._lent = [lent for lent in self._lent if lent() is not None]
        self._lent.append(weakref.ref(columns))
        return Pool(tuple(self._view_rows), _VmsByNode(self._vm_views), now, columns)

    def view(self, node_id: str) -> NodeView:
        self._refresh_views()
        return self._node_views[node_id]

    def live_leases(self) -> list[Lease]:
        return sorted(self.leases.values(), key=lambda l: (l.created_at, l.lease_id))

    def _new_lease(self, role: VmRole, node_id: str, size: Size, image: str, owner: str, state: str,
                   now: float, deadline: float | None, request_id: str = "") -> Lease:
        lease_id = self.new_id("od" if role is VmRole.ON_DEMAND else "bf")
        # Lease(...) with its other fields at their defaults, copied from a blank one (faster)
        return replace(BLANK_LEASE, lease_id=lease_id, role=role.value, node_id=node_id,
                       vm_name=f"{self.settings.vm_name_prefix}{lease_id}", vcpus=size.vcpus,
                       memory_mib=size.memory_mib, image=image, owner=owner, state=state, created_at=now,
                       deadline=deadline, request_id=request_id)

    # -- on-demand requests ---------------------------------------------------------------------

    def _unable(self, memory_mib: int, image: str) -> frozenset[str]:
        """The nodes that cannot boot this VM (image missing, memory below their least); kept
        until a node's catalogue changes, since a pool's nodes mostly offer the same images."""
        key = (image, memory_mib)
        unable = self._unable_cache.get(key)
        if unable is None:
            unable = frozenset(n.node_id for n in self.nodes.values()
                               if image not in n.images or memory_mib < n.min_memory_mib)
            if len(self._unable_cache) > 256:
                self._unable_cache.clear()
            self._unable_cache[key] = unable
        return unable

    def able(self, pool: Pool, memory_mib: int, image: str) -> Pool:
        """The pool less the nodes that cannot boot this VM."""
        unable = self._unable(memory_mib, image)
        if not unable:
            return pool
        return Pool(tuple(n for n in pool.nodes if n.node_id not in unable), pool.vms_by_node, pool.now)

    def unbootable(self, pool: Pool, memory_mib: int, image: str) -> Reject | None:
        """A rejection when no up node could boot this VM at all: checked before anything is stopped."""
        unable = self._unable(memory_mib, image)
        if not unable or any(n.up and n.node_id not in unable for n in pool.nodes):
            return None
        up = [self.nodes[n.node_id] for n in pool.nodes if n.up]
        if not up:
            return None
        if not any(image in n.images for n in up):
            offered = sorted(set().union(*(n.images for n in up)))
            return Reject(f"no up node has image {image!r} (they offer: {', '.join(offered[:10]) or 'none'})")
        least = min(n.min_memory_mib for n in up if image in n.images)
        return Reject(f"{memory_mib} MiB is less than the smallest VM the agents with image {image!r} "
                      f"launch ({least} MiB)")

    def pending(self, request_id: str) -> RequestRecord | None:
        return self.requests.get(request_id)

    def request(self, ask: Ask, now: float, timer: Callable[[], float] = lambda: 0.0) -> list[Effect]:
        """Decide an on-demand request and book it: the new lease and its victims, before any call.
        One that finds no room even by preemption waits for room (see _wait_until), else is rejected."""
        started = timer()
        pool = self.snapshot(now)
        unbootable = self.unbootable(pool, ask.memory_mib, ask.image)
        decision = unbootable or self._place(ask, pool)
        if not isinstance(decision, Reject):
            return self._book_request(ask, decision, now, now, (timer() - started) * 1000)
        until = self._wait_until(ask, now) if unbootable is None and self._may_fit(pool, ask) else None
        if until is not None:
            return self._queue(ask, decision.reason, now, until, (timer() - started) * 1000)
        return self._reject(ask, decision.reason, now, (timer() - started) * 1000)

    def _wait_until(self, ask: Ask, now: float) -> float | None:
        """When the wait for room of a request that has none now ends, or None: rejected at once.
        It waits for the wait window W (if any), and, whatever W, for backfill VMs that hold room it
        would fit in but cannot be preempted yet (starting or stopping), until their deadlines: an
        on-demand request is never turned away because backfill was mid-launch or mid-stop."""
        if len(self.waiting) >= self.reserve_settings.max_waiting:
            return None
        window = now + self.reserve_settings.wait_seconds if may_wait(len(self.waiting), self.reserve_settings) \
            is None else None
        transit = self._transit_deadline(ask, now)
        ends = [t for t in (window, transit) if t is not None]
        return max(ends) if ends else None

    def _transit_deadline(self, ask: Ask, now: float) -> float | None:
        """The latest deadline of the backfill VMs IN_TRANSIT on the nodes where the request would
        fit once those VMs are done (None: no such node)."""
        want = Size(ask.vcpus, ask.memory_mib)
        unable = self._unable(ask.memory_mib, ask.image)
        latest = None
        views = self._node_views   # fresh: the snapshot just refreshed them
        for node_id in self._in_transit:
            view = views.get(node_id)   # None: a node not heard from since a restart
            if view is None or node_id in unable or \
                    not room_after_transit(view, self._vm_views[node_id], want):
                continue
            for lease in self.by_node[node_id].values():
                if lease.role == "backfill" and lease.state in IN_TRANSIT:
                    deadline = lease.deadline if lease.deadline is not None else now + self.settings.launch_timeout
                    latest = deadline if latest is None else max(latest, deadline)
        return latest

    def _place(self, ask: Ask, pool: Pool) -> Decision:
        want = Size(ask.vcpus, ask.memory_mib)
        return place_on_demand(self.able(pool, ask.memory_mib, ask.image), want, self.backfill.termination_policy,
                               seed=stable_seed(ask.request_id))

    @staticmethod
    def _may_fit(pool: Pool, ask: Ask) -> bool:
        """Whether some node could ever hold the request (a bad size or one larger than every node
        is rejected at once: waiting would not help). With no node known yet (a controller just
        started), nodes may still come."""
        if not (ask.vcpus > 0 and ask.memory_mib > 0):
            return False
        if not pool.nodes:
            return True
        c = pool.columns   # every node at once (a pass over the views was 1.5 % of a simulated month)
        return bool(np.any((c.capacity_vcpus >= ask.vcpus) & (c.capacity_memory >= ask.memory_mib)))

    def _reject(self, ask: Ask, reason: str, now: float, decided_ms: float) -> list[Effect]:
        record = RequestRecord(ask.request_id, ask.vcpus, ask.memory_mib, ask.image, ask.owner, "rejected", None,
                               "", (), reason, now, decided_ms)
        self._remember(record)
        return [Write(requests=(record,), events=(Audit("request.rejected", detail=dict(
            request_id=ask.request_id, reason=reason, vcpus=ask.vcpus, memory_mib=ask.memory_mib,
            decided_ms=round(record.decided_ms, 3))),))]

    def _queue(self, ask: Ask, cause: str, now: float, until: float, decided_ms: float) -> list[Effect]:
        """The request waits for room until `until`: written pending (path queued, with its
        deadline) before it is kept waiting, so a restart queues it again with the same deadline."""
        record = RequestRecord(ask.request_id, ask.vcpus, ask.memory_mib, ask.image, ask.owner, "pending", None,
                               "", (), cause, now, decided_ms, "queued", until)
        self._remember(record)
        self.waiting[ask.request_id] = (ask, now, until)
        return [Write(requests=(record,), events=(Audit("request.queued", detail=dict(
            request_id=ask.request_id, reason=cause, vcpus=ask.vcpus, memory_mib=ask.memory_mib,
            deadline=until, waiting=len(self.waiting))),))]

    def cancel_waiting(self, request_id: str, now: float) -> list[Effect]:
        """Withdraw a request waiting for room: written cancelled, so it is never placed (nor queued
        again after a restart). Nothing for a request that is not waiting (placed, answered, unknown)."""
        entry = self.waiting.pop(request_id, None)
        if entry is None:
            return []
        ask, queued_at, _until = entry
        waited = round(now - queued_at, 3)
        records = self._resolve(request_id, "cancelled", f"cancelled after waiting {waited:g} s for room")
        return [Write(requests=records, events=(Audit("request.cancelled", detail=dict(
            request_id=request_id, vcpus=ask.vcpus, memory_mib=ask.memory_mib, owner=ask.owner,
            waited_s=waited)),))]

    def retry_waiting(self, now: float) -> list[Effect]:
        """Requests waiting for room, oldest first: placed where room came, rejected at their deadline.
        Placement is tried again only when some node's books changed since the last retry (tick
        calls this every second), or when a request's wait ends."""
        effects: list[Effect] = []
        if not self.waiting:
            return effects
        changed, self._waiting_seen = self._books_version != self._waiting_seen, self._books_version
        for request_id, (ask, queued_at, until) in list(self.waiting.items()):
            if not changed and now < until:
                continue   # nothing freed room since it last failed, and its wait goes on
            decision = self._place(ask, self.snapshot(now))
            placeable = not isinstance(decision, Reject)
            # lengthened for backfill in transit: until is past the window (the same sum as
            # _wait_until's window, so equal to the last bit when it was not)
            verdict = wait_decision(queued_at, now, placeable, until - queued_at,
                                    decision.reason if isinstance(decision, Reject) else "",
                                    for_transit=until > queued_at + self.reserve_settings.wait_seconds)
            if verdict.action == "wait":
                continue
            del self.waiting[request_id]
            if verdict.action == "place":
                effects += self._book_request(ask, decision, now, queued_at, 0.0)
                continue
            records = self._resolve(request_id, "rejected", verdict.reason)
            effects.append(Write(requests=records, events=(Audit("request.rejected", detail=dict(
                request_id=request_id, reason=verdict.reason, vcpus=ask.vcpus, memory_mib=ask.memory_mib,
                waited_s=round(now - queued_at, 3))),)))
        return effects

    def _book_request(self, ask: Ask, decision: Decision, now: float, created_at: float,
                      decided_ms: float) -> list[Effect]:
        """Book a placement: the new lease and its victims, in one Write before any call."""
        policy = self.backfill.termination_policy
        want = Size(ask.vcpus, ask.memory_mib)
        if isinstance(decision, Reject):
            raise ValueError(f"request {ask.request_id}: a rejection cannot be booked ({decision.reason})")
        node = decision.node_id
        victims = [self.leases[v] for v in decision.victims] if isinstance(decision, Preempt) else []
        path = "free" if not victims else ("instant" if self._fits_beside(node, want) else "after_victims")
        s = self.settings
        stop_grace = s.notice_seconds if path == "instant" else self.backfill.grace_seconds
        # An instant victim's stop is asked once the launch is answered (Stop.after_launch).
        victim_deadline = now + stop_grace + s.stop_timeout + (s.launch_timeout if path == "instant" else 0)
        state, deadline = ("waiting", victim_deadline + s.launch_timeout) if path == "after_victims" else \
            ("starting", now + s.launch_timeout)
        lease = self._new_lease(VmRole.ON_DEMAND, node, want, ask.image, ask.owner, state, now, deadline,
                                ask.request_id)
        cause = f"on-demand request {ask.request_id} ({ask.vcpus} vCPUs, {ask.memory_mib} MiB)"
        stopped = [replace(v, state="on_notice" if path == "instant" else "preempting", deadline=victim_deadline,
                           request_id=ask.request_id, end_reason=f"preempted: {cause}") for v in victims]
        seen = [self._busy_detail(v, now) for v in victims]   # from their views as placement read them
        self._book(lease, now)
        for v in stopped:
            self._book(v, now)
        record = RequestRecord(ask.request_id, ask.vcpus, ask.memory_mib, ask.image, ask.owner, "pending",
                               lease.lease_id, node, tuple(v.lease_id for v in victims), "", created_at,
                               decided_ms, path)
        self._remember(record)
        events = [Audit("request.placed", node, lease.lease_id, dict(
            request_id=ask.request_id, path=path, policy=policy.value, victims=[v.lease_id for v in victims],
            decided_ms=round(record.decided_ms, 3), waited_s=round(now - created_at, 3)))]
        events += [Audit("vm.preempting", node, v.lease_id, dict(vm=v.vm_name, cause=cause, policy=policy.value,
                                                                  path=path, notice_s=stop_grace,
                                                                  work_lost_vcpu_seconds=round(work(v, now), 1),
                                                                  **detail))
                   for v, detail in zip(victims, seen)]
        effects: list[Effect] = [Write(created=(lease,), updated=tuple(stopped), requests=(record,),
                                       events=tuple(events))]
        if state == "starting":
            effects.append(Launch(lease))
        effects += [self._ask_stop(v, stop_grace, after_launch=path == "instant") for v in stopped]
        return effects

    def _busy_detail(self, lease: Lease, now: float) -> dict[str, Any]:
        """Under idle_first, what the guest or the CPU figures said of a victim (its view, before
        it is booked as stopping): why it was chosen."""
        if not self._tracks_cpu:
            return {}
        vm = self._vms_on[lease.node_id].views[lease.lease_id]
        since = vm.busy_since
        seen = "no CPU figure yet" if since is None else "idle" if since == IDLE else "busy"
        # where the clock came from: the guest's own word, the agent's CPU figures, or neither
        # (then it counts from the launch)
        clock = "guest" if lease.lease_id in self._guest_clock else "cpu" if since is not None else "launch"
        return dict(last_seen=seen, busy_for_s=round(vm.at_risk(now), 1), clock=clock)

    def _fits_beside(self, node_id: str, want: Size) -> bool:
        """Whether the node's memory, less the headroom, holds the new VM beside everything it runs now."""
        view = self.view(node_id)
        return view.allocated.memory_mib + want.memory_mib <= view.capacity.memory_mib - self.settings.headroom_mib

    def _remember(self, record: RequestRecord) -> None:
        self.requests[record.request_id] = record
        if len(self.requests) > 10_000:  # bounded: the resolved ones go first (the store keeps every one)
            resolved = (r for r, rec in self.requests.items() if rec.outcome != "pending")
            for request_id in list(islice(resolved, 1000)):   # the oldest, without reading every record
                del self.requests[request_id]

    def _resolve(self, request_id: str, outcome: str, reason: str = "") -> tuple[RequestRecord, ...]:
        record = self.requests.get(request_id)
        if record is None or record.outcome != "pending":
            return ()
        record = replace(record, outcome=outcome, reason=reason or record.reason)
        self.requests[request_id] = record
        return (record,)

    # -- agents' answers ---------------------------------------------------------------------------

    def launch_done(self, lease_id: str, ok: bool, detail: str, now: float) -> list[Effect]:
        lease = self.leases.get(lease_id)
        if lease is None or lease.state not in ("starting", "cancelling"):
            return []   # the report already settled it, or it ended meanwhile
        if lease.state == "cancelling":
            if not ok:
                return [self._end(lease, "ended", f"released before it started; the launch failed: {detail}", now)]
            return self._stop(lease, self.backfill.grace_seconds, now, "released while starting", launched=now)
        if not ok:
            detail_of = dict(vm=lease.vm_name, reason=detail)
            if lease.role == "backfill":
                detail_of["backfill_paused_s"] = self._back_off(lease.node_id, now)
            ended = self._end(lease, "failed", detail, now, kind="vm.launch_failed", detail=detail_of)
            return [replace(ended, requests=self._resolve(lease.request_id, "failed", detail))]
        self.launch_backoff.pop(lease.node_id, None)
        return [self._running(lease, now, launched_at=now)]

    def _back_off(self, node_id: str, now: float) -> float:
        """No backfill on this node for a while after a failed launch; returns for how long."""
        until, failures = self.launch_backoff.get(node_id, (0.0, 0))
        if now < until:
            return round(until - now, 3)   # launches asked together failing together: one pause
        pause = min(self.settings.retry_seconds * 2 ** failures, MAX_LAUNCH_BACKOFF_SECONDS)
        self.launch_backoff[node_id] = (now + pause, failures + 1)
        return pause

    def _running(self, lease: Lease, now: float, launched_at: float | None) -> Write:
        """Only the agent's answer to the launch makes a lease running (a report may show the VM
        while QEMU still starts); after a crash, the launch asked again brings that answer."""
        running = self._book(replace(lease, state="running", deadline=None,
                                     launched_at=lease.launched_at or launched_at or now), now)
        detail = dict(role=lease.role, vm=lease.vm_name, vcpus=lease.vcpus, memory_mib=lease.memory_mib)
        if lease.request_id and lease.role == "on_demand":
            detail.update(request_id=lease.request_id, seconds=round(now - lease.created_at, 3))
        return Write(updated=(running,), requests=self._resolve(lease.request_id, "placed") if lease.role ==
                     "on_demand" else (), events=(Audit("vm.launched", lease.node_id, lease.lease_id, detail),))

    def stop_done(self, lease_id: str, outcome: str, ok: bool, seconds: float, detail: str,
                  now: float) -> list[Effect]:
        self.stop_calls.discard(lease_id)
        lease = self.leases.get(lease_id)
        if lease is None or lease.state not in STOPS:
            return []   # a report already showed it gone
        if not ok:
            self.retry_at[lease_id] = now + self.settings.retry_seconds
            return [Write(events=(Audit("vm.stop_failed", lease.node_id, lease_id, dict(
                vm=lease.vm_name, error=detail, retry_in_s=self.settings.retry_seconds,
                gives_up_in_s=round((lease.deadline or now) - now, 1))),))]
        return self._stopped(lease, now, dict(stopped=outcome, seconds=round(seconds, 3), detail=detail))

    def _stopped(self, lease: Lease, now: float, how: dict) -> list[Effect]:
        """A stop confirmed (by the agent, or by the node's report no longer showing the VM)."""
        kind = stop_event(lease)
        detail = dict(vm=lease.vm_name, **how)
        if lease.state in VICTIM:
            record = self.requests.get(lease.request_id)
            detail.update(cause=lease.end_reason.removeprefix("preempted: "), path=record.path if record else "",
                          policy=self.backfill.termination_policy.value,
                          work_lost_vcpu_seconds=round(work(lease, now), 1))
        elif lease.end_reason.startswith(DRAINED):   # its work is lost as a victim's is
            detail.update(work_lost_vcpu_seconds=round(work(lease, now), 1))
        write = self._end(lease, lease.ending, lease.end_reason or "stopped", now, kind=kind, detail=detail)
        return [write] + self._start_waiting(lease.node_id, now)

    def _end(self, lease: Lease, state: str, reason: str, now: float, kind: str = "", detail: dict | None = None
             ) -> Write:
        ended = self._book(replace(lease, state=state, ended_at=now, end_reason=reason, deadline=None), now)
        events = (Audit(kind, lease.node_id, lease.lease_id, detail or dict(vm=lease.vm_name, reason=reason)),) \
            if kind else ()
        return Write(updated=(ended,), events=events)

    def _stop(self, lease: Lease, grace: int, now: float, reason: str, state: str = "stopping",
              ending: str = "ended", force: bool = False, launched: float | None = None) -> list[Effect]:
        stopping = self._book(replace(lease, state=state, end_reason=reason, ending=ending,
                                      deadline=now + grace + self.settings.stop_timeout,
                                      launched_at=lease.launched_at or launched), now)
        return [Write(updated=(stopping,), events=(Audit("vm.stopping", lease.node_id, lease.lease_id, dict(
            vm=lease.vm_name, reason=reason, grace_s=grace, force=force)),)), self._ask_stop(stopping, grace, force)]

    def _start_waiting(self, node_id: str, now: float) -> list[Effect]:
        """Waiting on-demand leases of this node whose victims are all gone start now."""
        effects: list[Effect] = []
        if not self._waiting_on.get(node_id):
            return effects   # none waits there (the common case: no pass over the node's leases)
        for lease in [l for l in self.by_node.get(node_id, {}).values() if l.state == "waiting"]:
            record = self.requests.get(lease.request_id)
            victims = record.victims if record else ()
            if any(v in self.unconfirmed or (v in self.leases and self.leases[v].state in STOPS) for v in victims):
                continue   # a victim still runs, or may: the lease's deadline decides
            view = self.view(node_id)
            if view.allocated.memory_mib > view.capacity.memory_mib:
                continue   # the node runs more than the books explain (a VM no lease holds): never overcommit
            starting = self._book(replace(lease, state="starting", deadline=now + self.settings.launch_timeout), now)
            effects += [Write(updated=(starting,), events=(Audit("request.victims_gone", node_id, lease.lease_id, dict(
                request_id=lease.request_id, waited_s=round(now - lease.created_at, 3))),)), Launch(starting)]
        return effects

    def _forget_victims(self, lease: Lease) -> None:
        """A waiting lease ends: its victims' unconfirmed stops hold nothing up any more."""
        record = self.requests.get(lease.request_id)
        if record is not None and self.unconfirmed:
            self.unconfirmed.difference_update(record.victims)

    # -- release ---------------------------------------------------------------------------------

    def release(self, lease_id: str, force: bool, now: float) -> tuple[Lease, list[Effect]]:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise LeaseError("lease_id", f"no live lease {lease_id!r}", not_found=True)
        grace = 0 if force else self.backfill.grace_seconds
        if lease.state in STOPS:
            raise LeaseError("lease_id", f"{lease_id} is already being stopped ({lease.state})")
        if lease.state == "waiting":
            self._forget_victims(lease)
            write = self._end(lease, "ended", "released before it started", now, kind="vm.released")
            return lease, [replace(write, requests=self._resolve(lease.request_id, "failed", "released"))]
        if lease.state == "lost":
            return lease, [self._end(lease, "ended", "released while its node did not report it", now,
                                     kind="vm.released")]
        if lease.state == "starting":  # the launch may land any moment: stop it once it has
            cancelling = self._book(replace(lease, state="cancelling", end_reason="released while starting",
                                            deadline=now + self.settings.launch_timeout + grace +
                                            self.settings.stop_timeout), now)
            return cancelling, [Write(updated=(cancelling,), requests=self._resolve(lease.request_id, "failed",
                                                                                     "released while starting"),
                                      events=(Audit("vm.cancelling", lease.node_id, lease_id,
                                                    dict(vm=lease.vm_name)),))]
        effects = self._stop(lease, grace, now, "released", force=force)
        return self.leases[lease_id], effects

    # -- reports ---------------------------------------------------------------------------------

    def report(self, report: ReportLike, now: float) -> list[Effect]:
        """One agent report: node liveness and load, and its VMs against the books."""
        effects: list[Effect] = []
        node = self.nodes.get(report.node_id)
        if node is None:
            node = self.nodes[report.node_id] = NodeState(report.node_id, report.agent_address,
                                                          Size(report.cpus, report.memory_mib),
                                                          fg_samples=deque(maxlen=self.settings.prediction_window))
            node.redrive = node.node_id in self._redrive_nodes
            self._unable_cache.clear()
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
        node.foreground_cpu = report.foreground_cpu_cores
        node.fg_samples.append(report.foreground_cpu_cores)
        self._reported.add(node.node_id)
        if node.min_memory_mib != report.min_memory_mib or len(node.images) != len(report.images) \
                or not node.images.issuperset(report.images):
            node.images, node.min_memory_mib = frozenset(report.images), report.min_memory_mib
            self._unable_cache.clear()
        vms = report.vms   # this runs for every report of every node
        signature = tuple([vm.name for vm in vms])
        backfill_cpu = 0.0
        for vm in vms:
            if vm.role == "backfill":
                backfill_cpu += vm.cpu_cores
        node.backfill_cpu = backfill_cpu
        if self._tracks_cpu:
            effects += self._recycle_idle(self._note_cpu(report, now), now)
        elif self._backfill.enabled:
            effects += self._recycle_idle(self._idle_near_end(report, now), now)
        version = self.lease_version.get(node.node_id, 0)
        unexplained = node.unexplained
        if signature != node.signature or version != node.seen_version or now < node.check_until \
                or (unexplained is not ZERO and unexplained != ZERO):   # matched until they are gone
            effects += self._match_vms(node, vms, now, signature)
            node.signature, node.seen_version = signature, self.lease_version.get(node.node_id, 0)
        if node.redrive:
            node.redrive = False
            effects += self._redrive(node.node_id, now)
        return [e for e in effects if not isinstance(e, Write) or e] if effects else effects

    def _node_event(self, kind: str, node: NodeState, **detail) -> Write:
        self.churn += 1
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
        seen, unexplained = set(), ZERO
        for vm in reported:
            seen.add(vm.name)
            lease = mine.get(vm.name)
            if lease is not None:
                if lease.state == "lost":
                    recovered = self._book(replace(lease, state="running", deadline=None), now)
                    effects.append(Write(updated=(recovered,), events=(Audit(
                        "vm.recovered", node.node_id, lease.lease_id, dict(vm=vm.name)),)))
                elif lease.state == "cancelling":
                    effects += self._stop(lease, self.backfill.grace_seconds, now, "released while starting",
                                          launched=vm.launched_at or now)
                continue
            size = Size(vm.vcpus, vm.memory_mib)
            if vm.name in self.retired:
                unexplained += size   # it ended in our books but still runs: it still takes room
                effects += self._clean_up(node, vm, now)
                continue
            write, adopted = self._adopt_or_refuse(node, vm, now)
            effects.append(write)
            if not adopted:
                unexplained += size
        young = False
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
            elif lease.state == "stopping" or lease.state in VICTIM:
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
        return effects

    def _ask_stop(self, lease: Lease, grace: int, force: bool = False, after_launch: bool = False) -> Stop:
        self.stop_calls.add(lease.lease_id)
        return Stop(lease, grace, force, after_launch)

    def _answer_due(self, lease: Lease, now: float) -> bool:
        """Whether a report that no longer shows a stopping VM should wait for the agent's answer:
        the report usually comes first, and only the answer says how the VM ended (clean or
        forced). Briefly: a call whose answer is lost must not hold the room until the deadline."""
        if lease.lease_id not in self.stop_calls:
            return False
        since = self.gone_since.setdefault(lease.lease_id, now)
        return now - since < self.settings.retry_seconds

    def _clean_up(self, node: NodeState, vm: ReportedVmLike, now: float) -> list[Effect]:
        """A VM of ours whose lease ended still runs: no VM runs outside the books, so it is stopped
        (forced; its lease's end already said what it lost), asked again every retry_seconds."""
        ended, when = self.retired[vm.name]
        if ended.node_id != node.node_id or now - when < self.settings.retire_seconds / 6 or \
                now < self.retry_at.get(f"cleanup:{vm.name}", 0.0):
            return []   # another node's VM is not ours to stop here; a VM just stopped may still show
        self.retry_at[f"cleanup:{vm.name}"] = now + self.settings.retry_seconds
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
        clash = next((l for l in self.leases.values() if l.vm_name == vm.name), None) if named is None else None
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
        booked = self.leases.pop(lease.lease_id, None)
        if booked is None:
            return [Write(events=(Audit("vm.conflict", lease.node_id, lease.lease_id, dict(
                vm=lease.vm_name, reason=f"not adopted: {reason}")),))]
        if booked.state == "waiting":
            self._waiting_on[booked.node_id] -= 1
        if booked.state in REACTS:
            self._reacting_on[booked.node_id] -= 1
        self._timed.pop(lease.lease_id, None)
        self._busy_since.pop(lease.lease_id, None)
        self._guest_clock.discard(lease.lease_id)
        self.by_node.get(lease.node_id, {}).pop(lease.lease_id, None)
        if lease.node_id in self._vms_on:
            self._vms_on[lease.node_id].remove(lease.lease_id)
            self._named_on[lease.node_id].pop(lease.vm_name, None)
        self._touch(lease.node_id)
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
            elif lease.state == "stopping" or lease.state in VICTIM:
                grace = self.settings.notice_seconds if lease.state == "on_notice" else self.backfill.grace_seconds
                stops.append(self._ask_stop(lease, max(min(grace, int((lease.deadline or now) - now)), 0),
                                            after_launch=lease.state == "on_notice"))
        # on-demand first: the service and the simulator chain after_launch stops to a node's first launch
        launches.sort(key=lambda launch: launch.lease.role != "on_demand")
        effects = launches + stops
        if effects:
            effects.insert(0, Write(events=(Audit("node.redriven", node_id, detail=dict(
                launches=sum(isinstance(e, Launch) for e in effects), stops=sum(isinstance(e, Stop) for e in effects))),)))
        return effects + self._start_waiting(node_id, now)

    # -- time ------------------------------------------------------------------------------------

    def tick(self, now: float) -> list[Effect]:
        """Liveness, deadlines and retries, due at `now`."""
        effects: list[Effect] = []
        s = self.settings
        if self.started_at is None:
            self.started_at = now
        if now - self.started_at > s.down_after:  # leases on nodes that never reported since the start
            for node_id in [n for n in self.by_node if n not in self.nodes]:
                effects += self._lose(node_id, "its node has not reported since the controller started", now)
        for node in self.nodes.values():
            silent = now - node.last_report
            if node.state == "up" and silent > s.suspect_after:
                node.state = "suspect"
                effects.append(self._node_event("node.suspect", node, silent_s=round(silent, 1)))
            elif node.state == "suspect" and silent > s.down_after:
                node.state = "down"
                effects.append(self._node_event("node.down", node, silent_s=round(silent, 1)))
                effects += self._lose(node.node_id, "its node is down", now)
        for lease in [l for l in self._timed.values() if now >= l.deadline]:   # in self.leases' order
            effects += self._expired(lease, now)
        for lease_id in [i for i, at in self.retry_at.items() if now >= at and not i.startswith("cleanup:")]:
            del self.retry_at[lease_id]
            lease = self.leases.get(lease_id)
            node = self.nodes.get(lease.node_id) if lease else None
            if lease is not None and lease.state in STOPS and node is not None and node.state == "up":
                effects.append(self._ask_stop(lease, max(int((lease.deadline or now) - now - s.stop_timeout), 0)))
        effects += self.retry_waiting(now)   # windows that closed
        return [e for e in effects if not isinstance(e, Write) or e]

    def _lose(self, node_id: str, reason: str, now: float) -> list[Effect]:
        effects: list[Effect] = []
        for lease in [l for l in self.by_node.get(node_id, {}).values() if l.state == "running"]:
            lost = self._book(replace(lease, state="lost", deadline=now + self.settings.lost_expiry), now)
            effects.append(Write(updated=(lost,), events=(Audit("vm.lost", node_id, lease.lease_id,
                                                                dict(vm=lease.vm_name, reason=reason)),)))
        return effects

    def _expired(self, lease: Lease, now: float) -> list[Effect]:
        """A state past its deadline ends: launches that never answered are stopped, stops that were
        never confirmed fail (the node's reports keep counting the VM if it still runs)."""
        if lease.state == "waiting":
            self._forget_victims(lease)
            write = self._end(lease, "failed", "its victims did not stop in time", now, kind="request.expired")
            return [replace(write, requests=self._resolve(lease.request_id, "failed", "victims did not stop in time"))]
        if lease.state == "starting":
            write, stop = self._stop(lease, 0, now, "the launch was not confirmed in time", ending="failed",
                                     force=True)
            return [replace(write, requests=self._resolve(lease.request_id, "failed",
                                                          "the launch was not confirmed in time")), stop]
        if lease.state == "lost":
            return [self._end(lease, "ended", f"lost for {self.settings.lost_expiry:g} s and never seen again", now,
                              kind="vm.gone")]
        if lease.state in STOPS:   # the VM may still run: a waiting lease never starts beside it
            if lease.state in VICTIM:
                self.unconfirmed.add(lease.lease_id)
            return [self._end(lease, "failed", f"{STOP_UNCONFIRMED} ({lease.end_reason})", now,
                              kind="vm.stop_expired")]
        return []

    # -- backfill and volunteer selection ---------------------------------------------------------

    def fill(self, now: float) -> list[Effect]:
        """Give freed room to waiting requests, keep the reserves' nodes free, launch backfill where
        the plan says, and recycle VMs past their longest life."""
        config = self.backfill
        effects: list[Effect] = self.retry_waiting(now)   # room freed goes to waiting requests first
        self._refresh_views()
        self.history.record(now, max(self._od_total, 0.0))
        if not config.enabled:
            return effects
        effects += self.select(now, evaluation=False)
        effects += self._keep_reserve(now)
        pool = self.snapshot(now)   # afresh: the reserve may have changed the nodes and their VMs
        # The plan reads only the selected nodes with room for one VM (the others would get none)
        # that can boot one; the VMs of every node still count and are recycled.
        unable, roomy = self._unable(config.memory_mb, config.image), self._nodes_with_backfill_room(config.size)
        # Nor does it read the nodes it gave nothing last time whose view and P have not changed
        # since (they would get nothing again): kept without a budget, with prediction (without it
        # a node with room always gets a VM).
        idle = self._backfill_idle
        track = not config.max_instances and self.settings.use_prediction
        if self._idle_for != (config, track):
            self._idle_for = (config, track)
            idle.clear()
        candidates = roomy - idle if idle else roomy
        if self._selected_by_p and 4 * len(candidates) < len(self.selected):
            # The selected nodes with room, in the selection's order (P, best first, then id)
            # without a pass over every selected node: the few with room, sorted.
            p = self.productivity
            targets = sorted((n for n in candidates if n in p and p[n] > 0 and n not in unable
                              and now >= self.launch_backoff.get(n, (0.0, 0))[0]), key=lambda n: (-p[n], n))
        else:
            targets = [n for n in self.selected if n in candidates and n not in unable
                       and now >= self.launch_backoff.get(n, (0.0, 0))[0]]
        cpu_room = self.productivity if self.settings.use_prediction else None
        plan = plan_backfill(pool, config, targets, cpu_room)
        if track:
            idle.update(targets)
            idle.difference_update(plan.launches)
        for vm_id in plan.recycles:
            effects += self._stop(self.leases[vm_id], config.grace_seconds, now,
                                  f"recycled after {config.duration_seconds} s")
        size = config.size
        for node_id in plan.launches:
            lease = self._new_lease(VmRole.BACKFILL, node_id, size, config.image, "backfill", "starting",
                                    now, now + self.settings.launch_timeout)
            self._book(lease, now)
            effects += [Write(created=(lease,)), Launch(lease)]
        return effects

    def _keep_reserve(self, now: float) -> list[Effect]:
        """Balancer's reserve: choose the nodes to keep free of backfill (pure: plan_for_pool), mark
        them, and give their running backfill notice (none when the reserve is soft: drain false,
        and no live hint; its nodes then stay reserved until the target shrinks)."""
        self.hints = list(live_hints(self.hints, now))
        s = self.reserve_settings
        if not (s.static_nodes or s.predictive is not PredictiveMode.OFF or self.hints or self.reserved_nodes):
            return []   # nothing reserved, nothing to release: the common case costs no snapshot
        state_of = lambda vm_id: self.leases[vm_id].state if vm_id in self.leases else "ended"   # noqa: E731
        target, chosen = plan_for_pool(self.reserve_settings, self.snapshot(now), self.hints, self.history, state_of,
                                       kept=self.reserved_nodes)
        effects: list[Effect] = []
        nodes = frozenset(chosen.nodes)
        if nodes != self.reserved_nodes:
            added, removed = sorted(nodes - self.reserved_nodes), sorted(self.reserved_nodes - nodes)
            self.reserved_nodes = nodes
            for node_id in added + removed:
                self._touch(node_id)
            effects.append(Write(events=(Audit("reserve.changed", detail=dict(   # node lists bounded: a pool is large
                target=target.as_dict(), added=added[:AUDIT_NODES], removed=removed[:AUDIT_NODES],
                added_count=len(added), removed_count=len(removed), short=chosen.short)),),
                reserved=tuple(sorted(nodes))))
        reason = DRAINED + target.explain()
        for vm_id in chosen.notices:
            lease = self.leases.get(vm_id)
            if lease is not None and lease.state == "running":
                effects += self._stop(lease, self.backfill.grace_seconds, now, reason)
        return effects

    def reserve_target(self, now: float) -> ReserveTarget:
        """The reserve at `now` (what `gleanctl reserve` shows), without changing anything."""
        up = sum(1 for n in self.nodes.values() if n.state == "up")
        return reserve_target(self.reserve_settings, now, up, live_hints(self.hints, now), self.history)

    def add_hint(self, hint: Hint, now: float) -> Write:
        """An admin's hint, checked against the pool and the live hints (ReserveError naming the
        field otherwise); the next fill drains toward it."""
        self.hints = list(live_hints(self.hints, now))
        up = sum(1 for n in self.nodes.values() if n.state == "up")
        lead = self.reserve_settings.lead_seconds
        validate_hint(hint, now, up, self.hints, lead)
        self.hints.append(hint)
        detail: dict[str, Any] = dict(nodes=hint.nodes, start_at=hint.start_at, until=hint.until, label=hint.label)
        note = late_hint_note(hint, now, lead)
        if note:
            detail["note"] = note
        return Write(events=(Audit("reserve.hint", detail=detail),), hints=tuple(self.hints))

    def cancel_hints(self, label: str, now: float) -> Write:
        """Drop the live hints with this label (every one when the label is empty)."""
        live = live_hints(self.hints, now)
        kept = [h for h in live if label and h.label != label]
        dropped = len(live) - len(kept)
        self.hints = kept
        return Write(events=(Audit("reserve.hint_cancelled", detail=dict(label=label, dropped=dropped)),),
                     hints=tuple(kept)) if dropped else Write()

    def set_reserve_settings(self, settings: ReserveSettings) -> None:
        self.reserve_settings = settings.validate()
        if (settings.slot_seconds, settings.utc_offset_seconds) != \
                (self.history.slot_seconds, self.history.utc_offset_seconds):
            self.history = DemandHistory(settings.slot_seconds, settings.utc_offset_seconds)

    def select(self, now: float, evaluation: bool) -> list[Effect]:
        """A volunteer-selection pass (RHIC): at the end of an evaluation interval it decides afresh;
        between them, after a burst of node churn, the last choice stands."""
        config = self.backfill
        self._refresh_views()
        rows = self._selection_rows
        touched = rows.update(self.nodes, self._node_views, self._rebuilt, self.settings.prediction_window, now,
                              self._reported)
        self._rebuilt = set()
        self._reported = set()
        ids, predicted = rows.ids, rows.predicted
        p, moved = self._productivity(rows, touched, config.memory_mb)
        self._p_rows = (ids, config.memory_mb, p)
        count = len(ids) if not config.max_instances else min(len(ids), config.max_instances)
        deferred = not evaluation and self.churn > self.settings.churn_burst
        # Room for every node: every node with P > 0, best first (what select_volunteers answers
        # then), kept sorted row by row rather than sorted afresh.
        all_fit = count >= len(ids) and not deferred
        result = Selection(self._best_first.update(ids, p, moved)) if all_fit else \
            select_volunteers(ids, p, self.selected, count, self.settings.swap_threshold_cores, deferred)
        if evaluation:
            self.churn = 0
        self.selected = result.chosen
        self._selected_by_p = all_fit
        if p is self._idle_p:
            pass   # no node's P changed
        elif moved is not None and moved[0] is self._idle_p and ids is self._idle_ids:
            self._backfill_idle.difference_update([ids[i] for i in moved[1]])   # the rows that differ, known
        elif ids is self._idle_ids and len(p) == len(self._idle_p):   # a node whose P changed may get backfill
            self._backfill_idle.difference_update([ids[i] for i in rows_where(p != self._idle_p).tolist()])
        else:
            self._backfill_idle.clear()
        self._idle_ids, self._idle_p = ids, p
        self.productivity = rows.by_node(p)
        if touched is None or touched or not isinstance(self.predicted, RowValues):
            self.predicted = rows.by_node(predicted.copy())   # else the same predictions as the last pass's
        if not result.swaps:
            return []
        return [Write(events=tuple(Audit("selection.swap", added, detail=dict(
            dropped=dropped, added=added, threshold_cores=self.settings.swap_threshold_cores))
            for dropped, added in result.swaps))]

    def _productivity(self, rows: SelectionRows, touched: list[int] | None, slot_memory_mib: int
                      ) -> tuple[np.ndarray, tuple[np.ndarray, list[int]] | None]:
        """P per row: afresh, or the last pass's with the `touched` rows computed again; and, when
        known, (the last P, the rows where this one differs)."""
        ids, predicted, last = rows.ids, rows.predicted, self._p_rows
        if touched is None or last is None or last[0] is not ids or last[1] != slot_memory_mib:
            p = potential_productivity(rows.cpu_max, predicted, rows.free_memory, slot_memory_mib)
            p[rows.excluded] = 0.0
            return p, None
        if not touched:   # no row's inputs changed: the same P (an array no one writes to)
            return last[2], None
        p = last[2].copy()
        if len(touched) > 16:   # many rows: in numpy
            part = potential_productivity(rows.cpu_max[touched], predicted[touched], rows.free_memory[touched],
                                          slot_memory_mib)
            part[rows.excluded[touched]] = 0.0
            p[touched] = part
            return p, None
        # the few rows whose inputs changed, in plain floats
        cpu_max, free_memory, excluded, moved = rows.cpu_max, rows.free_memory, rows.excluded, []
        for i in touched:
            value = 0.0 if excluded[i] else \
                node_potential_productivity(cpu_max.item(i), predicted.item(i), free_memory.item(i), slot_memory_mib)
            p[i] = value
            if value != last[2].item(i):   # as p != last P reads it (NaN differs)
                moved.append(i)
        return p, (last[2], moved)


def shows_idle(vm: ReportedVmLike) -> bool:
    """A VM idle by its own word (the work channel) or, if it said nothing, its own CPU figure
    (before the node's load is weighed: _cpu_idle)."""
    return vm.work_state == "idle" or (not vm.work_state and vm.cpu_sampled and vm.cpu_cores < IDLE_CPU_CORES)


def _cpu_idle(vm: ReportedVmLike, left: float, backfill_vcpus: int) -> bool:
    """A backfill VM idle by its CPU figure: under IDLE_CPU_CORES, unless its share of what the
    foreground `left` the node's `backfill_vcpus` (by vCPUs) is under that too (a starved VM)."""
    return vm.cpu_cores < IDLE_CPU_CORES and left * vm.vcpus >= IDLE_CPU_CORES * backfill_vcpus


