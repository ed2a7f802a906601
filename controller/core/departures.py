"""The residual capacity on-demand VMs are expected to free, from the lifetimes the pool has seen.

A goal-driven tenant's residual jumps when on-demand VMs leave (docs/simulator.md, "Where the
projection's error comes from": on the tenants bench the jumps came with departures, 2 to 4
times the residual, and the flat forecast projected finishes up to 85 % of the run too late).
The controller knows each live on-demand VM's age, and when each of the last on-demand VMs
that ended was launched and ended. With S the survival function of on-demand lifetimes, a VM of
age a is still there h seconds later with probability S(a + h) / S(a), and the vCPUs expected
to be freed by then are the sum over live VMs of their vCPUs times one minus that.

S is the product-limit (Kaplan-Meier) estimate over what was watched: from the oldest end kept
to now, every VM that was alive then is either among the ends kept (a death) or alive now
(censored at its age). A VM launched before that window entered it already old, so it counts
as at risk only from the age it had when the window opened (left truncation): counted from age
0, the many long-lived VMs alive now would dilute the hazard of the young ages (in a steady pool
of 10,000 VMs with 5,000 ends kept, it forecast a third of the departures of the next hour).

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

from gleaner_common import ids
from gleaner_common.ids import InvalidField

from .job_progress import MAX_TIME_S as MAX_SECONDS, MAX_VCPUS   # the sizing's bounds: a forecast it takes stays within them

MIN_LIFETIMES = 30            # fewer ended on-demand VMs than this: no forecast (the residual stays flat)
LIFETIMES_KEPT = 5_000        # the books keep the most recent on-demand lives, no more
HORIZON_S = 12 * 3600.0       # the forecast's reach: past it, the residual stays at its last value
STEP_S = 600.0                # one forecast point every ten minutes


def survival(deaths: Sequence[tuple[float, float]], censored: Sequence[tuple[float, float]]
             ) -> tuple[np.ndarray, np.ndarray]:
    """Product-limit survival with delayed entry: (times, S), S[i] the probability that a
    lifetime exceeds times[i] (a step function, 1 before times[0]). Each death and each censored
    life is (entry_age, exit_age): watched from entry_age on, dead (or last seen alive) at
    exit_age. At risk at t: entry <= t <= exit. Refuses negative, infinite or NaN ages and an
    exit before its entry."""
    times, factors = _factors(*_ages(deaths, "deaths"), *_ages(censored, "censored"))
    return times, np.cumprod(factors)


def _factors(entry_d: np.ndarray, exit_d: np.ndarray, entry_c: np.ndarray, exit_c: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(times, 1 - died / at risk at each death time): survival()'s steps, one by one, from the
    entry and exit ages of the deaths and of the censored."""
    exit_d = np.sort(exit_d)
    times = np.unique(exit_d)
    exits, entries = np.sort(np.concatenate([exit_d, exit_c])), np.sort(np.concatenate([entry_d, entry_c]))
    died = np.searchsorted(exit_d, times, side="right") - np.searchsorted(exit_d, times, side="left")
    at_risk = (exits.size - np.searchsorted(exits, times, side="left")) \
        - (entries.size - np.searchsorted(entries, times, side="right"))   # exit >= t, less entry > t
    return times, 1.0 - died / at_risk   # at_risk >= died: each death is at risk at its exit


def freed_vcpus(alive: Sequence[tuple[float, int]], lives: Sequence[tuple[float, float]], now_s: float,
                after_s: Sequence[float]) -> list[float] | None:
    """For each of `after_s` (seconds from now), the on-demand vCPUs expected to have left by
    then. `alive` is (launched_at, vcpus) of each live on-demand VM, `lives` (launched_at,
    ended_at) of the last ones that ended, all on the caller's clock. None with fewer than
    MIN_LIFETIMES lives (too few to estimate)."""
    if len(lives) < MIN_LIFETIMES:
        return None
    now = _seconds([now_s], "now_s")[0]
    launched_d, ended = (_seconds(column, f"lives {name}") for column, name in
                         zip(_columns(lives, "lives"), ("launched_at", "ended_at")))
    if np.any(ended < launched_d):
        raise InvalidField("lives", "a VM cannot end before its launch")
    launched_a = np.minimum(_seconds([t for t, _ in alive], "alive launched_at"), now)
    vcpus = np.asarray([_vcpus(v) for _, v in alive], dtype=float)
    opened = min(ended.min(), now)   # the window watched: from the oldest end kept to now
    ages = now - launched_a
    times, factors = _factors(np.maximum(0.0, opened - launched_d), ended - launched_d,
                              np.maximum(0.0, opened - launched_a), ages)
    # S(a + h) / S(a) is the product of the factors in (a, a + h]: kept as a count of the factors
    # that are 0 (everyone at risk died: a VM past it leaves for sure) and a sum of the others'
    # logs, since S itself may reach 0 before a live VM's age (one that entered the window old)
    zero = np.concatenate([[0], np.cumsum(factors <= 0)])
    logs = np.concatenate([[0.0], np.cumsum(np.log(np.where(factors > 0, factors, 1.0)))])
    order = np.argsort(ages)   # sorted, the searches below run faster
    ages, vcpus = ages[order], vcpus[order]
    start = np.searchsorted(times, ages, side="right")
    freed = []
    for h in _seconds(after_s, "after_s"):
        end = np.searchsorted(times, ages + h, side="right")
        stay = np.where(zero[end] > zero[start], 0.0, np.exp(logs[end] - logs[start]))
        freed.append(float((vcpus * (1.0 - stay)).sum()))
    return freed


def residual_forecast(residual_now: float, now_s: float, freed: Sequence[float] | None) -> list[tuple[float, float]]:
    """The residual as steps (time_s, vCPUs) for goals.project: the residual now, then plus the
    vCPUs `freed` says leave by each forecast_offsets() point (capped at MAX_VCPUS). Only
    [(now_s, residual_now)] (flat) when freed is None."""
    if freed is None:
        return [(now_s, residual_now)]
    return [(now_s, residual_now)] + [(now_s + h, min(float(MAX_VCPUS), residual_now + f))
                                      for h, f in zip(forecast_offsets(), freed)]


def forecast_offsets() -> list[float]:
    """Seconds from now of the forecast's points: every STEP_S up to HORIZON_S."""
    return [STEP_S * k for k in range(1, int(HORIZON_S // STEP_S) + 1)]


def _columns(rows: Sequence[tuple[float, float]], field: str) -> tuple[list[float], list[float]]:
    """The two columns of a list of pairs."""
    rows = list(rows)
    if any(not isinstance(r, (tuple, list)) or len(r) != 2 for r in rows):
        raise InvalidField(field, "each must be a pair of numbers")
    return [r[0] for r in rows], [r[1] for r in rows]


def _ages(pairs: Sequence[tuple[float, float]], field: str) -> tuple[np.ndarray, np.ndarray]:
    entry, leave = (_seconds(column, field) for column in _columns(pairs, field))
    if np.any(leave < entry):
        raise InvalidField(field, "an exit age before its entry age")
    return entry, leave


def _seconds(values: Sequence[float], field: str) -> np.ndarray:
    array = np.asarray(list(values), dtype=float)
    if array.size and (not np.all(np.isfinite(array)) or array.min() < 0 or array.max() > MAX_SECONDS):
        raise InvalidField(field, f"seconds must be finite, 0 to {MAX_SECONDS:g}")
    return array


def _vcpus(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidField("alive vcpus", f"{value!r} is not a whole number of vCPUs")
    return int(ids.bounded(value, 0, MAX_VCPUS, "alive vcpus", "vCPUs"))
