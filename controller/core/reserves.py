"""Balancer's reserves, as pure decisions: which nodes stay free of backfill, and how long an
on-demand request that finds no room may wait.

Four policies, after the Balancer paper (on-demand and batch work sharing one cluster):

- **Static reserve** R: whole nodes kept free of backfill. As Balancer's R, it is the size of the
  on-demand pool, not of its idle part: a node that on-demand VMs use and no backfill VM shares
  counts towards it. In the paper's hardest week, R = 12 nodes (about 18 % of the former
  on-demand cluster) ended every on-demand rejection; a third of a 372-node cluster was needed
  for the same effect under heavier synthetic on-demand load.
- **Hints**: an admin says N nodes will be needed from ``start_at`` until ``until``. A hint counts
  from ``start_at - lead`` so that the backfill on the nodes it takes is drained (notice, grace,
  stop) by ``start_at``; it drops out at ``until``. The paper found a hint given 15-30 minutes
  ahead as effective as a static reserve of a third of the cluster, at a fraction of the cost.
- **Predictive reserve**: from the controller's own samples of on-demand demand (in nodes), per
  time-of-day slot (the paper: four 6-hour slots), the peak of the same slot over the last 1, 7 or
  30 days (mode day, week, month). The slot ``now`` falls in and the slot ``now + lead`` falls in
  both count, so demand that history expects in the next slot is drained for in time. It is
  never more than the pool.
- **Wait window** W: an on-demand request that cannot be placed even by preemption waits up to W
  seconds for room, then is rejected; W = 0 rejects at once (the behaviour before reserves).

How they combine, in nodes to keep free of backfill at ``now``::

    max(static, predicted) + hinted, capped at the up nodes, of which `hinted` stay idle

Static and predicted size the on-demand pool, the nodes on-demand VMs use counting (as
Balancer's R counts its allocated nodes): they are two estimates of the same unannounced
demand (the admin's floor and history's peak), so the larger one stands. Hinted demand is
announced on top of whatever is there, so it adds, and its nodes must be idle when the hinted
VMs arrive: choose_reserved_nodes takes nodes until both hold (enough nodes, and enough of them
beside what on-demand VMs use). It takes the nodes cheapest to keep free: those without
backfill first (the ones on-demand VMs use, then empty ones), then those whose backfill is
already stopping, then those whose backfill loses the least work, ties by node id; and it lists
the running backfill VMs on them to give notice to. Demand is measured in nodes: the on-demand
memory on a node over its memory, summed over the nodes. With every policy off nothing is
reserved, as before reserves existed.

Time is seconds since the epoch, passed in. Nothing here reads a clock or does I/O.
"""
from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .snapshot import NodeView, Pool
from .records import VmRole
from .reserve_settings import (DAY, EPSILON, HOUR, MAX_HINTS, MODE_DAYS, MONTH_DAYS,
                               NO_SLOT, Hint, PredictiveMode, ReserveError, ReserveSettings, _whole)

def lead_warning(settings: ReserveSettings, fill_period_seconds: float, grace_seconds: float,
                 stop_timeout_seconds: float) -> str | None:
    """Why the lead may be too short to drain backfill by a hint's start, or None.

    A hint counts from start_at - lead, the next fill pass may come a fill period later, and a
    backfill VM given notice then takes up to its grace plus the stop timeout to be gone."""
    needed = fill_period_seconds + grace_seconds + stop_timeout_seconds
    if settings.lead_seconds >= needed:
        return None
    return (f"lead_seconds {settings.lead_seconds:g} is less than a fill period ({fill_period_seconds:g} s) plus "
            f"the grace ({grace_seconds:g} s) and stop timeout ({stop_timeout_seconds:g} s): backfill may "
            f"still run on hinted nodes at the hint's start")


# -- hints ----------------------------------------------------------------------------------------

