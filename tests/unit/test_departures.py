"""The residual on-demand VMs are expected to free (controller.core.departures): product-limit
survival of on-demand lifetimes with delayed entry, each live VM's chance to still be there,
and the forecast the projected finish of a goal is drawn from."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from controller.core.departures import (HORIZON_S, MIN_LIFETIMES, STEP_S, forecast_offsets, freed_vcpus,
                                        residual_forecast, survival)
from gleaner_common.ids import InvalidField

NOW = 1_000_000.0


def test_survival_is_kaplan_meier_with_live_vms_censored():
    """Deaths at 1, 2, 2, 3 and one VM alive at 2.5, all watched from age 0: at risk 5, 4 and 1
    at the three times, so S = 4/5, then 4/5 x 2/4, then 0 (worked by hand)."""
    times, s = survival([(0, 1), (0, 2), (0, 2), (0, 3)], [(0, 2.5)])
    assert list(times) == [1, 2, 3]
    assert s == pytest.approx([0.8, 0.4, 0.0])


def test_a_life_watched_from_a_later_age_is_at_risk_only_from_then():
    """Deaths at 1 (watched from 0) and 3 (watched from 2), one alive at 4 (from 0): at 1 only two
    are at risk (the other entered at 2), so S(1) = 1/2, and S(3) = 1/2 x 1/2."""
    times, s = survival([(0, 1), (2, 3)], [(0, 4)])
    assert list(times) == [1, 3]
    assert s == pytest.approx([0.5, 0.25])


def test_survival_without_censoring_is_the_empirical_share_alive():
    lifetimes = [random.Random(1).uniform(0, 100) for _ in range(200)]
    times, s = survival([(0.0, l) for l in lifetimes], [])
    for t, value in zip(times, s):
        assert value == pytest.approx(sum(l > t for l in lifetimes) / len(lifetimes))


def lives(count: int, lived: float, first_launch: float = NOW - 100_000) -> list[tuple[float, float]]:
    return [(first_launch + 10 * i, first_launch + 10 * i + lived) for i in range(count)]


def test_each_live_vm_leaves_by_its_age_and_the_lifetimes_seen():
    """Every VM seen lived 600 s: one of age 300 leaves within 300 s, one just launched within
    600 s; their vCPUs are freed then, not before."""
    freed = freed_vcpus([(NOW, 2), (NOW - 300, 4)], lives(MIN_LIFETIMES, 600), NOW, [100, 299, 300, 599, 600])
    assert freed == pytest.approx([0, 0, 4, 4, 6])


def test_a_vm_older_than_every_lifetime_seen_is_expected_to_stay():
    assert freed_vcpus([(NOW - 50_000, 8)], lives(MIN_LIFETIMES, 600), NOW, [600, HORIZON_S]) == [0.0, 0.0]


@pytest.mark.parametrize("seed", range(3))
def test_in_a_steady_pool_the_forecast_is_near_the_departures_that_come(seed):
    """A steady pool of about 3,000 on-demand VMs with lifetimes of mean 4 h (exponential: each
    leaves within an hour with probability 1 - e^(-1/4), whatever its age), 500 ends kept. Most
    VMs alive now were launched before the oldest end kept: counted as at risk from age 0, they
    would dilute the young ages' hazard and the forecast would say about half the departures."""
    rng = np.random.default_rng(seed)
    mean, alive_target = 4 * 3600.0, 3000
    span = 30 * mean
    starts = np.sort(rng.uniform(0, span, rng.poisson(alive_target / mean * span)))
    ends = starts + rng.exponential(mean, starts.size)
    now = span
    alive = [(float(t), 1) for t in starts[ends > now]]
    ended = np.argsort(ends)[: int((ends <= now).sum())]   # the ended, in the order they ended
    kept = [(float(starts[i]), float(ends[i])) for i in ended[-500:]]
    for hours in (1, 4):
        expected = len(alive) * (1 - math.exp(-hours * 3600 / mean))
        [forecast] = freed_vcpus(alive, kept, now, [hours * 3600.0])
        assert forecast == pytest.approx(expected, rel=0.15)


def test_too_few_lifetimes_forecast_nothing_and_leave_the_residual_flat():
    assert freed_vcpus([(NOW, 2)], lives(MIN_LIFETIMES - 1, 10), NOW, [60]) is None
    assert residual_forecast(7.0, NOW, None) == [(NOW, 7.0)]


def test_the_forecast_steps_every_ten_minutes_to_its_horizon():
    freed = freed_vcpus([(NOW, 4)], lives(MIN_LIFETIMES, 1800), NOW, forecast_offsets())
    forecast = residual_forecast(3.0, NOW, freed)
    assert forecast[0] == (NOW, 3.0)
    assert [t for t, _ in forecast[1:]] == [NOW + STEP_S * k for k in range(1, int(HORIZON_S // STEP_S) + 1)]
    assert dict(forecast)[NOW + 1200] == 3.0 and dict(forecast)[NOW + 1800] == 7.0
    assert residual_forecast(999_999.0, NOW, [10.0])[1][1] == 1_000_000   # never past the bound the sizing takes


@pytest.mark.parametrize("seed", range(20))
def test_the_forecast_only_rises_and_never_past_every_live_vcpu(seed):
    rng = random.Random(seed)
    ended = sorted((t, t + rng.expovariate(1 / 3600)) for t in (NOW - rng.uniform(0, 200_000)
                                                                for _ in range(rng.randint(MIN_LIFETIMES, 400))))
    ended = [(a, min(b, NOW)) for a, b in ended]
    alive = [(NOW - rng.uniform(0, 20_000), rng.randint(1, 16)) for _ in range(rng.randint(0, 60))]
    residual = rng.uniform(0, 50)
    forecast = residual_forecast(residual, NOW, freed_vcpus(alive, ended, NOW, forecast_offsets()))
    values = [v for _, v in forecast]
    assert all(b >= a - 1e-9 for a, b in zip(values, values[1:]))
    assert residual - 1e-9 <= min(values) and max(values) <= residual + sum(v for _, v in alive) + 1e-9


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, 1e13])
def test_times_out_of_bounds_are_refused_by_name(bad):
    with pytest.raises(InvalidField, match="lives launched_at"):
        freed_vcpus([], [(bad, 10.0)] * MIN_LIFETIMES, NOW, [60])
    with pytest.raises(InvalidField, match="alive launched_at"):
        freed_vcpus([(bad, 1)], lives(MIN_LIFETIMES, 10), NOW, [60])


def test_a_life_that_ends_before_it_began_is_refused():
    with pytest.raises(InvalidField, match="before its launch"):
        freed_vcpus([], [(NOW, NOW - 1)] * MIN_LIFETIMES, NOW, [60])
    with pytest.raises(InvalidField, match="exit age before its entry"):
        survival([(5.0, 1.0)], [])


@pytest.mark.parametrize("vcpus", [True, -1, 1.5, 2_000_000, np.float64(2)])
def test_vcpus_that_are_not_whole_and_bounded_are_refused(vcpus):
    with pytest.raises(InvalidField, match="vcpus"):
        freed_vcpus([(NOW, vcpus)], lives(MIN_LIFETIMES, 10), NOW, [60])
