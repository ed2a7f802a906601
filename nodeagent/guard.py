"""The starvation guard's rule (MIMP, section 4.2), as a pure function over CPU-time samples.

A volunteer at minimal priority can starve beside busy foreground VMs. With a period p
and a slice e: if over the last p seconds the volunteer ran less than e, raise it to
normal priority until it has run e over the last p, then lower it again; judged a lookahead L
ahead: the CPU time that leaves the window within the next L seconds (its oldest part) is
not counted. Without L, the CPU a volunteer got in a burst left the window as fast as it had
come while the guard noticed only at its next tick: every window held e less one tick at the
raised rate (0.125 s of a 0.5 s slice at half a CPU; 0.39 s per period measured). With L of
two ticks every window of p holds e when the raised rate holds steady, and the foreground
loses about e/(p - L) of a CPU to it (5.3 % rather than 5 % by default), no more.

"Ran less than e" only counts when the volunteer wanted more: an idle guest also runs
little. So a volunteer is starved when it ran less than e although what it ran plus the
time its vCPUs sat runnable in the host's queue (libvirt's vcpu.N.delay) is at least e.

Samples are (monotonic seconds, cumulative CPU ns, cumulative queue-wait ns).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Collection, Iterable, Sequence
from enum import Enum


class GuardAction(str, Enum):
    NONE = "none"
    BOOST = "boost"
    RELEASE = "release"


@dataclass(frozen=True)
class GuardConfig:
    enabled: bool = True
    period_seconds: float = 10.0   # p
    slice_ms: float = 500.0        # e: 5% of a CPU, enough for heartbeats and a login shell
    tick_seconds: float = 0.25     # reading a raised or at-risk volunteer: bounds how far a boost overshoots e
    idle_tick_seconds: float = 1.0  # reading every other one: a starving VM waits at most this much longer
    lookahead_seconds: float = 0.5  # L: judge the window as it will be this much later (two fast ticks)


Sample = tuple[float, int, int]


def window(samples: "Sequence[Sample]", now: float, period: float, lookahead: float = 0.0) -> tuple[int, int] | None:
    """(CPU ns run, ns spent waiting to run) over the last `period` seconds less its oldest
    `lookahead` seconds (what will have left it by then), or None while the samples do not
    reach back a whole period (a freshly launched VM is not judged on part of a period)."""
    if not samples or samples[0][0] > now - period:
        return None
    start = samples[0]
    for sample in samples:
        if sample[0] > now - period + lookahead:
            break
        start = sample
    newest = samples[-1]
    return newest[1] - start[1], newest[2] - start[2]


def lookahead(config: GuardConfig) -> float:
    """L, kept within a quarter of the period however the two are configured."""
    return min(config.lookahead_seconds, config.period_seconds / 4)


def decide(samples: "Sequence[Sample]", now: float, boosted: bool, config: GuardConfig) -> GuardAction:
    """What to do with one volunteer, given its samples in time order (the newest is `now`)
    and whether it is raised now."""
    slice_ns = int(config.slice_ms * 1e6)
    used = window(samples, now, config.period_seconds, lookahead(config))
    if boosted:
        done = used is None or used[0] >= slice_ns or not config.enabled
        return GuardAction.RELEASE if done else GuardAction.NONE
    if not config.enabled or used is None:
        return GuardAction.NONE
    ran, waited = used
    return GuardAction.BOOST if ran < slice_ns <= ran + waited else GuardAction.NONE


def at_risk(samples: "Sequence[Sample]", now: float, config: GuardConfig) -> bool:
    """Whether a volunteer needs watching at the fast tick: it wants CPU (its vCPUs waited)
    and its window holds less than twice e, so it could fall below e before a slow tick."""
    used = window(samples, now, config.period_seconds, lookahead(config))
    if used is None:
        return False
    ran, waited = used
    return waited > 0 and ran < 2 * config.slice_ms * 1e6


def to_sample(volunteers: "Iterable[str]", watched: "Collection[str]", slow_tick_due: bool) -> list[str]:
    """The volunteers a guard step samples: every one at a slow tick, and between them, at the
    fast tick, only the watched ones (raised, or at risk). Each volunteer is then read as often
    as it would be alone: a raised one at the fast tick (the overshoot of e), an at-risk one too,
    any other once a slow tick, so one that starves is boosted at most idle_tick_seconds after
    (a window of 2e or more may still empty within a slow tick if its CPU came in a burst)."""
    return [name for name in volunteers if slow_tick_due or name in watched]


def trim(samples: "deque[Sample]", now: float, period: float) -> None:
    """Drop samples older than needed: keep the newest one at or before now - period."""
    while len(samples) >= 2 and samples[1][0] <= now - period:
        samples.popleft()
