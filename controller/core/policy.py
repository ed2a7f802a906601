"""The controller's decisions, as pure functions over a snapshot of the pool.

Nothing here talks to an agent, a database or a clock: placement of on-demand VMs (with the
choice of backfill victims), the backfill launcher's plan, and the termination orders all take
plain data and return plain data, so the tests can check them exhaustively and a trace-driven
simulation can reuse them.
"""
from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

import numpy as np

from .records import ZERO, BackfillConfig, Policy, Size, VmRole, plain_init, replace


_launched_at = attrgetter("launched_at")
IDLE = math.inf   # VmView.busy_since of a VM last seen idle: no work at risk, however long it has run


def _risk_clock(vm: VmView) -> float:
    return vm.launched_at if vm.busy_since is None else vm.busy_since


@plain_init
@dataclass(frozen=True)
class VictimLadder:
    """A node's preemptible VMs newest first, with running sums of their sizes: how far back in
    age a preemption of a given size must reach on the node. That age is a lower bound on the
    node's most_recent cost (exact when no victim can be spared), so placement reads the VMs of
    only the nodes that could be the cheapest (NodeArrays, _youngest_first). Under idle_first
    the ages are on its clock (VmView.busy_since; IDLE rungs first) and bound its cost alike."""
    launched_at: tuple[float, ...]    # newest first: launch times, or idle_first's clocks
    vcpus: tuple[int, ...]            # running sums, in the same order
    memory_mib: tuple[int, ...]

    @classmethod
    def of(cls, victims: Iterable[VmView], by_busy: bool = False) -> VictimLadder | None:
        """The ladder by launch time, or (`by_busy`) by idle_first's clock, VmView.busy_since."""
        clock = _risk_clock if by_busy else _launched_at
        # newest first; a reversed sort keeps equal times in their order, as a key of -time would
        newest_first = sorted(victims, key=clock, reverse=True)
        if not newest_first:
            return None
        sizes = [vm.size for vm in newest_first]
        vcpus = tuple(itertools.accumulate([size.vcpus for size in sizes]))
        memory = tuple(itertools.accumulate([size.memory_mib for size in sizes]))
        return cls(tuple([clock(vm) for vm in newest_first]), vcpus, memory)


@dataclass(frozen=True)
class NodeView:
    node_id: str
    capacity: Size
    up: bool = True
    reserve: Size = ZERO          # never given to backfill
    backfill_excluded: bool = False  # the whole node is reserved from backfill
    allocated: Size = ZERO        # every VM on the node (kept by the caller; Pool.of computes it)
    pinned: Size = ZERO           # what no preemption can free: on-demand VMs, backfill VMs not preemptible now
    newest_victim_at: float | None = None  # launch time of the youngest preemptible VM, None if there is none
    # Sums the backfill plan and volunteer selection read, kept by the caller like the ones above
    # (over the VMs the node's VmViews hold: what they hold, so a victim on notice counts its memory only).
    backfill_vcpus: int = 0                # vCPUs backfill VMs hold
    backfill_vms: int = 0                  # backfill VMs (running, starting or stopping)
    on_demand_memory_mib: int = 0          # memory on-demand VMs hold
    oldest_victim_at: float | None = None  # launch time of the oldest preemptible VM (recycling)
    victim_ladder: VictimLadder | None = None  # preemptible VMs newest first (placement's bound)

    @property
    def room(self) -> Size:
        return self.capacity - self.allocated


@dataclass(frozen=True)
class VmView:
    vm_id: str
    node_id: str
    role: VmRole
    size: Size
    launched_at: float            # seconds since the epoch
    preemptible: bool = True      # false while a backfill VM starts or stops
    # idle_first's clock, from what the guest says of its work or else the agents' CPU figures:
    # when the VM's current busy spell began (never before its launch), IDLE if it was last seen
    # idle, None if not known (then since its launch). Set by the ledger only while the policy is
    # idle_first.
    busy_since: float | None = None

    def runtime(self, now: float) -> float:
        return max(now - self.launched_at, 0.0)

    def at_risk(self, now: float) -> float:
        """Seconds of work idle_first takes a stop to lose: the current busy spell (0 if idle)."""
        return max(now - _risk_clock(self), 0.0)

    def work(self, now: float) -> float:
        """Work lost if it stops now: runtime x vCPUs, in vCPU-seconds."""
        return self.runtime(now) * self.size.vcpus


