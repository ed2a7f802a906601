"""Goal-driven sizing of a batch tenant's allocation, after RHIC (Zhang et al., "Harnessing residual
resources for ... background workloads", sections 4.4-4.5 and 5.2-5.3): how many volunteer
(residual, preemptible) vCPUs and how much dedicated (non-preemptible) capacity a tenant's job
needs to meet its goal, re-evaluated each interval as the residual forecast and the job's
progress change.

RHIC's model (section 4.4), as used here:

- the job's progress depends on the *aggregate* productivity it receives (Insight 3), not on
  which nodes give it; so capacity is a number of vCPUs over time, volunteers plus dedicated;
- the processing rate is measured (Eq. 5): R_proc = work completed / (elapsed x aggregate
  productivity); here, progress units per vCPU-hour (job_progress.progress_rate);
- the time left is the work left over the predicted productivity times that rate (Eq. 6);
  here the predicted residual capacity is a step function of time (residual_forecast), so the
  time left is where the capacity's integral reaches the work left;
- goals (section 4.4, "Goal Estimation"): a deadline (RHIC's score: estimated completion minus
  the deadline; here the least dedicated capacity that brings it to or under 0), or least
  monetary cost (the job's cost up to its estimated completion, at a price for dedicated and
  one for volunteer capacity: RHIC's evaluation priced dedicated nodes at $1.00/h and
  volunteers at $0.42/h, section 5.1). RHIC's energy goal is left out;
- RHIC pads its estimate with the average task length to allow for stragglers; `padding_s`.

Gleaner's differences: the dedicated capacity is the search variable (RHIC fixes its dedicated
nodes and searches the volunteer count, evaluating every count, section 4.1 and 5.2); dedicated
capacity never passes the tenant's own lower bound, and a deadline it cannot meet within it is
reported "at risk" with the projected finish. A deadline takes every volunteer the tenant is
granted (RHIC hugs its deadlines with the fewest, as its volunteers are paid; Gleaner's are idle
capacity, shared among batch tenants by PSF), and dedicated capacity waits while the tenant's
whole lower bound bought a little later would still meet it. The job's tasks may say progress
only when they finish, so the rate counts vCPU-time up to the report lag
(job_progress.report_lag) and the padding is at least one task; it steers the sizing only from a
twentieth of the job on (job_progress.sizing_rate). RHIC's I/O saturation model (section 4.3)
has no counterpart: Gleaner's volunteers carry their own disks.

Pure: times are seconds on the caller's clock (now_s, deadline_s and the forecast share it); no
clock, no I/O, no numpy.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from dataclasses import dataclass

from gleaner_common import ids
from gleaner_common.ids import InvalidField

from .job_progress import HOUR, MAX_FORECAST_POINTS, MAX_TASK_S, MAX_TIME_S, MAX_VCPUS, MIN_TASK_S, Progress

MAX_WORK_VCPU_HOURS = 1e9
MAX_PRICE = 1e9
MAX_RATE = 1e18
GRID = 16                      # least cost: candidates per search pass (RHIC sampled every 2 of 36)
MAX_WAVE_TASKS = 100.0                 # last_wave_vcpus: how many tasks before the deadline it may look


# ------------------------------------------------------------------------------------ goals

@dataclass(frozen=True)
class Deadline:
    """W vCPU-hours of work by the deadline D (RHIC's deadline goal). W also gives the job's rate
    until progress has been measured: its progress total over W."""
    work_vcpu_hours: float
    deadline_s: float

    def __post_init__(self) -> None:
        ids.number(self.work_vcpu_hours, 1e-9, MAX_WORK_VCPU_HOURS, "goal.work_vcpu_hours", "vCPU-hours")
        ids.number(self.deadline_s, 0.0, MAX_TIME_S, "goal.deadline_s", "s")


@dataclass(frozen=True)
class LeastCost:
    """The cheapest way to finish W vCPU-hours of work (RHIC's monetary goal): dedicated capacity
    at its price, volunteers at theirs (0 when residual capacity is free to the tenant), and a
    fixed cost for each hour the job runs whatever its size (RHIC's always-on dedicated nodes,
    or anyone waiting for the result). Without one of a fixed cost or a volunteer price below
    the dedicated one, the answer is plain: all volunteers, no dedicated capacity."""
    price_per_dedicated_vcpu_hour: float
    work_vcpu_hours: float
    price_per_volunteer_vcpu_hour: float = 0.0
    fixed_cost_per_hour: float = 0.0

    def __post_init__(self) -> None:
        dedicated = ids.number(self.price_per_dedicated_vcpu_hour, 0.0, MAX_PRICE,
                                   "goal.price_per_dedicated_vcpu_hour")
        ids.number(self.work_vcpu_hours, 1e-9, MAX_WORK_VCPU_HOURS, "goal.work_vcpu_hours", "vCPU-hours")
        ids.number(self.price_per_volunteer_vcpu_hour, 0.0, dedicated, "goal.price_per_volunteer_vcpu_hour")
        ids.number(self.fixed_cost_per_hour, 0.0, MAX_PRICE, "goal.fixed_cost_per_hour")


Goal = Deadline | LeastCost
GOAL_KINDS = ("deadline", "least_cost")


def goal_from_dict(values: Mapping[str, Any]) -> Goal:
    """A goal as stored (JSON): {"kind": "deadline", "work_vcpu_hours", "deadline_s"} or
    {"kind": "least_cost", "work_vcpu_hours", "price_per_dedicated_vcpu_hour",
    "price_per_volunteer_vcpu_hour"?, "fixed_cost_per_hour"?}. InvalidField names what is wrong."""
    if not isinstance(values, Mapping):
        raise InvalidField("goal", f"{values!r} is not a table of the goal's figures")
    kind = values.get("kind")
    figures = {k: v for k, v in values.items() if k != "kind"}
    try:
        if kind == "deadline":
            return Deadline(**figures)
        if kind == "least_cost":
            return LeastCost(**figures)
    except TypeError as exc:   # a figure missing or unknown
        raise InvalidField("goal", f"{kind}: {exc}") from None
    raise InvalidField("goal.kind", f"{kind!r} is not one of {', '.join(GOAL_KINDS)}")


@dataclass(frozen=True)
class Sizing:
    """size_for_goal's answer: what to give the tenant this interval, and what it leads to.
    `volunteer_vcpus` is what it takes now (the forecast's value now, within its upper bound
    beside its dedicated vCPUs); `projected_finish_s` is math.inf when the job would never
    finish at this size; `cost` is the projected cost under LeastCost, else None; `done` when
    the job's progress says no work is left."""
    volunteer_vcpus: int
    dedicated_vcpus: int
    projected_finish_s: float
    on_track: bool
    explain: str
    cost: float | None = None
    done: bool = False   # the job's progress says no work is left
    # the plan buys its lower bound later: its finish is the deadline that plan meets (the books
    # show a sooner one when on-demand VMs expected to leave bring it)
    buys_later: bool = False


def projection_rate(goal: Goal, progress: Progress, measured: float | None) -> float:
    """The rate a projected finish is made at: the measured one (progress_rate), but never above
    what the goal states (progress TOTAL over W: what a vCPU does when no work is lost). Guests
    that say progress as tasks end make the measured rate read high just after each wave of
    tasks ends (by k/(k-1) after the k-th), and a projection at it comes early; a job slower than
    stated (work lost to preemption, a W set too low) is projected at its measured rate."""
    stated = progress.total / goal.work_vcpu_hours
    return stated if measured is None else min(measured, stated)


def last_wave_vcpus(goal: Goal, progress: Progress, rate_per_vcpu: float | None, task_s: float | None, now_s: float,
                    padding_s: float, lower_bound_vcpus: int, within_tasks: float) -> int:
    """Dedicated vCPUs for the job's last wave: once the deadline less `padding_s` is within
    `within_tasks` tasks (`task_s`, task_length's) and the work left fits its lower bound in one
    task, a vCPU per task left, within the bound; else 0 (also for least cost, or before a task is
    said). Guests say progress as tasks end: a volunteer preempted in the last wave loses a task
    there is no time to run again. `rate_per_vcpu` as size_for_goal's (None: the goal's own)."""
    if task_s is None or not isinstance(goal, Deadline):
        return 0
    task = ids.number(task_s, MIN_TASK_S, MAX_TASK_S, "task_s", "s")
    padding = ids.number(padding_s, 0.0, MAX_TIME_S, "padding_s", "s")
    within = ids.number(within_tasks, 0.0, MAX_WAVE_TASKS, "within_tasks", "tasks")
    left = _job(goal, progress, now_s, (), rate_per_vcpu, lower_bound_vcpus, None).work_left   # vCPU-hours
    task_hours = task / HOUR
    if now_s + within * task < goal.deadline_s - padding or left > lower_bound_vcpus * task_hours:
        return 0   # not yet, or more than one wave on the bound (a job never finishing: left is inf)
    return min(lower_bound_vcpus, math.ceil(left / task_hours - 1e-9))


def dedicated_releases(vms: Sequence[tuple[str, int, str, float]], wanted_vcpus: int, now_s: float,
                       task_s: float | None) -> tuple[list[str], int]:
    """Which of a tenant's dedicated VMs to release so that they hold no more than `wanted_vcpus`:
    `vms` are (id, vCPUs, state, started), oldest first. The youngest go first, in whole VMs, but
    one running for less than a task (`task_s`; MAX_TASK_S before a task is said) stays, since
    guests say progress as tasks end and it would lose its work in flight, and an older one goes
    in its place. Only running and waiting VMs go (one starting goes at a later sizing). Returns
    the ids to release and the vCPUs kept past `wanted_vcpus` for their first task (0 if none)."""
    keep_s = MAX_TASK_S if task_s is None else task_s
    held = sum(vcpus for _id, vcpus, _state, _started in vms)
    released: list[str] = []
    young = False
    for vm_id, vcpus, state, started in reversed(vms):
        if held - vcpus < wanted_vcpus:
            break
        if state == "running" and now_s - started < keep_s:
            young = True
        elif state in ("running", "waiting"):
            released.append(vm_id)
            held -= vcpus
    return released, (held - wanted_vcpus if young else 0)


# --------------------------------------------------------------------------- the job's model

@dataclass(frozen=True)
class _Job:
    """What the sizing searches over: the residual forecast as steps from now, the work left in
    vCPU-hours, and the cap on the tenant's total vCPUs (its upper bound) if any."""
    now_s: float
    steps: tuple[tuple[float, float], ...]   # (from_s, residual vCPUs), the first from now_s
    work_left: float                         # vCPU-hours (Eq. 6's J_remaining / R_proc)
    upper: float

    def run(self, dedicated: float, cap: float = math.inf, dedicated_from: float | None = None) -> tuple[float, float]:
        """(finish_s, volunteer vCPU-hours used) with `dedicated` vCPUs throughout (or from
        `dedicated_from` on) and volunteers up to `cap` of the residual at each step (Eq. 6 over
        a step function)."""
        left, used = self.work_left, 0.0
        if left <= 0:
            return self.now_s, 0.0
        if math.isinf(left):   # no progress measured at any rate: it never finishes
            return math.inf, math.inf
        steps = self.steps if dedicated_from is None else _split(self.steps, dedicated_from)
        for i, (start, residual) in enumerate(steps):
            end = steps[i + 1][0] if i + 1 < len(steps) else math.inf
            own = min(dedicated, self.upper) if dedicated_from is None or start >= dedicated_from else 0.0
            volunteers = max(0.0, min(cap, residual, self.upper - own))
            rate = own + volunteers
            if rate <= 0:
                continue
            hours = (end - start) / HOUR
            if left <= rate * hours:
                return start + left / rate * HOUR, used + volunteers * left / rate
            left -= rate * hours
            used += volunteers * hours
        return math.inf, used

    def residual_now(self) -> float:
        return self.steps[0][1]

    def most_residual(self) -> float:
        return max(residual for _, residual in self.steps)


def _split(steps: tuple[tuple[float, float], ...], at: float) -> tuple[tuple[float, float], ...]:
    """The steps with a step boundary at `at` (the residual unchanged by it)."""
    if at <= steps[0][0] or any(start == at for start, _ in steps):
        return steps
    before = [value for start, value in steps if start < at][-1]
    return tuple(sorted([*steps, (at, before)]))


def _steps(forecast: Sequence[tuple[float, float]], now_s: float) -> tuple[tuple[float, float], ...]:
    """The forecast as steps from now: the value in effect now (the last point at or before now,
    or the first point if all are later: a forecast is read as starting now), then every later
    point. An empty forecast is no residual capacity."""
    if len(forecast) > MAX_FORECAST_POINTS:
        raise InvalidField("residual_forecast", f"{len(forecast)} points; at most {MAX_FORECAST_POINTS}")
    points = sorted(_point(point, i) for i, point in enumerate(forecast))
    if not points:
        return ((now_s, 0.0),)
    current = [value for time, value in points if time <= now_s]
    steps = [(now_s, current[-1] if current else points[0][1])]
    steps += [(time, value) for time, value in points if time > now_s]
    return tuple(steps)


def _point(point: tuple[float, float], index: int) -> tuple[float, float]:
    if not isinstance(point, (tuple, list)) or len(point) != 2:
        raise InvalidField(f"residual_forecast[{index}]", f"{point!r} is not (time_s, vcpus)")
    return (ids.number(point[0], 0.0, MAX_TIME_S, f"residual_forecast[{index}].time_s", "s"),
            ids.number(point[1], 0.0, MAX_VCPUS, f"residual_forecast[{index}].vcpus", "vCPUs"))


# ------------------------------------------------------------------------------- the sizing

def size_for_goal(goal: Goal, progress: Progress, now_s: float, residual_forecast: Sequence[tuple[float, float]],
                  rate_per_vcpu: float | None, lower_bound_vcpus: int, *, upper_bound_vcpus: int | None = None,
                  padding_s: float = 0.0, defer_s: float = 0.0, guaranteed_upper_vcpus: int | None = None,
                  guaranteed_defer_s: float = 0.0) -> Sizing:
    """The tenant's allocation for this interval (RHIC, section 4.4): for a Deadline, every
    volunteer it is granted and the least dedicated vCPUs beside them that finish by the deadline
    less `padding_s` (none while its whole lower bound, bought `defer_s` from now, would still
    do: volunteers granted meanwhile need less of it; nor while it would, bought
    `guaranteed_defer_s` from now, holding up to `guaranteed_upper_vcpus`, its guaranteed bound
    beside the residual, where the pool can place less now); for LeastCost, the cheapest dedicated
    capacity beside all the residual. Dedicated capacity never passes `lower_bound_vcpus` (the
    tenant's own lower bound); a deadline not met within it is at risk, with the projected
    finish at the bound. `rate_per_vcpu` is progress_rate's figure (None: not measured yet, the
    goal's work W stands in: progress total over W); `upper_bound_vcpus` caps volunteers and
    dedicated together.

    Measured (tests/bench/tenants.py, docs/simulator.md): capping volunteers at the fewest that
    meet the deadline, as RHIC hugs its deadlines to spare paid volunteers, left the tenant
    short when volunteers were preempted late and made it buy 3.8 times the dedicated capacity
    of an exhaustive search; Gleaner's volunteers are idle capacity, shared by PSF."""
    job = _job(goal, progress, now_s, residual_forecast, rate_per_vcpu, lower_bound_vcpus, upper_bound_vcpus)
    if job.work_left <= 0:
        return Sizing(0, 0, job.now_s, True, "done: no work left", 0.0 if isinstance(goal, LeastCost) else None,
                      done=True)
    if isinstance(goal, Deadline):
        padding = ids.number(padding_s, 0.0, MAX_TIME_S, "padding_s", "s")
        defer = ids.number(defer_s, 0.0, MAX_TIME_S, "defer_s", "s")
        waits = _waits(job, defer, guaranteed_upper_vcpus, guaranteed_defer_s)
        return _for_deadline(job, goal.deadline_s - padding, lower_bound_vcpus, waits)
    if isinstance(goal, LeastCost):
        return _for_least_cost(job, goal, lower_bound_vcpus)
    raise InvalidField("goal", f"{goal!r} is neither a Deadline nor a LeastCost")


def _job(goal: Goal, progress: Progress, now_s: float, forecast: Sequence[tuple[float, float]],
         rate: float | None, lower: int, upper: int | None) -> _Job:
    """The inputs checked and turned into the job's model."""
    if not isinstance(progress, Progress):
        raise InvalidField("progress", f"{progress!r} is not a Progress")
    ids.number(now_s, 0.0, MAX_TIME_S, "now_s", "s")
    for value, field in ((lower, "lower_bound_vcpus"), (upper, "upper_bound_vcpus")):
        if value is not None:
            ids.whole(value, MAX_VCPUS, field, "vCPUs")
    work = getattr(goal, "work_vcpu_hours", None)
    if work is None:
        raise InvalidField("goal", f"{goal!r} is neither a Deadline nor a LeastCost")
    rate = ids.number(progress.total / work if rate is None else rate, 0.0, MAX_RATE, "rate_per_vcpu",
                          "per vCPU-hour")
    left = progress.total - progress.done
    work_left = 0.0 if left <= 0 else (left / rate if rate > 0 else math.inf)
    return _Job(float(now_s), _steps(forecast, float(now_s)), work_left,
                math.inf if upper is None else float(upper))


def _least(low: int, high: int, ok: Callable[[int], bool]) -> int | None:
    """The least integer in [low, high] for which the monotone test `ok` holds, or None."""
    if not ok(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if ok(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _waits(job: _Job, defer_s: float, upper: int | None,
           guaranteed_defer_s: float) -> list[tuple[_Job, float, str, str]]:
    """The plans to buy the lower bound later that _for_deadline tries, each (the job as it would
    stand, how much later, what the explanation says after the volunteers' finish and after the
    bound): within what the pool can place now, then within the guaranteed cap when that is more
    (the pool cannot place the bound now, but no other tenant's VM can take it)."""
    waits = [(job, defer_s, "", "")]
    later = ids.number(guaranteed_defer_s, 0.0, MAX_TIME_S, "guaranteed_defer_s", "s")
    if upper is not None and ids.whole(upper, MAX_VCPUS, "guaranteed_upper_vcpus", "vCPUs") > job.upper and later > 0:
        waits.append((dataclasses.replace(job, upper=float(upper)), later,
                      f", and the pool can place only {job.upper:.0f} of its vCPUs now",
                      " (kept from other tenants' on-demand VMs)"))
    return waits


def _for_deadline(job: _Job, deadline: float, lower: int,
                  waits: Sequence[tuple[_Job, float, str, str]] = ()) -> Sizing:
    """Deadline: every volunteer it is granted, and the least dedicated capacity beside them."""
    finish, _ = job.run(0)
    volunteers = _whole(max(0.0, min(job.residual_now(), job.upper)))
    if finish <= deadline:
        fewest = _least(0, math.ceil(job.most_residual()), lambda k: job.run(0, k)[0] <= deadline)
        return Sizing(volunteers, 0, finish, True,
                      f"met by volunteers alone: {volunteers} vCPUs now ({fewest} would do), finishing "
                      f"{deadline - finish:.0f} s before the deadline")
    late = "never finish" if math.isinf(finish) else f"finish {finish - deadline:.0f} s late"
    for plan, wait, pool_note, bound_note in waits:
        # dedicated capacity bought later meets it still: wait, as volunteers granted meanwhile
        # need less of it (buying now what a flat forecast says would buy for the whole run)
        if wait > 0 and lower >= 1 and plan.run(lower, dedicated_from=job.now_s + wait)[0] <= deadline:
            return Sizing(volunteers, 0, deadline, True,
                          f"waiting: volunteers alone ({volunteers} vCPUs now) would {late}{pool_note}, but its lower "
                          f"bound's {lower} dedicated vCPUs{bound_note} from {wait:.0f} s on would still meet the "
                          "deadline", buys_later=True)
    dedicated = _least(1, lower, lambda d: job.run(d)[0] <= deadline) if lower >= 1 else None
    at_risk = dedicated is None
    if at_risk:   # the earliest finish within the bound, with the least dedicated capacity that gives it
        earliest = job.run(lower)[0]
        dedicated = _least(0, lower, lambda d: job.run(d)[0] <= earliest)
    finish, _ = job.run(dedicated)
    volunteers = _whole(max(0.0, min(job.residual_now(), job.upper - dedicated)))
    if at_risk:
        when = "never finishes" if math.isinf(finish) else f"finishes {finish - deadline:.0f} s after the deadline"
        return Sizing(volunteers, dedicated, finish, False,
                      f"at risk: with {dedicated} dedicated vCPUs (more of its lower bound {lower} would not finish "
                      f"sooner) and all the residual, it {when}")
    return Sizing(volunteers, dedicated, finish, True,
                  f"needs {dedicated} dedicated vCPUs beside all the residual ({volunteers} vCPUs now), "
                  f"finishing {deadline - finish:.0f} s before the deadline")


def _whole(vcpus: float) -> int:
    """Whole vCPUs that can host VMs now: a fraction of a predicted vCPU cannot."""
    return int(math.floor(vcpus + 1e-9))


def _job_cost(job: _Job, goal: LeastCost, dedicated: int) -> float:
    """The job's cost to completion with `dedicated` vCPUs and all the residual (RHIC's monetary
    score, section 4.4): fixed cost per hour and dedicated capacity for its whole run, plus the
    volunteer vCPU-hours it uses; math.inf if it never finishes."""
    finish, volunteer_hours = job.run(dedicated)
    if math.isinf(finish):
        return math.inf
    hours = (finish - job.now_s) / HOUR
    return (goal.fixed_cost_per_hour * hours + goal.price_per_dedicated_vcpu_hour * min(dedicated, job.upper) * hours
            + goal.price_per_volunteer_vcpu_hour * volunteer_hours)


def _cheapest(job: _Job, goal: LeastCost, lower: int) -> int:
    """The dedicated vCPUs in 0..lower of least job_cost, by a coarse-to-fine search: GRID + 1
    evenly spaced candidates, then the same around the best until the step is one vCPU. Not
    exhaustive (RHIC evaluates every volunteer count, but its range is 37; a lower bound may be
    thousands of vCPUs); its cost is checked against an exhaustive search in the tests."""
    low, high, best = 0, lower, 0
    while True:
        step = max(1, math.ceil((high - low) / GRID))
        candidates = sorted({*range(low, high + 1, step), high, best})
        best = min(candidates, key=lambda d: (_job_cost(job, goal, d), d))
        if step == 1:
            return best
        low, high = max(0, best - step), min(lower, best + step)


def _for_least_cost(job: _Job, goal: LeastCost, lower: int) -> Sizing:
    """LeastCost: the cheapest dedicated capacity beside all the residual."""
    dedicated = _cheapest(job, goal, lower)
    if math.isinf(_job_cost(job, goal, dedicated)):
        dedicated = lower   # nothing finishes it: do the most the bound allows
    finish, _ = job.run(dedicated)
    cost = _job_cost(job, goal, dedicated)
    volunteers = _whole(max(0.0, min(job.residual_now(), job.upper - dedicated)))
    if math.isinf(finish):
        return Sizing(volunteers, dedicated, finish, False,
                      f"at risk: never finishes, even with all {dedicated} dedicated vCPUs of its lower bound", None)
    return Sizing(volunteers, dedicated, finish, True,
                  f"least cost {cost:.2f}: {dedicated} dedicated vCPUs beside all the residual ({volunteers} vCPUs "
                  f"now), finishing at {finish:.0f} s", cost)


# ------------------------------------------------------------------------------ projections

@dataclass(frozen=True)
class Projection:
    """Where a given allocation leads: the finish (math.inf: never), and under LeastCost its cost."""
    finish_s: float
    cost: float | None


def project(goal: Goal, progress: Progress, now_s: float, residual_forecast: Sequence[tuple[float, float]],
            rate_per_vcpu: float | None, dedicated_vcpus: int, *, volunteer_cap: float = math.inf,
            upper_bound_vcpus: int | None = None) -> Projection:
    """The finish (Eq. 6) and cost (section 4.4's monetary score) of one allocation: dedicated_vcpus
    throughout, volunteers up to volunteer_cap of the residual. For a bench's hindsight (the
    forecast being what the residual turned out to be) and for the exhaustive check in the tests."""
    job = _job(goal, progress, now_s, residual_forecast, rate_per_vcpu, dedicated_vcpus, upper_bound_vcpus)
    cap = ids.number(volunteer_cap, 0.0, math.inf, "volunteer_cap", "vCPUs")
    finish, _ = job.run(dedicated_vcpus, cap)
    if isinstance(goal, LeastCost):
        if math.isinf(cap):
            return Projection(finish, _job_cost(job, goal, dedicated_vcpus))
        raise InvalidField("volunteer_cap", "a least-cost projection takes all the residual (no cap)")
    return Projection(finish, None)
