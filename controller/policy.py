"""The controller's decisions, as pure functions over a snapshot of the pool.

Nothing here talks to an agent, a database or a clock: placement of on-demand VMs (with the
choice of backfill victims), the backfill launcher's plan, and the termination orders all take
plain data and return plain data, so the tests can check them exhaustively and a trace-driven
simulation can reuse them.
"""
from __future__ import annotations

import itertools
import random
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


@dataclass(frozen=True)
class VmView:
    vm_id: str
    node_id: str
    role: VmRole
    size: Size
    launched_at: float            # seconds since the epoch

    def runtime(self, now: float) -> float:
        return max(now - self.launched_at, 0.0)

    def work(self, now: float) -> float:
        """Work lost if it stops now: runtime x vCPUs, in vCPU-seconds."""
        return self.runtime(now) * self.size.vcpus


@dataclass(frozen=True)
class Pool:
    nodes: tuple[NodeView, ...]
    vms: tuple[VmView, ...]
    now: float

    def on_node(self, node_id: str) -> list[VmView]:
        return [vm for vm in self.vms if vm.node_id == node_id]


def allocated(vms: list[VmView], role: VmRole | None = None) -> Size:
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


def place_on_demand(pool: Pool, want: Size, policy: Policy = Policy.MOST_RECENT, seed: int = 0) -> Decision:
    """Where an on-demand VM of size `want` goes, and which backfill VMs must make room."""
    if want.vcpus <= 0 or want.memory_mib <= 0:
        return Reject(f"a VM needs at least 1 vCPU and 1 MiB, not {want.vcpus} vCPUs and {want.memory_mib} MiB")
    up = [node for node in pool.nodes if node.up]
    by_node = {node.node_id: pool.on_node(node.node_id) for node in up}
    feasible = [n for n in up if want.fits_in(n.capacity - allocated(by_node[n.node_id], VmRole.ON_DEMAND))]
    if not feasible:
        return Reject(_infeasible_reason(pool, up, by_node, want))
    free = [(n.capacity - allocated(by_node[n.node_id]), n) for n in feasible]
    fitting = [(room, n) for room, n in free if want.fits_in(room)]
    if fitting:  # best fit: keep large holes for large requests
        room, node = min(fitting, key=lambda p: (p[0].vcpus - want.vcpus, p[0].memory_mib - want.memory_mib,
                                                  p[1].node_id))
        return Place(node.node_id)
    rng = random.Random(seed)
    options = []
    for room, node in free:
        backfill = [vm for vm in by_node[node.node_id] if vm.role is VmRole.BACKFILL]
        victims = choose_victims(backfill, want - room, policy, pool.now, rng)
        if victims is not None:
            options.append((_victim_cost(victims, policy, pool.now), node.node_id, victims))
    if policy is Policy.ANY:
        _, node_id, victims = options[rng.randrange(len(options))]
    else:
        _, node_id, victims = min(options, key=lambda o: (o[0], o[1]))
    return Preempt(node_id, tuple(vm.vm_id for vm in victims), sum(vm.work(pool.now) for vm in victims))


def _infeasible_reason(pool: Pool, up: list[NodeView], by_node: dict[str, list[VmView]], want: Size) -> str:
    if not up:
        down = len(pool.nodes)
        return f"no node is up ({down} known, none reporting)" if down else "the pool has no nodes"
    best = max((n.capacity - allocated(by_node[n.node_id], VmRole.ON_DEMAND) for n in up),
               key=lambda s: (s.vcpus, s.memory_mib))
    return (f"no node can host {want.vcpus} vCPUs and {want.memory_mib} MiB even after stopping every backfill "
            f"VM: the most any of the {len(up)} up nodes has outside on-demand VMs is {best.vcpus} vCPUs "
            f"and {best.memory_mib} MiB")


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


@dataclass(frozen=True)
class BackfillPlan:
    launches: tuple[str, ...] = ()     # node ids, one per VM to launch
    recycles: tuple[str, ...] = ()     # vm ids past duration_seconds
    notes: tuple[str, ...] = field(default=())


def backfill_room(node: NodeView, vms: list[VmView]) -> Size:
    """What backfill may still take on a node: capacity less every VM and the reserve."""
    if not node.up or node.backfill_excluded:
        return ZERO
    return node.capacity - node.reserve - allocated(vms)


def plan_backfill(pool: Pool, config: BackfillConfig, targets: list[str] | None = None,
                  cpu_room: dict[str, float] | None = None) -> BackfillPlan:
    """Which nodes get new backfill VMs now, and which old ones are recycled.

    `targets` are the selected volunteer nodes, best first (all up nodes by id when None);
    `cpu_room` caps how many vCPUs of backfill a node should carry (its potential productivity).
    """
    if not config.enabled:
        return BackfillPlan()
    backfill = [vm for vm in pool.vms if vm.role is VmRole.BACKFILL]
    recycles = tuple(vm.vm_id for vm in sorted(backfill, key=lambda vm: vm.launched_at)
                     if vm.runtime(pool.now) >= config.duration_seconds)
    budget = (config.max_instances - len(backfill)) if config.max_instances else None
    nodes = {n.node_id: n for n in pool.nodes}
    order = targets if targets is not None else sorted(n.node_id for n in pool.nodes)
    launches: list[str] = []
    for node_id in order:
        node = nodes.get(node_id)
        if node is None:
            continue
        vms = pool.on_node(node_id)
        room = backfill_room(node, vms)
        count = fitting_count(room, config.size)
        if cpu_room is not None and node_id in cpu_room:
            held = allocated(vms, VmRole.BACKFILL).vcpus
            count = min(count, max(int((cpu_room[node_id] - held) // config.vcpus), 0))
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