@plain_init
@dataclass(frozen=True)
class Pool:
    """The pool as decisions see it. The caller keeps the per-node sums in NodeView up to date
    (the controller does so incrementally); Pool.of builds a consistent one from a list of VMs."""
    nodes: tuple[NodeView, ...]
    vms_by_node: Mapping[str, Sequence[VmView]]
    now: float
    arrays: NodeArrays | None = field(default=None, compare=False, repr=False)   # the nodes as columns

    @classmethod
    def of(cls, nodes: Sequence[NodeView], vms: Sequence[VmView], now: float) -> Pool:
        by_node: dict[str, list[VmView]] = {n.node_id: [] for n in nodes}
        for vm in vms:
            by_node.setdefault(vm.node_id, []).append(vm)
        return cls(tuple(summed(n, by_node[n.node_id]) for n in nodes), by_node, now)

    @property
    def columns(self) -> NodeArrays:
        """The nodes as columns (row i is nodes[i]): the caller's, kept as it keeps the sums, or
        built here."""
        # The caller's without a cached_property: its first read takes a lock (Python 3.11), and
        # the ledger gives arrays to a pool per decision
        return self.arrays if self.arrays is not None else self._built_columns

    @cached_property
    def _built_columns(self) -> NodeArrays:
        return NodeArrays(self.nodes)

    def on_node(self, node_id: str) -> Sequence[VmView]:
        return self.vms_by_node.get(node_id, ())

    @property
    def vms(self) -> list[VmView]:
        return [vm for vms in self.vms_by_node.values() for vm in vms]


INT_MAX = np.iinfo(np.int64).max


def rows_where(mask: np.ndarray) -> np.ndarray:
    """The rows where a 1-D mask is true: np.flatnonzero without its wrapper (a ravel, then
    nonzero), which cost as much as the search itself on a pool's columns, several per decision."""
    return mask.nonzero()[0]


