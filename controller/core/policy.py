"""The controller's decisions, as pure functions over a snapshot of the pool.

Nothing here talks to an agent, a database or a clock: placement of on-demand VMs (with the
choice of backfill victims), the backfill launcher's plan, and the termination orders all take
plain data and return plain data, so the tests can check them exhaustively and a trace-driven
simulation can reuse them.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum


class Policy(str, Enum):
    MOST_RECENT = "most_recent"   # youngest backfill VMs first: they have the least work to lose
    ANY = "any"                   # random order
    LEAST_LOSS = "least_loss"     # fewest victims, then the least work lost (runtime x vCPUs)


class VmRole(str, Enum):
    ON_DEMAND = "on_demand"
    BACKFILL = "backfill"


@dataclass(frozen=True)
class Size:
    vcpus: int
    memory_mib: int

    def __add__(self, other: Size) -> Size:
        return Size(self.vcpus + other.vcpus, self.memory_mib + other.memory_mib)

    def __sub__(self, other: Size) -> Size:
        return Size(self.vcpus - other.vcpus, self.memory_mib - other.memory_mib)

    def fits_in(self, room: Size) -> bool:
        return self.vcpus <= room.vcpus and self.memory_mib <= room.memory_mib


ZERO = Size(0, 0)


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

    def runtime(self, now: float) -> float:
        return max(now - self.launched_at, 0.0)

    def work(self, now: float) -> float:
        """Work lost if it stops now: runtime x vCPUs, in vCPU-seconds."""
        return self.runtime(now) * self.size.vcpus


@dataclass(frozen=True)
class Pool:
    """The pool as decisions see it. The caller keeps the per-node sums in NodeView up to date
    (the controller does so incrementally); Pool.of builds a consistent one from a list of VMs."""
    nodes: tuple[NodeView, ...]
    vms_by_node: Mapping[str, Sequence[VmView]]
    now: float

    @classmethod
    def of(cls, nodes: Sequence[NodeView], vms: Sequence[VmView], now: float) -> Pool:
        by_node: dict[str, list[VmView]] = {n.node_id: [] for n in nodes}
        for vm in vms:
            by_node.setdefault(vm.node_id, []).append(vm)
        summed = tuple(dataclasses.replace(n, allocated=allocated(by_node[n.node_id]),
                                           pinned=allocated([vm for vm in by_node[n.node_id] if not is_victim(vm)]),
                                           newest_victim_at=max((vm.launched_at for vm in by_node[n.node_id]
                                                                 if is_victim(vm)), default=None))
                       for n in nodes)
        return cls(summed, by_node, now)

    def on_node(self, node_id: str) -> Sequence[VmView]:
        return self.vms_by_node.get(node_id, ())

    @property
    def vms(self) -> list[VmView]:
        return [vm for vms in self.vms_by_node.values() for vm in vms]


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

@dataclass(frozen=True)
class Reject:
    reason: str


@dataclass(frozen=True)
class Place:
    node_id: str


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
    return sorted(vms, key=lambda vm: (vm.runtime(now), vm.vm_id))


def _prune(chosen: list[VmView], need: Size) -> list[VmView]:
    """Drop victims that are not needed, sparing the ones the policy would stop last first:
    the result is minimal (no victim can be spared) and still follows the policy's order."""
    kept = list(chosen)
    for vm in reversed(chosen):
        rest = [v for v in kept if v is not vm]
        if need.fits_in(allocated(rest)):
            kept = rest
    return kept


def _victims_in_order(backfill: list[VmView], need: Size, order: list[VmView]) -> list[VmView] | None:
    chosen: list[VmView] = []
    for vm in order:
        if need.fits_in(allocated(chosen)):
            break
        chosen.append(vm)
    if not need.fits_in(allocated(chosen)):
        return None
    return _prune(chosen, need)


EXACT_SEARCH_LIMIT = 12  # backfill VMs on one node beyond which least_loss searches greedily


def _least_loss_victims(backfill: list[VmView], need: Size, now: float) -> list[VmView] | None:
    if len(backfill) > EXACT_SEARCH_LIMIT:
        by_size = sorted(backfill, key=lambda vm: (-vm.size.vcpus, -vm.size.memory_mib, vm.work(now), vm.vm_id))
        return _victims_in_order(backfill, need, by_size)
    ordered = sorted(backfill, key=lambda vm: vm.vm_id)
    for count in range(1, len(ordered) + 1):
        sets = [s for s in itertools.combinations(ordered, count) if need.fits_in(allocated(list(s)))]
        if sets:
            best = min(sets, key=lambda s: (sum(vm.work(now) for vm in s), [vm.vm_id for vm in s]))
            return sorted(best, key=lambda vm: (vm.work(now), vm.vm_id))
    return None


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
    # most_recent: the oldest VM stopped should be as young as possible.
    return (max((vm.runtime(now) for vm in victims), default=0.0), len(victims))


