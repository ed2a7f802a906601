"""The controller's decisions, as pure functions over a snapshot of the pool.

Nothing here talks to an agent, a database or a clock: placement of on-demand VMs (with the
choice of backfill victims) and the termination orders take plain data and return plain data,
so the tests can check them exhaustively and a trace-driven simulation can reuse them. The pool
they read is in snapshot.py; the backfill launcher's plan in backfill_plan.py.
"""
from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from .records import ZERO, Policy, Size, VmRole, plain_init


_launched_at = attrgetter("launched_at")
from .snapshot import NodeArrays, NodeView, Pool, VmView, allocated, is_victim, rows_where


@plain_init
@dataclass(frozen=True)
class Reject:
    reason: str           # for people: the figures that decided it
    code: str = "other"   # for machines (metrics, scripts): one of REJECTION_CODES


# Why a request is rejected, in a word: the label of gleaner_controller_requests_total and the
# `reason_code` of request.rejected events (a bounded set, unlike the reasons' text).
REJECTION_CODES = ("invalid_size", "no_nodes", "no_node_up", "no_room", "no_image", "below_image_minimum",
                   "books_inconsistent", "wait_expired", "tenant_upper_bound", "tenant_lower_bounds", "other")


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


def victims_by_tenant(pool: Pool, decision: Preempt, want: Size, tenant_rank: dict[str, int], policy: Policy,
                      rng: random.Random) -> Preempt:
    """The victims on a preemption's node chosen again tenant by tenant (issue 26): first from
    the batch tenant ranked first (furthest over its PSF share: tenancy.victim_tenant_order), then
    the next, each in the termination policy's order; a minimal set. `tenant_rank` maps each
    preemptible VM to its tenant's rank. The node stays the policy's choice. Unchanged when the
    tenants' order cannot cover the need (VMs in transit: placement's own answer stands)."""
    node = pool.nodes[pool.columns.position[decision.node_id]]
    backfill = [vm for vm in pool.on_node(decision.node_id) if is_victim(vm)]
    by_policy = {id(vm): i for i, vm in enumerate(termination_order(backfill, policy, pool.now, rng))}
    order = sorted(backfill, key=lambda vm: (tenant_rank.get(vm.vm_id, len(tenant_rank)), by_policy[id(vm)]))
    victims = _victims_in_order(backfill, want - node.room, order)
    if victims is None:
        return decision
    return Preempt(decision.node_id, tuple(vm.vm_id for vm in victims), sum(vm.work(pool.now) for vm in victims))


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
    """Where an on-demand VM of size `want` goes, and which backfill VMs must make room.

    Backfill is invisible to the choice of node: the nodes are compared by what on-demand VMs hold
    alone (every backfill VM counted as free), best fit, so that on-demand VMs pack and whole
    nodes stay whole for large requests. The best-fit nodes whose on-demand state is identical
    (the same capacity, the same on-demand allocation) tie: any of them leaves the pool's on-demand
    future the same, so with the same requests and releases the pool never serves on-demand worse
    with backfill than without. Nodes that hold on-demand VMs are each unique (their VMs leave at
    their own times): among those the one whose VMs came first is taken, backfill or not; so
    backfill decides only among best-fit nodes with no on-demand VM: free room first (best fit),
    then the cheapest victims by the termination policy, then, if only backfill VMs starting or
    stopping hold the room, those (the launch waits for them)."""
    if want.vcpus <= 0 or want.memory_mib <= 0:
        return Reject(f"a VM needs at least 1 vCPU and 1 MiB, not {want.vcpus} vCPUs and {want.memory_mib} MiB",
                      "invalid_size")
    c = pool.columns   # every node at once, in numpy: a pass over every node is most of a decision's time
    can_host = rows_where(c.up & (c.od_room_vcpus >= want.vcpus) & (c.od_room_memory >= want.memory_mib))
    if not len(can_host):
        return _infeasible(pool, want)
    tied = on_demand_best_fit(c, can_host)
    if len(tied) > 1 and _holds_on_demand(c, tied[0]):
        tied = tied[[_placed_first(pool, tied)]]
    fits = tied[(c.room_vcpus[tied] >= want.vcpus) & (c.room_memory[tied] >= want.memory_mib)]
    if len(fits):  # best fit on the free room too, the least spare vCPUs then memory then id
        best_fit = np.lexsort((c.name_rank[fits], c.room_memory[fits], c.room_vcpus[fits]))[0]
        return Place(pool.nodes[fits[best_fit]].node_id)
    return _cheapest_victims(pool, tied, want, policy, random.Random(seed)) or _through_transit(pool, tied, want)


