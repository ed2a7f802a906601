"""Stage: tenants' bounds on on-demand requests (PhoenixCloud's model, the arithmetic in
controller.core.tenancy).

Every on-demand VM belongs to a tenant: the one named as its owner, else the built-in
``default``. The books keep what each tenant's non-preemptible VMs hold (on-demand VMs, and a
batch tenant's dedicated ones); backfill is never counted, since backfill is invisible to
on-demand placement. Before placement, a request is checked against its tenant's upper bound
and against the capacity guaranteed to the other tenants (their unused lower bounds, scaled in
proportion when nodes are down and the pool is below their sum). The bounds are pool-wide
figures, as in the paper: which node a VM goes to is placement's business.

With only the built-in tenants (unbounded, no lower bound) nothing is checked, so a pool that
never made a tenant decides exactly as before.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from .policy import Reject
from .records import (BACKFILL_TENANT, DEFAULT_TENANT, ZERO, Audit, Effect, Lease, Size, TenantRecord, Write)
from .tenancy import (MAX_MEMORY_MIB, MAX_VCPUS, Tenant, TenantKind, effective_lower, on_demand_verdict, owner_tenant,
                      show, tenant_of, total)

UNBOUNDED = Size(MAX_VCPUS, MAX_MEMORY_MIB)
BUILT_IN = (Tenant(DEFAULT_TENANT, TenantKind.ON_DEMAND, ZERO, UNBOUNDED),
            Tenant(BACKFILL_TENANT, TenantKind.BATCH, ZERO, UNBOUNDED))


def tenant_of_record(record: TenantRecord) -> Tenant:
    """The pure tenant of a stored one: an unbounded upper (0, 0) is the largest bound there is."""
    return Tenant(record.name, TenantKind(record.kind), record.lower, UNBOUNDED if record.unbounded else record.upper)


def _stored_table(text: str) -> dict | None:
    """A tenant's stored JSON table, or None if it is not one (never an error: one bad row must
    not stop the controller from starting)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _binds(tenant: Tenant) -> bool:
    """Whether a tenant's bounds can ever refuse a request: a lower bound (guaranteed, so kept from
    others) or a finite upper bound."""
    return tenant.lower != ZERO or tenant.upper != UNBOUNDED


def dedicated_bound(tenant: Tenant) -> Tenant:
    """The bounds a tenant's non-preemptible VMs answer to: an on-demand tenant's own; a batch
    tenant's dedicated VMs (RHIC's dedicated capacity) stay within its lower bound (issue 26)."""
    if tenant.kind is TenantKind.BATCH:
        return Tenant(tenant.name, tenant.kind, tenant.lower, tenant.lower)
    return tenant


