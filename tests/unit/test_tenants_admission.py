"""controller/tenants.py: PhoenixCloud's two admission conditions as the controller applies them
for now, what is idle for a new lower bound, and which tenant a VM belongs to."""
from __future__ import annotations

import pytest

from controller import tenants as tenancy
from controller.core.records import Lease, Size, TenantRecord
from gleaner_common.ids import InvalidField

CAPACITY = Size(8, 16384)
DEFAULT = TenantRecord("default", "on_demand")
BACKFILL = TenantRecord("backfill", "batch")


def tenant(name: str, kind: str, lower: Size, upper: Size) -> TenantRecord:
    return TenantRecord(name, kind, lower.vcpus, lower.memory_mib, upper.vcpus, upper.memory_mib)


def lease(lease_id: str, owner: str, role: str = "on_demand", state: str = "running") -> Lease:
    return Lease(lease_id, role, "n1", f"vm-{lease_id}", 2, 2048, "tiny", owner, state, 1.0)


def test_both_conditions_hold_and_the_unbounded_built_ins_are_not_booked():
    new = tenant("a", "on_demand", Size(2, 2048), Size(8, 16384))
    assert tenancy.admission_problem([DEFAULT, BACKFILL], new, CAPACITY, CAPACITY, 1.0, 1.0) is None


def test_the_upper_bounds_past_capacity_times_rbt_are_refused_with_both_figures():
    a = tenant("a", "on_demand", Size(0, 0), Size(6, 4096))
    new = tenant("b", "batch", Size(1, 1024), Size(3, 1024))
    problem = tenancy.admission_problem([DEFAULT, a], new, CAPACITY, CAPACITY, 1.0, 1.0)
    assert problem == ("tenant 'b' not admitted: the upper bounds would sum to 9 vCPUs, 5120 MiB, over capacity "
                       "8 vCPUs, 16384 MiB x RBT 1 = 8 vCPUs, 16384 MiB; the lower bound 1 vCPUs, 1024 MiB fits in "
                       "what is idle, 8 vCPUs, 16384 MiB")
    assert tenancy.admission_problem([DEFAULT, a], new, CAPACITY, CAPACITY, 1.5, 1.0) is None   # 9 <= 12


def test_capacity_times_rbt_is_rounded_as_the_core_rounds_it():
    """100 x 1.15 is 114.99999999999999 in floating point: an admin who books 115 of it means 115,
    as the simulator's admission (core.tenancy.admit) reads it."""
    capacity = Size(100, 102400)
    new = tenant("a", "on_demand", Size(0, 0), Size(115, 1024))
    assert tenancy.admission_problem([DEFAULT], new, capacity, capacity, 1.15, 1.0) is None
    assert "over capacity" in tenancy.admission_problem([DEFAULT], tenant("b", "batch", Size(0, 0), Size(116, 1024)),
                                                        capacity, capacity, 1.15, 1.0)


def test_a_lower_bound_must_fit_what_is_idle():
    new = tenant("b", "batch", Size(3, 1024), Size(3, 1024))
    problem = tenancy.admission_problem([DEFAULT], new, CAPACITY, Size(2, 16384), 1.0, 1.0)
    assert "the lower bound 3 vCPUs, 1024 MiB does not fit in what is idle, 2 vCPUs, 16384 MiB" in problem
    assert "within capacity 8 vCPUs, 16384 MiB x RBT 1" in problem


def test_idle_counts_each_on_demand_tenants_larger_of_lower_bound_and_use_and_never_backfill():
    a = tenant("a", "on_demand", Size(1, 4096), Size(4, 8192))
    batch = tenant("b", "batch", Size(1, 1024), Size(2, 2048))
    live = [lease("1", "a"), lease("2", "a"), lease("3", "zed"), lease("4", "x", role="backfill")]
    used = tenancy.usage(live, ["default", "backfill", "a", "b"])
    assert used["a"] == (Size(4, 4096), ["1", "2"]) and used["default"] == (Size(2, 2048), ["3"])
    assert used["backfill"] == (Size(2, 2048), ["4"])
    # a: max(1, 4) vCPUs, max(4096, 4096) MiB; default: what it holds; b: its lower bound; backfill: nothing
    assert tenancy.idle_for([DEFAULT, BACKFILL, a, batch], used, CAPACITY) == Size(8 - 4 - 2 - 1, 16384 - 4096 - 2048 - 1024)


def test_a_vm_belongs_to_the_tenant_named_as_its_owner_else_to_default():
    names = ["default", "backfill", "a"]
    assert tenancy.tenant_of(lease("1", "a"), names) == "a"
    assert tenancy.tenant_of(lease("2", "nobody"), names) == "default"
    assert tenancy.tenant_of(lease("3", "backfill"), names) == "default"   # an owner never borrows the batch tenant
    # a backfill VM is the batch tenant's it was launched for; adopted (or from before tenants), the built-in's
    assert tenancy.tenant_of(lease("4", "a", role="backfill"), names) == "a"
    assert tenancy.tenant_of(lease("5", "adopted", role="backfill"), names) == "backfill"


def test_a_change_that_takes_nothing_more_skips_admission_and_bounding_an_unbounded_one_does_not():
    a = tenant("a", "on_demand", Size(2, 2048), Size(4, 4096))
    assert tenancy.takes_nothing_more(a, tenant("a", "on_demand", Size(1, 2048), Size(3, 4096)))
    assert not tenancy.takes_nothing_more(a, tenant("a", "on_demand", Size(2, 2048), Size(5, 4096)))
    assert not tenancy.takes_nothing_more(DEFAULT, tenant("default", "on_demand", Size(0, 0), Size(1, 1)))


@pytest.mark.parametrize("text, field, allow, words", [
    ("4", "lower", False, "is not CPUS,MIB"), ("a,b", "upper", False, "is not CPUS,MIB"),
    ("-1,5", "upper", False, "is not CPUS,MIB"), ("unbounded", "upper", False, "is not CPUS,MIB"),
])
def test_sizes_are_two_whole_numbers(text, field, allow, words):
    with pytest.raises(InvalidField, match=words) as raised:
        tenancy.parse_size(text, field, allow)
    assert raised.value.field == field
    assert tenancy.parse_size("unbounded", "upper", True) == Size(0, 0)
    assert tenancy.parse_size("4,8192", "upper") == Size(4, 8192)


def test_only_the_built_in_tenants_may_be_unbounded():
    with pytest.raises(InvalidField, match="only for the built-in tenants"):
        tenancy.checked("a", "batch", Size(0, 0), Size(0, 0))
    assert tenancy.checked("default", "on-demand", Size(0, 0), Size(0, 0)) == "on_demand"
    with pytest.raises(tenancy.TenantExists):
        tenancy.created("backfill", "batch", Size(0, 0), Size(1, 1), 0.0)
