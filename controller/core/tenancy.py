"""Tenants and their bounds, as pure arithmetic: PhoenixCloud's cooperative provisioning model
(Zhan et al., IEEE Trans. Computers 2013, section 3, "the cooperative resource provisioning
model", and the runtime algorithm it states; section 4 builds on it).

The paper's terms and ours:

- a *service provider* (SP) is a tenant; one whose requests need an immediate answer (web
  servers) has the higher priority and is an ``on_demand`` tenant here; one whose requests can
  queue (batch jobs) is a ``batch`` tenant, and batch tenants own backfill;
- each tenant states a *lower* and an *upper* bound. Within its lower bound capacity is the
  tenant's alone (no other tenant's on-demand VM takes it; backfill may use it while idle, and
  yields when the tenant needs it); between the bounds it is the tenant's first but lent while
  idle; nothing goes past the upper bound;
- *RBT*, the resource booking threshold, limits admission: the sum of all upper bounds may not
  pass capacity x RBT (RBT > 1 overbooks);
- *URR*, the usage rate reference: when the share of capacity allocated (to every tenant,
  backfill included) is over it, a batch tenant gets only its *PSF*, proportional sharing
  factor, of what it asks: its lower bound over the sum of the batch tenants' lower bounds.

Sizes are two dimensions (vCPUs and memory); every rule holds in each dimension separately, and
every fraction of a Size is rounded down, so no rounding ever grants past a bound.

Pure: plain frozen records in, plain records out; no clock, no I/O, no numpy (gleanctl may load
it to check a tenant before it sends one).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from gleaner_common import ids
from gleaner_common.ids import InvalidField

from .records import BACKFILL_TENANT, DEFAULT_TENANT, ZERO, Lease, Size

MAX_VCPUS = 1_000_000           # a bound past any pool Gleaner runs; catches typos and overflow
MAX_MEMORY_MIB = 1 << 40        # 1 EiB
MAX_RBT = 10.0                  # the paper tries 1 and 2; past 10 the booking check means nothing
MIN_RBT = 0.1
MAX_USAGE_RATE = 1000.0         # allocated / capacity may pass 1 when the pool shrinks
# A batch tenant's own backfill settings (controller.core.batch_fill); the others (policy, grace,
# recycling, interruption) are the pool's: they concern its on-demand users as much as the tenant.
TENANT_BACKFILL_KEYS = ("enabled", "image", "vcpus", "memory_mb", "max_instances")


class TenantKind(str, Enum):
    ON_DEMAND = "on_demand"   # PhoenixCloud's higher-priority SP: served at once
    BATCH = "batch"           # the lower-priority SP: its requests may wait; owns backfill


def check_size(size: Size, field: str) -> Size:
    """A Size of non-negative whole vCPUs and MiB within the module's bounds."""
    if not isinstance(size, Size):
        raise InvalidField(field, f"{size!r} is not a size (vCPUs, MiB)")
    ids.whole(size.vcpus, MAX_VCPUS, f"{field}.vcpus", "vCPUs")
    ids.whole(size.memory_mib, MAX_MEMORY_MIB, f"{field}.memory_mib", "MiB")
    return size


def show(size: Size) -> str:
    """A Size as an admin reads it in a refusal."""
    return f"{size.vcpus} vCPUs, {size.memory_mib} MiB"


@dataclass(frozen=True)
class Tenant:
    """A tenant (PhoenixCloud's SP, section 3): its name (an owner name, gleaner_common.ids.person),
    kind, and its two bounds. Construction checks them and raises InvalidField naming the field."""
    name: str
    kind: TenantKind
    lower: Size
    upper: Size

    def __post_init__(self) -> None:
        ids.person(self.name, "tenant.name")
        try:   # gleanctl spells it on-demand; the records on_demand
            kind = self.kind.replace("-", "_") if isinstance(self.kind, str) else self.kind
            object.__setattr__(self, "kind", TenantKind(kind))
        except ValueError:
            raise InvalidField("tenant.kind", f"{self.kind!r} for tenant {self.name!r} is not one of "
                                              "on_demand, batch") from None
        check_size(self.lower, "tenant.lower")
        check_size(self.upper, "tenant.upper")
        for dim, unit in (("vcpus", "vCPUs"), ("memory_mib", "MiB")):
            low, high = getattr(self.lower, dim), getattr(self.upper, dim)
            if low > high:
                raise InvalidField(f"tenant.lower.{dim}", f"{low} {unit} for tenant {self.name!r} is above "
                                                          f"its upper bound {high} {unit}")