def _candidates(pool: Pool, feasible: list[NodeView], policy: Policy, rng: random.Random) -> Iterator[tuple]:
    """(lower bound on the node's victim cost, node), cheapest bound first, lazily.

    The bound lets the search stop early: for most_recent it comes from the node's newest
    preemptible VM (kept in NodeView), and a heap yields nodes in bound order without sorting
    all of them, so a decision over 10,000 full nodes looks at the VMs of only a few;
    least_loss reads each node's VMs."""
    now = pool.now
    if policy is Policy.ANY:
        nodes = [n for n in feasible if n.newest_victim_at is not None]
        rng.shuffle(nodes)
        yield from (((0.0, 0), n) for n in nodes)
        return
    if policy is Policy.LEAST_LOSS:
        heap = []
        for i, node in enumerate(feasible):
            works = [vm.work(now) for vm in pool.on_node(node.node_id) if is_victim(vm)]
            if works:
                heap.append(((1, min(works)), node.node_id, i))
    else:
        heap = [((now - n.newest_victim_at, 1), n.node_id, i) for i, n in enumerate(feasible)
                if n.newest_victim_at is not None]
    heapq.heapify(heap)
    while heap:
        bound, _, i = heapq.heappop(heap)
        yield bound, feasible[i]


def place_on_demand(pool: Pool, want: Size, policy: Policy = Policy.MOST_RECENT, seed: int = 0) -> Decision:
    """Where an on-demand VM of size `want` goes, and which backfill VMs must make room."""
    if want.vcpus <= 0 or want.memory_mib <= 0:
        return Reject(f"a VM needs at least 1 vCPU and 1 MiB, not {want.vcpus} vCPUs and {want.memory_mib} MiB")
    wv, wm = want.vcpus, want.memory_mib
    feasible: list[NodeView] = []
    fit_key, fit = None, None
    for n in pool.nodes:  # one pass over every node, in plain ints: this is most of a decision's time
        if not n.up:
            continue
        cap, pinned, used = n.capacity, n.pinned, n.allocated
        if cap.vcpus - pinned.vcpus < wv or cap.memory_mib - pinned.memory_mib < wm:
            continue
        feasible.append(n)
        spare_v, spare_m = cap.vcpus - used.vcpus - wv, cap.memory_mib - used.memory_mib - wm
        if spare_v >= 0 and spare_m >= 0:  # best fit: keep large holes for large requests
            key = (spare_v, spare_m, n.node_id)
            if fit_key is None or key < fit_key:
                fit_key, fit = key, n
    if fit is not None:
        return Place(fit.node_id)
    if not feasible:
        return Reject(_infeasible_reason(pool, [n for n in pool.nodes if n.up], want))
    rng = random.Random(seed)
    best = None
    for bound, node in _candidates(pool, feasible, policy, rng):
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


def _infeasible_reason(pool: Pool, up: list[NodeView], want: Size) -> str:
    if not up:
        down = len(pool.nodes)
        return f"no node is up ({down} known, none reporting)" if down else "the pool has no nodes"
    best = max((n.capacity - n.pinned for n in up), key=lambda s: (s.vcpus, s.memory_mib))
    return (f"no node can host {want.vcpus} vCPUs and {want.memory_mib} MiB even after stopping every backfill "
            f"VM: the most room on any of the {len(up)} up nodes, counting backfill VMs as free, is "
            f"{best.vcpus} vCPUs and {best.memory_mib} MiB")


# -- backfill -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackfillConfig:
    enabled: bool = False
    max_instances: int = 0            # 0: as many as fit
    image: str = "tiny"
    memory_mb: int = 128              # the tiny guest boots in 96 MiB; 128 leaves it room
    vcpus: int = 1
    duration_seconds: int = 604800
    termination_policy: Policy = Policy.MOST_RECENT
    retry_seconds: int = 300
    grace_seconds: int = 10

    @property
    def size(self) -> Size:
        return Size(self.vcpus, self.memory_mb)

    def as_dict(self) -> dict:
        """Plain values (the policy by name), for JSON, the store and protobuf."""
        return {**dataclasses.asdict(self), "termination_policy": self.termination_policy.value}

    @classmethod
    def from_dict(cls, values: dict) -> BackfillConfig:
        return cls(**{**values, "termination_policy": Policy(values["termination_policy"])})


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
    """
    if not config.enabled:
        return BackfillPlan()
    backfill = [vm for vm in pool.vms if vm.role is VmRole.BACKFILL]
    recycles = tuple(vm.vm_id for vm in sorted(backfill, key=lambda vm: vm.launched_at)
                     if vm.preemptible and vm.runtime(pool.now) >= config.duration_seconds)
    budget = (config.max_instances - len(backfill)) if config.max_instances else None
    nodes = {n.node_id: n for n in pool.nodes}
    order = targets if targets is not None else sorted(n.node_id for n in pool.nodes)
    launches: list[str] = []
    for node_id in order:
        node = nodes.get(node_id)
        if node is None:
            continue
        count = fitting_count(backfill_room(node), config.size)
        if cpu_room is not None and node_id in cpu_room:
            held = sum(vm.size.vcpus for vm in pool.on_node(node_id) if vm.role is VmRole.BACKFILL)
            # to the nearest VM: half a free core is worth a volunteer vCPU
            count = min(count, max(int((cpu_room[node_id] - held) / config.vcpus + 0.5), 0))
        if budget is not None:
            count = min(count, budget - len(launches))
        launches += [node_id] * count
    return BackfillPlan(launches=tuple(launches), recycles=recycles)


def fitting_count(room: Size, size: Size) -> int:
    if room.vcpus < 0 or room.memory_mib < 0:
        return 0
    by_cpu = room.vcpus // size.vcpus if size.vcpus else 0
    by_memory = room.memory_mib // size.memory_mib if size.memory_mib else 0
    return max(min(by_cpu, by_memory), 0)
