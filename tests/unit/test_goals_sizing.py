"""RHIC's goal-driven sizing (controller/core/goals.py), worked by hand from section 4.4: the rate
(Eq. 5), the finish (Eq. 6 over a step forecast), a deadline met by volunteers alone, one that
needs dedicated capacity, one impossible within the lower bound, and least cost; with the
checks of untrusted progress and of every input."""
from __future__ import annotations

import math

import pytest

from controller.core.goals import Deadline, LeastCost, last_wave_vcpus, project, projection_rate, size_for_goal
from controller.core.job_progress import Progress, progress_rate, report_lag, sizing_rate
from gleaner_common.ids import InvalidField

H = 3600.0
FRESH = Progress(0, 400)   # with no measured rate, the goal's W stands in: 400 units over W vCPU-hours


# ----------------------------------------------------------------------------------- deadline

def test_a_deadline_met_by_volunteers_alone_takes_every_volunteer_and_says_how_few_would_do():
    # W = 40 vCPU-hours, 8 residual vCPUs finish in 5 h; a 10 h deadline needs only 4, but it
    # takes all 8 (volunteers preempted late would otherwise leave it short)
    sizing = size_for_goal(Deadline(40, 10 * H), FRESH, 0.0, [(0.0, 8.0)], None, 8)
    assert (sizing.volunteer_vcpus, sizing.dedicated_vcpus) == (8, 0)
    assert sizing.projected_finish_s == pytest.approx(5 * H) and sizing.on_track
    assert "volunteers alone" in sizing.explain and "(4 would do)" in sizing.explain