class NodeArrays:
    """NodeViews as columns of plain numbers, row i being the i-th node: placement and the backfill
    plan scan them with numpy instead of a Python loop over every node, which was most of a
    decision's time in a pool of 1,000 nodes. Each node's victim ladder is a row of three
    matrices (padded: times NaN, running sums INT_MAX; an IDLE rung is +inf). The ledger keeps one row by row
    as its views change (set_row); Pool.columns builds one from the nodes otherwise."""

    def __init__(self, nodes: Sequence[NodeView]) -> None:
        count = len(nodes)
        self.ids = [n.node_id for n in nodes]
        self.position = {node_id: i for i, node_id in enumerate(self.ids)}
        self.name_rank = np.empty(count, dtype=np.int64)   # rank of each id in sorted order: ties by id
        self.name_rank[sorted(range(count), key=self.ids.__getitem__)] = np.arange(count)
        self.up = np.zeros(count, dtype=bool)
        self.capacity_vcpus, self.capacity_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
        self.pinned_vcpus, self.pinned_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
        self.allocated_vcpus, self.allocated_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
        # capacity less allocated (NodeView.room), and less pinned (the room preemption can make):
        # kept per row, so placement does not subtract every node's columns per request
        self.room_vcpus, self.room_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
        self.unpinned_vcpus, self.unpinned_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
        self.oldest_victim_at = np.full(count, np.nan)
        self._oldest: float | None = math.nan   # their minimum (NaN: no victim; None: to be read again)
        self.ladder_length = np.zeros(count, np.int64)
        self.ladder_sizes = np.ones(count, dtype=bool)   # the ladder has the victims' sizes (not a stand-in)
        self.backfill_vms = np.zeros(count, np.int64)
        self.ladder_rows: list[VictimLadder | None] = [None] * count   # what each row's rungs hold
        self._ladders(count, max((len(n.victim_ladder.launched_at) for n in nodes if n.victim_ladder), default=1))
        for i, node in enumerate(nodes):
            self.set_row(i, node)

    def _ladders(self, count: int, width: int) -> None:
        # Column-major: placement reduces each row's few rungs (axis 1), which numpy then does as
        # a handful of vector operations over every node rather than one short loop per node.
        self.ladder_at = np.full((count, width), np.nan, order="F")
        self.ladder_vcpus = np.full((count, width), INT_MAX, dtype=np.int64, order="F")
        self.ladder_memory = np.full((count, width), INT_MAX, dtype=np.int64, order="F")

    def set_row(self, i: int, node: NodeView) -> None:
        self.up[i] = node.up
        self.capacity_vcpus[i], self.capacity_memory[i] = node.capacity.vcpus, node.capacity.memory_mib
        self.pinned_vcpus[i], self.pinned_memory[i] = node.pinned.vcpus, node.pinned.memory_mib
        self.allocated_vcpus[i], self.allocated_memory[i] = node.allocated.vcpus, node.allocated.memory_mib
        self.room_vcpus[i] = node.capacity.vcpus - node.allocated.vcpus
        self.room_memory[i] = node.capacity.memory_mib - node.allocated.memory_mib
        self.unpinned_vcpus[i] = node.capacity.vcpus - node.pinned.vcpus
        self.unpinned_memory[i] = node.capacity.memory_mib - node.pinned.memory_mib
        self._set_oldest(i, math.nan if node.oldest_victim_at is None else node.oldest_victim_at)
        self.backfill_vms[i] = node.backfill_vms
        ladder = _ladder(node)
        self.ladder_sizes[i] = ladder is node.victim_ladder
        last = self.ladder_rows[i]
        if ladder is last or ladder == last:   # the very ladder (often: kept with the victims) is read first
            return   # the same rungs (often: a change of a node's VMs that are not victims)
        self.ladder_rows[i] = ladder
        length = len(ladder.launched_at) if ladder else 0
        if length > self.ladder_at.shape[1]:   # a longer ladder than any so far: widen every row
            old = (self.ladder_at, self.ladder_vcpus, self.ladder_memory)
            self._ladders(len(self.ids), max(length, 2 * old[0].shape[1]))
            for new_matrix, old_matrix in zip((self.ladder_at, self.ladder_vcpus, self.ladder_memory), old):
                new_matrix[:, :old_matrix.shape[1]] = old_matrix
        was = self.ladder_length.item(i)
        self.ladder_length[i] = length
        if ladder:
            self.ladder_at[i, :length] = ladder.launched_at
            self.ladder_vcpus[i, :length] = ladder.vcpus
            self.ladder_memory[i, :length] = ladder.memory_mib
        if was > length:   # past its rungs a row is padding: only the rungs it no longer has are padded again
            self.ladder_at[i, length:was] = np.nan
            self.ladder_vcpus[i, length:was] = INT_MAX
            self.ladder_memory[i, length:was] = INT_MAX

    def _set_oldest(self, i: int, value: float) -> None:
        """Row i's oldest victim, keeping their minimum known unless the row that held it grew older."""
        oldest = self._oldest
        if oldest is not None:
            was = self.oldest_victim_at.item(i)
            if was == oldest:   # the row held the minimum (NaN equals nothing)
                self._oldest = value if value <= oldest else None
            elif value < oldest or (oldest != oldest and value == value):   # lower, or the first victim
                self._oldest = value
        self.oldest_victim_at[i] = value

    def oldest_victim(self) -> float:
        """The launch time of the oldest victim of every row (NaN: none); recycling asks at every
        fill, and set_row keeps it between them."""
        if self._oldest is None:
            column = self.oldest_victim_at
            self._oldest = float(np.fmin.reduce(column)) if len(column) else math.nan
        return self._oldest

    def copy(self) -> NodeArrays:
        """A copy whose rows later set_row calls on this one leave alone (the ids are shared)."""
        twin = object.__new__(NodeArrays)
        twin.__dict__.update({k: v.copy(order="K") if isinstance(v, np.ndarray) else v for k, v in self.__dict__.items()
                              if k != "_lent"})
        twin.ladder_rows = list(self.ladder_rows)
        return twin

    def lend(self) -> NodeArrays:
        """A twin reading these very arrays, read-only, without copying them: it shows later
        set_row calls on this one, so its lender copies its own arrays before changing a row while
        a twin it lent is still alive (the ledger's snapshots: a decision reads them and drops them).
        The read-only views are made once per set of arrays (a row written shows through them)."""
        lent = self.__dict__.get("_lent")
        if lent is None or lent["ladder_at"].base is not self.ladder_at:   # none yet, or the ladders widened
            lent = {}
            for k, v in self.__dict__.items():
                if isinstance(v, np.ndarray):
                    v = v.view()
                    v.flags.writeable = False
                if k != "_lent":
                    lent[k] = v
            self._lent = lent
        twin = object.__new__(NodeArrays)
        twin.__dict__.update(lent)
        twin._oldest = self.oldest_victim()   # the lent dict's is the one of when it was made (kept here)
        return twin


def _ladder(node: NodeView) -> VictimLadder | None:
    """The node's victim ladder; for a node given without one, its newest victim alone, which
    still bounds most_recent's cost from below."""
    if node.victim_ladder is not None or node.newest_victim_at is None:   # (idle_first needs the real one)
        return node.victim_ladder
    return VictimLadder((node.newest_victim_at,), (INT_MAX,), (INT_MAX,))


