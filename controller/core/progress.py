"""A batch tenant's job progress, as its guests say it (issue 26, RHIC's progress score): each
backfill guest may say `progress DONE TOTAL` on its work channel, its agent reports the last
well-formed one per VM (ReportedVm.progress_done/progress_total, bounded by controller.checks),
and the books keep here each live backfill lease's latest statement, the tenant's progress read
from them (tenant_progress), and a bounded history of (time, done, vCPUs held) samples per tenant
for goals.progress_rate.

Trust: a statement is the guest's word. It is filed under the tenant the books give its lease
(never a tenant the guest names), so a guest can mislead only its own tenant's sizing, which
stays within that tenant's bounds (goals.size_for_goal); its figures are bounded before they get
here, and the history's times are the controller's clock (when a report first showed a change),
never the guest's.

Pure: no clock, no I/O; the books call it with `now`.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from .goals import Progress

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
        history = self._history.get(tenant)
        if history is None or last is None or last.total != progress.total:
            history = self._history[tenant] = deque(maxlen=self._max_samples)
        elif history and history[-1][1:] == (progress.done, held_vcpus):
            return
        history.append((now, progress.done, held_vcpus))

    def forget(self, lease_id: str) -> None:
        """A lease ended: its statement goes (its tenant's last progress and history stay)."""
        self._said.pop(lease_id, None)

    def forget_tenant(self, tenant: str) -> None:
        """A tenant was deleted: what was said of its job goes too."""
        self._last.pop(tenant, None)
        self._history.pop(tenant, None)

    def statement(self, lease_id: str) -> Statement | None:
        kept = self._said.get(lease_id)
        return None if kept is None else kept[1]

    def progress(self, tenant: str) -> Progress | None:
        """The tenant's progress: from its live VMs' statements, else the last it had (None: none said)."""
        live = tenant_progress(s for t, s in self._said.values() if t == tenant)
        return live if live is not None else self._last.get(tenant)

    def history(self, tenant: str) -> tuple[tuple[float, float, float], ...]:
        """The tenant's (time_s, done, vcpus) samples, oldest first, for goals.progress_rate."""
        return tuple(self._history.get(tenant, ()))
