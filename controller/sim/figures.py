"""What a simulation's results are made of: the summary (summary.json: the header with the inputs'
digests and every setting, the figures, the audit events and the notes), the per-VM rows
(vms.csv) and the timeline (timeline.csv: Timeline, allocated vCPU-seconds and lost work per
bucket of simulated time), from plain data the engine (controller/sim/engine.py) keeps.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ..core.records import BackfillConfig, Lease, LedgerSettings, RequestRecord, Reserve
from ..core.reserve_settings import Hint, ReserveSettings
from .traces import OnDemandRequest
from .world import DAY, HOUR, SimSettings


def reason_group(reason: str) -> str:
    """A rejection reason without its numbers and after the first colon, to group them by."""
    return re.sub(r"\d+(?:\.\d+)?", "N", reason).split(":")[0].strip()


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


class Timeline:
    """Allocated vCPU-seconds (on-demand, backfill) and backfill work lost, per bucket of simulated
    time: what the plots draw. The totals are the summary's own (the same integration, split at
    bucket edges)."""

    def __init__(self, duration: float, bucket_seconds: float = 0.0) -> None:
        self.bucket = bucket_seconds or max(60.0, duration / 720)
        count = max(math.ceil(duration / self.bucket), 1)
        self.on_demand = [0.0] * count
        self.backfill = [0.0] * count
        self.lost = [0.0] * count

    def allocated(self, start: float, stop: float, on_demand: int, backfill: int) -> None:
        """on_demand and backfill vCPUs were allocated from start to stop."""
        while start < stop:
            i = min(int(start // self.bucket), len(self.on_demand) - 1)
            edge = stop if i == len(self.on_demand) - 1 else min(stop, (i + 1) * self.bucket)
            if edge <= start:   # rounding at a bucket's edge: the rest goes to this bucket
                edge = stop
            self.on_demand[i] += on_demand * (edge - start)
            self.backfill[i] += backfill * (edge - start)
            start = edge

    def lost_work(self, at: float, vcpu_seconds: float) -> None:
        self.lost[min(int(at // self.bucket), len(self.lost) - 1)] += vcpu_seconds

    def rows(self, end: float, pool_vcpus: int) -> list[dict[str, Any]]:
        """One row per bucket up to `end`: its start, utilization by role over the bucket (the
        last one may be cut short by the end) and the work lost so far as VM-level accounting
        counts it (a stop loses the VM's runtime x vCPUs), in vCPU-hours."""
        rows, lost = [], 0.0
        for i in range(min(math.ceil(end / self.bucket), len(self.on_demand))):
            span = (min((i + 1) * self.bucket, end) - i * self.bucket) * pool_vcpus
            lost += self.lost[i]
            rows.append(dict(start_s=i * self.bucket, utilization_on_demand=round(self.on_demand[i] / span, 6),
                             utilization_backfill=round(self.backfill[i] / span, 6),
                             vm_level_lost_vcpu_hours=round(lost / HOUR, 3)))
        return rows


class Allocation:
    """The vCPUs allocated now to on-demand and backfill VMs (a backfill VM on notice counts none:
    they went to the on-demand VM beside it), integrated over simulated time for the summary's
    utilization, and per bucket into the Timeline. The engine calls integrate(now) before each
    change."""
    __slots__ = ("on_demand", "backfill", "on_demand_area", "backfill_area", "since", "timeline")

    def __init__(self, timeline: Timeline) -> None:
        self.on_demand = 0
        self.backfill = 0
        self.on_demand_area = 0.0   # vCPU-seconds, up to `since`
        self.backfill_area = 0.0
        self.since = 0.0
        self.timeline = timeline

    def integrate(self, now: float) -> None:
        dt = now - self.since
        if dt > 0:
            self.on_demand_area += self.on_demand * dt
            self.backfill_area += self.backfill * dt
            self.timeline.allocated(self.since, now, self.on_demand, self.backfill)
            self.since = now

# -- the summary --------------------------------------------------------------------------------------

NOTES = (
    "requests larger than every node are rejected by the ledger itself (no node can host them); "
    "they are counted in rejected_larger_than_node",
    "rejected_due_to_backfill counts rejections made while some node's backfill VMs (running, "
    "starting or stopping) held room that would have fit the request; placement counts running "
    "backfill as free, and a request held up by backfill starting or stopping waits for it (up to "
    "those VMs' deadlines), so one is counted only when that wait ran out or the queue was full",
    "utilization_working: as Nimbus counts it, vCPUs running an on-demand VM or backfill work "
    "(task-level: a job, whether it later finished or was lost; VM-level: the backfill VM itself, "
    "but not a victim on notice, whose vCPUs went to the on-demand VM) over total vCPUs, integrated "
    "over time; never above utilization",
    "vm_level_*: backfill work as VM-level accounting counts it, in every run: a VM's work is its "
    "runtime x vCPUs and a stop loses all of it (as the audit log's work_lost_vcpu_seconds). In "
    "task-level runs (--backfill-jobs) the work lost is the jobs' (backfill_job_lost_share, "
    "backfill_job_seconds_*): read the vm_level_* figures there as what a VM-level count would say",
    "utilization: allocated vCPUs over total vCPUs, integrated over time; a backfill VM on notice "
    "counts no vCPUs (they went to the on-demand VM beside it)",
    "waits: from arrival to the launch answer, placed requests only (a request that waited for "
    "room within the reserves' wait window counts its time in the queue)",
    "lost work counts backfill VMs drained for a reserve (backfill_drained) as well as preempted ones",
    "survival after T: of the backfill VMs launched at least T before the end, the share that ran "
    "at least T (survival.png draws the Kaplan-Meier curve, VMs alive at the end censored)",
)


def summary(header: dict[str, Any], figures: dict[str, Any], events: Mapping[str, int]) -> dict[str, Any]:
    """summary.json: the header (summary_header), the figures (summary_figures), the audit events
    by kind and the notes on how the figures are counted."""
    return dict(header=header, figures=figures, events=dict(sorted(events.items())), notes=list(NOTES))


def summary_header(inputs: dict[str, str], settings: SimSettings, timeline_seconds: float,
                   ledger: LedgerSettings, backfill: BackfillConfig, reserves: Mapping[str, Reserve],
                   reserve_settings: ReserveSettings, hints: Sequence[Hint], demand_series: int) -> dict[str, Any]:
    """The inputs (names and digests) and every setting as run."""
    return dict(inputs=inputs, sim=sim_header(settings), timeline_seconds=timeline_seconds,
                ledger=asdict(ledger),
                backfill=backfill.as_dict(),
                reserves={k: asdict(v) for k, v in reserves.items()},
                reserve_settings=reserve_settings.as_dict(),
                hints=[asdict(h) for h in hints],
                demand_series=demand_series)


def sim_header(settings: SimSettings) -> dict[str, Any]:
    """The settings as run: with a pool of groups, without the one size it does not read."""
    sim = asdict(settings)
    if settings.pool:
        del sim["node_cpus"], sim["node_memory_mib"]
    return sim


def summary_figures(*, pool_vcpus: int, end: float, od_area: float, bf_area: float, requests_total: int,
                    arrived: int, ignored_after_end: int, records: Iterable[RequestRecord],
                    rejections: Mapping[str, int], rejected_larger_than_node: int, rejected_due_to_backfill: int,
                    released: int, queued: int, drained: int, waits: Sequence[float],
                    preempted: Iterable[Mapping[str, Any]], work: Mapping[str, Any], events: int, wall: float,
                    stopped_early: bool) -> dict[str, Any]:
    """The run's figures. `od_area`, `bf_area`: vCPU-seconds allocated to on-demand and backfill
    VMs up to `end`; `records`: the request records (RequestRecord) as written; `preempted`: the
    vm.preempted and vm.hibernated events'
    details (a victim saved is preempted all the same); `work`: the backfill work's own figures (BackfillWork.summary,
    whose backfill_working_vcpu_seconds gives utilization_working); `events`: the events the run
    counted; `wall`: its wall seconds."""
    capacity = pool_vcpus * end
    outcomes = Counter(r.outcome for r in records)
    answered = sum(v for k, v in outcomes.items() if k != "pending")
    figures = dict(
        utilization=round((od_area + bf_area) / capacity, 6) if capacity else None,
        utilization_on_demand=round(od_area / capacity, 6) if capacity else None,
        utilization_backfill=round(bf_area / capacity, 6) if capacity else None,
        requests_total=requests_total,
        requests_arrived=arrived,
        requests_ignored_after_end=ignored_after_end,
        requests_answered=answered,
        requests_placed=outcomes.get("placed", 0),
        requests_rejected=outcomes.get("rejected", 0),
        requests_failed=outcomes.get("failed", 0),
        requests_pending=outcomes.get("pending", 0),
        rejection_reasons=dict(sorted(rejections.items())),
        rejected_larger_than_node=rejected_larger_than_node,
        rejected_due_to_backfill=rejected_due_to_backfill,
        requests_released=released,
        requests_queued=queued,
        backfill_drained=drained,
        wait_p50_s=percentile(waits, 50),
        wait_p99_s=percentile(waits, 99),
        preempted_paths=dict(Counter(d.get("path", "") for d in preempted)),
    )
    figures.update(work)
    working = figures.pop("backfill_working_vcpu_seconds")
    figures["utilization_working"] = round((od_area + working) / capacity, 6) if capacity else None
    figures.update(simulated_days=round(end / DAY, 6), stopped_early=stopped_early,
                   sim_events=events, wall_seconds=round(wall, 3),
                   sim_events_per_s=round(events / wall) if wall else None)
    return figures


# -- the per-VM rows ----------------------------------------------------------------------------------

def vm_rows(leases: Iterable[Lease], by_lease: Mapping[str, OnDemandRequest], end: float) -> list[dict[str, Any]]:
    """One row per lease: what the per-VM CSV holds. wait_s: an on-demand VM's wait from its
    request's arrival (`by_lease`: the request each lease was booked for) to its launch;
    runtime_s: from launch to its end (or the run's `end`); preempted: a backfill VM stopped to
    make room (its runtime x vCPUs was lost)."""
    rows = []
    for l in sorted(leases, key=lambda l: (l.created_at, l.lease_id)):
        request = by_lease.get(l.lease_id)
        launched = l.launched_at
        rows.append(dict(
            lease_id=l.lease_id, role=l.role, node=l.node_id, vcpus=l.vcpus, memory_mib=l.memory_mib,
            launched=launched, ended=l.ended_at, state=l.state, end_reason=l.end_reason, request_id=l.request_id,
            wait_s=round(launched - request.at, 3) if request is not None and launched is not None else None,
            runtime_s=round((l.ended_at if l.ended_at is not None else end) - launched, 3)
            if launched is not None else None,
            preempted=l.role == "backfill" and l.end_reason.startswith("preempted")))
    return rows
