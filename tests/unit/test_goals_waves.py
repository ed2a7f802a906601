"""The finish in whole waves of a job's tasks (controller/core/goals.py, wave_finish and
capacity_rising): hand-worked cases, where it does not apply, bad samples refused, and
properties over random histories (never before the wave in flight ends; more vCPUs held or more
work done never bring it later)."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from controller.core.goals import dedicated_releases
from controller.core.job_progress import (MAX_TASK_S, MIN_TASK_S, RISING_SHARE, RISING_WINDOW_S, Progress,
                                          capacity_rising, wave_finish)
from gleaner_common.ids import InvalidField

H = 3600.0


def steady(vcpus: float = 16) -> list[tuple[float, float, float]]:
    """16 vCPUs held from t=0; the first tasks (600 s) said at 600, the next wave at 1200."""
    return [(0.0, 0.0, vcpus), (600.0, 16.0, vcpus), (1200.0, 32.0, vcpus)]


def test_the_wave_in_flight_ends_a_task_after_the_last_word_and_each_later_one_does_held_x_task():
    rate = 16 / (16 * 600 / H)   # the history's own: 16 units per 16 vCPUs x 600 s, 6 per vCPU-hour
    left_units = 100 - 32        # 68 units: 68 / 6 vCPU-hours = 40,800 vCPU-seconds
    finish = wave_finish(Progress(32, 100), steady(), rate, 1300.0, 16)
    # the wave in flight ends at 1800 and does 9,600; 31,200 left take ceil(3.25) = 4 more waves
    assert left_units / rate * H == pytest.approx(40_800)
    assert finish == 1800 + 4 * 600


def test_a_late_word_rounds_the_wave_in_flight_up_to_whole_tasks_after_it():
    rate = 6.0
    # no word since 1200; at 2500 the wave in flight is taken to end at 1200 + 3 x 600
    assert wave_finish(Progress(32, 100), steady(), rate, 2500.0, 16) == 3000 + 4 * 600
    # the work left fits in the wave in flight: that wave's end is the finish
    assert wave_finish(Progress(99, 100), steady(), rate, 1300.0, 16) == 1800


def test_the_task_length_is_the_report_lag_within_its_bounds():
    fast = [(0.0, 0.0, 16.0), (5.0, 1.0, 16.0)]          # said after 5 s: a task of MIN_TASK_S
    slow = [(0.0, 0.0, 16.0), (3 * H, 1.0, 16.0)]         # said after 3 h: a task of MAX_TASK_S
    assert wave_finish(Progress(1, 100), fast, 1.0, 6.0, 16) == 5 + MIN_TASK_S + math.ceil(
        (99 * H - 16 * MIN_TASK_S) / (16 * MIN_TASK_S)) * MIN_TASK_S
    assert wave_finish(Progress(1, 100), slow, 1.0, 3 * H + 1, 16) == 3 * H + MAX_TASK_S + math.ceil(
        (99 * H - 16 * MAX_TASK_S) / (16 * MAX_TASK_S)) * MAX_TASK_S


def test_no_finish_in_waves_without_a_task_said_nor_vcpus_held():
    assert wave_finish(Progress(0, 100), [(0.0, 0.0, 16.0), (600.0, 0.0, 16.0)], 6.0, 700.0, 16) is None
    assert wave_finish(Progress(0, 100), [], 6.0, 700.0, 16) is None
    assert wave_finish(Progress(32, 100), steady(), 6.0, 1300.0, 0) is None


def test_vcpus_rising_past_the_share_over_their_recent_mean_leave_the_waves_out():
    history = steady()
    mean = 16.0
    edge = (1 + RISING_SHARE) * mean
    assert not capacity_rising(history, edge, 1300.0)
    assert capacity_rising(history, edge + 1, 1300.0)
    assert wave_finish(Progress(32, 100), history, 6.0, 1300.0, edge + 1) is None
    # samples older than the window do not count: far later, nothing recent, nothing rising
    assert not capacity_rising(history, 100.0, 1200.0 + RISING_WINDOW_S + 1)
    # a fall is not a rise: the waves on what it holds now apply
    assert wave_finish(Progress(32, 100), history, 6.0, 1300.0, 4) is not None


@pytest.mark.parametrize("history, field", [
    ([(0.0, 0.0)], "history[0]"),
    ([(0.0, -1.0, 16.0)], "history[0].done"),
    ([(0.0, 0.0, float("nan"))], "history[0].vcpus"),
    ([(float("inf"), 0.0, 16.0)], "history[0].time_s"),
])
def test_bad_samples_are_refused_naming_the_field(history, field):
    with pytest.raises(InvalidField) as refused:
        wave_finish(Progress(32, 100), history, 6.0, 1300.0, 16)
    assert field in str(refused.value)


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[float, float, float]]:
    steps = draw(st.lists(st.tuples(st.floats(1, 2 * H), st.floats(0, 50), st.integers(1, 64)), min_size=2, max_size=12))
    t, done, samples = 0.0, 0.0, []
    for gap, made, vcpus in steps:
        samples.append((t, done, float(vcpus)))
        t, done = t + gap, done + made
    return samples


@settings(max_examples=300, deadline=None)
@given(histories(), st.floats(0, 3 * H), st.floats(0.1, 100), st.integers(1, 256), st.floats(0, 1))
def test_the_finish_is_never_before_the_wave_in_flight_ends_and_more_held_or_done_never_later(
        history, after, rate, held, share):
    now = history[-1][0] + after
    done = history[-1][1]
    total = done + 1 + 1000 * share
    progress = Progress(done, total)
    finish = wave_finish(progress, history, rate, now, held)
    if finish is None:
        return
    assert finish >= now
    more_held = wave_finish(progress, history, rate, now, held * 2)
    assert more_held is None or more_held <= finish
    more_done = wave_finish(Progress(min(total, done + (total - done) / 2), total), history, rate, now, held)
    assert more_done is not None and more_done <= finish


# -- which dedicated VMs go (goals.dedicated_releases) ------------------------------------------------

def _vms(*started: float, state: str = "running") -> list[tuple[str, int, str, float]]:
    return [(f"d{i}", 1, state, at) for i, at in enumerate(started)]


def test_dedicated_vms_go_youngest_first_once_each_has_run_a_task():
    vms = _vms(0.0, 0.0, 500.0, 900.0)   # oldest first
    assert dedicated_releases(vms, 0, 1000.0, 600.0) == (["d1", "d0"], 2)   # the two younger stay a task
    assert dedicated_releases(vms, 0, 1100.0, 600.0) == (["d2", "d1", "d0"], 1)
    assert dedicated_releases(vms, 0, 1500.0, 600.0) == (["d3", "d2", "d1", "d0"], 0)
    assert dedicated_releases(vms, 3, 1000.0, 600.0) == (["d1"], 0)   # the one wanted gone is an older one
    assert dedicated_releases(vms, 4, 5000.0, 600.0) == ([], 0)


def test_before_a_task_is_said_a_dedicated_vm_stays_the_longest_task():
    vms = _vms(0.0)
    assert dedicated_releases(vms, 0, MAX_TASK_S - 1, None) == ([], 1)
    assert dedicated_releases(vms, 0, MAX_TASK_S, None) == (["d0"], 0)


@pytest.mark.parametrize("state, gone", [("waiting", ["d0"]), ("starting", [])])
def test_a_waiting_vm_goes_at_once_and_a_starting_one_at_a_later_sizing(state, gone):
    assert dedicated_releases(_vms(999.0, state=state), 0, 1000.0, 600.0) == (gone, 0)


@pytest.mark.parametrize("seed", range(50))
def test_releases_never_go_below_what_is_wanted_and_never_take_a_vm_mid_task(seed):
    rng = random.Random(seed)
    vms = sorted(((f"d{i}", rng.randint(1, 4), rng.choice(["running", "waiting", "starting"]), rng.uniform(0, 3000))
                  for i in range(rng.randint(0, 8))), key=lambda v: v[3])
    wanted, now, task = rng.randint(0, 20), 3000.0, rng.uniform(60, 3600)
    gone, kept = dedicated_releases(vms, wanted, now, task)
    by_id = {v[0]: v for v in vms}
    held = sum(v[1] for v in vms) - sum(by_id[g][1] for g in gone)
    assert not gone or held >= wanted
    assert all(by_id[g][2] != "starting" and not (by_id[g][2] == "running" and now - by_id[g][3] < task) for g in gone)
    assert 0 <= kept <= max(0, held - wanted)
