"""A batch tenant's job progress, as its guests say it (issue 26, RHIC's progress score): each
backfill guest may say `progress DONE TOTAL` on its work channel, its agent reports the last
well-formed one per VM (ReportedVm.progress_done/progress_total, bounded by controller.checks),
and the books keep here each live backfill lease's latest statement, the tenant's progress read
from them (tenant_progress), and a bounded history of (time, done, vCPUs held) samples per tenant
for job_progress.progress_rate.

Trust: a statement is the guest's word. It is filed under the tenant the books give its lease
(never a tenant the guest names), so a guest can mislead only its own tenant's sizing, which
stays within that tenant's bounds (goals.size_for_goal); its figures are bounded before they get
here, and the history's times are the controller's clock (when a report first showed a change),
never the guest's.

Pure: no clock, no I/O; the books call it with `now`. Its last progress and history per tenant
outlive a restart (snapshot, restore: the controller saves them with each goals job): begun
afresh, a history would start mid-task, and its first tasks said would read as a short task
length and a high rate, so the sizing would release dedicated VMs too soon and buy too little.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gleaner_common.ids import InvalidField

from .job_progress import Progress, history_point

MAX_SAMPLES = 256   # per tenant: at a job's end per sample, hours of history; progress_rate reads first to last


@dataclass(frozen=True)
class Statement:
    """One VM's latest `progress DONE TOTAL`; `said_at`: at or before this (controller clock: the
    report's time less progress_for_s, the age of the guest's last write on its channel)."""
    done: int
    total: int
    said_at: float = 0.0


def tenant_progress(statements: Iterable[Statement | Progress]) -> Progress | None:
    """One tenant's progress from its VMs' statements (None: none said): the statement with the
    largest TOTAL, then the largest DONE among those. Why: every VM's runner speaks of the same
    job, each from where it stands; the one that counts the most units knows the most of the job
    (a runner that joined late, or counts only its own share, states a smaller TOTAL), and among
    equal TOTALs the most DONE is the latest word (a runner that restarted from a checkpoint
    says less). Neither summed nor averaged: a guest that says more only moves its own tenant's
    figure, within the bounds its statement was checked against."""
    best = max(statements, key=lambda s: (s.total, s.done), default=None)
    return None if best is None else Progress(best.done, best.total)


class ProgressBook:
    """Per live backfill lease, its guest's latest statement; per tenant, its last known progress
    (kept when its VMs end: the job does not end with them) and its history samples."""

    def __init__(self, max_samples: int = MAX_SAMPLES) -> None:
        self._said: dict[str, tuple[str, Statement]] = {}   # lease id -> (its tenant, its statement)
        self._last: dict[str, Progress] = {}                 # tenant -> its progress when last read
        self._history: dict[str, deque[tuple[float, float, float]]] = {}
        self._max_samples = max_samples
        self.version = 0   # moves with every change a snapshot would show (what to save, and when)

    def note(self, lease_id: str, tenant: str, done: int, total: int, for_s: float, now: float) -> bool:
        """A report's statement of `lease_id`'s guest (already bounded); True if it is new."""
        kept = self._said.get(lease_id)
        if kept is not None and kept[0] == tenant and kept[1].done == done and kept[1].total == total:
            return False
        self._said[lease_id] = (tenant, Statement(done, total, now - for_s))
        return True

    def sample(self, tenant: str, held_vcpus: int, now: float) -> None:
        """Read `tenant`'s progress now, and add a sample to its history when its DONE or the vCPUs
        it holds changed since the last one (progress_rate counts each sample's vCPUs until the
        next). A new TOTAL is a new job: its history starts afresh."""
        progress = tenant_progress(s for t, s in self._said.values() if t == tenant)
        if progress is None:
            return
        last = self._last.get(tenant)
        self._last[tenant] = progress
        self.version += last != progress
        history = self._history.get(tenant)
        if history is None or last is None or last.total != progress.total:
            history = self._history[tenant] = deque(maxlen=self._max_samples)
        elif history and history[-1][1:] == (progress.done, held_vcpus):
            return
        history.append((now, progress.done, held_vcpus))
        self.version += 1

    def forget(self, lease_id: str) -> None:
        """A lease ended: its statement goes (its tenant's last progress and history stay)."""
        self._said.pop(lease_id, None)

    def forget_tenant(self, tenant: str) -> None:
        """A tenant was deleted: what was said of its job goes too."""
        self._last.pop(tenant, None)
        self._history.pop(tenant, None)
        self.version += 1

    def statement(self, lease_id: str) -> Statement | None:
        kept = self._said.get(lease_id)
        return None if kept is None else kept[1]

    def progress(self, tenant: str) -> Progress | None:
        """The tenant's progress: from its live VMs' statements, else the last it had (None: none said)."""
        live = tenant_progress(s for t, s in self._said.values() if t == tenant)
        return live if live is not None else self._last.get(tenant)

    def history(self, tenant: str) -> tuple[tuple[float, float, float], ...]:
        """The tenant's (time_s, done, vcpus) samples, oldest first, for job_progress.progress_rate."""
        return tuple(self._history.get(tenant, ()))

    def job_done(self, tenant: str) -> bool:
        """Whether the tenant's progress says its job done (DONE at TOTAL)."""
        said = self.progress(tenant)
        return said is not None and said.done >= said.total

    def snapshot(self, leave_out: str | None = None) -> dict[str, dict[str, Any]]:
        """Per tenant (but `leave_out`), its last progress and history, as JSON values (restore
        reads them back)."""
        return {tenant: dict(done=last.done, total=last.total, history=[list(s) for s in self._history.get(tenant, ())])
                for tenant, last in sorted(self._last.items()) if tenant != leave_out}

    def restore(self, saved: Any, tenants: Iterable[str]) -> list[tuple[str, str]]:
        """What a snapshot kept of `tenants` (the others are gone: deleted while the controller was
        down), before any report. Returns (tenant, why) for each entry not read: unreadable, it is
        left out whole and that tenant starts afresh (never half a history)."""
        if not isinstance(saved, Mapping):
            return [("*", f"{str(saved)[:200]} is not a table of tenants")]
        problems: list[tuple[str, str]] = []
        known = set(tenants)
        for tenant, entry in saved.items():
            if tenant not in known:
                continue
            try:
                last, history = _restored(entry, self._max_samples)
            except InvalidField as exc:
                problems.append((str(tenant), str(exc)))
                continue
            self._last[tenant] = last
            self._history[tenant] = deque(history, maxlen=self._max_samples)
        self.version += 1
        return problems


def _restored(entry: Any, max_samples: int) -> tuple[Progress, list[tuple[float, float, float]]]:
    """One tenant's snapshot entry, checked as a guest's figures are (InvalidField names what is wrong)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("history"), list):
        raise InvalidField("goal_progress", f"{str(entry)[:200]} is not (done, total, history)")
    last = Progress(entry.get("done"), entry.get("total"))
    samples = entry["history"]
    if len(samples) > max_samples:
        raise InvalidField("goal_progress.history", f"{len(samples)} samples; at most {max_samples}")
    history = [history_point(point, i) for i, point in enumerate(samples)]
    if any(later[0] < earlier[0] for earlier, later in zip(history, history[1:])):
        raise InvalidField("goal_progress.history", "its samples are not in time order")
    if any(done > last.total for _t, done, _v in history):
        raise InvalidField("goal_progress.history", f"a sample says more done than the job's total {last.total:g}")
    return last, history