def validate_hint(hint: Hint, now: float, pool_nodes: int, existing: Sequence[Hint] = (),
                  lead_seconds: float = 0.0) -> Hint:
    """The hint, or ReserveError naming the field at fault: a node count from 1 to the pool,
    a start not in the past, a positive length, and, with the live hints `existing`, no moment
    when the hints together ask more nodes than the pool or more than MAX_HINTS are kept."""
    _whole("nodes", hint.nodes, least=1)
    for field in ("start_at", "until"):
        value = getattr(hint, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ReserveError(field, f"must be a finite time in seconds since the epoch, not {value!r}")
    if hint.nodes > pool_nodes:
        raise ReserveError("nodes", f"{hint.nodes} is more than the pool's {pool_nodes} nodes")
    if hint.start_at < now:
        raise ReserveError("start_at", f"is {now - hint.start_at:g} s in the past")
    if hint.until <= hint.start_at:
        raise ReserveError("until", f"the hint must last more than 0 s, not {hint.until - hint.start_at:g} s")
    live = live_hints(existing, now)
    if len(live) >= MAX_HINTS:
        raise ReserveError("hints", f"at most {MAX_HINTS} hints at once; {len(live)} are live")
    busiest = _peak_hinted(hint, live, lead_seconds)
    if busiest > pool_nodes:
        raise ReserveError("nodes", f"with the hints it overlaps, {busiest} nodes would be needed at once, "
                                    f"more than the pool's {pool_nodes}")
    return hint


def _peak_hinted(hint: Hint, others: Iterable[Hint], lead_seconds: float) -> int:
    """The most nodes `hint` and `others` hold at once while `hint` counts: the sum only grows
    where a hint starts counting, so checking at those moments is enough."""
    begin = hint.start_at - lead_seconds
    overlapping = [h for h in others if h.start_at - lead_seconds < hint.until and h.until > begin]
    moments = [begin] + [h.start_at - lead_seconds for h in overlapping if h.start_at - lead_seconds > begin]
    return max(hint.nodes + sum(h.nodes for h in overlapping if h.counts_at(t, lead_seconds)) for t in moments)


def late_hint_note(hint: Hint, now: float, lead_seconds: float) -> str | None:
    """A warning for a hint given less than the lead before its start (accepted: its nodes are
    drained at once, and may still be draining at its start), or None."""
    ahead = hint.start_at - now
    if ahead >= lead_seconds:
        return None
    return (f"the hint starts in {ahead:g} s, less than the drain lead of {lead_seconds:g} s: backfill on its "
            f"nodes may still be stopping at its start")


def live_hints(hints: Iterable[Hint], now: float) -> tuple[Hint, ...]:
    """The hints not yet over (the rest can be forgotten)."""
    return tuple(h for h in hints if h.until > now)


def hinted_nodes(hints: Iterable[Hint], now: float, lead_seconds: float) -> int:
    """Nodes the hints hold at `now`: each from start_at - lead until its end."""
    return sum(h.nodes for h in hints if h.counts_at(now, lead_seconds))


# -- predictive reserve ---------------------------------------------------------------------------

class DemandHistory:
    """Per-slot peaks of on-demand demand (in nodes) over the last 31 days, in a ring of one
    entry per slot: bounded memory whatever the sampling rate, and O(1) per sample (amortised:
    a sample after a silence also fills the slots it skipped, each at most once).

    Demand is a level: between two samples it stays at the first one's value, so a slot with
    no sample of its own still has the level that held through it."""

    def __init__(self, slot_seconds: int = 6 * HOUR, utc_offset_seconds: int = 0) -> None:
        ReserveSettings(slot_seconds=slot_seconds, utc_offset_seconds=utc_offset_seconds).validate()
        self.slot_seconds = slot_seconds
        self.utc_offset_seconds = utc_offset_seconds
        self.slots_per_day = DAY // slot_seconds
        self.size = (MONTH_DAYS + 1) * self.slots_per_day + 1   # 30 days back from today's slot, and slack
        self._slot = array("q", [NO_SLOT]) * self.size                # the absolute slot each entry holds
        self._peak = array("d", [0.0]) * self.size
        self.last_slot: int | None = None
        self.last_time = -math.inf
        self.last_value = 0.0

    def slot_of(self, t: float) -> int:
        """The absolute slot number of time `t` (time-of-day slot: this modulo slots_per_day)."""
        return math.floor((t + self.utc_offset_seconds) / self.slot_seconds)

    def record(self, t: float, nodes: float) -> None:
        """One sample: `nodes` of on-demand demand at time `t`."""
        if isinstance(nodes, bool) or not isinstance(nodes, (int, float)) or not math.isfinite(nodes) or nodes < 0:
            raise ReserveError("nodes", f"demand must be a finite number of nodes, at least 0, not {nodes!r}")
        if not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ReserveError("t", f"must be a finite time in seconds, not {t!r}")
        k = self.slot_of(t)
        if self.last_slot is not None and k < self.last_slot:
            self._raise(k, nodes)   # a late sample: it may only raise a peak still kept
            return
        if self.last_slot is not None and k > self.last_slot:
            for skipped in range(max(self.last_slot + 1, k - self.size + 1), k):
                self._set(skipped, self.last_value)
            self._set(k, self.last_value)   # the level at the slot's start
        self._raise(k, nodes)
        self.last_slot = k
        if t >= self.last_time:
            self.last_time, self.last_value = t, float(nodes)

    def _set(self, k: int, value: float) -> None:
        i = k % self.size
        self._slot[i], self._peak[i] = k, value

    def _raise(self, k: int, value: float) -> None:
        i = k % self.size
        if self._slot[i] == k:
            self._peak[i] = max(self._peak[i], value)
        elif self._slot[i] < k:
            self._slot[i], self._peak[i] = k, value

    def peak(self, k: int) -> float | None:
        """The peak demand of absolute slot `k`, or None when no sample tells (before the first
        one, or older than the ring keeps). After the last sample, its level holds."""
        if self.last_slot is None:
            return None
        if k > self.last_slot:
            return self.last_value
        i = k % self.size
        return self._peak[i] if self._slot[i] == k else None

    def snapshot(self) -> dict[str, Any]:
        """The history as plain values, for the store: the kept peaks, oldest first, and the last
        sample's level (which stands for every slot after it)."""
        return dict(slot_seconds=self.slot_seconds, utc_offset_seconds=self.utc_offset_seconds,
                    last_time=self.last_time if self.last_slot is not None else None, last_value=self.last_value,
                    peaks=sorted((k, p) for k, p in zip(self._slot, self._peak) if k != NO_SLOT))

    @classmethod
    def from_snapshot(cls, values: Mapping[str, Any]) -> DemandHistory:
        """The history snapshot() described."""
        history = cls(values["slot_seconds"], values.get("utc_offset_seconds", 0))
        for k, peak in values["peaks"]:
            history._set(int(k), float(peak))
        if values.get("last_time") is not None:
            history.last_time, history.last_value = float(values["last_time"]), float(values["last_value"])
            history.last_slot = history.slot_of(history.last_time)
        return history


def predicted_nodes(history: DemandHistory | None, mode: PredictiveMode, now: float, lead_seconds: float,
                    pool_nodes: int) -> int:
    """Nodes the predictive reserve keeps at `now`: the peak demand of the same time-of-day slot
    over the last 1, 7 or 30 days, for the slot `now` is in and the one `now + lead` is in (so
    the next slot's demand is drained for in time), rounded up, never more than the pool."""
    days = MODE_DAYS[mode]
    if history is None or not days or pool_nodes <= 0:
        return 0
    slots = {history.slot_of(now), history.slot_of(now + lead_seconds)}
    per_day = history.slots_per_day
    peaks = [history.peak(k - day * per_day) for k in slots for day in range(1, days + 1)]
    peak = max((p for p in peaks if p is not None), default=0.0)
    return min(math.ceil(peak - EPSILON), pool_nodes)


# -- the combined reserve -------------------------------------------------------------------------

@dataclass(frozen=True)
class ReserveTarget:
    """What to keep free of backfill at a moment, and where the numbers come from."""
    nodes: int          # max(static, predicted) + hinted, capped at the pool: nodes free of backfill
    idle: int           # hinted, capped at the pool: of those, node-equivalents on-demand VMs leave idle
    static: int
    predicted: int
    hinted: int
    pool: int           # up nodes

    @property
    def capped(self) -> bool:
        return self.nodes < max(self.static, self.predicted) + self.hinted

    def explain(self) -> str:
        text = (f"{self.nodes} nodes kept free of backfill: max(static {self.static}, predicted "
                f"{self.predicted}) + hinted {self.hinted}")
        if self.idle:
            text += f", {self.idle} of them idle beside what on-demand VMs use"
        return text + (f", capped at the {self.pool} up nodes" if self.capped else "")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "capped": self.capped}


