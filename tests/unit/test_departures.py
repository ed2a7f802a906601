"""The residual on-demand VMs are expected to free (controller.core.departures): Kaplan-Meier
survival of on-demand lifetimes, each live VM's chance to still be there, and the forecast the
projected finish of a goal is drawn from."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from controller.core.departures import HORIZON_S, MIN_LIFETIMES, STEP_S, freed_vcpus, residual_forecast, survival
from gleaner_common.ids import InvalidField


def test_survival_is_kaplan_meier_with_live_vms_censored():
    """Deaths at 1, 2, 2, 3 and one VM alive at 2.5: at risk 5, 4 and 1 at the three times, so
    S = 4/5, then 4/5 x 2/4, then 0 (worked by hand)."""
    times, s = survival([1, 2, 2, 3], [2.5])
    assert list(times) == [1, 2, 3]
    assert s == pytest.approx([0.8, 0.4, 0.0])


def test_survival_without_censoring_is_the_empirical_share_alive():
    lifetimes = [random.Random(1).uniform(0, 100) for _ in range(200)]
    times, s = survival(lifetimes, [])
    for t, value in zip(times, s):
        assert value == pytest.approx(sum(l > t for l in lifetimes) / len(lifetimes))


def test_each_live_vm_leaves_by_its_age_and_the_lifetimes_seen():
    """Every VM seen lived 600 s: one of age 300 leaves within 300 s, one just launched within
    600 s; their vCPUs are freed then, not before."""
    lifetimes = [600.0] * MIN_LIFETIMES
    freed = freed_vcpus([(0.0, 2), (300.0, 4)], lifetimes, [100, 299, 300, 599, 600])
    assert freed == pytest.approx([0, 0, 4, 4, 6])


def test_a_vm_older_than_every_lifetime_seen_is_expected_to_stay():
    assert freed_vcpus([(5000.0, 8)], [600.0] * MIN_LIFETIMES, [600, 3600 * 12]) == [0.0, 0.0]


def test_too_few_lifetimes_forecast_nothing_and_leave_the_residual_flat():
    assert freed_vcpus([(0.0, 2)], [10.0] * (MIN_LIFETIMES - 1), [60]) is None
    assert residual_forecast(7.0, 1000.0, [(0.0, 2)], [10.0] * (MIN_LIFETIMES - 1)) == [(1000.0, 7.0)]


def test_the_forecast_steps_every_ten_minutes_to_its_horizon():
    forecast = residual_forecast(3.0, 1000.0, [(0.0, 4)], [1800.0] * MIN_LIFETIMES)
    assert forecast[0] == (1000.0, 3.0)
    assert [t for t, _ in forecast[1:]] == [1000.0 + STEP_S * k for k in range(1, int(HORIZON_S // STEP_S) + 1)]
    assert dict(forecast)[1000.0 + 1200] == 3.0 and dict(forecast)[1000.0 + 1800] == 7.0


@pytest.mark.parametrize("seed", range(20))
def test_the_forecast_only_rises_and_never_past_every_live_vcpu(seed):
    rng = random.Random(seed)
    lifetimes = [rng.expovariate(1 / 3600) for _ in range(rng.randint(MIN_LIFETIMES, 400))]
    alive = [(rng.uniform(0, 20_000), rng.randint(1, 16)) for _ in range(rng.randint(0, 60))]
    residual = rng.uniform(0, 50)
    forecast = residual_forecast(residual, 0.0, alive, lifetimes)
    values = [v for _, v in forecast]
    assert all(b >= a - 1e-9 for a, b in zip(values, values[1:]))
    assert residual - 1e-9 <= min(values) and max(values) <= residual + sum(v for _, v in alive) + 1e-9


@pytest.mark.parametrize("bad", [[-1.0], [math.nan], [math.inf], [1e13]])
def test_lifetimes_and_ages_out_of_bounds_are_refused_by_name(bad):
    with pytest.raises(InvalidField, match="lifetimes"):
        survival(bad * MIN_LIFETIMES, [])
    with pytest.raises(InvalidField, match="alive ages"):
        freed_vcpus([(bad[0], 1)], [10.0] * MIN_LIFETIMES, [60])


@pytest.mark.parametrize("vcpus", [True, -1, 1.5, 2_000_000, np.float64(2)])
def test_vcpus_that_are_not_whole_and_bounded_are_refused(vcpus):
    with pytest.raises(InvalidField, match="vcpus"):
        freed_vcpus([(10.0, vcpus)], [10.0] * MIN_LIFETIMES, [60])
