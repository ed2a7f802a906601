"""Properties of PhoenixCloud's bounds (controller/core/tenancy.py) over random tenants and random
sequences of requests and releases: no tenant is pushed below its lower bound by another tenant's
on-demand VM; no batch tenant is granted past its upper bound; admission never lets the upper
bounds pass capacity x RBT; the PSF shares of the batch tenants add to 1."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from controller.core.records import ZERO, Size
from controller.core.tenancy import (Share, TenancySettings, Tenant, admit, batch_grant, effective_lower,
                                     on_demand_verdict, psf, show)

NAMES = ["t0", "t1", "t2", "t3", "t4"]


def sizes(high: int = 64) -> st.SearchStrategy[Size]:
    return st.builds(Size, st.integers(0, high), st.integers(0, high * 1024))


@st.composite
def tenants(draw: st.DrawFn, name: str, high: int = 32) -> Tenant:
    lower = draw(sizes(high))
    extra = draw(sizes(high))
    kind = draw(st.sampled_from(["on_demand", "batch"]))
    return Tenant(name, kind, lower, lower + extra)


@st.composite
def pools(draw: st.DrawFn) -> tuple[list[Tenant], Size]:
    count = draw(st.integers(1, len(NAMES)))
    members = [draw(tenants(NAMES[i])) for i in range(count)]
    return members, draw(sizes(96))


def below(a: Size, b: Size) -> Size:
    return Size(max(0, a.vcpus - b.vcpus), max(0, a.memory_mib - b.memory_mib))


@settings(max_examples=300, deadline=None)
@given(pool=pools(), steps=st.lists(st.tuples(st.integers(0, 4), sizes(24), st.booleans()), max_size=40))
def test_no_tenant_is_pushed_below_its_lower_bound_by_anothers_on_demand_vm(pool, steps):
    members, capacity = pool
    lower = effective_lower(members, capacity).lower
    usage: dict[str, Size] = {}
    for index, want, release in steps:
        asker = members[index % len(members)]
        mine = usage.get(asker.name, ZERO)
        if release:
            usage[asker.name] = below(mine, want)
        elif on_demand_verdict(asker, usage, want, members, capacity).allowed:
            usage[asker.name] = mine + want
        # every tenant can still reach its (effective) lower bound, whatever the others took
        for tenant in members:
            gap = below(lower[tenant.name], usage.get(tenant.name, ZERO))
            verdict = on_demand_verdict(tenant, usage, gap, members, capacity)
            assert verdict.allowed, (tenant.name, show(gap), verdict.reason)
            assert usage.get(tenant.name, ZERO).fits_in(tenant.upper)
        assert sum(u.vcpus for u in usage.values()) <= capacity.vcpus
        assert sum(u.memory_mib for u in usage.values()) <= capacity.memory_mib


@settings(max_examples=300, deadline=None)
@given(pool=pools())
def test_effective_lower_bounds_fit_the_pool_are_within_each_bound_and_proportional(pool):
    members, capacity = pool
    honoured = effective_lower(members, capacity)
    total_vcpus = sum(t.lower.vcpus for t in members)
    assert sum(s.vcpus for s in honoured.lower.values()) == min(capacity.vcpus, total_vcpus)
    for tenant in members:
        got = honoured.lower[tenant.name]
        assert got.fits_in(tenant.lower)
        if total_vcpus > capacity.vcpus:   # within one vCPU of the exact proportion
            assert abs(got.vcpus - tenant.lower.vcpus * capacity.vcpus / total_vcpus) < 1
    assert honoured.scaled == (not honoured.lower_sum.fits_in(capacity))


@settings(max_examples=300, deadline=None)
@given(upper=sizes(64), urr=st.floats(0, 1), steps=st.lists(
    st.tuples(sizes(48), st.builds(Size, st.integers(-8, 96), st.integers(-8, 96 * 1024)), st.floats(0, 2),
              st.floats(0, 1), st.floats(0, 1), st.booleans()), max_size=40))
def test_no_batch_tenant_is_ever_granted_past_its_upper_bound(upper, urr, steps):
    held = ZERO
    for requested, unallocated, rate, share_v, share_m, release in steps:
        if release:
            held = below(held, requested)
            continue
        grant = batch_grant(requested, unallocated, rate, TenancySettings(urr=urr), Share(share_v, share_m),
                            below(upper, held))
        assert grant.fits_in(requested) and grant.fits_in(Size(max(0, unallocated.vcpus),
                                                                 max(0, unallocated.memory_mib)))
        held = held + grant
        assert held.fits_in(upper)


@settings(max_examples=300, deadline=None)
@given(capacity=sizes(96), rbt=st.floats(0.1, 10), idle=sizes(96),
       candidates=st.lists(st.lists(sizes(48), min_size=2, max_size=4), max_size=12))
def test_admission_never_lets_the_upper_bounds_pass_capacity_times_rbt(capacity, rbt, idle, candidates):
    joined: list[Tenant] = []
    for number, group in enumerate(candidates):
        lower, extra = group[0], group[1]
        new = [Tenant(f"n{number}", "batch", lower, lower + extra)]
        verdict = admit(joined, new, capacity, idle, TenancySettings(rbt=rbt))
        assert show(verdict.upper_sum) in verdict.reason and show(verdict.idle) in verdict.reason
        if verdict.admitted:
            joined += new
            assert lower.fits_in(idle)
        assert sum(t.upper.vcpus for t in joined) <= math.floor(capacity.vcpus * rbt + 1e-9)
        assert sum(t.upper.memory_mib for t in joined) <= math.floor(capacity.memory_mib * rbt + 1e-9)


@settings(max_examples=300, deadline=None)
@given(pool=pools())
def test_psf_shares_add_to_one_over_the_batch_tenants(pool):
    members, _ = pool
    batch = [t for t in members if t.kind.value == "batch"]
    if not batch:
        return
    shares = [psf(t, members) for t in batch]
    assert math.isclose(sum(s.vcpus for s in shares), 1.0)
    assert math.isclose(sum(s.memory for s in shares), 1.0)
