"""PhoenixCloud's bounds for on-demand tenants (controller/core/tenancy.py), worked by hand from the
paper's section 3: checking a tenant, admission's two conditions, lower bounds honoured in
proportion when the pool shrinks, and the on-demand verdict (upper bound, others' guarantees)."""
from __future__ import annotations

import pytest

from controller.core.records import Size
from controller.core.tenancy import (MAX_VCPUS, TenancySettings, Tenant, TenantKind, admit, effective_lower,
                                     on_demand_verdict)
from gleaner_common.ids import InvalidField


def od(name: str, lower: tuple[int, int], upper: tuple[int, int]) -> Tenant:
    return Tenant(name, "on_demand", Size(*lower), Size(*upper))


def batch(name: str, lower: tuple[int, int], upper: tuple[int, int]) -> Tenant:
    return Tenant(name, "batch", Size(*lower), Size(*upper))


# ------------------------------------------------------------------------------- validation

def test_a_tenant_takes_either_spelling_of_on_demand():
    assert Tenant("web", "on-demand", Size(1, 1), Size(2, 2)).kind is TenantKind.ON_DEMAND
    assert Tenant("hpc", TenantKind.BATCH, Size(0, 0), Size(2, 2)).kind is TenantKind.BATCH


@pytest.mark.parametrize("args, field, words", [
    (("web", "on_demand", Size(5, 1), Size(4, 1)), "tenant.lower.vcpus", ["5 vCPUs", "'web'", "upper bound 4"]),
    (("web", "on_demand", Size(1, 900), Size(1, 800)), "tenant.lower.memory_mib", ["900 MiB", "800 MiB"]),
    (("web", "on_demand", Size(-1, 0), Size(1, 1)), "tenant.lower.vcpus", ["-1", "0..1000000"]),
    (("web", "on_demand", Size(0, 0), Size(MAX_VCPUS + 1, 1)), "tenant.upper.vcpus", ["1000001"]),
    (("web", "on_demand", Size(1.5, 0), Size(2, 1)), "tenant.lower.vcpus", ["1.5", "whole number"]),
    (("web", "on_demand", Size(True, 0), Size(2, 1)), "tenant.lower.vcpus", ["whole number"]),
    (("web", "spot", Size(0, 0), Size(1, 1)), "tenant.kind", ["'spot'", "on_demand, batch"]),
    (("../x", "batch", Size(0, 0), Size(1, 1)), "tenant.name", ["'../x'"]),
    (("", "batch", Size(0, 0), Size(1, 1)), "tenant.name", ["''"]),
    (("web", "batch", (0, 0), Size(1, 1)), "tenant.lower", ["not a size"]),
])
def test_a_bad_tenant_is_refused_naming_the_field(args, field, words):
    with pytest.raises(InvalidField) as caught:
        Tenant(*args)
    assert caught.value.field == field
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize("kwargs, field", [
    ({"rbt": 0.0}, "tenancy.rbt"), ({"rbt": 11.0}, "tenancy.rbt"), ({"rbt": float("nan")}, "tenancy.rbt"),
    ({"urr": -0.1}, "tenancy.urr"), ({"urr": 1.5}, "tenancy.urr"), ({"urr": "1"}, "tenancy.urr"),
    ({"urr": float("inf")}, "tenancy.urr"),
])
def test_settings_out_of_range_are_refused_naming_the_key_and_range(kwargs, field):
    with pytest.raises(InvalidField) as caught:
        TenancySettings(**kwargs)
    assert caught.value.field == field
    assert ".." in str(caught.value) or "not a number" in str(caught.value)


def test_the_papers_baseline_is_the_default():
    assert TenancySettings() == TenancySettings(rbt=1.0, urr=1.0)
    TenancySettings(rbt=2, urr=0.5)   # the paper's section 5.6.3 values


# -------------------------------------------------------------------------------- admission

POOL = Size(100, 102400)


