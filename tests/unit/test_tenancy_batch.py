"""PhoenixCloud's lower-priority grants (controller/core/tenancy.py), worked by hand from Algorithm 1
(section 3): PSF = a batch tenant's lower bound over the sum of the batch tenants' lower bounds;
over URR, min(requested, unallocated) x PSF; not over URR, what it asks if it fits, else
unallocated x PSF; never past the upper bound. And the order victims are taken from."""
from __future__ import annotations

import pytest

from controller.core.records import Size
from controller.core.tenancy import (Share, TenancySettings, Tenant, batch_grant, psf, usage_rate,
                                     victim_tenant_order)
from gleaner_common.ids import InvalidField

A = Tenant("alpha", "batch", Size(20, 20480), Size(60, 61440))
B = Tenant("beta", "batch", Size(30, 10240), Size(60, 61440))
WEB = Tenant("web", "on_demand", Size(40, 40960), Size(80, 81920))
HALF = TenancySettings(urr=0.5)
ROOMY = Size(1000, 1 << 20)


def test_psf_is_the_lower_bound_over_the_batch_lower_bounds_per_dimension():
    assert psf(A, [A, B, WEB]) == Share(0.4, 20480 / 30720)   # the on-demand tenant does not count
    assert psf(B, [A, B, WEB]) == Share(0.6, 10240 / 30720)


def test_psf_with_no_lower_bounds_is_an_equal_share():
    c, d = Tenant("c", "batch", Size(0, 0), Size(4, 4)), Tenant("d", "batch", Size(0, 8), Size(4, 8))
    assert psf(c, [c, d]) == Share(0.5, 0.0) and psf(d, [c, d]) == Share(0.5, 1.0)


def test_psf_refuses_an_on_demand_tenant_or_a_stranger():
    with pytest.raises(InvalidField, match="PSF is for batch tenants"):
        psf(WEB, [A, B, WEB])
    with pytest.raises(InvalidField, match="not among the batch tenants"):
        psf(A, [B])


def test_over_urr_a_tenant_gets_psf_of_the_smaller_of_asked_and_unallocated():
    # usage 0.9 > URR 0.5; alpha asks 50 where 10 are unallocated: 10 x 0.4 = 4; beta: 10 x 0.6 = 6
    assert batch_grant(Size(50, 0), Size(10, 0), 0.9, HALF, psf(A, [A, B]), ROOMY) == Size(4, 0)
    assert batch_grant(Size(50, 0), Size(10, 0), 0.9, HALF, psf(B, [A, B]), ROOMY) == Size(6, 0)
    # asking less than is unallocated: 5 x 0.4 = 2
    assert batch_grant(Size(5, 0), Size(10, 0), 0.9, HALF, psf(A, [A, B]), ROOMY) == Size(2, 0)


def test_not_over_urr_a_request_that_fits_is_granted_whole():
    assert batch_grant(Size(8, 8192), Size(60, 61440), 0.4, HALF, psf(A, [A, B]), ROOMY) == Size(8, 8192)


def test_not_over_urr_a_request_that_does_not_fit_gets_psf_of_the_unallocated():
    # 80 asked of 60 unallocated: 60 x 0.4 = 24
    assert batch_grant(Size(80, 0), Size(60, 0), 0.4, HALF, psf(A, [A, B]), ROOMY) == Size(24, 0)


def test_at_exactly_urr_the_paper_grants_what_fits():
    assert batch_grant(Size(8, 0), Size(10, 0), 0.5, HALF, psf(A, [A, B]), ROOMY) == Size(8, 0)
    assert batch_grant(Size(8, 0), Size(10, 0), 0.5000001, HALF, psf(A, [A, B]), ROOMY) == Size(3, 0)


def test_never_past_the_upper_bound():
    # alpha holds 55 of its 60: only 5 more, whatever the pool has free
    assert batch_grant(Size(8, 0), Size(100, 0), 0.1, HALF, psf(A, [A, B]), Size(5, 100)) == Size(5, 0)
    assert batch_grant(Size(8, 0), Size(100, 0), 0.9, HALF, Share(1.0, 1.0), Size(5, 100)) == Size(5, 0)
    assert batch_grant(Size(8, 8), Size(100, 100), 0.1, HALF, psf(A, [A, B]), Size(0, 0)) == Size(0, 0)


def test_a_pool_overcommitted_grants_nothing():
    assert batch_grant(Size(8, 8), Size(-4, -4), 0.3, HALF, Share(1.0, 1.0), ROOMY) == Size(0, 0)


def test_grant_refuses_bad_figures_naming_them():
    with pytest.raises(InvalidField) as caught:
        batch_grant(Size(1, 1), Size(1, 1), float("nan"), HALF, Share(1.0, 1.0), ROOMY)
    assert caught.value.field == "usage_rate"
    with pytest.raises(InvalidField) as caught:
        Share(1.5, 0.0)
    assert caught.value.field == "psf.vcpus"


def test_usage_rate_counts_the_scarcer_dimension():
    assert usage_rate(Size(5, 90), Size(10, 100)) == pytest.approx(0.9)
    assert usage_rate(Size(0, 0), Size(0, 0)) == 0.0
    assert usage_rate(Size(1, 0), Size(0, 10)) == 1000.0


def test_victims_come_first_from_the_tenant_furthest_over_its_psf():
    shares = {"alpha": psf(A, [A, B]), "beta": psf(B, [A, B])}   # vCPUs 0.4 / 0.6
    usage = {"alpha": Size(30, 1024), "beta": Size(10, 1024)}     # alpha holds 0.75 of the vCPUs
    assert victim_tenant_order(usage, shares) == ["alpha", "beta"]
    usage = {"alpha": Size(8, 512), "beta": Size(32, 1024)}       # beta +0.2 of vCPUs, +0.33 of memory
    assert victim_tenant_order(usage, shares) == ["beta", "alpha"]


def test_victim_order_leaves_out_tenants_holding_nothing_and_counts_a_missing_share_as_zero():
    usage = {"alpha": Size(4, 4), "beta": Size(0, 0), "ghost": Size(4, 4)}
    assert victim_tenant_order(usage, {"alpha": Share(1.0, 1.0)}) == ["ghost", "alpha"]
