"""Backfill VM survival by Kaplan-Meier (controller/sim/survival.py), against examples by hand."""
from __future__ import annotations

import numpy as np
import pytest

from controller.sim.survival import kaplan_meier, survival_at


def test_kaplan_meier_by_hand():
    # six VMs ran 1, 2, 2, 3, 4 and 5 h; the second at 2 h and the one at 4 h still ran at the end
    # t=1: 6 at risk, 1 ends: 5/6; t=2: 5 at risk (the one censored at 2 h still counts), 1 ends:
    # 5/6 x 4/5 = 2/3; t=3: 3 at risk, 1 ends: 2/3 x 2/3 = 4/9; t=5: 1 at risk, 1 ends: 0
    times, survival = kaplan_meier([1, 2, 2, 3, 4, 5], [True, True, False, True, False, True])
    assert times.tolist() == [0, 1, 2, 3, 5]
    assert np.allclose(survival, [1, 5 / 6, 2 / 3, 4 / 9, 0])
    assert survival_at(times, survival, 2.5) == pytest.approx(2 / 3)
    assert survival_at(times, survival, 3) == pytest.approx(4 / 9)   # an event at t counts at t
    assert survival_at(times, survival, 0.5) == 1.0


def test_censored_vms_are_not_counted_as_ending():
    # three VMs: one ended at 1 h, two still running at 10 h. Counting those as ending at 10 h
    # would bring the curve to 0; censored, it stays at 2/3
    times, survival = kaplan_meier([1, 10, 10], [True, False, False])
    assert times.tolist() == [0, 1] and np.allclose(survival, [1, 2 / 3])
    assert survival_at(times, survival, 10) == pytest.approx(2 / 3)


def test_ties_and_no_events():
    times, survival = kaplan_meier([2, 2, 2], [True, True, False])
    assert times.tolist() == [0, 2] and np.allclose(survival, [1, 1 / 3])
    times, survival = kaplan_meier([3, 4], [False, False])
    assert times.tolist() == [0] and survival.tolist() == [1]
    times, survival = kaplan_meier([], [])
    assert survival.tolist() == [1]


def test_without_censoring_it_is_the_plain_share_still_running():
    durations = [5, 1, 3, 3, 8, 2]
    times, survival = kaplan_meier(durations, [True] * 6)
    for t in (0, 1, 2.5, 3, 7, 8):
        assert survival_at(times, survival, t) == pytest.approx(sum(d > t for d in durations) / 6)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="same length"):
        kaplan_meier([1, 2], [True])
    with pytest.raises(ValueError, match="none negative"):
        kaplan_meier([-1], [True])