def test_admitted_when_uppers_are_exactly_capacity_times_rbt_and_lowers_fit_idle():
    existing = [od("web", (20, 20480), (60, 61440))]
    pair = [od("search", (5, 5120), (20, 20480)), batch("hpc", (5, 5120), (20, 20480))]
    verdict = admit(existing, pair, POOL, Size(10, 10240), TenancySettings())
    assert verdict.admitted, verdict.reason
    assert verdict.upper_sum == Size(100, 102400) and verdict.upper_limit == POOL
    assert verdict.new_lower_sum == Size(10, 10240)


def test_refused_past_capacity_times_rbt_naming_both_figures():
    existing = [od("web", (20, 20480), (60, 61440))]
    pair = [od("search", (5, 5120), (20, 20480)), batch("hpc", (5, 5120), (21, 20480))]
    verdict = admit(existing, pair, POOL, Size(50, 51200), TenancySettings())
    assert not verdict.admitted
    assert "sum of upper bounds 101 vCPUs, 102400 MiB" in verdict.reason
    assert "capacity x RBT 1 = 100 vCPUs, 102400 MiB (over)" in verdict.reason
    assert "new lower bounds 10 vCPUs, 10240 MiB against idle 50 vCPUs, 51200 MiB (fits)" in verdict.reason


def test_rbt_over_one_overbooks():
    existing = [od("web", (20, 20480), (100, 102400))]
    new = [batch("hpc", (5, 5120), (100, 102400))]
    assert not admit(existing, new, POOL, Size(50, 51200), TenancySettings(rbt=1.0)).admitted
    verdict = admit(existing, new, POOL, Size(50, 51200), TenancySettings(rbt=2.0))
    assert verdict.admitted and verdict.upper_limit == Size(200, 204800)


def test_rbt_rounding_forgives_float_error():
    verdict = admit([], [od("web", (0, 0), (115, 115))], Size(100, 100), Size(100, 100), TenancySettings(rbt=1.15))
    assert verdict.admitted and verdict.upper_limit == Size(115, 115)


def test_refused_when_new_lowers_pass_what_is_idle_naming_both_figures():
    pair = [od("search", (6, 1024), (20, 20480)), batch("hpc", (5, 1024), (20, 20480))]
    verdict = admit([], pair, POOL, Size(10, 10240), TenancySettings())
    assert not verdict.admitted
    assert "new lower bounds 11 vCPUs, 2048 MiB against idle 10 vCPUs, 10240 MiB (over)" in verdict.reason
    assert "sum of upper bounds 40 vCPUs, 40960 MiB" in verdict.reason and "(fits)" in verdict.reason


def test_memory_alone_can_refuse():
    verdict = admit([], [od("web", (1, 200000), (1, 200000))], POOL, POOL, TenancySettings())
    assert not verdict.admitted and "(over)" in verdict.reason


def test_a_taken_name_is_refused():
    existing = [od("web", (0, 0), (1, 1))]
    assert "already taken" in admit(existing, [batch("web", (0, 0), (1, 1))], POOL, POOL, TenancySettings()).reason
    twice = [batch("hpc", (0, 0), (1, 1)), batch("hpc", (0, 0), (1, 1))]
    assert not admit([], twice, POOL, POOL, TenancySettings()).admitted


# -------------------------------------------------------------------- shrinking guarantees

def test_lowers_that_fit_are_kept_whole():
    tenants = [od("a", (4, 4096), (8, 8192)), batch("b", (2, 2048), (8, 8192))]
    honoured = effective_lower(tenants, Size(6, 6144))
    assert not honoured.scaled
    assert honoured.lower == {"a": Size(4, 4096), "b": Size(2, 2048)}


def test_a_shrunk_pool_honours_lowers_in_proportion_and_says_so():
    tenants = [od("a", (6, 6000), (8, 8192)), od("b", (3, 3000), (8, 8192)), batch("c", (1, 1000), (8, 8192))]
    honoured = effective_lower(tenants, Size(5, 5000))   # half the 10 vCPUs, 10000 MiB promised
    assert honoured.scaled and "in proportion" in honoured.explain
    # 3, 1.5, 0.5 vCPUs: floors 3, 1, 0 leave 1, given to the larger remainder (b's 0.5 ties c's: name order)
    assert honoured.lower == {"a": Size(3, 3000), "b": Size(2, 1500), "c": Size(0, 500)}
    assert sum(s.vcpus for s in honoured.lower.values()) == 5