def summed(node: NodeView, vms: Sequence[VmView], unexplained: Size = ZERO) -> NodeView:
    """The node with its sums taken from its VMs (Pool.of; the ledger, per node whose leases
    changed), `unexplained` being room taken outside any VM it knows."""
    # One pass in plain ints (this runs for every node whose leases changed, per event): the sums
    # of allocated(), max() and min() over the same VMs in the same order.
    victims = []
    all_vcpus = all_memory = pinned_vcpus = pinned_memory = backfill_vcpus = backfill_vms = on_demand_memory = 0
    newest = oldest = None
    backfill_role = VmRole.BACKFILL
    for vm in vms:
        size = vm.size
        all_vcpus += size.vcpus
        all_memory += size.memory_mib
        if vm.role is backfill_role:
            backfill_vcpus += size.vcpus
            backfill_vms += 1
            if vm.preemptible:   # is_victim
                victims.append(vm)
                at = vm.launched_at
                if newest is None or at > newest:
                    newest = at
                if oldest is None or at < oldest:
                    oldest = at
                continue
        else:
            if vm.role is VmRole.ON_DEMAND:
                on_demand_memory += size.memory_mib
        pinned_vcpus += size.vcpus
        pinned_memory += size.memory_mib
    return replace(
        node, allocated=unexplained + Size(all_vcpus, all_memory),
        pinned=unexplained + Size(pinned_vcpus, pinned_memory),
        newest_victim_at=newest, backfill_vcpus=backfill_vcpus, backfill_vms=backfill_vms,
        on_demand_memory_mib=on_demand_memory, oldest_victim_at=oldest,
        victim_ladder=VictimLadder.of(victims, any(vm.busy_since is not None for vm in victims)))


def room_after_transit(node: NodeView, vms: Sequence[VmView], want: Size) -> bool:
    """Whether `want` would fit on the node, by preemption if need be, once its backfill VMs that
    cannot be preempted now (starting or stopping) are done: room backfill holds only for a moment."""
    vcpus = memory = 0
    for vm in vms:
        if vm.role is VmRole.BACKFILL and not vm.preemptible:
            vcpus += vm.size.vcpus
            memory += vm.size.memory_mib
    return node.up and (vcpus or memory) > 0 and \
        want.vcpus <= node.capacity.vcpus - node.pinned.vcpus + vcpus and \
        want.memory_mib <= node.capacity.memory_mib - node.pinned.memory_mib + memory


def is_victim(vm: VmView) -> bool:
    """Whether preemption may stop this VM."""
    return vm.role is VmRole.BACKFILL and vm.preemptible


def allocated(vms: Sequence[VmView], role: VmRole | None = None) -> Size:
    total = ZERO
    for vm in vms:
        if role is None or vm.role is role:
            total += vm.size
    return total


# -- on-demand placement ------------------------------------------------------------------------

@plain_init
@dataclass(frozen=True)
class Reject:
    reason: str


@plain_init
@dataclass(frozen=True)
class Place:
    node_id: str


@plain_init
@dataclass(frozen=True)
class Preempt:
    node_id: str
    victims: tuple[str, ...]    # vm ids, in the order to stop them
    work_lost: float            # vCPU-seconds


Decision = Reject | Place | Preempt


def termination_order(vms: list[VmView], policy: Policy, now: float, rng: random.Random) -> list[VmView]:
    """Backfill VMs in the order the policy would stop them."""
    if policy is Policy.ANY:
        ordered = sorted(vms, key=lambda vm: vm.vm_id)
        rng.shuffle(ordered)
        return ordered
    if policy is Policy.LEAST_LOSS:
        return sorted(vms, key=lambda vm: (vm.work(now), vm.vm_id))
    if policy is Policy.IDLE_FIRST:   # idle ones first, the youngest of them first
        return sorted(vms, key=lambda vm: (vm.at_risk(now), vm.runtime(now), vm.vm_id))
    return sorted(vms, key=lambda vm: (vm.runtime(now), vm.vm_id))