def reserve_target(settings: ReserveSettings, now: float, pool_nodes: int, hints: Iterable[Hint] = (),
                   history: DemandHistory | None = None) -> ReserveTarget:
    """The combined reserve at `now` over a pool of `pool_nodes` up nodes."""
    pool = max(pool_nodes, 0)
    static = settings.static_nodes
    predicted = predicted_nodes(history, settings.predictive, now, settings.lead_seconds, pool)
    hinted = hinted_nodes(hints, now, settings.lead_seconds)
    return ReserveTarget(min(max(static, predicted) + hinted, pool), min(hinted, pool), static, predicted, hinted,
                         pool)


# -- which nodes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackfillVm:
    vm_id: str
    work: float                # vCPU-seconds it loses if stopped now
    state: str = "running"     # starting | running | stopping (notice given, recycled, released)

    @property
    def stays(self) -> bool:
        """Whether it will still run unless given notice (a starting one gets its notice at the
        next pass, once it runs)."""
        return self.state in ("starting", "running")


@dataclass(frozen=True)
class NodeLoad:
    node_id: str
    up: bool = True
    on_demand_share: float = 0.0          # the share of the node on-demand VMs hold, 0..1
    backfill: tuple[BackfillVm, ...] = ()

    def cost(self) -> tuple:
        """How dear the node is to keep free of backfill; the cheapest are reserved first:
        nothing to stop (on-demand's nodes before empty ones: backfill could use less of
        them), then backfill already on its way out, then the least work lost."""
        staying = [vm for vm in self.backfill if vm.stays]
        return (bool(staying), sum(vm.work for vm in staying), bool(self.backfill), -self.on_demand_share,
                self.node_id)