def test_one_dimension_short_scales_only_that_dimension():
    tenants = [od("a", (2, 6000), (8, 8192)), od("b", (2, 2000), (8, 8192))]
    honoured = effective_lower(tenants, Size(10, 4000))
    assert honoured.scaled
    assert honoured.lower == {"a": Size(2, 3000), "b": Size(2, 1000)}


# ------------------------------------------------------------------------ on-demand verdict

def test_past_the_upper_bound_is_rejected_naming_the_bound():
    web = od("web", (2, 2048), (8, 8192))
    verdict = on_demand_verdict(web, {"web": Size(6, 6144)}, Size(4, 1024), [web], Size(100, 102400))
    assert not verdict.allowed and verdict.bound == "upper"
    assert "upper bound 8 vCPUs, 8192 MiB" in verdict.reason and "6 vCPUs, 6144 MiB in use" in verdict.reason
    assert verdict.room == Size(2, 2048)


def test_another_tenants_unused_lower_bound_is_kept_from_on_demand():
    # a pool of 16: web guarantees 8 and uses 2, so 6 more are kept for it; search may take 16 - 2 - 6 = 8
    web, search = od("web", (8, 8192), (16, 16384)), od("search", (0, 0), (16, 16384))
    usage = {"web": Size(2, 2048)}
    verdict = on_demand_verdict(search, usage, Size(8, 8192), [web, search], Size(16, 16384))
    assert verdict.allowed and verdict.room == Size(8, 8192) and verdict.reserved_for_others == Size(6, 6144)
    refused = on_demand_verdict(search, usage, Size(9, 1024), [web, search], Size(16, 16384))
    assert not refused.allowed and refused.bound == "others' lower bounds"
    assert "6 vCPUs, 6144 MiB is kept for other tenants' lower bounds" in refused.reason


def test_a_tenants_own_lower_bound_is_its_own_to_use():
    web, search = od("web", (8, 8192), (16, 16384)), od("search", (4, 4096), (16, 16384))
    verdict = on_demand_verdict(web, {}, Size(12, 12288), [web, search], Size(16, 16384))
    assert verdict.allowed and verdict.room == Size(12, 12288)


def test_a_batch_tenants_lower_bound_is_guaranteed_too():
    web, hpc = od("web", (0, 0), (16, 16384)), batch("hpc", (4, 4096), (16, 16384))
    assert not on_demand_verdict(web, {}, Size(13, 1024), [web, hpc], Size(16, 16384)).allowed
    assert on_demand_verdict(web, {"hpc": Size(4, 4096)}, Size(12, 12288), [web, hpc], Size(16, 16384)).allowed


def test_a_shrunk_pool_keeps_only_the_effective_lower_bounds():
    # lowers 8 + 8 in a pool shrunk to 8: each is honoured at 4; b uses none, so a may take 4
    a, b = od("a", (8, 8192), (16, 16384)), od("b", (8, 8192), (16, 16384))
    assert on_demand_verdict(a, {}, Size(4, 4096), [a, b], Size(8, 8192)).allowed
    assert not on_demand_verdict(a, {}, Size(5, 4096), [a, b], Size(8, 8192)).allowed


def test_usage_of_a_tenant_not_listed_still_fills_the_pool_and_an_unknown_asker_is_refused():
    a = od("a", (0, 0), (16, 16384))
    assert not on_demand_verdict(a, {"gone": Size(10, 1024)}, Size(7, 1024), [a], Size(16, 16384)).allowed
    with pytest.raises(InvalidField) as caught:
        on_demand_verdict(od("x", (0, 0), (1, 1)), {}, Size(1, 1), [a], Size(16, 16384))
    assert caught.value.field == "tenant"
