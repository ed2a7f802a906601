"""The tenants bench's hindsight search (tests/bench/tenants.py least_meeting): the least pinned
dedicated size that meets a deadline, found by bisection, for every threshold."""
from __future__ import annotations

import pytest

from tests.bench.tenants import DEADLINES, SEED_SET_STEP, STARTS, goal_cases, judge, least_meeting, per_seed_set


@pytest.mark.parametrize("high", [0, 1, 2, 7, 64])
def test_the_search_finds_the_least_size_that_meets_for_every_threshold(high):
    for threshold in range(high + 2):   # high + 1: none meets
        asked: list[int] = []

        def met(d: int) -> bool:
            asked.append(d)
            return d >= threshold
        found = least_meeting(met, high)
        assert found == (threshold if threshold <= high else None)
        assert asked[0] == 0   # most runs need none: asked first
        assert len(asked) <= 2 + max(high, 1).bit_length()   # bisection, not every size


def _run(seed: int, bought: float, hindsight: float | None, met: bool = True) -> dict:
    return dict(seed=seed, met=met, finish_error_at_half=0.05, dedicated_vcpu_hours=bought,
                hindsight_dedicated_vcpu_hours=hindsight, model_hindsight_dedicated_vcpu_hours=0.0,
                lower_bound_violations=0, upper_bound_violations=0)


def test_each_set_of_seeds_runs_every_start_and_deadline_with_seeds_of_its_own():
    cases = goal_cases(5, 3, STARTS)
    assert len(cases) == 3 * len(STARTS) * len(DEADLINES)
    seeds = [seed for *_rest, seed in cases]
    assert sorted(set(seeds)) == [base + i for base in (5, 105, 205) for i in range(len(STARTS))]
    # every start keeps one seed across its deadlines, and no two starts share one
    by_start = {}
    for start, _which, _deadline, seed in cases:
        by_start.setdefault((start, (seed - 5) // SEED_SET_STEP), set()).add(seed)
    assert all(len(s) == 1 for s in by_start.values()) and len(by_start) == 3 * len(STARTS)


def test_figures_are_pooled_over_the_sets_and_given_per_set():
    goals = [_run(0, 30.0, 10.0), _run(1, 0.0, 0.0), _run(100, 10.0, 10.0, met=False), _run(101, 5.0, None)]
    pooled = judge([], goals)["figures"]
    assert pooled["dedicated_over_hindsight"] == 2.0   # (30 + 0 + 10) / (10 + 0 + 10); the run no size meets apart
    assert pooled["deadline_met_share"] == round(2 / 3, 4)
    per_set = per_seed_set(goals, 0)
    assert per_set["0"]["dedicated_over_hindsight"] == 3.0 and per_set["0"]["deadline_met_share"] == 1.0
    assert per_set["100"]["dedicated_over_hindsight"] == 1.0 and per_set["100"]["deadline_met_share"] == 0.0