def _prune(chosen: list[VmView], need: Size) -> list[VmView]:
    """Drop victims that are not needed, sparing the ones the policy would stop last first:
    the result is minimal (no victim can be spared) and still follows the policy's order."""
    if len({id(vm) for vm in chosen}) < len(chosen):
        return _prune_repeated(chosen, need)
    vcpus, memory = sum(vm.size.vcpus for vm in chosen), sum(vm.size.memory_mib for vm in chosen)
    spared: set[int] = set()
    for vm in reversed(chosen):  # running sums in plain ints: this runs for every node a decision reads
        if need.vcpus <= vcpus - vm.size.vcpus and need.memory_mib <= memory - vm.size.memory_mib:
            vcpus, memory = vcpus - vm.size.vcpus, memory - vm.size.memory_mib
            spared.add(id(vm))
    return [vm for vm in chosen if id(vm) not in spared] if spared else list(chosen)


def _prune_repeated(chosen: list[VmView], need: Size) -> list[VmView]:
    """_prune for a list that holds one VM more than once (sparing it spares every copy)."""
    kept = list(chosen)
    for vm in reversed(chosen):
        rest = [v for v in kept if v is not vm]
        if need.fits_in(allocated(rest)):
            kept = rest
    return kept


def _victims_in_order(backfill: list[VmView], need: Size, order: list[VmView]) -> list[VmView] | None:
    need_vcpus, need_memory = need.vcpus, need.memory_mib
    chosen: list[VmView] = []
    vcpus = memory = 0
    for vm in order:
        if need_vcpus <= vcpus and need_memory <= memory:
            break
        chosen.append(vm)
        vcpus, memory = vcpus + vm.size.vcpus, memory + vm.size.memory_mib
    if not (need_vcpus <= vcpus and need_memory <= memory):
        return None
    return _prune(chosen, need)


EXACT_SEARCH_LIMIT = 12  # backfill VMs on one node beyond which least_loss searches greedily


def _least_loss_victims(backfill: list[VmView], need: Size, now: float) -> list[VmView] | None:
    if len(backfill) > EXACT_SEARCH_LIMIT:
        by_size = sorted(backfill, key=lambda vm: (-vm.size.vcpus, -vm.size.memory_mib, vm.work(now), vm.vm_id))
        return _victims_in_order(backfill, need, by_size)
    ordered = sorted(backfill, key=lambda vm: vm.vm_id)
    for count in range(1, len(ordered) + 1):
        sets = [s for s in itertools.combinations(ordered, count) if _covers(s, need)]
        if sets:
            best = min(sets, key=lambda s: (sum(vm.work(now) for vm in s), [vm.vm_id for vm in s]))
            return sorted(best, key=lambda vm: (vm.work(now), vm.vm_id))
    return None


def _covers(vms: Sequence[VmView], need: Size) -> bool:
    return need.vcpus <= sum(vm.size.vcpus for vm in vms) and need.memory_mib <= sum(vm.size.memory_mib for vm in vms)


def choose_victims(backfill: list[VmView], need: Size, policy: Policy, now: float,
                   rng: random.Random) -> list[VmView] | None:
    """A minimal set of these backfill VMs whose room covers `need`, or None if all of them do not."""
    if need.fits_in(ZERO):
        return []
    if policy is Policy.LEAST_LOSS:
        return _least_loss_victims(backfill, need, now)
    return _victims_in_order(backfill, need, termination_order(backfill, policy, now, rng))


def _victim_cost(victims: list[VmView], policy: Policy, now: float) -> tuple:
    """How bad a node's victim set is; the node with the lowest cost is preempted."""
    if policy is Policy.LEAST_LOSS:
        return (len(victims), sum(vm.work(now) for vm in victims))
    if policy is Policy.IDLE_FIRST:   # the longest busy spell stopped should be as short as possible
        return (max((vm.at_risk(now) for vm in victims), default=0.0), len(victims))
    # most_recent: the oldest VM stopped should be as young as possible.
    return (max((vm.runtime(now) for vm in victims), default=0.0), len(victims))


def _candidates(pool: Pool, feasible: list[NodeView], policy: Policy, rng: random.Random) -> Iterator[tuple]:
    """(lower bound on the node's victim cost, node), cheapest bound first, lazily, for any, and
    for least_loss and idle_first over nodes given without victim ladders (which reads each
    node's VMs); otherwise _youngest_first (most_recent, idle_first), _fewest_then_least_work."""
    now = pool.now
    if policy is Policy.ANY:
        nodes = [n for n in feasible if n.newest_victim_at is not None]
        rng.shuffle(nodes)
        yield from (((0.0, 0), n) for n in nodes)
        return
    heap = []
    for i, node in enumerate(feasible):
        victims = [vm for vm in pool.on_node(node.node_id) if is_victim(vm)]
        if victims:
            heap.append((_cost_floor(victims, policy, now), node.node_id, i))
    heapq.heapify(heap)
    while heap:
        bound, _, i = heapq.heappop(heap)
        yield bound, feasible[i]