@dataclass(frozen=True)
class ReservedNodes:
    nodes: tuple[str, ...]       # node ids to keep free of backfill, cheapest first
    notices: tuple[str, ...]     # running backfill VMs on them to give notice to now
    short: int = 0               # nodes asked for that no up node could provide
    idle: float = 0.0            # node-equivalents on them that on-demand VMs leave idle


def choose_reserved_nodes(nodes: Iterable[NodeLoad], count: int, idle: float = 0) -> ReservedNodes:
    """The up nodes cheapest to keep free of backfill (NodeLoad.cost, ties by node id), as many
    as `count` and as it takes for `idle` node-equivalents beside what on-demand VMs use on
    them, and the running backfill VMs on them to give notice to.

    With idle = hinted and count = max(static, predicted) + hinted, the nodes on-demand VMs use
    count towards the static and predicted part and the hinted part stays idle for the hinted
    VMs. Each node adds 1 to the count and at most 1 to what on-demand uses, so the idle part
    never shrinks as nodes are added: the cheapest prefix that satisfies both is taken."""
    heap = [(n.cost(), n) for n in nodes if n.up]
    heapq.heapify(heap)
    chosen = _cheapest_until(((n.on_demand_share, n) for _, n in _drain(heap)), count, idle)
    notices = tuple(vm.vm_id for n in chosen for vm in sorted(n.backfill, key=lambda vm: vm.vm_id)
                    if vm.state == "running")
    return _reserved(chosen, notices, count, [n.on_demand_share for n in chosen])


def _drain(heap: list) -> Iterator:
    while heap:
        yield heapq.heappop(heap)


def _cheapest_until(ordered: Iterable[tuple[float, Any]], count: int, idle: float) -> list:
    """The prefix of `ordered` ((on-demand share, node), cheapest first) that holds `count` nodes
    and `idle` node-equivalents beside on-demand's use, or all of it."""
    chosen, used = [], 0.0
    for share, node in ordered:
        if len(chosen) >= count and len(chosen) - used >= idle - EPSILON:
            break
        chosen.append(node)
        used += share
    return chosen


