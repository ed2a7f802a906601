"""The residual capacity on-demand VMs are expected to free, from the lifetimes the pool has seen.

A goal-driven tenant's residual jumps when on-demand VMs leave (docs/simulator.md, "Where the
projection's error comes from": on the tenants bench the jumps came with departures, 2 to 4
times the residual, and the flat forecast projected finishes up to 85 % of the run too late).
The controller knows each live on-demand VM's age, and the lifetimes of those that ended. With
S the survival function of on-demand lifetimes (Kaplan-Meier: ended VMs are deaths, live ones
censored at their age), a VM of age a is still there h seconds later with probability
S(a + h) / S(a), and the vCPUs expected to be freed by then are the sum over live VMs of their
vCPUs times one minus that.

Used for the projected finish that `gleanctl tenant show` gives, not for buying dedicated
capacity: sized on it, the tenants bench met one deadline fewer and bought 1.36 times the
hindsight search's dedicated capacity (against 1.16 sized on the residual now), because freed
vCPUs may go to other tenants or to new on-demand VMs. New arrivals are not forecast: counted
at the last two hours' rate, the projection came out worse (a mean error of 0.45 against 0.15),
this bench's on-demand load having no steady rate.

Pure: plain numbers in, numbers out; times on the caller's clock.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gleaner_common.ids import InvalidField

MIN_LIFETIMES = 30            # fewer ended on-demand VMs than this: no forecast (the residual stays flat)
LIFETIMES_KEPT = 5_000        # the books keep the most recent on-demand lifetimes, no more
HORIZON_S = 12 * 3600.0       # the forecast's reach: past it, the residual stays at its last value
STEP_S = 600.0                # one forecast point every ten minutes
MAX_SECONDS = 1e12


def survival(lifetimes: Sequence[float], ages: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Kaplan-Meier: (times, S) with S[i] the probability that a lifetime exceeds times[i] (a
    step function, 1 before times[0]). `lifetimes` ended (deaths), `ages` still alive (censored:
    at risk up to their age). Refuses negative, infinite or NaN values."""
    deaths, censored = np.sort(_seconds(lifetimes, "lifetimes")), np.sort(_seconds(ages, "ages"))
    times = np.unique(deaths)
    if times.size == 0:
        return np.zeros(0), np.zeros(0)
    died = np.searchsorted(deaths, times, side="right") - np.searchsorted(deaths, times, side="left")
    # at risk at t: deaths at or after t, and the censored whose age reaches t (a VM of age t has lived to t)
    at_risk = (deaths.size - np.searchsorted(deaths, times, side="left")) \
        + (censored.size - np.searchsorted(censored, times, side="left"))
    return times, np.cumprod(1.0 - died / at_risk)


def surviving(times: np.ndarray, s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """S(x) for each x (the step function survival() gave)."""
    index = np.searchsorted(times, x, side="right") - 1
    return np.where(index < 0, 1.0, s[np.clip(index, 0, max(s.size - 1, 0))] if s.size else 1.0)


def freed_vcpus(alive: Sequence[tuple[float, int]], lifetimes: Sequence[float],
                after_s: Sequence[float]) -> list[float] | None:
    """For each of `after_s` (seconds from now), the on-demand vCPUs expected to have left by
    then: `alive` is (age_s, vcpus) of each live on-demand VM, `lifetimes` the seconds ended
    on-demand VMs lived. None with fewer than MIN_LIFETIMES lifetimes (too few to estimate)."""
    if len(lifetimes) < MIN_LIFETIMES:
        return None
    pairs = list(alive)
    ages = _seconds([age for age, _ in pairs], "alive ages")
    vcpus = np.asarray([_vcpus(v) for _, v in pairs], dtype=float)
    times, s = survival(lifetimes, ages)
    now = surviving(times, s, ages)
    outlived = now <= 0   # older than every lifetime seen, none of them censored: taken to stay
    freed = []
    for h in _seconds(after_s, "after_s"):
        stay = np.where(outlived, 1.0, surviving(times, s, ages + h) / np.where(outlived, 1.0, now))
        freed.append(float((vcpus * (1.0 - stay)).sum()))
    return freed


def residual_forecast(residual_now: float, now_s: float, alive: Sequence[tuple[float, int]],
                      lifetimes: Sequence[float]) -> list[tuple[float, float]]:
    """The residual as steps (time_s, vCPUs) for goals.project: the residual now, plus every
    on-demand vCPU expected to be freed, each STEP_S up to HORIZON_S. Only [(now_s,
    residual_now)] (flat) when too few lifetimes are known."""
    after = [STEP_S * k for k in range(1, int(HORIZON_S // STEP_S) + 1)]
    freed = freed_vcpus(alive, lifetimes, after)
    if freed is None:
        return [(now_s, residual_now)]
    return [(now_s, residual_now)] + [(now_s + h, residual_now + f) for h, f in zip(after, freed)]


def _seconds(values: Sequence[float], field: str) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if array.size and (not np.all(np.isfinite(array)) or array.min() < 0 or array.max() > MAX_SECONDS):
        raise InvalidField(field, f"seconds must be finite, 0 to {MAX_SECONDS:g}")
    return array


def _vcpus(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 1_000_000:
        raise InvalidField("alive vcpus", f"{value!r} is not a whole number of vCPUs, 0 to 1000000")
    return int(value)