class TenantBounds:
    """Stage: the tenants, what each one's non-preemptible VMs hold, and the check of an on-demand
    request against the bounds. Kept by the kernel's hooks (_view_lease, _unview_lease)."""

    def _init_bounds(self) -> None:
        self.tenants: tuple[Tenant, ...] = BUILT_IN
        self._tenant_names: frozenset[str] = frozenset(t.name for t in BUILT_IN)
        self._bounded = False                          # some tenant's bounds can refuse a request
        self._held_by: dict[str, tuple[str, Size, bool]] = {}   # live lease -> (tenant, size, backfill)
        self.tenant_usage: dict[str, Size] = {}         # tenant -> what its non-preemptible VMs hold
        self.backfill_usage: dict[str, Size] = {}       # batch tenant -> what its backfill VMs hold now
        self.tenant_backfill: dict[str, dict] = {}      # batch tenant -> its own backfill settings
        self._batch_fill = False                        # the launcher grants by tenant (batch_fill.py)
        self.draining: set[str] = set()                 # batch tenants being deleted: granted nothing
        self.unreadable_settings: list[tuple[str, str, str]] = []
        self._scaled: bool | None = None               # the lower bounds were last seen scaled down

    def set_tenants(self, tenants: Iterable[Tenant | TenantRecord], backfill: Mapping[str, Mapping] | None = None
                    ) -> None:
        """The pool's tenants (the store's): the built-in ones are kept if not given. A batch
        tenant's own backfill settings come from its record (or `backfill`, by name): the keys of
        TENANT_BACKFILL_KEYS, the pool-wide settings for the rest."""
        records = list(tenants)
        given = [t if isinstance(t, Tenant) else tenant_of_record(t) for t in records]
        names = {t.name for t in given}
        for gone in self._tenant_names - names - {t.name for t in BUILT_IN}:
            self.progress.forget_tenant(gone)   # deleted: one made again under its name starts afresh
        self.tenants = tuple(given) + tuple(t for t in BUILT_IN if t.name not in names)
        self._tenant_names = frozenset(t.name for t in self.tenants)
        self._bounded = any(_binds(t) for t in self.tenants)
        own = dict(backfill or {})
        self.unreadable_settings = []   # (tenant, what, why): the service logs them
        for record in records:
            if isinstance(record, TenantRecord) and record.backfill:
                parsed = _stored_table(record.backfill)
                if parsed is None:   # written by another version, or by hand: the pool-wide settings
                    self.unreadable_settings.append((record.name, "backfill", record.backfill[:200]))
                else:
                    own[record.name] = parsed
        self.tenant_backfill = {t.name: dict(own.get(t.name, {})) for t in self.tenants if t.kind is TenantKind.BATCH}
        self._goals_from(records)
        # Only the built-in batch tenant, unbounded, with no settings nor goal of its own: the
        # pool-wide launcher, as before tenants.
        self._batch_fill = any(t.kind is TenantKind.BATCH and (t.name != BACKFILL_TENANT or _binds(t)
                                                               or self.tenant_backfill.get(t.name)
                                                               or t.name in self.tenant_goals)
                               for t in self.tenants)
        self._held_by.clear()
        self.tenant_usage.clear()
        self.backfill_usage.clear()
        for lease in self.leases.values():
            self._hold(lease)

    def tenant_named(self, owner: str) -> Tenant:
        """The tenant an on-demand VM's owner names: itself if a tenant has that name (never the
        built-in backfill tenant, whose VMs are backfill), else the built-in default."""
        name = owner_tenant(owner, self._tenant_names)
        return next(t for t in self.tenants if t.name == name)

    def tenant_of_lease(self, lease: Lease) -> str:
        return tenant_of(lease, self._tenant_names)

    def tenant_held(self, name: str) -> Size:
        """What the tenant's VMs hold now: its backfill and its non-preemptible VMs (what its upper
        bound caps)."""
        return self.backfill_usage.get(name, ZERO) + self.tenant_usage.get(name, ZERO)

    # -- the kernel's hooks ----------------------------------------------------------------------

    def _view_lease(self, lease: Lease) -> None:
        super()._view_lease(lease)
        self._hold(lease)

    def _unview_lease(self, node_id: str, lease_id: str) -> None:
        super()._unview_lease(node_id, lease_id)
        held = self._held_by.pop(lease_id, None)
        if held is not None:
            name, size, backfill = held
            usage = self.backfill_usage if backfill else self.tenant_usage
            usage[name] = usage[name] - size

    def _hold(self, lease: Lease) -> None:
        """Count a live lease for its tenant: an on-demand one whole from its booking (even while
        it waits for its victims' memory) until it ends; a backfill one for what it holds in its
        state (a hibernated VM holds nothing)."""
        if lease.lease_id in self._held_by:
            return
        backfill = lease.role == "backfill"
        size = lease.held if backfill else lease.size
        if backfill and size == ZERO:
            return
        name = tenant_of(lease, self._tenant_names)
        self._held_by[lease.lease_id] = (name, size, backfill)
        usage = self.backfill_usage if backfill else self.tenant_usage
        usage[name] = usage.get(name, ZERO) + size

    # -- decisions -------------------------------------------------------------------------------

    def tenant_capacity(self) -> Size:
        """The pool's capacity for the bounds: every node not down (a suspect node still holds its VMs)."""
        return total(n.capacity for n in self.nodes.values() if n.state != "down")

    def effective_lower_bound(self, name: str) -> Size:
        """What the tenant's lower bound guarantees it now (tenancy.effective_lower: honoured in
        proportion while the pool is below the sum of the lower bounds)."""
        return effective_lower(self.tenants, self.tenant_capacity()).lower.get(name, ZERO)

    def bounds_verdict(self, owner: str, want: Size) -> Reject | None:
        """None when the request's tenant may take `want` more; else the rejection, naming the bound.
        Past its own upper bound: code tenant_upper_bound (waiting would not help until the tenant
        releases a VM); into the other tenants' guaranteed capacity: tenant_lower_bounds."""
        if not self._bounded:
            return None
        tenant = dedicated_bound(self.tenant_named(owner))
        tenants = [tenant if t.name == tenant.name else t for t in self.tenants]
        verdict = on_demand_verdict(tenant, self.tenant_usage, want, tenants, self.tenant_capacity())
        if verdict.allowed:
            return None
        if verdict.bound == "upper":
            what = "its lower bound (a batch tenant's dedicated VMs)" if tenant.kind is TenantKind.BATCH else \
                "its upper bound"
            return Reject(f"{verdict.reason} ({what})", "tenant_upper_bound")
        return Reject(verdict.reason, "tenant_lower_bounds")

    def bounds_scaled(self, now: float) -> list[Effect]:
        """An event when the pool's capacity falls below the sum of the lower bounds (nodes down:
        each is honoured in proportion from then on) and when it is back above it."""
        if not any(t.lower != ZERO for t in self.tenants):
            self._scaled = None
            return []
        lower = effective_lower(self.tenants, self.tenant_capacity())
        if lower.scaled == bool(self._scaled):
            return []
        was, self._scaled = self._scaled, lower.scaled
        if was is None and not lower.scaled:
            return []   # the first look, and all is well: nothing to say
        detail = dict(capacity=show(lower.capacity), lower_sum=show(lower.lower_sum), explain=lower.explain,
                      honoured=", ".join(f"{name}={show(size)}" for name, size in sorted(lower.lower.items())
                                         if size != ZERO))
        kind = "tenants.lower_bounds_scaled" if lower.scaled else "tenants.lower_bounds_restored"
        return [Write(events=(Audit(kind, detail=detail),))]
