"""Tenants: their names, kinds and bounds as gleanctl and the controller check them, which tenant
a VM belongs to, and the admission check (PhoenixCloud's two conditions).

Pure: no gRPC, SQLite or clock. The service (controller/service.py, its tenant methods) reads the
books and the store, asks these functions, and writes. admission_problem is the one place the
admission rule lives; it will later be answered by the pure core's arithmetic (core/tenancy.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from gleaner_common import ids
from gleaner_common.ids import InvalidField

from .checks import MAX_NODE_CPUS, MAX_NODE_MEMORY_MIB
from .core.tenancy import booking_limit, owner_tenant as tenant_of_owner, tenant_of
from .core.records import (BACKFILL_TENANT, BUILT_IN_TENANTS, DEFAULT_TENANT, TENANT_KINDS, ZERO, Lease, Size,
                           TenantRecord, VmRole)

# A tenant's bound is at most a large pool's worth (4096 nodes of the largest node we accept).
MAX_BOUND_VCPUS = 4096 * MAX_NODE_CPUS
MAX_BOUND_MEMORY_MIB = 4096 * MAX_NODE_MEMORY_MIB
# [tenants] in the controller's configuration: RBT, the booking threshold (the sum of the upper
# bounds may reach capacity x RBT: above 1 overbooks), and URR, the usage reference above which
# batch tenants share idle capacity by PSF. The paper's baseline is 1 and 1.
RBT_RANGE = (0.1, 10.0)
URR_RANGE = (0.01, 1.0)
UNBOUNDED = "unbounded"
BOUND_FIELDS = ("lower_vcpus", "lower_memory_mib", "upper_vcpus", "upper_memory_mib")
SIZE_FORMAT = "CPUS,MIB (two whole numbers, e.g. 4,8192)"


class TenantNotFound(LookupError):
    pass


class TenantExists(RuntimeError):
    pass


class TenantRefused(RuntimeError):
    """The call is understood but the pool says no (admission, live VMs, a built-in tenant);
    nothing was written."""


def name(value: str, field: str = "name") -> str:
    """A tenant's name follows the owners' rules (gleaner_common.ids.person): an on-demand VM
    belongs to the tenant named as its owner."""
    return ids.person(value, field)


def kind(value: str, field: str = "kind") -> str:
    """on_demand or batch (gleanctl's on-demand is taken too)."""
    word = value.replace("-", "_") if isinstance(value, str) else value
    if word not in TENANT_KINDS:
        raise InvalidField(field, f"{str(value)[:40]!r} is not a tenant kind: on-demand or batch")
    return word


def parse_size(text: str, field: str, allow_unbounded: bool = False) -> Size:
    """"CPUS,MIB" as a Size, checked by bounds(); `unbounded` (only where allowed) is 0,0."""
    if allow_unbounded and text == UNBOUNDED:
        return ZERO
    parts = text.split(",") if isinstance(text, str) else []
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise InvalidField(field, f"{str(text)[:40]!r} is not {SIZE_FORMAT}")
    return Size(int(parts[0]), int(parts[1]))


def bounds(tenant: str, lower: Size, upper: Size) -> None:
    """A lower bound of whole numbers from 0, an upper bound of whole numbers from 1 (or, for a
    built-in tenant, 0,0: unbounded), each figure at most a large pool's, and lower <= upper."""
    for field, size, low in (("lower", lower, 0), ("upper", upper, 1)):
        if field == "upper" and size == ZERO and tenant in BUILT_IN_TENANTS:
            continue
        ids.bounded(size.vcpus, low, MAX_BOUND_VCPUS, f"{field} vCPUs")
        ids.bounded(size.memory_mib, low, MAX_BOUND_MEMORY_MIB, f"{field} MiB", "MiB")
    if upper != ZERO and not lower.fits_in(upper):
        raise InvalidField("lower", f"{lower.vcpus},{lower.memory_mib} is above the upper bound "
                                    f"{upper.vcpus},{upper.memory_mib}: a lower bound is at most the upper")


def checked(tenant: str, tenant_kind: str, lower: Size, upper: Size) -> str:
    """A new tenant's name, kind and bounds checked (InvalidField names the first that is wrong);
    returns the kind as stored."""
    name(tenant)
    tenant_kind = kind(tenant_kind)
    if upper == ZERO and tenant not in BUILT_IN_TENANTS:
        raise InvalidField("upper", "0,0 (unbounded) is only for the built-in tenants; give CPUS,MIB of at least 1,1")
    bounds(tenant, lower, upper)
    return tenant_kind


def created(tenant: str, tenant_kind: str, lower: Size, upper: Size, at: float) -> TenantRecord:
    """A new tenant's record, checked; a built-in name is TenantExists (they exist from the
    store's first open, and are never made again)."""
    tenant_kind = checked(tenant, tenant_kind, lower, upper)
    if tenant in BUILT_IN_TENANTS:
        raise TenantExists(f"tenant {tenant!r} is built in and exists already; `gleanctl tenant set` changes its bounds")
    return TenantRecord(tenant, tenant_kind, lower.vcpus, lower.memory_mib, upper.vcpus, upper.memory_mib, at)


def usage(leases: Iterable[Lease], names: Iterable[str]) -> dict[str, tuple[Size, list[str]]]:
    """Per tenant: what its live VMs hold now, and their lease ids."""
    names = set(names)
    found: dict[str, tuple[Size, list[str]]] = {n: (ZERO, []) for n in names}
    for lease in leases:
        owner = tenant_of(lease, names)
        held, vms = found.setdefault(owner, (ZERO, []))
        vms.append(lease.lease_id)
        found[owner] = (held + lease.held, vms)
    return found


def idle_for(others: Sequence[TenantRecord], used: dict[str, tuple[Size, list[str]]], capacity: Size) -> Size:
    """What is idle for a new lower bound: the capacity less what each other tenant has committed.
    An on-demand tenant commits the larger of its lower bound and what its VMs hold, per figure; a
    batch tenant its lower bound only: its backfill is preempted for any on-demand VM, so it never
    stands in a guarantee's way."""
    committed = ZERO
    for tenant in others:
        held = used.get(tenant.name, (ZERO, []))[0] if tenant.kind == "on_demand" else ZERO
        committed = committed + Size(max(tenant.lower_vcpus, held.vcpus), max(tenant.lower_memory_mib, held.memory_mib))
    return Size(max(capacity.vcpus - committed.vcpus, 0), max(capacity.memory_mib - committed.memory_mib, 0))


def booked(tenant: TenantRecord) -> Size:
    """What a tenant's upper bound adds to admission's sum (an unbounded one: nothing)."""
    return ZERO if tenant.unbounded else tenant.upper


def takes_nothing_more(old: TenantRecord, new: TenantRecord) -> bool:
    """Whether a change of bounds asks the pool for nothing more: its lower bound and what its
    upper bound books both stay or shrink (a bounded upper given to an unbounded tenant books more)."""
    return new.lower.fits_in(old.lower) and booked(new).fits_in(booked(old))


def admission_problem(existing: Sequence[TenantRecord], new: TenantRecord, capacity: Size, idle: Size,
                      rbt: float, urr: float) -> str | None:
    """PhoenixCloud's two conditions for admitting `new` beside `existing` (the others): the sum of
    the upper bounds stays within capacity x RBT, and the new lower bounds fit in what is idle.
    None when both hold, else why not, naming both figures of both conditions. An unbounded upper
    (the built-in tenants') is left out of the sum: it takes what the others leave. URR steers
    the batch tenants' shares, not admission (accepted here for the core's rule to come)."""
    del urr
    uppers = sum((booked(t) for t in (*existing, new)), ZERO)
    limit = booking_limit(capacity, rbt)   # the core's rounding: 100 x 1.15 books 115, not 114
    upper_ok = uppers.fits_in(limit)
    lower_ok = new.lower.fits_in(idle)
    if upper_ok and lower_ok:
        return None
    upper_text = (f"the upper bounds would sum to {_size(uppers)}, {'within' if upper_ok else 'over'} capacity "
                  f"{_size(capacity)} x RBT {rbt:g} = {_size(limit)}")
    lower_text = (f"the lower bound {_size(new.lower)} {'fits' if lower_ok else 'does not fit'} in what is idle, "
                  f"{_size(idle)}")
    return f"tenant {new.name!r} not admitted: {upper_text}; {lower_text}"


def _size(size: Size) -> str:
    return f"{size.vcpus} vCPUs, {size.memory_mib} MiB"