def test_dedicated_capacity_waits_while_the_whole_lower_bound_bought_later_would_still_do():
    # W = 40; no residual now; a lower bound of 8 does it in 5 h. With 6 h to the deadline it may
    # wait up to 1 h: asked to wait 30 min, it buys nothing now and projects the deadline
    waiting = size_for_goal(Deadline(40, 6 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, defer_s=0.5 * H)
    assert waiting.dedicated_vcpus == 0 and waiting.on_track
    assert waiting.projected_finish_s == pytest.approx(6 * H) and "waiting" in waiting.explain
    # waiting 90 min would be too late: it buys now, the least that does it (40 / 6 h: 7 vCPUs)
    late = size_for_goal(Deadline(40, 6 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, defer_s=1.5 * H)
    assert late.dedicated_vcpus == 7 and late.on_track and late.projected_finish_s <= 6 * H
    # without waiting (the default), the same
    assert size_for_goal(Deadline(40, 6 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8).dedicated_vcpus == 7
    # residual that will come counts: 8 volunteers from 2 h on do it with the lower bound's help later
    assert size_for_goal(Deadline(40, 6 * H), FRESH, 0.0, [(0.0, 0.0), (2 * H, 8.0)], None, 8,
                         defer_s=1.5 * H).dedicated_vcpus == 0


def test_a_lower_bound_the_pool_cannot_place_now_waits_while_bought_later_it_would_still_do():
    # W = 40; no residual; the pool can place 2 of its vCPUs now (upper 2), but its lower bound
    # of 8 is kept for it. Capped at 2, nothing meets a 10 h deadline: it would buy those 2 now
    capped = size_for_goal(Deadline(40, 10 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, upper_bound_vcpus=2, defer_s=180)
    assert capped.dedicated_vcpus == 2 and not capped.on_track
    # its 8 bought 1 h from now still finish by 6 h: it waits, and says why
    waiting = size_for_goal(Deadline(40, 10 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, upper_bound_vcpus=2,
                            defer_s=180, guaranteed_upper_vcpus=8, guaranteed_defer_s=H)
    assert "from 3600 s on" in waiting.explain
    assert waiting.dedicated_vcpus == 0 and waiting.on_track and waiting.buys_later
    assert waiting.projected_finish_s == pytest.approx(10 * H)
    assert "the pool can place only 2" in waiting.explain and "kept from other tenants" in waiting.explain
    # 5.5 h: 8 from 1 h on do 36 of the 40 by then; waiting would miss it, so it buys what it can now
    soon = size_for_goal(Deadline(40, 5.5 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, upper_bound_vcpus=2,
                         defer_s=180, guaranteed_upper_vcpus=8, guaranteed_defer_s=H)
    assert soon.dedicated_vcpus == 2 and not soon.buys_later
    # a guarantee no larger than what the pool can place changes nothing
    same = size_for_goal(Deadline(40, 10 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, upper_bound_vcpus=2,
                         defer_s=180, guaranteed_upper_vcpus=2, guaranteed_defer_s=H)
    assert same == capped


@pytest.mark.parametrize("field, value", [("guaranteed_upper_vcpus", True), ("guaranteed_upper_vcpus", -1),
                                          ("guaranteed_upper_vcpus", 2.5), ("guaranteed_upper_vcpus", 10 ** 9),
                                          ("guaranteed_defer_s", -1.0), ("guaranteed_defer_s", math.nan)])
def test_the_guaranteed_wait_refuses_bad_inputs_naming_them(field, value):
    kwargs = dict(guaranteed_upper_vcpus=8, guaranteed_defer_s=H)
    kwargs[field] = value
    with pytest.raises(InvalidField) as error:
        size_for_goal(Deadline(40, 10 * H), FRESH, 0.0, [(0.0, 0.0)], None, 8, upper_bound_vcpus=2, **kwargs)
    assert field in str(error.value)


# ------------------------------------------------------------------------------ the last wave

def test_the_last_wave_runs_on_a_dedicated_vcpu_per_task_left_once_the_deadline_is_near():
    # W = 10 for 100 units: 10 units per vCPU-hour. 90 done: 1 vCPU-hour left, six 10-minute tasks
    goal, nearly = Deadline(10, 10 * H), Progress(90, 100)
    near = 10 * H - 300 - 1.5 * 600   # the deadline less the padding, a task and a half away
    assert last_wave_vcpus(goal, nearly, None, 600, near, 300, 8, 2) == 6
    # two tasks away and a second more: not yet
    assert last_wave_vcpus(goal, nearly, None, 600, 10 * H - 300 - 2 * 600 - 1, 300, 8, 2) == 0
    # within one task only: not at a task and a half
    assert last_wave_vcpus(goal, nearly, None, 600, near, 300, 8, 1) == 0
    # the work left does not fit the lower bound in one task (5 vCPUs do 5/6 vCPU-hour): not the last wave
    assert last_wave_vcpus(goal, nearly, None, 600, near, 300, 5, 2) == 0
    # three tasks left, a bound of 4: three
    assert last_wave_vcpus(goal, Progress(95, 100), None, 600, near, 300, 4, 2) == 3
    # at the measured rate (20 units per vCPU-hour): half a vCPU-hour, three tasks
    assert last_wave_vcpus(goal, nearly, 20.0, 600, near, 300, 8, 2) == 3
    # no task said yet, nothing left, least cost, no lower bound: none
    assert last_wave_vcpus(goal, nearly, None, None, near, 300, 8, 2) == 0
    assert last_wave_vcpus(goal, Progress(100, 100), None, 600, near, 300, 8, 2) == 0
    assert last_wave_vcpus(LeastCost(10, 1.0), nearly, None, 600, near, 300, 8, 2) == 0
    assert last_wave_vcpus(goal, nearly, None, 600, near, 300, 0, 2) == 0


@pytest.mark.parametrize("field, kwargs", [("task_s", dict(task_s=0.0)), ("task_s", dict(task_s=math.nan)),
                                           ("within_tasks", dict(within_tasks=-1.0)),
                                           ("padding_s", dict(padding_s=-5.0)),
                                           ("lower_bound_vcpus", dict(lower_bound_vcpus=True)),
                                           ("lower_bound_vcpus", dict(lower_bound_vcpus=-1)),
                                           ("rate_per_vcpu", dict(rate_per_vcpu=-1.0))])
def test_the_last_wave_refuses_bad_inputs_naming_them(field, kwargs):
    args = dict(goal=Deadline(10, 10 * H), progress=Progress(90, 100), rate_per_vcpu=None, task_s=600.0,
                now_s=10 * H - 1200, padding_s=300.0, lower_bound_vcpus=8, within_tasks=2.0)
    args.update(kwargs)
    with pytest.raises(InvalidField) as error:
        last_wave_vcpus(**args)
    assert field in str(error.value)


def test_a_deadline_that_needs_dedicated_capacity_gets_the_least():
    # W = 100; the residual gives 10 vCPUs for 5 h (50 vCPU-hours), then none: the other 50 over
    # the 10 h to the deadline need 5 dedicated vCPUs
    forecast = [(0.0, 10.0), (5 * H, 0.0)]
    sizing = size_for_goal(Deadline(100, 10 * H), FRESH, 0.0, forecast, None, 8)
    assert (sizing.volunteer_vcpus, sizing.dedicated_vcpus) == (10, 5)
    assert sizing.projected_finish_s == pytest.approx(10 * H) and sizing.on_track
    assert "5 dedicated vCPUs" in sizing.explain


def test_a_deadline_impossible_within_the_lower_bound_is_at_risk_with_the_finish():
    # as above with a lower bound of 3: 13 x 5 = 65 in 5 h, the other 35 at 3 vCPUs take 11.67 h
    forecast = [(0.0, 10.0), (5 * H, 0.0)]
    sizing = size_for_goal(Deadline(100, 10 * H), FRESH, 0.0, forecast, None, 3)
    assert sizing.dedicated_vcpus == 3 and not sizing.on_track
    assert sizing.projected_finish_s == pytest.approx(5 * H + 35 / 3 * H)
    assert "at risk" in sizing.explain and "24000 s after the deadline" in sizing.explain


def test_no_residual_and_no_lower_bound_never_finishes():
    sizing = size_for_goal(Deadline(10, H), FRESH, 0.0, [], None, 0)
    assert sizing.projected_finish_s == math.inf and not sizing.on_track and "never finishes" in sizing.explain


def test_the_measured_rate_replaces_the_goals_estimate_and_only_the_work_left_counts():
    # half done; 20 units per vCPU-hour measured: 200 units left are 10 vCPU-hours; 2 vCPUs take 5 h
    half = Progress(200, 400)
    assert project(Deadline(40, 100 * H), half, 1000.0, [(0.0, 2.0)], 20.0, 0).finish_s == pytest.approx(1000.0 + 5 * H)
    # a deadline 7 h away: 2 volunteer vCPUs do it in 5 h; the goal's W would have said 20
    # vCPU-hours, which they could not do in time
    sizing = size_for_goal(Deadline(40, 1000.0 + 7 * H), half, 1000.0, [(0.0, 2.0)], 20.0, 0)
    assert sizing.on_track and "(2 would do)" in sizing.explain
    assert sizing.volunteer_vcpus == 2 and sizing.projected_finish_s == pytest.approx(1000.0 + 5 * H)
    assert not size_for_goal(Deadline(40, 1000.0 + 7 * H), half, 1000.0, [(0.0, 2.0)], None, 0).on_track


def test_padding_moves_the_deadline_earlier():
    forecast = [(0.0, 10.0), (5 * H, 0.0)]
    padded = size_for_goal(Deadline(100, 10 * H), FRESH, 0.0, forecast, None, 16, padding_s=H)
    # 50 vCPU-hours over 9 h: 6 dedicated vCPUs (5.56 rounded up)
    assert padded.dedicated_vcpus == 6 and padded.projected_finish_s < 9 * H


def test_the_forecast_is_read_from_now():
    # points before now: the last one is in effect now; the job starts at 2 h with 4 vCPUs left
    forecast = [(0.0, 100.0), (H, 4.0), (3 * H, 8.0)]
    # 4 vCPUs for 1 h (4), then 8 for 1 h (8): done at 4 h, wanting every vCPU the forecast has
    sizing = size_for_goal(Deadline(12, 4 * H), FRESH, 2 * H, forecast, None, 0)
    assert sizing.volunteer_vcpus == 4 and sizing.projected_finish_s == pytest.approx(4 * H)


def test_the_upper_bound_caps_volunteers_and_dedicated_together():
    sizing = size_for_goal(Deadline(60, 10 * H), FRESH, 0.0, [(0.0, 10.0)], None, 4, upper_bound_vcpus=6)
    assert (sizing.volunteer_vcpus, sizing.dedicated_vcpus) == (6, 0)   # 6 x 10 h = 60
    sizing = size_for_goal(Deadline(60, 5 * H), FRESH, 0.0, [(0.0, 10.0)], None, 4, upper_bound_vcpus=6)
    assert not sizing.on_track and sizing.volunteer_vcpus + sizing.dedicated_vcpus <= 6


def test_a_finished_job_needs_nothing():
    sizing = size_for_goal(Deadline(40, H), Progress(400, 400), 5 * H, [(0.0, 8.0)], None, 8)
    assert (sizing.volunteer_vcpus, sizing.dedicated_vcpus, sizing.on_track) == (0, 0, True)


# --------------------------------------------------------------------------------- least cost

def test_least_cost_with_free_volunteers_and_no_fixed_cost_buys_nothing():
    sizing = size_for_goal(LeastCost(1.0, 100), FRESH, 0.0, [(0.0, 4.0)], None, 64)
    assert sizing.dedicated_vcpus == 0 and sizing.cost == pytest.approx(0.0)
    assert sizing.projected_finish_s == pytest.approx(25 * H)


@pytest.mark.parametrize("fixed, dedicated, cost", [
    (2.0, 0, 50.0),      # (F + d) x 100 / (4 + d) rises with d when F < 4: 2 x 25 h
    (10.0, 16, 130.0),   # and falls when F > 4: (10 + 16) x 5 h
])
def test_least_cost_weighs_the_fixed_cost_of_time_against_dedicated_capacity(fixed, dedicated, cost):
    sizing = size_for_goal(LeastCost(1.0, 100, 0.0, fixed), FRESH, 0.0, [(0.0, 4.0)], None, 16)
    assert sizing.dedicated_vcpus == dedicated and sizing.cost == pytest.approx(cost) and sizing.on_track


def test_least_cost_finds_an_optimum_inside_the_range():
    # 10 residual vCPUs for 2 h, then none; W = 40, F = 1/h, dedicated $1 per vCPU-hour.
    # d <= 10: finish 20/d h, cost 20/d + 20; d >= 10: finish 40/(10+d) h, cost (1+d) 40/(10+d).
    # Least at d = 10: 2 h, cost 22 (d = 9: 22.22; d = 11: 22.86)
    sizing = size_for_goal(LeastCost(1.0, 40, 0.0, 1.0), Progress(0, 40), 0.0, [(0.0, 10.0), (2 * H, 0.0)],
                           None, 64)
    assert sizing.dedicated_vcpus == 10 and sizing.cost == pytest.approx(22.0)
    assert sizing.projected_finish_s == pytest.approx(2 * H)


def test_least_cost_counts_volunteer_hours_at_their_price():
    # RHIC's prices: $1.00 dedicated, $0.42 volunteer; all 100 vCPU-hours on volunteers: $42
    sizing = size_for_goal(LeastCost(1.0, 100, 0.42), FRESH, 0.0, [(0.0, 4.0)], None, 8)
    assert sizing.dedicated_vcpus == 0 and sizing.cost == pytest.approx(42.0)


def test_least_cost_that_never_finishes_is_at_risk_at_the_bound():
    sizing = size_for_goal(LeastCost(1.0, 100), FRESH, 0.0, [], 0.0, 12)
    assert sizing.dedicated_vcpus == 12 and not sizing.on_track and sizing.projected_finish_s == math.inf


def test_project_gives_one_allocations_finish_and_cost():
    forecast = [(0.0, 10.0), (2 * H, 0.0)]
    assert project(LeastCost(1.0, 40, 0.0, 1.0), Progress(0, 40), 0.0, forecast, None, 5).cost == \
        pytest.approx(24.0)   # 20/5 = 4 h: 4 + 5 x 4
    assert project(Deadline(40, H), Progress(0, 40), 0.0, forecast, None, 0, volunteer_cap=5).finish_s == \
        math.inf   # 5 vCPUs for 2 h: 10 of 40, then nothing


# ------------------------------------------------------------------------------ progress rate

def test_progress_rate_is_progress_over_the_vcpu_hours_that_made_it():
    # progress said from the first minute (lag 60 s): 4 vCPUs for 1 h, 2 vCPUs for 1 h, less the
    # last minute's (its work is in flight): 5.9667 vCPU-hours made 60 units
    history = [(0, 0, 4), (60, 1, 4), (H, 40, 2), (2 * H, 60, 9)]
    assert progress_rate(history) == pytest.approx(60 / (4 + 2 * (H - 60) / H))
    assert progress_rate(list(reversed(history))) == pytest.approx(60 / (4 + 2 * (H - 60) / H))   # any order


def test_the_rate_leaves_out_the_vcpu_time_of_tasks_still_in_flight():
    # tasks of 10 min that say progress when they finish: 6 vCPUs from 0, the first 6 tasks said
    # at 10 min, 6 more at 20 min (one unit a vCPU-second). Counted up to now the first 20 min
    # would read as 1/2 then 1/1 of the truth, and at 10 min as no rate at all; the report lag
    # (10 min) leaves out the vCPU-time whose tasks have not said yet
    task = 600.0
    at_first = [(0, 0, 6), (task, 6 * task, 6)]
    assert progress_rate(at_first) is None   # all the vCPU-time so far is in flight
    both = [*at_first, (2 * task, 12 * task, 6)]
    assert progress_rate(both) == pytest.approx(12 * task / (6 * task / H))   # 2 units per vCPU-s counted
    steady = [(i * task, 6 * task * i, 6) for i in range(12)]
    assert progress_rate(steady) == pytest.approx(H * 11 / 10)   # 11 waves said over 10 waves' vCPU-time
    assert report_lag(steady) == pytest.approx(task)
    assert report_lag([(0, 0, 0), (5, 0, 6), (65, 1, 6)]) == pytest.approx(60)   # from the first vCPUs held
    assert report_lag([(0, 0, 6), (60, 0, 6)]) == 0.0   # no progress yet


@pytest.mark.parametrize("history", [[], [(0, 5, 4)], [(0, 0, 0), (H, 10, 0)], [(H, 0, 4), (H, 10, 4)]])
def test_progress_rate_is_none_when_it_cannot_be_measured(history):
    assert progress_rate(history) is None


def test_progress_that_went_backwards_is_no_progress():
    assert progress_rate([(0, 50, 4), (H, 10, 4)]) == 0.0
    # the lag is 1 h (the first word of more than the start's 0): 100 units over 2 h of 1 vCPU
    assert progress_rate([(0, 0, 1), (H, 100, 1), (2 * H, 0, 1), (3 * H, 100, 1)]) == pytest.approx(100 / 2)


@pytest.mark.parametrize("history, field", [
    ([(0, 0, 4), (H, 1e16, 4)], "history[1].done"), ([(0, 0, -1), (H, 1, 4)], "history[0].vcpus"),
    ([(float("nan"), 0, 4)], "history[0].time_s"), ([(0, 0)], "history[0]"),
])
def test_bad_history_is_refused_naming_the_sample(history, field):
    with pytest.raises(InvalidField) as caught:
        progress_rate(history)
    assert caught.value.field == field


# ---------------------------------------------------------------------------- untrusted input

@pytest.mark.parametrize("done, total, field", [
    (5, 4, "progress.done"), (-1, 4, "progress.done"), (0, 0, "progress.total"), (0, -3, "progress.total"),
    (0, float("nan"), "progress.total"), (float("inf"), 4, "progress.done"), (0, 1e16, "progress.total"),
    ("1", 4, "progress.done"),
])
def test_bad_progress_is_refused_naming_the_field(done, total, field):
    with pytest.raises(InvalidField) as caught:
        Progress(done, total)
    assert caught.value.field == field


@pytest.mark.parametrize("make, field", [
    (lambda: Deadline(0, 10), "goal.work_vcpu_hours"), (lambda: Deadline(1, float("inf")), "goal.deadline_s"),
    (lambda: LeastCost(-1, 10), "goal.price_per_dedicated_vcpu_hour"),
    (lambda: LeastCost(1.0, 10, 2.0), "goal.price_per_volunteer_vcpu_hour"),
    (lambda: LeastCost(1.0, 10, 0.0, float("nan")), "goal.fixed_cost_per_hour"),
])
def test_bad_goals_are_refused_naming_the_field(make, field):
    with pytest.raises(InvalidField) as caught:
        make()
    assert caught.value.field == field


@pytest.mark.parametrize("kwargs, field", [
    ({"residual_forecast": [(0, -1)]}, "residual_forecast[0].vcpus"),
    ({"residual_forecast": [(0, 1), (1,)]}, "residual_forecast[1]"),
    ({"rate_per_vcpu": -1.0}, "rate_per_vcpu"), ({"lower_bound_vcpus": 2.5}, "lower_bound_vcpus"),
    ({"lower_bound_vcpus": -1}, "lower_bound_vcpus"), ({"now_s": float("nan")}, "now_s"),
    ({"upper_bound_vcpus": True}, "upper_bound_vcpus"), ({"padding_s": -5}, "padding_s"),
    ({"goal": "fast"}, "goal"), ({"progress": (0, 1)}, "progress"),
])
def test_bad_sizing_inputs_are_refused_naming_the_field(kwargs, field):
    args = {"goal": Deadline(10, H), "progress": FRESH, "now_s": 0.0, "residual_forecast": [(0.0, 4.0)],
            "rate_per_vcpu": None, "lower_bound_vcpus": 4, **kwargs}
    with pytest.raises(InvalidField) as caught:
        size_for_goal(**args)
    assert caught.value.field == field


def test_the_projection_rate_is_the_measured_one_never_above_what_the_goal_states():
    goal, progress = Deadline(7.0, 10_000.0), Progress(100, 700)   # 700 units over 7 vCPU-hours: 100 each
    assert projection_rate(goal, progress, None) == 100.0   # nothing measured: the goal's own figure
    assert projection_rate(goal, progress, 281.0) == 100.0  # read high after a wave of tasks ended
    assert projection_rate(goal, progress, 28.0) == 28.0    # slower than stated: as measured
    assert projection_rate(LeastCost(1.0, 7.0), progress, 250.0) == 100.0


@pytest.mark.parametrize("done, expected", [(4.9, None), (5.0, "measured"), (100.0, "measured")])
def test_the_sizing_rate_is_the_measured_one_only_from_a_twentieth_of_the_job(done, expected):
    """History of 2 vCPUs over an hour; said DONE of 100: below 5 done, no rate (the goal's own
    stands in); from 5, progress_rate's."""
    history = [(0.0, 0.0, 2.0), (H, done / 2, 2.0), (2 * H, done, 2.0)]
    rate = sizing_rate(Progress(done, 100.0), history)
    assert rate == (None if expected is None else progress_rate(history))


def test_the_sizing_rate_is_none_when_nothing_was_said_or_no_progress_measured():
    assert sizing_rate(None, [(0.0, 0.0, 2.0), (H, 50.0, 2.0)]) is None
    assert sizing_rate(Progress(50.0, 100.0), [(0.0, 50.0, 2.0), (H, 50.0, 2.0)]) is None   # measured 0
