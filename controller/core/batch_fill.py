"""Batch tenants own backfill: the launcher grants idle capacity to each after PhoenixCloud's
algorithm for a lower-priority request (controller.core.tenancy.batch_grant), and launches each
one's VMs with its own backfill settings.

Grants are made tenant after tenant in one fill, the one furthest below its PSF share of what
the batch tenants hold first, each against what the grants before it left: below URR a tenant
gets what it asks if it fits (up to its upper bound), above it min(asked, unallocated) x PSF.
What it asks is as many of its VMs as its settings allow (max_instances, else as many as the
pool could hold), less what it holds. A grant is capacity; the plan (backfill_plan) then places
as many of the tenant's VMs as fit in it on the selected nodes with room.

Only used when some batch tenant besides the built-in one exists, or the built-in one is
bounded (TenantBounds._batch_fill); otherwise the pool-wide launcher runs as before tenants.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .backfill_plan import fitting_count, plan_backfill
from .records import (HIBERNATED, ZERO, BackfillConfig, Effect, Launch, Lease, Size, VmRole, Write)
from .tenancy import (TENANT_BACKFILL_KEYS, Share, Tenant, TenancySettings, TenantKind, batch_grant, batch_shares, psf, total, usage_rate,
                      victim_tenant_order)



def tenant_config(pool: BackfillConfig, own: Mapping[str, object]) -> BackfillConfig:
    """A batch tenant's backfill settings: the pool's, with its own keys. Disabled with the pool."""
    config = dataclasses.replace(pool, **{k: v for k, v in own.items() if k in TENANT_BACKFILL_KEYS})
    return config if pool.enabled else dataclasses.replace(config, enabled=False)


@dataclass(frozen=True)
class Grant:
    tenant: str
    asked: Size
    granted: Size
    vms: int          # whole VMs of the tenant's size in the grant
    psf: Share


def grant_order(batch: Sequence[Tenant], held: Mapping[str, Size], shares: Mapping[str, Share]) -> list[Tenant]:
    """The batch tenants, furthest below their PSF share of what the batch tenants hold first (the
    reverse of tenancy.victim_tenant_order), ties by name."""
    actual = batch_shares({t.name: held.get(t.name, ZERO) for t in batch})

    def deficit(tenant: Tenant) -> float:
        fair, mine = shares[tenant.name], actual[tenant.name]
        return max(mine.vcpus - fair.vcpus, mine.memory - fair.memory)

    return sorted(batch, key=lambda t: (deficit(t), t.name))


def batch_grants(tenants: Sequence[Tenant], configs: Mapping[str, BackfillConfig], held: Mapping[str, Size],
                 counts: Mapping[str, int], allocated: Size, capacity: Size, settings: TenancySettings) -> list[Grant]:
    """Each enabled batch tenant's grant in this fill, in grant order. `held`: what each tenant's
    VMs hold (backfill and dedicated), `counts`: its backfill VMs, `allocated`: what every VM in
    the pool holds. Every tenant is judged against the pool as the fill found it (its usage rate
    and unallocated capacity), so above URR the grants split the unallocated capacity by PSF,
    whose shares add up to 1; then, in grant order, no grant passes what the ones before it left
    (below URR the first tenants' asks are served whole, as the paper serves requests in turn). Pure."""
    # PSF among the tenants that launch backfill: a disabled one's share would stay idle
    batch = [t for t in tenants if t.kind is TenantKind.BATCH and configs[t.name].enabled]
    shares = {t.name: psf(t, batch) for t in batch}
    rate = usage_rate(allocated, capacity)
    unallocated = _clip(capacity - allocated)
    left = unallocated
    grants: list[Grant] = []
    for tenant in grant_order(batch, held, shares):
        config = configs[tenant.name]
        asked = _asked(config, counts.get(tenant.name, 0), capacity)
        if not config.max_instances:   # it takes what there is: its ask is what is unallocated, so it
            asked = Size(min(asked.vcpus, unallocated.vcpus), min(asked.memory_mib, unallocated.memory_mib))
            # fits below URR (the paper's "else unallocated x PSF" would starve a tenant whose
            # lower bound is 0 whenever anything at all is allocated)
        upper_left = _clip(tenant.upper - held.get(tenant.name, ZERO))
        granted = batch_grant(asked, unallocated, rate, settings, shares[tenant.name], upper_left)
        granted = Size(min(granted.vcpus, left.vcpus), min(granted.memory_mib, left.memory_mib))
        vms = fitting_count(granted, config.size)
        grants.append(Grant(tenant.name, asked, granted, vms, shares[tenant.name]))
        left = _clip(left - Size(config.vcpus * vms, config.memory_mb * vms))
    return grants


def _clip(size: Size) -> Size:
    return Size(max(size.vcpus, 0), max(size.memory_mib, 0))


def _asked(config: BackfillConfig, count: int, capacity: Size) -> Size:
    """As many of the tenant's VMs as its settings allow, less those it runs: with no
    max_instances, as many as the pool could hold (batch_grants then cuts that to what is
    unallocated)."""
    if config.max_instances:
        more = max(config.max_instances - count, 0)
    else:
        more = fitting_count(capacity, config.size)
    return Size(config.vcpus * more, config.memory_mb * more)


class BatchFilling:
    """Stage: the backfill launcher when batch tenants share backfill (see the module's doc)."""

    def _fill_batch_tenants(self, now: float, lanes) -> list[Effect]:
        """Grant, plan and book each batch tenant's launches; recycle VMs past their longest life."""
        pool_config = self.backfill
        pool = self.snapshot(now)
        effects: list[Effect] = []
        for vm_id in plan_backfill(pool, pool_config, []).recycles:
            effects += self._stop(self.leases[vm_id], pool_config.grace_seconds, now,
                                  f"recycled after {pool_config.duration_seconds} s")
        configs = self.tenant_configs()
        for grant in self.current_grants(now):
            if grant.vms <= 0:
                continue
            effects += self._launch_for(grant, configs[grant.tenant], lanes, now)
        return effects

    def tenant_configs(self) -> dict[str, BackfillConfig]:
        """Each batch tenant's backfill settings: the pool's with its own keys (the built-in tenant
        has none unless one was set for it, so its settings are the pool's)."""
        pool = self.backfill
        configs = {t.name: tenant_config(pool, self.tenant_backfill.get(t.name, {}))
                   for t in self.tenants if t.kind is TenantKind.BATCH}
        # being deleted, or its goal's job done: granted nothing more
        for name in (self.draining | self.goals_done()).intersection(configs):
            configs[name] = dataclasses.replace(configs[name], enabled=False)
        return configs

    def current_grants(self, now: float) -> list[Grant]:
        """The grants a fill would make now (goal_sizing's residual reads them too)."""
        self._refresh_views()
        held = {name: self.tenant_held(name) for name in self._tenant_names}
        counts: dict[str, int] = {}
        for lease in self.leases.values():
            if lease.role == "backfill" and lease.state != HIBERNATED:
                name = self.tenant_of_lease(lease)
                counts[name] = counts.get(name, 0) + 1
        up = [v for v in self._node_views.values() if v.up]
        allocated = total(v.allocated for v in up)
        return batch_grants(self.tenants, self.tenant_configs(), held, counts, allocated, self.tenant_capacity(),
                            self.tenancy_settings)

    def _launch_for(self, grant: Grant, config: BackfillConfig, lanes, now: float) -> list[Effect]:
        """Up to grant.vms of the tenant's VMs on the selected nodes with room, best first."""
        pool = self.snapshot(now)   # afresh: the tenants before it booked their launches
        unable = self._unable(config.memory_mb, config.image)
        targets = [n for n in self.selected if n not in unable and n not in lanes.busy
                   and now >= self.launch_backoff.get(n, (0.0, 0))[0]]
        running = sum(n.backfill_vms for n in pool.nodes)
        # the plan's budget counts every backfill VM of the pool: this tenant's grant on top of them
        limited = dataclasses.replace(config, max_instances=running + grant.vms)
        cpu_room = self.productivity if self.settings.use_prediction else None
        effects: list[Effect] = []
        for node_id in lanes.cap(plan_backfill(pool, limited, targets, cpu_room).launches):
            asleep = self._tenant_asleep(node_id, grant.tenant, config.size)
            if asleep is not None:   # its own hibernated VM takes the room back before a new one
                effects += self._resume(asleep, now)
                continue
            lease = self._new_lease(VmRole.BACKFILL, node_id, config.size, config.image, grant.tenant, "starting",
                                    now, now + self.settings.launch_timeout)
            self._book(lease, now)
            effects += [Write(created=(lease,)), Launch(lease)]
        return effects

    def victim_ranks(self, node_id: str) -> dict[str, int] | None:
        """Each preemptible backfill VM on the node: its tenant's place in tenancy.victim_tenant_order
        (the batch tenant furthest over its PSF share of what the batch tenants hold first); None
        when one tenant or none holds backfill there (the policy alone decides)."""
        on_node = [l for l in self.by_node.get(node_id, {}).values() if l.role == "backfill" and l.state == "running"]
        owners = {self.tenant_of_lease(l) for l in on_node}
        if len(owners) < 2:
            return None
        batch = [t for t in self.tenants if t.kind is TenantKind.BATCH]
        shares = {t.name: psf(t, batch) for t in batch}
        order = victim_tenant_order(dict(self.backfill_usage), shares)
        rank = {name: i for i, name in enumerate(order)}
        return {l.lease_id: rank.get(self.tenant_of_lease(l), len(rank)) for l in on_node}

    def _tenant_asleep(self, node_id: str, tenant: str, room: Size) -> Lease | None:
        if not self._asleep_on.get(node_id):
            return None
        asleep = [l for l in self.by_node.get(node_id, {}).values()
                  if l.state == HIBERNATED and self.tenant_of_lease(l) == tenant
                  and l.vcpus <= room.vcpus and l.memory_mib <= room.memory_mib]
        return min(asleep, key=lambda l: (l.hibernated_at or 0.0, l.lease_id), default=None)