def _reserved(chosen: Sequence, notices: tuple[str, ...], count: int, shares: Sequence[float]) -> ReservedNodes:
    ids = tuple(n.node_id for n in chosen)
    return ReservedNodes(ids, notices, max(count - len(ids), 0), max(len(ids) - sum(shares), 0.0))


def node_loads(pool: Pool, state_of: Callable[[str], str] | None = None) -> list[NodeLoad]:
    """The pool's nodes as choose_reserved_nodes reads them; a node's VMs are read only when it
    carries backfill. `state_of(vm_id)` is the lease state (the ledger's); without it a VM not
    preemptible counts as stopping, though it may be starting."""
    return [_load(node, pool, state_of) for node in pool.nodes]


def _load(node: NodeView, pool: Pool, state_of: Callable[[str], str] | None) -> NodeLoad:
    backfill: tuple[BackfillVm, ...] = ()
    if node.backfill_vms:
        backfill = tuple(BackfillVm(vm.vm_id, vm.work(pool.now), _state(vm.vm_id, vm.preemptible, state_of))
                         for vm in pool.on_node(node.node_id) if vm.role is VmRole.BACKFILL)
    return NodeLoad(node.node_id, node.up, on_demand_share(node), backfill)


def on_demand_share(node: NodeView) -> float:
    """The share of the node on-demand VMs hold, by memory (the resource a backfill VM keeps
    until it is gone; its vCPUs yield at once, running at cpu.idle)."""
    memory = node.capacity.memory_mib
    return min(node.on_demand_memory_mib / memory, 1.0) if memory > 0 else 0.0


def _state(vm_id: str, preemptible: bool, state_of: Callable[[str], str] | None) -> str:
    if state_of is None:
        return "running" if preemptible else "stopping"
    state = state_of(vm_id)
    return state if state in ("starting", "running") else "stopping"


def on_demand_nodes(pool: Pool) -> float:
    """On-demand demand now, in nodes: the up nodes' on-demand shares summed. What the ledger
    records in the DemandHistory."""
    return sum(on_demand_share(n) for n in pool.nodes if n.up)


def plan_for_pool(settings: ReserveSettings, pool: Pool, hints: Iterable[Hint] = (),
                  history: DemandHistory | None = None, state_of: Callable[[str], str] | None = None,
                  kept: Iterable[str] = ()) -> tuple[ReserveTarget, ReservedNodes]:
    """reserve_plan over the ledger's Pool, reading VMs only when it must: every node without
    backfill is cheaper to keep free than any node with some, so while those suffice no VM
    list is read (the steady state, once the reserved nodes are drained). A soft reserve (drain
    false, no hint counting yet) is soft_reserved's, from the nodes reserved last time (`kept`)."""
    columns = pool.columns   # the nodes as columns: this runs at every fill, over every node
    up_rows = np.flatnonzero(columns.up)
    hints = tuple(hints)
    target = reserve_target(settings, pool.now, len(up_rows), hints, history)
    if not target.nodes:
        return target, ReservedNodes((), ())
    if not settings.drain and not target.hinted:   # a hint that counts drains, so its nodes are free by its start
        return target, soft_reserved(pool, target, kept)
    # a node without backfill costs (False, 0, False, -share, id): its order among them
    nodes = pool.nodes
    heap = [(-on_demand_share(n), n.node_id, n)
            for n in map(nodes.__getitem__, np.flatnonzero(columns.up & (columns.backfill_vms == 0)).tolist())]
    heapq.heapify(heap)
    free = _cheapest_until(((-share, n) for share, _, n in _drain(heap)), target.nodes, target.idle)
    if _enough(free, target.nodes, target.idle):
        return target, _reserved(free, (), target.nodes, [on_demand_share(n) for n in free])
    up = [nodes[i] for i in up_rows.tolist()]
    return target, choose_reserved_nodes([_load(n, pool, state_of) for n in up], target.nodes, target.idle)


