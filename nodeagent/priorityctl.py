"""A domain's CPU class in its cgroup, and the starvation guard that raises a starved volunteer.

Enforcement (nodeagent/enforcement.py) decides when a class is applied or re-asserted;
this module applies the CPU part and keeps the guard's state.

Decisions come from pure functions (priority.cpu_setting, guard.decide); this module only
gathers their inputs and applies their answers through cgroups and the event bus.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from pathlib import Path

from gleaner_common.logs import log_event
from gleaner_common.vocabulary import PriorityClass

from .host import cgroups
from .events import Event, EventBus
from .guard import GuardAction, GuardConfig, Sample, at_risk, decide, to_sample, trim
from .priority import CpuWeights, cpu_setting

log = logging.getLogger(__name__)


class PriorityController:
    def __init__(self, events: EventBus, cgroup_root: Path, weights: CpuWeights, guard: GuardConfig,
                 proc: Path = cgroups.PROC) -> None:
        self.events = events
        self.cgroup_root = cgroup_root
        self.proc = proc   # where the vCPU threads' schedstat files are
        self.facts = cgroups.detect(cgroup_root)
        self.groups = cgroups.GroupFinder(cgroup_root, self.facts.version)
        self.weights = weights
        self.guard = guard
        self._lock = threading.Lock()
        # Held from reading a domain's effective class to writing it to the cgroup, and by the
        # guard from a boost or release decision to its write: a reconcile pass that read "not
        # raised" just before a boost must not write idle after it (the volunteer then sat idle,
        # the guard believing it raised, until the next pass).
        self._apply_lock = threading.RLock()
        self._boosted: dict[str, int] = {}          # domain -> CPU ns when its boost began
        self._samples: dict[str, deque[Sample]] = {}
        self._schedstat: dict[str, list] = {}      # domain -> its vCPU threads' schedstat files
        self._at_risk: set[str] = set()
        self._no_vcpus: set[str] = set()           # domains whose vCPU threads were not found yet (logged once)
        self._slow_tick_at = -math.inf             # monotonic time of the next step that samples every volunteer

    def setting(self, cls: PriorityClass) -> cgroups.CpuSetting:
        return cpu_setting(cls, self.facts, self.weights)

    def is_boosted(self, name: str) -> bool:
        with self._lock:
            return name in self._boosted

    def effective_class(self, name: str, cls: PriorityClass) -> PriorityClass:
        return PriorityClass.FOREGROUND if self.is_boosted(name) else cls

    def apply(self, name: str, cls: PriorityClass) -> list[str]:
        """Put the domain's cgroup in the class's CPU setting; returns what changed."""
        with self._apply_lock:
            group = self.groups.find(name)
            if group is None:
                raise FileNotFoundError(f"no cgroup for domain {name} under {self.cgroup_root}")
            return cgroups.apply_cpu(group, self.facts.version, self.setting(self.effective_class(name, cls)))

    def forget(self, name: str) -> None:
        self.groups.forget(name)
        self._schedstat.pop(name, None)
        self._no_vcpus.discard(name)
        with self._lock:
            self._boosted.pop(name, None)
            self._samples.pop(name, None)

    def _sample(self, names: list[str]) -> dict[str, tuple[int, int]]:
        samples = {}
        for name in names:
            try:
                samples[name] = cgroups.read_schedstat(self._schedstat_paths(name))
            except (FileNotFoundError, ProcessLookupError):
                # Threads changed: look again next tick; counters of other threads do not continue these.
                self._schedstat.pop(name, None)
                with self._lock:
                    self._samples.pop(name, None)
        return samples

    def _schedstat_paths(self, name: str) -> list:
        paths = self._schedstat.get(name)
        if paths is None:
            group = self.groups.find(name)
            if group is None:
                raise FileNotFoundError(name)
            paths = cgroups.vcpu_schedstat_paths(group, self.facts.version, self.proc)
            if paths is None:   # still starting: its vCPU threads are not in their groups yet
                self._note_no_vcpus(name, group)
                raise FileNotFoundError(name)
            self._schedstat[name] = paths
            self._no_vcpus.discard(name)
        return paths

    def _note_no_vcpus(self, name: str, group: Path) -> None:
        """Say once per domain that the guard cannot read it yet, rather than skip it silently."""
        if name not in self._no_vcpus:
            self._no_vcpus.add(name)
            log_event(log, "guard.no_vcpu_threads", domain=name, group=str(group),
                      note="not judged until libvirt has put its vCPU threads in vcpuN groups")

    def guard_interval(self) -> float:
        """Seconds until the next guard step: the fast tick while a volunteer is raised or close
        to starving (it bounds how far a boost overshoots e), else the slow one."""
        with self._lock:
            busy = bool(self._boosted or self._at_risk)
        return self.guard.tick_seconds if busy else self.guard.idle_tick_seconds

    def guard_tick(self, volunteers: dict[str, PriorityClass], now: float | None = None) -> None:
        """One guard step over the running domains whose class is volunteer."""
        now = time.monotonic() if now is None else now
        slow_tick_due = now >= self._slow_tick_at
        if slow_tick_due:
            self._slow_tick_at = now + self.guard.idle_tick_seconds
        with self._lock:
            watched = set(self._boosted) | self._at_risk
        cpu = self._sample(to_sample(volunteers, watched, slow_tick_due))
        period = self.guard.period_seconds
        with self._lock:
            for gone in set(self._samples) - set(volunteers):
                self._samples.pop(gone, None)
                self._boosted.pop(gone, None)
                self._at_risk.discard(gone)
        for name, cls in volunteers.items():
            if name not in cpu:
                continue
            ran_ns, waited_ns = cpu[name]
            with self._apply_lock:
                with self._lock:
                    samples = self._samples.setdefault(name, deque())
                    samples.append((now, ran_ns, waited_ns))
                    trim(samples, now, period)
                    action = decide(samples, now, name in self._boosted, self.guard)
                    if at_risk(samples, now, self.guard):
                        self._at_risk.add(name)
                    else:
                        self._at_risk.discard(name)
                    if action is GuardAction.BOOST:
                        self._boosted[name] = ran_ns
                    elif action is GuardAction.RELEASE:
                        started = self._boosted.pop(name)
                if action is GuardAction.NONE:
                    continue
                try:
                    self.apply(name, cls)
                except (OSError, ValueError) as exc:
                    log_event(log, "guard.apply_failed", logging.WARNING, domain=name, error=str(exc))
                    continue
            if action is GuardAction.BOOST:
                self.events.publish(Event("guard.boost", name, f"ran less than {self.guard.slice_ms:g} ms in "
                                          f"the last {period:g} s; raised to normal priority",
                                          {"period_s": f"{period:g}", "slice_ms": f"{self.guard.slice_ms:g}"}))
            else:
                ran_ms = (ran_ns - started) / 1e6
                self.events.publish(Event("guard.release", name, f"ran {ran_ms:.0f} ms while raised; lowered again",
                                          {"ran_ms": f"{ran_ms:.0f}"}))