@dataclass(frozen=True)
class TenancySettings:
    """The pool's two PhoenixCloud thresholds (section 3); the paper's baseline is 1 and 1
    (its sections 5.5 and 5.7; section 5.6.3 also runs URR 0.5, RBT 2)."""
    rbt: float = 1.0   # resource booking threshold: sum of upper bounds <= capacity x RBT
    urr: float = 1.0   # usage rate reference: above it, batch tenants get PSF of what they ask

    def __post_init__(self) -> None:
        for name, low, high in (("rbt", MIN_RBT, MAX_RBT), ("urr", 0.0, 1.0)):
            value = getattr(self, name)
            ids.number(value, low, high, f"tenancy.{name}")   # also refuses NaN


def total(sizes: Iterable[Size]) -> Size:
    """The sum of sizes."""
    out = ZERO
    for size in sizes:
        out = out + size
    return out


def booking_limit(capacity: Size, rbt: float) -> Size:
    """What the upper bounds may sum to: capacity x RBT, rounded down in each dimension."""
    return Size(_floor(capacity.vcpus * rbt), _floor(capacity.memory_mib * rbt))


def _floor(value: float) -> int:
    """Round down, forgiving the float error of a product such as 10 x 1.1 (11.000000000000002)
    or 100 x 1.15 (114.99999999999999): an admin who books 115 of 100 x 1.15 means 115."""
    return math.floor(value + 1e-9)


def tenant_of(lease: Lease, names: Iterable[str]) -> str:
    """The tenant a live VM belongs to: a backfill VM to the batch tenant it was launched for (its
    owner), else (adopted, or from before tenants) to the built-in batch tenant; an on-demand VM to
    the tenant named as its owner, else to default (an owner never borrows the batch tenant's name)."""
    if lease.role == "backfill":
        return lease.owner if lease.owner in names else BACKFILL_TENANT
    return owner_tenant(lease.owner, names)


def owner_tenant(owner: str, names: Iterable[str]) -> str:
    """The tenant an on-demand owner names: itself if a tenant has that name, else default."""
    return owner if owner in names and owner != BACKFILL_TENANT else DEFAULT_TENANT


# ---------------------------------------------------------------------------------- admission

@dataclass(frozen=True)
class Admission:
    """admit's answer. Both figures are always given, admitted or not, so a refusal names them."""
    admitted: bool
    upper_sum: Size       # every upper bound, the existing tenants' and the new ones'
    upper_limit: Size     # capacity x RBT, rounded down
    new_lower_sum: Size   # the new tenants' lower bounds
    idle: Size            # what is idle now
    reason: str