def soft_reserved(pool: Pool, target: ReserveTarget, kept: Iterable[str]) -> ReservedNodes:
    """A soft reserve's nodes: no notice is given, so a node comes free only as its backfill ends
    or is preempted, and the reserve must not move to wherever is emptiest now or it would never
    come free. So: the up nodes without backfill (free already; the most on-demand beside first),
    then the up nodes reserved last time (`kept`), then the fewest backfill VMs (the soonest free),
    each by id last. Read from the columns alone: no VM list, whatever the pool."""
    c, nodes = pool.columns, pool.nodes
    kept_rows = {i for i in (c.position.get(node_id) for node_id in kept) if i is not None}
    up = np.flatnonzero(c.up)
    free = up[c.backfill_vms[up] == 0].tolist()
    order = sorted(free, key=lambda i: _soft_cost(c, nodes[i], kept_rows))
    if not _enough([nodes[i] for i in order], target.nodes):
        rest = up[c.backfill_vms[up] > 0].tolist()
        order += sorted(rest, key=lambda i: _soft_cost(c, nodes[i], kept_rows))
    chosen = _cheapest_until(((on_demand_share(nodes[i]), nodes[i]) for i in order), target.nodes, target.idle)
    return _reserved(chosen, (), target.nodes, [on_demand_share(n) for n in chosen])


def _soft_cost(columns, node: NodeView, kept_rows: set[int]) -> tuple:
    row = columns.position[node.node_id]
    return (row not in kept_rows, int(columns.backfill_vms[row]), -on_demand_share(node), node.node_id)


def _enough(chosen: Sequence[NodeView], count: int, idle: float = 0.0) -> bool:
    """Whether `chosen` holds `count` nodes and `idle` node-equivalents beside on-demand's use."""
    return len(chosen) >= count and len(chosen) - sum(on_demand_share(n) for n in chosen) >= idle - EPSILON


def reserve_plan(settings: ReserveSettings, now: float, nodes: Sequence[NodeLoad], hints: Iterable[Hint] = (),
                 history: DemandHistory | None = None) -> tuple[ReserveTarget, ReservedNodes]:
    """What fill needs in one call: the target at `now` over the up nodes, and which nodes."""
    target = reserve_target(settings, now, sum(1 for n in nodes if n.up), hints, history)
    return target, choose_reserved_nodes(nodes, target.nodes, target.idle)


# -- the wait window ------------------------------------------------------------------------------

@dataclass(frozen=True)
class WaitDecision:
    action: str          # place | wait | reject
    deadline: float      # the last moment the request may still be placed: queued_at + W
    reason: str = ""     # why it was rejected


def wait_reason(wait_seconds: float, cause: str = "", for_transit: bool = False) -> str:
    """Why a request that waited `wait_seconds` was rejected: its wait window ran out, or (for_transit)
    the wait for backfill VMs starting or stopping, which it got beyond the window, did."""
    text = f"no room after {wait_seconds:g} s waiting for backfill VMs starting or stopping" if for_transit else \
        f"no room within the wait window of {wait_seconds:g} s"
    return f"{text}: {cause}" if cause else text


def wait_decision(queued_at: float, now: float, placeable: bool, wait_seconds: float,
                  cause: str = "", for_transit: bool = False) -> WaitDecision:
    """What to do with a request queued at `queued_at`, asked again at `now`: place it if it
    can be placed now and its window is still open, keep it waiting while the window is open,
    reject it otherwise. `cause` is why placement failed (placement's reason), kept in the
    rejection. A request never waits past queued_at + W: a check that comes late rejects it.
    `for_transit`: its wait was lengthened for backfill in transit (the rejection says so)."""
    deadline = queued_at + max(wait_seconds, 0.0)
    if now > deadline or (not placeable and now >= deadline):
        return WaitDecision("reject", deadline, wait_reason(wait_seconds, cause, for_transit))
    if placeable:
        return WaitDecision("place", deadline)
    return WaitDecision("wait", deadline)


def may_wait(waiting: int, settings: ReserveSettings) -> str | None:
    """Why a new request may not join the queue of `waiting` requests (the queue is bounded), or None."""
    if settings.wait_seconds <= 0:
        return wait_reason(settings.wait_seconds)
    if waiting >= settings.max_waiting:
        return f"{waiting} requests already wait for room (at most {settings.max_waiting})"
    return None
