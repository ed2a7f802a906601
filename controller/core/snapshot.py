"""The pool as the decisions read it: a NodeView per node, a VmView per VM, the victims' ladder
per node, and the pool's columns (NodeArrays) that placement and the backfill plan scan at once.

Plain data, built by the books (controller.core.views); nothing here does I/O.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

import numpy as np

from .records import ZERO, Size, VmRole, plain_init, replace


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
    # the part of `pinned` that backfill VMs starting or stopping hold: backfill's room all the same,
    # so on-demand placement counts it as free (it is waited for, never a reason to go elsewhere)
    in_transit: Size = ZERO

    @property
    def room(self) -> Size:
        return self.capacity - self.allocated

    @property
    def on_demand_room(self) -> Size:
        """The room as on-demand placement sees it: every backfill VM counted as free."""
        return self.capacity - self.pinned + self.in_transit


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
    # An on-demand VM: when its lease was booked and for which request. Placement tells apart nodes
    # whose on-demand allocations are equal by their VMs' order (the same with or without backfill).
    placed: tuple[float, str] = (0.0, "")

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
        # capacity less allocated (NodeView.room), and less what on-demand VMs hold (NodeView.on_demand_room,
        # the room placement sees): kept per row, so placement does not subtract every node's columns per request
        self.room_vcpus, self.room_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
        self.od_room_vcpus, self.od_room_memory = np.zeros(count, np.int64), np.zeros(count, np.int64)
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
        self.od_room_vcpus[i] = node.capacity.vcpus - node.pinned.vcpus + node.in_transit.vcpus
        self.od_room_memory[i] = node.capacity.memory_mib - node.pinned.memory_mib + node.in_transit.memory_mib
        self._set_oldest(i, math.nan if node.oldest_victim_at is None else node.oldest_victim_at)
        self.backfill_vms[i] = node.backfill_vms
        self.set_ladder(i, node)

    def set_ladder(self, i: int, node: NodeView) -> None:
        """Row i's victim ladder alone (set_row's last part): what changes when only idle_first's
        clocks moved on the node."""
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
    transit_vcpus = transit_memory = 0
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
            transit_vcpus += size.vcpus
            transit_memory += size.memory_mib
        else:
            if vm.role is VmRole.ON_DEMAND:
                on_demand_memory += size.memory_mib
        pinned_vcpus += size.vcpus
        pinned_memory += size.memory_mib
    return replace(
        node, allocated=unexplained + Size(all_vcpus, all_memory),
        pinned=unexplained + Size(pinned_vcpus, pinned_memory), in_transit=Size(transit_vcpus, transit_memory),
        newest_victim_at=newest, backfill_vcpus=backfill_vcpus, backfill_vms=backfill_vms,
        on_demand_memory_mib=on_demand_memory, oldest_victim_at=oldest,
        victim_ladder=VictimLadder.of(victims, any(vm.busy_since is not None for vm in victims)))


def is_victim(vm: VmView) -> bool:
    """Whether preemption may stop this VM."""
    return vm.role is VmRole.BACKFILL and vm.preemptible


def allocated(vms: Sequence[VmView], role: VmRole | None = None) -> Size:
    total = ZERO
    for vm in vms:
        if role is None or vm.role is role:
            total += vm.size
    return total