def _cost_floor(victims: list[VmView], policy: Policy, now: float) -> tuple:
    """No set of these victims costs less (_victim_cost) than this."""
    if policy is Policy.IDLE_FIRST:
        return (min(vm.at_risk(now) for vm in victims), 1)
    return (1, min(vm.work(now) for vm in victims))


def _youngest_first(pool: Pool, feasible: np.ndarray, want: Size) -> Iterator[tuple]:
    """most_recent's (and idle_first's, on its clock) candidates among the rows `feasible`:
    (lower bound on the node's cost, node), lowest first. The bound is the age (on the ladder's
    clock) of the oldest VM that the node's newest-first victims must reach to cover what the
    request needs there (its victim ladder, all nodes at once); a node whose victims cannot cover
    it is left out, as choose_victims would find none. So a decision over 10,000 full nodes reads
    the VMs of only the few that could be cheapest."""
    columns, now = pool.columns, pool.now
    # the rungs any ladder has (the matrices are wider; past its rungs a row is padded with
    # INT_MAX, which no need reaches)
    width = int(columns.ladder_length.max()) if len(columns.ids) else 0
    ladder_vcpus, ladder_memory = columns.ladder_vcpus[:, :width], columns.ladder_memory[:, :width]
    # reach: the larger of the two bisect_lefts (rungs short of the vCPUs, of the memory). A row's
    # running sums only grow, so each "short" set is a prefix of its rungs: their union is the
    # longer prefix, and one count of it is that maximum.
    if 2 * len(feasible) > len(columns.ids):   # most rows: over every row, not a copy of most of them
        need_vcpus = want.vcpus - columns.room_vcpus
        need_memory = want.memory_mib - columns.room_memory
        reach = ((ladder_vcpus < need_vcpus[:, None]) | (ladder_memory < need_memory[:, None])).sum(axis=1)[feasible]
    else:
        need_vcpus = want.vcpus - columns.room_vcpus[feasible]
        need_memory = want.memory_mib - columns.room_memory[feasible]
        reach = ((ladder_vcpus[feasible] < need_vcpus[:, None]) |
                 (ladder_memory[feasible] < need_memory[:, None])).sum(axis=1)
    covered = reach < columns.ladder_length[feasible]
    rows, reach = feasible[covered], reach[covered]
    bounds = np.maximum(now - columns.ladder_at[rows, reach], 0.0)
    for j in _ascending(bounds):
        yield (float(bounds[j]), 1), pool.nodes[rows[j]]


def _ascending(values: np.ndarray, first: int = 16) -> Iterator[int]:
    """np.argsort(values, kind="stable"), lazily: the `first` lowest values (and every value tied
    with them) are sorted first, the rest only if the caller reads on (placement mostly stops
    after the first few candidates)."""
    if len(values) <= 2 * first or np.isnan(values).any():
        yield from values.argsort(kind="stable").tolist()
        return
    threshold = values[values.argpartition(first - 1)[:first]].max()
    low = rows_where(values <= threshold)   # in position order, so a stable sort keeps ties in it
    yield from low[values[low].argsort(kind="stable")].tolist()
    high = rows_where(values > threshold)
    yield from high[values[high].argsort(kind="stable")].tolist()


def _fewest_then_least_work(pool: Pool, feasible: np.ndarray, want: Size) -> Iterator[tuple]:
    """least_loss's candidates among the rows `feasible`: (lower bound on (victims, work lost),
    node), lowest first, all nodes at once from their victim ladders. No set of a node's victims
    covering what the request needs there has fewer VMs than the largest ones take (by vCPUs, and
    by memory), nor, with that many, less work than that many of its least-worked VMs; a node
    whose victims together cannot cover it is left out. The work bound is lowered by a hair, as
    its sum adds in another order than the cost's."""
    c, now = pool.columns, pool.now
    rows = feasible[c.ladder_length[feasible] > 0]
    length = c.ladder_length[rows]
    width = int(length.max()) if len(rows) else 0   # the rungs these ladders have (the rest is padding)
    valid = np.arange(width) < length[:, None]
    sizes_vcpus = np.where(valid, np.diff(c.ladder_vcpus[rows, :width], prepend=0, axis=1), 0)
    sizes_memory = np.where(valid, np.diff(c.ladder_memory[rows, :width], prepend=0, axis=1), 0)
    need_vcpus = want.vcpus - c.room_vcpus[rows]
    need_memory = want.memory_mib - c.room_memory[rows]
    short_vcpus = (np.cumsum(-np.sort(-sizes_vcpus, axis=1), axis=1) < need_vcpus[:, None]).sum(axis=1)
    short_memory = (np.cumsum(-np.sort(-sizes_memory, axis=1), axis=1) < need_memory[:, None]).sum(axis=1)
    covered = (short_vcpus < length) & (short_memory < length)
    fewest = np.maximum(short_vcpus, short_memory)[covered] + 1
    works = np.where(valid, np.maximum(now - c.ladder_at[rows, :width], 0.0) * sizes_vcpus, np.inf)[covered]
    least = np.cumsum(np.sort(works, axis=1), axis=1)[np.arange(len(fewest)), fewest - 1]
    least = least - np.abs(least) * 1e-9 - 1e-9
    rows = rows[covered]
    for j in np.lexsort((least, fewest)).tolist():
        yield (int(fewest[j]), float(least[j])), pool.nodes[rows[j]]