def admit(existing: Sequence[Tenant], new: Sequence[Tenant], capacity: Size, idle: Size,
          settings: TenancySettings) -> Admission:
    """PhoenixCloud's admission strategy (section 3, the model's second point): new tenants join
    only if (1) the sum of the upper bounds of all tenants, existing and new, is within capacity
    x RBT, and (2) the sum of the new tenants' lower bounds fits in what is idle now; both at
    once, in each dimension. The paper admits a pair of coordinated SPs at a time; any number
    may join here. Its "lower than" is read as "not more than", so a pool booked exactly to
    capacity x RBT (as the default tenants book it) is admitted. `idle` is the caller's figure;
    capacity held by backfill counts as idle, since backfill yields to a lower bound."""
    check_size(capacity, "capacity")
    check_size(idle, "idle")
    names = [t.name for t in existing]
    for tenant in new:
        if tenant.name in names:
            return _refuse_name(existing, new, capacity, idle, settings, tenant.name)
        names.append(tenant.name)
    upper_sum = total(t.upper for t in (*existing, *new))
    limit = booking_limit(capacity, settings.rbt)
    lower_sum = total(t.lower for t in new)
    uppers_ok, lowers_ok = upper_sum.fits_in(limit), lower_sum.fits_in(idle)
    figures = (f"sum of upper bounds {show(upper_sum)} against capacity x RBT {settings.rbt:g} = {show(limit)} "
               f"({'fits' if uppers_ok else 'over'}); new lower bounds {show(lower_sum)} against idle "
               f"{show(idle)} ({'fits' if lowers_ok else 'over'})")
    admitted = uppers_ok and lowers_ok
    reason = ("admitted: " if admitted else "refused: ") + figures
    return Admission(admitted, upper_sum, limit, lower_sum, idle, reason)


def _refuse_name(existing: Sequence[Tenant], new: Sequence[Tenant], capacity: Size, idle: Size,
                 settings: TenancySettings, name: str) -> Admission:
    """A refusal for a name already taken, with the figures still given."""
    upper_sum = total(t.upper for t in (*existing, *new))
    limit = booking_limit(capacity, settings.rbt)
    return Admission(False, upper_sum, limit, total(t.lower for t in new), idle,
                     f"refused: tenant name {name!r} is already taken")


# ---------------------------------------------------------------------- shrinking guarantees

@dataclass(frozen=True)
class EffectiveLower:
    """The lower bounds the pool can honour now. `scaled` is set when the pool is below the sum
    of the lower bounds in some dimension, for an event that says so."""
    lower: Mapping[str, Size]
    scaled: bool
    lower_sum: Size
    capacity: Size
    explain: str


def effective_lower(tenants: Sequence[Tenant], capacity: Size) -> EffectiveLower:
    """Every tenant's lower bound, or, in a dimension where the pool has shrunk below their sum
    (nodes down), each in proportion: capacity x lower / sum of lowers, rounded down, and the
    remainder handed out a unit at a time to the largest fractions (ties by name), so the shares
    add up to the capacity exactly and none exceeds its bound. The paper guarantees lower bounds
    by admission (section 3) and says nothing of a pool that shrinks; proportion is Gleaner's
    rule (issue 26)."""
    check_size(capacity, "capacity")
    lower_sum = total(t.lower for t in tenants)
    vcpus = _apportion({t.name: t.lower.vcpus for t in tenants}, capacity.vcpus)
    memory = _apportion({t.name: t.lower.memory_mib for t in tenants}, capacity.memory_mib)
    lower = {t.name: Size(vcpus[t.name], memory[t.name]) for t in tenants}
    scaled = not lower_sum.fits_in(capacity)
    explain = (f"pool {show(capacity)} is below the sum of lower bounds {show(lower_sum)}: each honoured in "
               "proportion" if scaled else f"lower bounds {show(lower_sum)} fit the pool {show(capacity)}")
    return EffectiveLower(lower, scaled, lower_sum, capacity, explain)


