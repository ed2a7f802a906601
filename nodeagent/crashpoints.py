"""Named points where a test can make the agent die, to prove it recovers from a crash there.

They are off unless the environment variable GLEANER_AGENT_CRASH_AT names them (a comma-
separated list); the agent then calls os._exit(137) on reaching one, as a SIGKILL would
leave it: no cleanup, no `finally`, no log flushed beyond what was written. The names:

    launch.after_overlay     the domain's overlay was made; nothing is defined yet
    launch.after_define      the domain is defined (metadata started=no) and not started
    launch.after_start       the domain runs, but its metadata still says started=no
    terminate.after_acpi     the ACPI power button was pressed; the domain is still defined
    terminate.after_undefine the domain is undefined (by terminate or the reaper); its overlay
                             is still on disk
    hibernate.after_save_started  libvirtd has created the state file and saves into it (its job
                             goes on without the agent)
    hibernate.after_save     the save finished: the domain is stopped, its state file complete
    resume.restore_started   libvirtd has begun restoring from the state file
    resume.after_restore     the domain is restored, PAUSED, its volunteer settings not yet on
    resume.before_run        its settings are on; it is still paused, the state file still there

What a restarted agent does with each is in nodeagent/reaper.py and nodeagent/domains.py.

GLEANER_AGENT_PAUSE_AT ("POINT:SECONDS,...") makes the agent wait at a point instead, so a
test can let other work (a reconcile pass, a report) run exactly there.
"""
from __future__ import annotations

import logging
import os
import time

from gleaner_common.logs import log_event

log = logging.getLogger(__name__)
ENV = "GLEANER_AGENT_CRASH_AT"
PAUSE_ENV = "GLEANER_AGENT_PAUSE_AT"
POINTS = frozenset({"launch.after_overlay", "launch.after_define", "launch.after_start",
                    "terminate.after_acpi", "terminate.after_undefine", "hibernate.after_save_started",
                    "hibernate.after_save", "resume.restore_started", "resume.after_restore", "resume.before_run"})
EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL

_armed = frozenset(name.strip() for name in os.environ.get(ENV, "").split(",") if name.strip())
_pauses = {point.strip(): float(seconds) for point, _, seconds in
           (item.partition(":") for item in os.environ.get(PAUSE_ENV, "").split(",") if item.strip())}


class UnknownCrashPoint(ValueError):
    """The code names a crash point that POINTS does not list (a typo or a point not added there)."""


def announce() -> None:
    """Say at start-up which crash points are armed (none, outside tests)."""
    if _armed or _pauses:
        log_event(log, "crash_points.armed", logging.WARNING, points=",".join(sorted(_armed)),
                  pauses=",".join(f"{p}:{s:g}" for p, s in sorted(_pauses.items())),
                  unknown=",".join(sorted((_armed | set(_pauses)) - POINTS)))


def is_armed(name: str) -> bool:
    """Whether a test asked to die or wait at this point (so that the agent looks for the moment
    only then)."""
    return name in _armed or name in _pauses


def crash_point(name: str) -> None:
    """Die here, at once, if GLEANER_AGENT_CRASH_AT names this point (or wait, if
    GLEANER_AGENT_PAUSE_AT does)."""
    if name not in POINTS:
        raise UnknownCrashPoint(f"no crash point named {name!r}; the points are {', '.join(sorted(POINTS))}")
    if name in _pauses:
        log_event(log, "crash_point.paused", logging.WARNING, point=name, seconds=_pauses[name])
        time.sleep(_pauses[name])
    if name in _armed:
        log_event(log, "crash_point.reached", logging.WARNING, point=name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_CODE)
