"""The backfill launcher's plan, as a pure function over a snapshot of the pool: where new backfill
VMs go (the selected nodes with room, in order) and which VMs are past their longest life.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from .records import ZERO, BackfillConfig, Size, VmRole, plain_init


_launched_at = attrgetter("launched_at")
from .snapshot import NodeView, Pool, rows_where


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
            count = min(count, vms_by_cpu(cpu_room[node_id], node.backfill_vcpus, size_vcpus))
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


def vms_by_cpu(cpu_room: float, backfill_vcpus: int, vm_vcpus: int) -> int:
    """Backfill VMs a node's potential productivity leaves room for, to the nearest VM: half a free
    core is worth a volunteer vCPU."""
    return max(int((cpu_room - backfill_vcpus) / max(vm_vcpus, 1) + 0.5), 0)


def fitting_count(room: Size, size: Size) -> int:
    return _fitting(room.vcpus, room.memory_mib, size.vcpus, size.memory_mib)


def _fitting(room_vcpus: int, room_memory: int, vcpus: int, memory_mib: int) -> int:
    if room_vcpus < 0 or room_memory < 0:
        return 0
    by_cpu = room_vcpus // vcpus if vcpus else 0
    by_memory = room_memory // memory_mib if memory_mib else 0
    return max(min(by_cpu, by_memory), 0)