def _apportion(wants: Mapping[str, int], room: int) -> dict[str, int]:
    """Each its want if they all fit; else shares of `room` in proportion (largest remainder)."""
    whole = sum(wants.values())
    if whole <= room:
        return dict(wants)
    shares = {name: want * room // whole for name, want in wants.items()}
    left = room - sum(shares.values())
    by_fraction = sorted(wants, key=lambda name: (-(wants[name] * room % whole), name))
    for name in by_fraction[:left]:
        shares[name] += 1
    return shares


# -------------------------------------------------------------------------- on-demand verdict

@dataclass(frozen=True)
class Verdict:
    """on_demand_verdict's answer: `room` is the most this tenant's on-demand VMs may take now,
    pool-wide (placement on a node is the books' business)."""
    allowed: bool
    room: Size
    reserved_for_others: Size   # the other tenants' unused (effective) lower bounds
    bound: str                  # "" when allowed; "upper" or "others' lower bounds" when not
    reason: str


def on_demand_verdict(tenant: Tenant, usage_by_tenant: Mapping[str, Size], want: Size,
                      tenants: Sequence[Tenant], capacity: Size) -> Verdict:
    """Whether an on-demand request of `want` for `tenant` may go ahead, after PhoenixCloud's
    bounds (section 3, the model's first point, and Algorithm 1's higher-priority branch: served
    at once, but never past its upper bound, nor into the capacity guaranteed to another
    tenant). `usage_by_tenant` is what each tenant's non-preemptible VMs hold (on-demand VMs and
    a batch tenant's dedicated ones); backfill is never usage here, as backfill is invisible to
    on-demand placement. Every other tenant's unused effective lower bound, on-demand or batch,
    is reserved; the tenant's own is its to use."""
    check_size(want, "want")
    if tenant.name not in {t.name for t in tenants}:
        raise InvalidField("tenant", f"{tenant.name!r} is not among the pool's tenants")
    mine = usage_by_tenant.get(tenant.name, ZERO)
    after = mine + want
    up_room = _clip(tenant.upper - mine)
    if not after.fits_in(tenant.upper):
        return Verdict(False, up_room, ZERO, "upper",
                       f"tenant {tenant.name!r}: {show(mine)} in use plus {show(want)} asked is past its "
                       f"upper bound {show(tenant.upper)}")
    reserved = _reserved_for_others(tenant.name, usage_by_tenant, tenants, capacity)
    free = _clip(capacity - total(usage_by_tenant.values()) - reserved)
    room = _min(free, up_room)
    if not want.fits_in(room):
        return Verdict(False, room, reserved, "others' lower bounds",
                       f"tenant {tenant.name!r}: {show(want)} asked, {show(room)} free once {show(reserved)} is "
                       "kept for other tenants' lower bounds")
    return Verdict(True, room, reserved, "", f"tenant {tenant.name!r}: {show(want)} of {show(room)} free")


def _reserved_for_others(name: str, usage_by_tenant: Mapping[str, Size], tenants: Sequence[Tenant],
                         capacity: Size) -> Size:
    """The sum over the other tenants of what their effective lower bound still guarantees them."""
    lower = effective_lower(tenants, capacity).lower
    return total(_clip(lower[t.name] - usage_by_tenant.get(t.name, ZERO)) for t in tenants if t.name != name)


def _clip(size: Size) -> Size:
    return Size(max(0, size.vcpus), max(0, size.memory_mib))


def _min(a: Size, b: Size) -> Size:
    return Size(min(a.vcpus, b.vcpus), min(a.memory_mib, b.memory_mib))


# ----------------------------------------------------------------------------- batch tenants

@dataclass(frozen=True)
class Share:
    """A fraction of a Size per dimension, each in 0..1 (a PSF, or a share of batch usage)."""
    vcpus: float
    memory: float

    def __post_init__(self) -> None:
        for dim in ("vcpus", "memory"):
            value = getattr(self, dim)
            ids.number(value, 0.0, 1.0, f"psf.{dim}")

    def of(self, size: Size) -> Size:
        """This share of a size, rounded down."""
        return Size(_floor(max(0, size.vcpus) * self.vcpus), _floor(max(0, size.memory_mib) * self.memory))


def psf(tenant: Tenant, batch_tenants: Sequence[Tenant]) -> Share:
    """PhoenixCloud's proportional sharing factor (section 3, Algorithm 1's definition under
    case 2): the tenant's lower bound over the sum of the lower bounds of all batch tenants, in
    each dimension. Where that sum is 0 (no batch tenant has a lower bound in that dimension)
    the paper's ratio is undefined; each batch tenant then gets an equal share, 1/n, so the
    shares still add to 1 and none is starved."""
    if tenant.kind is not TenantKind.BATCH:
        raise InvalidField("tenant.kind", f"tenant {tenant.name!r} is {tenant.kind.value}; PSF is for batch tenants")
    batch = [t for t in batch_tenants if t.kind is TenantKind.BATCH]
    if tenant.name not in {t.name for t in batch}:
        raise InvalidField("tenant", f"{tenant.name!r} is not among the batch tenants")
    return Share(_ratio(tenant.lower.vcpus, [t.lower.vcpus for t in batch]),
                 _ratio(tenant.lower.memory_mib, [t.lower.memory_mib for t in batch]))


def _ratio(mine: int, every: Sequence[int]) -> float:
    whole = sum(every)
    return mine / whole if whole else 1.0 / len(every)


def usage_rate(allocated: Size, capacity: Size) -> float:
    """The paper's usage rate (section 3): resources allocated to all tenants, backfill included,
    over the capacity; the larger of the two dimensions (the scarcer one decides). An empty pool
    is fully used."""
    rates = [a / c if c else (0.0 if a <= 0 else math.inf) for a, c in
             ((allocated.vcpus, capacity.vcpus), (allocated.memory_mib, capacity.memory_mib))]
    rate = max(rates)
    return MAX_USAGE_RATE if rate > MAX_USAGE_RATE else max(0.0, rate)


def batch_grant(requested: Size, unallocated: Size, usage_rate: float, settings: TenancySettings,
                psf: Share, upper_left: Size) -> Size:
    """What a batch tenant is granted, after PhoenixCloud's Algorithm 1, lower-priority branch
    (section 3, cases 1-3):

    1. never past its upper bound (`upper_left` = upper bound - what it holds). The paper grants
       nothing to a request that would pass it; Gleaner's launcher asks for as much as it could
       use, so the request is cut to `upper_left` instead, and the bound holds either way;
    2. usage rate over URR: min(requested, unallocated) x PSF;
    3. usage rate not over URR: what it asks if that fits in the unallocated capacity, else
       unallocated x PSF (and never more than it asks).

    The paper's boundary is kept: at exactly URR, case 3 applies. Each dimension is rounded
    down. `unallocated` is capacity minus everything allocated, backfill included."""
    for size, field in ((requested, "requested"), (upper_left, "upper_left")):
        check_size(_clip(size), field)
    ids.number(usage_rate, 0.0, MAX_USAGE_RATE, "usage_rate")
    asked = _min(_clip(requested), _clip(upper_left))
    free = _clip(unallocated)
    if usage_rate > settings.urr:
        return psf.of(_min(asked, free))
    if asked.fits_in(free):
        return asked
    return _min(asked, psf.of(free))


def batch_shares(batch_usage: Mapping[str, Size]) -> dict[str, Share]:
    """Each batch tenant's share of what all batch tenants hold, per dimension (0 where none do)."""
    whole = total(batch_usage.values())
    return {name: Share(used.vcpus / whole.vcpus if whole.vcpus else 0.0,
                        used.memory_mib / whole.memory_mib if whole.memory_mib else 0.0)
            for name, used in batch_usage.items()}


def victim_tenant_order(batch_usage: Mapping[str, Size], shares: Mapping[str, Share]) -> list[str]:
    """The batch tenants to take backfill victims from, in order (issue 26, after PhoenixCloud's
    PSF, section 3): furthest over its PSF share first, measured as its share of what all batch
    tenants hold minus its PSF, the larger of the two dimensions; ties by name. Tenants holding
    nothing are left out (no victims there); one with no share given counts as PSF 0."""
    held = {name: used for name, used in batch_usage.items() if used.vcpus > 0 or used.memory_mib > 0}
    actual = batch_shares(held)
    zero = Share(0.0, 0.0)

    def excess(name: str) -> float:
        fair = shares.get(name, zero)
        return max(actual[name].vcpus - fair.vcpus, actual[name].memory - fair.memory)

    return sorted(held, key=lambda name: (-excess(name), name))