ON_DEMAND_STATE = ("od_room_vcpus", "od_room_memory", "capacity_vcpus", "capacity_memory")


def on_demand_best_fit(columns: NodeArrays, rows: np.ndarray) -> np.ndarray:
    """The rows among `rows` that are the best fit for on-demand (the least on-demand room left,
    by vCPUs then memory, then the smallest node) and so tie: their on-demand state (capacity,
    and capacity less the on-demand room) is the same. In row order."""
    for name in ON_DEMAND_STATE:
        values = getattr(columns, name)[rows]
        rows = rows[values == values.min()]
    return rows


def _holds_on_demand(columns: NodeArrays, row: int) -> bool:
    return bool(columns.od_room_vcpus[row] < columns.capacity_vcpus[row] or
                columns.od_room_memory[row] < columns.capacity_memory[row])


def _placed_first(pool: Pool, tied: np.ndarray) -> int:
    """Which of these nodes (equal on-demand allocations, not empty) takes the request: the one
    whose on-demand VMs came first (the earliest booked, then its request id). Nodes equal in
    allocation but holding different VMs are not interchangeable (their VMs leave at different
    times), so backfill may not choose between them; this choice reads only the on-demand VMs,
    and so is the one the pool makes with or without backfill. (Room no lease explains, alone
    on a node, comes after any on-demand VM; then the node id.)"""
    def first(row: int) -> tuple:
        node = pool.nodes[row]
        placed = [vm.placed for vm in pool.on_node(node.node_id) if vm.role is VmRole.ON_DEMAND]
        return (min(placed) if placed else (math.inf, ""), node.node_id)
    return min(range(len(tied)), key=lambda i: first(int(tied[i])))


def _cheapest_victims(pool: Pool, feasible: np.ndarray, want: Size, policy: Policy,
                      rng: random.Random) -> Preempt | None:
    """Among the rows `feasible`, the node whose preemptible VMs make room at the least cost by the
    policy (None: no node's preemptible VMs cover what it lacks)."""
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
    if best is None:
        return None
    _, node_id, victims = best
    return Preempt(node_id, tuple(vm.vm_id for vm in victims), sum(vm.work(pool.now) for vm in victims))


def _through_transit(pool: Pool, tied: np.ndarray, want: Size) -> Decision:
    """Backfill VMs starting or stopping hold the room on every tied node: the first of them (by
    id) takes those VMs, then its preemptible ones youngest first, as victims; the launch waits
    for them (a starting one is stopped once its launch is answered). Its work lost is that of
    its preemptible victims: the others have none yet, or are already being stopped."""
    now = pool.now
    for row in tied[np.argsort(pool.columns.name_rank[tied], kind="stable")].tolist():
        node = pool.nodes[row]
        backfill = [vm for vm in pool.on_node(node.node_id) if vm.role is VmRole.BACKFILL]
        transit = sorted((vm for vm in backfill if not vm.preemptible), key=lambda vm: vm.vm_id)
        order = transit + termination_order([vm for vm in backfill if vm.preemptible], Policy.MOST_RECENT, now,
                                            random.Random(0))
        victims = _victims_in_order(backfill, want - node.room, order)
        if victims is not None:
            return Preempt(node.node_id, tuple(vm.vm_id for vm in victims),
                           sum(vm.work(now) for vm in victims if vm.preemptible))
    # cannot happen while NodeView sums match the VMs; say so rather than crash
    return Reject("the pool's books do not add up: a node has room on paper but no VMs to stop", "books_inconsistent")


def _infeasible(pool: Pool, want: Size) -> Reject:
    c = pool.columns
    up = np.flatnonzero(c.up)
    if not len(up):
        down = len(pool.nodes)
        return Reject(f"no node is up ({down} known, none reporting)", "no_node_up") if down else \
            Reject("the pool has no nodes", "no_nodes")
    # the most room counting backfill as free, by vCPUs then memory (capacity - pinned, the largest)
    vcpus, memory = c.od_room_vcpus[up], c.od_room_memory[up]
    best_vcpus = int(vcpus.max())
    best_memory = int(memory[vcpus == best_vcpus].max())
    return Reject(f"no node can host {want.vcpus} vCPUs and {want.memory_mib} MiB even after stopping every "
                  f"backfill VM: the most room on any of the {len(up)} up nodes, counting backfill VMs as free, is "
                  f"{best_vcpus} vCPUs and {best_memory} MiB", "no_room")
