"""Survival of backfill VMs as the Kaplan-Meier estimator gives it: a VM still running when the run
ends is censored (it survived at least that long; what came after is not known), not counted as
ending then. Pure numpy, no plotting: controller/sim/plots.py draws what this returns.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.departures import survival as product_limit   # the controller's estimator, every VM watched from 0


def kaplan_meier(durations: Sequence[float], ended: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The Kaplan-Meier survival curve of `durations` (seconds each VM ran), `ended[i]` saying
    whether VM i ended (an event) or was still running at the end (censored).

    Returns (times, survival), a step function starting at (0, 1): survival[k] is the estimated
    share still running after times[k], up to times[k + 1]. At each time an event happens,
    S(t) = S(t-) x (1 - d / n), with d the VMs ending then and n those still at risk just before
    (running at least that long: ended then or later, or censored then or later, so a VM censored
    at the time of an event counts as at risk for it). A curve whose last VM ended reaches 0; one
    whose last ones were censored stays above it.
    """
    d = np.asarray(durations, dtype=float)
    e = np.asarray(ended, dtype=bool)
    if d.shape != e.shape or d.ndim != 1:
        raise ValueError(f"durations and ended must be two lists of the same length, got {d.shape} and {e.shape}")
    if np.isnan(d).any() or (d < 0).any():
        raise ValueError("durations must be numbers of seconds, none negative")
    times, survival = product_limit([(0.0, x) for x in d[e]], [(0.0, x) for x in d[~e]])
    return np.concatenate(([0.0], times)), np.concatenate(([1.0], survival))


def survival_at(times: np.ndarray, survival: np.ndarray, t: float) -> float:
    """The curve's value at t (right-continuous: an event at t counts)."""
    return float(survival[np.searchsorted(times, t, side="right") - 1])