def place_on_demand(pool: Pool, want: Size, policy: Policy = Policy.MOST_RECENT, seed: int = 0) -> Decision:
    """Where an on-demand VM of size `want` goes, and which backfill VMs must make room."""
    if want.vcpus <= 0 or want.memory_mib <= 0:
        return Reject(f"a VM needs at least 1 vCPU and 1 MiB, not {want.vcpus} vCPUs and {want.memory_mib} MiB")
    c = pool.columns   # every node at once, in numpy: a pass over every node is most of a decision's time
    can_host = c.up & (c.unpinned_vcpus >= want.vcpus) & (c.unpinned_memory >= want.memory_mib)
    fits = rows_where(can_host & (c.room_vcpus >= want.vcpus) & (c.room_memory >= want.memory_mib))
    if len(fits):  # best fit, the least spare vCPUs then memory then id: keep large holes for large requests
        # (the spare room is the room less `want`: the rooms sort as it would)
        best_fit = np.lexsort((c.name_rank[fits], c.room_memory[fits], c.room_vcpus[fits]))[0]
        return Place(pool.nodes[fits[best_fit]].node_id)
    feasible = rows_where(can_host)
    if not len(feasible):
        return Reject(_infeasible_reason(pool, want))
    rng = random.Random(seed)
    best = None
    if policy is Policy.MOST_RECENT or \
            (policy is Policy.IDLE_FIRST and pool.columns.ladder_sizes[feasible].all()):   # ladders on its clock
        candidates = _youngest_first(pool, feasible, want)
    elif policy is Policy.LEAST_LOSS and pool.columns.ladder_sizes[feasible].all():
        candidates = _fewest_then_least_work(pool, feasible, want)
    else:
        candidates = _candidates(pool, [pool.nodes[i] for i in feasible.tolist()], policy, rng)
    for bound, node in candidates:
        if best is not None and (policy is Policy.ANY or bound > best[0]):
            break
        backfill = [vm for vm in pool.on_node(node.node_id) if is_victim(vm)]
        victims = choose_victims(backfill, want - node.room, policy, pool.now, rng)
        if victims is not None:
            option = (_victim_cost(victims, policy, pool.now), node.node_id, victims)
            if best is None or option[:2] < best[:2]:
                best = option
    if best is None:  # cannot happen while NodeView sums match the VMs; say so rather than crash
        return Reject("the pool's books do not add up: a node has room on paper but no VMs to stop")
    _, node_id, victims = best
    return Preempt(node_id, tuple(vm.vm_id for vm in victims), sum(vm.work(pool.now) for vm in victims))


def _infeasible_reason(pool: Pool, want: Size) -> str:
    c = pool.columns
    up = np.flatnonzero(c.up)
    if not len(up):
        down = len(pool.nodes)
        return f"no node is up ({down} known, none reporting)" if down else "the pool has no nodes"
    # the most room counting backfill as free, by vCPUs then memory (capacity - pinned, the largest)
    vcpus, memory = c.unpinned_vcpus[up], c.unpinned_memory[up]
    best_vcpus = int(vcpus.max())
    best_memory = int(memory[vcpus == best_vcpus].max())
    return (f"no node can host {want.vcpus} vCPUs and {want.memory_mib} MiB even after stopping every backfill "
            f"VM: the most room on any of the {len(up)} up nodes, counting backfill VMs as free, is "
            f"{best_vcpus} vCPUs and {best_memory} MiB")


