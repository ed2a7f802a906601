"""What a batch job's progress says, as its guests report it (`progress DONE TOTAL` on the work
channel, after each task): the measured processing rate (RHIC's Eq. 5, progress_rate), how long
a task takes (report_lag, task_length), and the finish if the job runs in whole waves of tasks on
what it holds (wave_finish). goals.py sizes the job on these.

Progress is untrusted guest input: every figure is bounded (InvalidField names it). Pure: no
clock, no I/O.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gleaner_common import ids
from gleaner_common.ids import InvalidField

HOUR = 3600.0
MAX_PROGRESS = 1e15            # a guest's progress figures: far past any real count, refused beyond
MAX_VCPUS = 1_000_000
MAX_TIME_S = 1e12              # about 31,000 years of epoch seconds
MAX_FORECAST_POINTS = 100_000
# The measured rate steers the sizing once the guests say this share of the job is done; before,
# the goal's own (progress TOTAL over W). A rate from the first few tasks reads the work lost with
# the first volunteers preempted as the job's pace, and bought dedicated capacity released minutes
# later: on the tenants bench, dedicated bought over the search's 1.41 -> 1.26, 1.61 -> 1.39, 1.37
# -> 1.23 and 1.23 unchanged on four seed sets; at 0.10, 1.52 and 1.79 (docs/simulator.md, "The
# rate from a twentieth of the job on").
MEASURED_AFTER_SHARE = 0.05
# The finish shown counts whole waves of the job's tasks on the vCPUs it holds (wave_finish) unless
# those have risen by more than this share over their mean in the last RISING_WINDOW_S: then the
# tenant is still being given capacity, and the finish is projected on the residual and the
# on-demand VMs expected to leave. On the tenants bench, finish_error_at_half 0.126 -> 0.085 on
# seeds 0-7, and 0.114 -> 0.088 and 0.121 -> 0.087 on eight seed sets not used to choose these;
# at a share of 0.3, or a window of 15 min or 1 h, 0.10 to 0.16 (docs/simulator.md, "The finish
# in waves of tasks").
RISING_SHARE = 0.2
RISING_WINDOW_S = 1800.0
MIN_TASK_S, MAX_TASK_S = 60.0, HOUR   # a wave's length: the report lag, within these


@dataclass(frozen=True)
class Progress:
    """A job's progress as its guests report it (`progress DONE TOTAL` on the work channel):
    untrusted, so bounded: 0 <= done <= total, 0 < total <= MAX_PROGRESS."""
    done: float
    total: float

    def __post_init__(self) -> None:
        total = ids.number(self.total, 0.0, MAX_PROGRESS, "progress.total")
        if total <= 0:
            raise InvalidField("progress.total", f"{self.total} must be more than 0")
        ids.number(self.done, 0.0, total, "progress.done")


def progress_rate(history: Sequence[tuple[float, float, float]]) -> float | None:
    """The job's measured processing rate, RHIC's Eq. 5: progress made over the vCPU-hours that
    made it, in progress units per vCPU-hour. `history` is (time_s, done, vcpus) samples, vcpus
    being what the tenant held from that sample to the next. None when it cannot be measured
    (fewer than two samples, or no vCPU-time between them). Progress that went backwards (a
    guest restarted its count) counts as none: net progress, never below 0, so a guest that
    oscillates cannot inflate its own rate."""
    if len(history) > MAX_FORECAST_POINTS:
        raise InvalidField("history", f"{len(history)} samples; at most {MAX_FORECAST_POINTS}")
    samples = sorted(history_point(point, i) for i, point in enumerate(history))
    if len(samples) < 2:
        return None
    end = samples[-1][0] - report_lag(samples)   # progress said now is for vCPU-time up to `end`
    vcpu_hours = sum(samples[i][2] * (min(samples[i + 1][0], end) - samples[i][0]) / HOUR
                     for i in range(len(samples) - 1) if samples[i][0] < end)
    if vcpu_hours <= 0:
        return None
    return max(0.0, samples[-1][1] - samples[0][1]) / vcpu_hours


def sizing_rate(said: Progress | None, history: Sequence[tuple[float, float, float]]) -> float | None:
    """The rate a sizing is made at: progress_rate over `history` once the guests have said
    MEASURED_AFTER_SHARE of the job done (a share of its TOTAL, not of the history kept: a long
    job's history window may cover less); None before, or when nothing was said or no progress
    measured, for the goal's own rate (progress TOTAL over W) to stand in."""
    if said is None or not rate_measured_yet(said):
        return None
    rate = progress_rate(history)
    return rate if rate is not None and rate > 0 else None


def rate_measured_yet(said: Progress) -> bool:
    """Whether the guests have said enough of the job done (MEASURED_AFTER_SHARE of its TOTAL)
    for its measured rate to steer the sizing."""
    return said.done >= MEASURED_AFTER_SHARE * said.total


def report_lag(samples: Sequence[tuple[float, float, float]]) -> float:
    """Seconds from the first vCPUs held to the first progress said. Guests say what they have
    finished, so the vCPU-time of work in flight shows up only later: counted up to now, a job
    just started (every job, at the start) would read as a slow job, and the sizing would buy
    dedicated capacity it does not need. It is also how long a task of the job takes (the first
    one said), which pads the sizing as RHIC pads by the average task length. 0 before any
    progress (then the rate is 0, unmeasured). `samples` sorted by time, as progress_rate's."""
    held = next((t for t, _done, vcpus in samples if vcpus > 0), None)
    said = next((t for t, done, _vcpus in samples if done > samples[0][1]), None)
    return 0.0 if held is None or said is None else max(0.0, said - held)


def wave_finish(progress: Progress, history: Sequence[tuple[float, float, float]], rate_per_vcpu: float,
                now_s: float, held_vcpus: float) -> float | None:
    """The job's finish if its tasks run in whole waves on the vCPUs it holds now: a task takes
    the report lag (the first task said, within MIN_TASK_S and MAX_TASK_S), the wave in flight
    ends a whole number of tasks after the last progress said, and each later wave does
    held_vcpus x task of the work left (progress left over `rate_per_vcpu`, as vCPU-seconds).
    Guests say progress as tasks end, so the job moves in such steps; where its capacity holds,
    this lands closer than the fluid projection (`project`, on the residual and the on-demand VMs
    expected to leave). None where it does not apply: nothing held, no progress said yet (no
    task length), or the held vCPUs rising (capacity_rising: a wave on what it holds now would
    come late)."""
    samples = sorted(history_point(point, i) for i, point in enumerate(history))
    task = task_length(samples)
    if held_vcpus <= 0 or task is None or rate_per_vcpu <= 0 or capacity_rising(samples, held_vcpus, now_s):
        return None
    rises = [t for (t, done, _), (_, before, _) in zip(samples[1:], samples) if done > before]
    last = rises[-1] if rises else samples[0][0]
    in_flight_end = last + task * max(1, math.ceil((now_s - last) / task))
    left = (progress.total - progress.done) / rate_per_vcpu * HOUR   # vCPU-seconds
    wave = held_vcpus * task
    return in_flight_end + math.ceil(max(0.0, left - wave) / wave) * task


def task_length(samples: Sequence[tuple[float, float, float]]) -> float | None:
    """How long a task of the job takes, for its waves: the report lag within MIN_TASK_S and
    MAX_TASK_S; None before any progress (no task said yet). `samples` sorted, as report_lag's."""
    lag = report_lag(samples)
    return None if lag <= 0 else min(max(lag, MIN_TASK_S), MAX_TASK_S)


def capacity_rising(samples: Sequence[tuple[float, float, float]], held_vcpus: float, now_s: float) -> bool:
    """Whether the vCPUs held now are over (1 + RISING_SHARE) times their mean over the samples
    of the last RISING_WINDOW_S (`samples` as progress_rate's, sorted)."""
    recent = [vcpus for t, _done, vcpus in samples if t >= now_s - RISING_WINDOW_S]
    return bool(recent) and held_vcpus > (1 + RISING_SHARE) * sum(recent) / len(recent)


def history_point(point: tuple[float, float, float], index: int) -> tuple[float, float, float]:
    """A (time_s, done, vcpus) sample of a progress history, bounded (InvalidField names it)."""
    if not isinstance(point, (tuple, list)) or len(point) != 3:
        raise InvalidField(f"history[{index}]", f"{point!r} is not (time_s, done, vcpus)")
    return (ids.number(point[0], 0.0, MAX_TIME_S, f"history[{index}].time_s", "s"),
            ids.number(point[1], 0.0, MAX_PROGRESS, f"history[{index}].done"),
            ids.number(point[2], 0.0, MAX_VCPUS, f"history[{index}].vcpus", "vCPUs"))