# -- backfill -----------------------------------------------------------------------------------

@plain_init
@dataclass(frozen=True)
class BackfillPlan:
    launches: tuple[str, ...] = ()     # node ids, one per VM to launch
    recycles: tuple[str, ...] = ()     # vm ids past duration_seconds
    notes: tuple[str, ...] = field(default=())


def backfill_room(node: NodeView) -> Size:
    """What backfill may still take on a node: capacity less every VM and the reserve."""
    if not node.up or node.backfill_excluded:
        return ZERO
    return node.capacity - node.reserve - node.allocated


def plan_backfill(pool: Pool, config: BackfillConfig, targets: list[str] | None = None,
                  cpu_room: dict[str, float] | None = None) -> BackfillPlan:
    """Which nodes get new backfill VMs now, and which old ones are recycled.

    `targets` are the selected volunteer nodes, best first (all up nodes by id when None);
    `cpu_room` caps how many cores of backfill a node should carry (its potential productivity).
    The backfill VMs counted and recycled are those on the pool's nodes; the plan reads the
    per-node sums in NodeView, and the VMs of a node only when one of them is due for recycling.
    """
    if not config.enabled:
        return BackfillPlan()
    budget = (config.max_instances - sum(n.backfill_vms for n in pool.nodes)) if config.max_instances else None
    position = pool.columns.position
    order = targets if targets is not None else sorted(n.node_id for n in pool.nodes)
    size_vcpus, size_memory = config.vcpus, config.memory_mb
    launches: list[str] = []
    for node_id in order:
        row = position.get(node_id)
        if row is None:
            continue
        node = pool.nodes[row]
        if not node.up or node.backfill_excluded:
            continue  # no backfill room (backfill_room)
        cap, reserve, used = node.capacity, node.reserve, node.allocated
        count = _fitting(cap.vcpus - reserve.vcpus - used.vcpus, cap.memory_mib - reserve.memory_mib - used.memory_mib,
                         size_vcpus, size_memory)
        if count and cpu_room is not None and node_id in cpu_room:
            # to the nearest VM: half a free core is worth a volunteer vCPU
            count = min(count, max(int((cpu_room[node_id] - node.backfill_vcpus) / size_vcpus + 0.5), 0))
        if budget is not None:
            count = min(count, budget - len(launches))
        if count > 0:
            launches += [node_id] * count
    return BackfillPlan(launches=tuple(launches), recycles=_recycles(pool, config.duration_seconds))


# In the last tenth of its longest life, a backfill VM a report shows idle (its guest's word, or
# its CPU: the rule idle_first's clock reads) is recycled then, whatever the policy: a worker
# between jobs loses nothing, where one recycled at duration_seconds loses the job it runs then.
RECYCLE_IDLE_SHARE = 0.1


def recycles_when_idle(runtime: float, duration_seconds: int) -> bool:
    """Whether a backfill VM seen idle after `runtime` seconds is recycled at once."""
    return runtime >= duration_seconds * (1.0 - RECYCLE_IDLE_SHARE)


def _recycles(pool: Pool, duration_seconds: int) -> tuple[str, ...]:
    """Preemptible backfill VMs past their longest life, oldest first (ties in pool order)."""
    now, columns = pool.now, pool.columns
    if not max(now - columns.oldest_victim(), 0.0) >= duration_seconds:
        # the oldest victim of all (now - t only shrinks as t grows) has not run that long, so no
        # row would pass the test below (NaN: no victim anywhere): most fills recycle nothing
        return ()
    # the nodes whose oldest victim has run that long (NaN, no victim, compares false)
    due_on = rows_where(np.maximum(now - columns.oldest_victim_at, 0.0) >= duration_seconds).tolist()
    due = [vm for row in due_on for vm in pool.on_node(pool.nodes[row].node_id)
           if vm.role is VmRole.BACKFILL and vm.preemptible and vm.runtime(now) >= duration_seconds]
    return tuple(vm.vm_id for vm in sorted(due, key=lambda vm: vm.launched_at))


def fitting_count(room: Size, size: Size) -> int:
    return _fitting(room.vcpus, room.memory_mib, size.vcpus, size.memory_mib)


def _fitting(room_vcpus: int, room_memory: int, vcpus: int, memory_mib: int) -> int:
    if room_vcpus < 0 or room_memory < 0:
        return 0
    by_cpu = room_vcpus // vcpus if vcpus else 0
    by_memory = room_memory // memory_mib if memory_mib else 0
    return max(min(by_cpu, by_memory), 0)
