"""Per-tenant figures of a simulation with tenants (controller/sim/tenants.py): what each tenant
held against its bounds, its requests' rejections by bound, the batch tenants' backfill shares
against PSF, each goal and whether it was met, and two violation counts.

Definitions (a tenant's *held* is what the books count against its bounds: for an on-demand
tenant, what its on-demand VMs hold from their booking to their end (controller.core.bounds'
tenant_usage); for a batch tenant, that (its dedicated VMs) plus what its backfill VMs hold
(backfill_usage); read after every Write the books make, so every change is seen):

- ``lower_bound_violations``: the number of requests of a tenant (on-demand requests, and a
  batch tenant's requests for dedicated VMs) refused for room (rejected with a code other than
  tenant_upper_bound, invalid_size, no_image and below_image_minimum, or queued to wait for room;
  a request larger than every node is left out: no room would ever hold it)
  at a moment when the tenant's held non-preemptible capacity plus the request still fit within
  its effective lower bound (controller.core.tenancy.effective_lower: the lower bound, scaled in
  proportion if the pool is below their sum), in both vCPUs and memory. Such a refusal means the
  guarantee was not kept: the capacity within the lower bound should have been the tenant's.
  A request refused while the tenant already held its lower bound (or that would take it past
  it) is not a violation: the guarantee does not cover it.
- ``upper_bound_violations``: the number of times a tenant's held went from within its upper
  bound to past it (in vCPUs or memory), each such episode once however long it lasted (its
  time is ``time_above_upper_share``).
- ``time_below_lower_share``, ``time_within_bounds_share``, ``time_above_upper_share``: shares of
  the run's time (time-weighted, exact) that the tenant's held was below its lower bound in some
  dimension, within both bounds, past its upper bound.
- ``backfill_share``: a batch tenant's backfill vCPU-seconds over all batch tenants' (the whole
  run), beside ``psf_vcpus`` (its lower bound over the batch tenants' lower bounds);
  ``backfill_share_over_urr``: the same over the ticks (every TICK_S) at which the pool's usage
  rate, vCPUs allocated to every VM over the pool's vCPUs, was past URR, where PSF applies (None:
  never past it).
- A goal (deadline): ``met`` when the tenant's last job finished by the deadline;
  ``finish_error_at_half``: at half the elapsed time (start + (finish - start) / 2) the books'
  latest projected finish, |projected - finish| / (finish - start);
  ``dedicated_vcpu_hours``: what its dedicated VMs held (from booking to end) over the run;
  ``hindsight_dedicated_vcpu_hours``: the least dedicated vCPU-hours, d x (finish - start) over
  whole d from 0 to its lower bound, with which goals.project, over the residual the books saw
  for it (sampled every TICK_S from the start: its backfill and its uncapped grant) at the rate
  the run measured (vCPU-seconds done over the vCPU-hours it held until its finish), finishes
  by the deadline (None: none does). ``hindsight_over_held_dedicated_vcpu_hours``: the same over
  the volunteer vCPUs it actually held (its backfill, sampled likewise): a lower residual than
  the books' (their grant counts capacity pool-wide, which placement may not find on one node;
  and the goal's cap keeps the tenant below it), so a larger hindsight.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..core.goals import Deadline, Goal, project
from ..core.job_progress import Progress
from ..core.records import ZERO, Size
from ..core.tenancy import TenantKind, effective_lower, psf

HOUR = 3600.0
NOT_ROOM = ("tenant_upper_bound", "invalid_size", "no_image", "below_image_minimum")
TICK_S = 60.0


def predicted_residual(ledger: Any, tenant: str, now: float) -> float:
    """vCPUs of residual capacity the books would give `tenant` now: what its backfill holds and
    what the launcher would grant it (the books' own residual, through
    their public calls)."""
    held = ledger.backfill_usage.get(tenant, ZERO).vcpus
    configs = ledger.tenant_configs()
    granted = sum(g.vms * configs[g.tenant].vcpus for g in ledger.current_grants(now)
                  if g.tenant == tenant)
    return float(held + granted)


class _Tenant:
    """One tenant's running figures."""
    __slots__ = ("name", "kind", "lower", "upper", "bounded", "od", "bf", "since", "od_area", "bf_area",
                 "below", "within", "above", "over", "upper_violations", "over_urr_bf")

    def __init__(self, name: str, kind: TenantKind, lower: Size, upper: Size) -> None:
        self.name, self.kind, self.lower, self.upper = name, kind, lower, upper
        self.bounded = upper.vcpus < 1_000_000
        self.od = self.bf = ZERO
        self.since = 0.0
        self.od_area = self.bf_area = 0.0             # vCPU-seconds
        self.below = self.within = self.above = 0.0   # seconds
        self.over = False
        self.upper_violations = 0
        self.over_urr_bf = 0.0

    def held(self) -> Size:
        return self.od + self.bf if self.kind is TenantKind.BATCH else self.od

    def integrate(self, now: float) -> None:
        span = now - self.since
        if span <= 0:
            return
        self.od_area += self.od.vcpus * span
        self.bf_area += self.bf.vcpus * span
        held = self.held()
        if not held.fits_in(self.upper):
            self.above += span
        elif not self.lower.fits_in(held):
            self.below += span
        else:
            self.within += span
        self.since = now

    def held_area_at(self, at: float) -> float:
        """vCPU-seconds held (backfill and dedicated) from the start to `at` (>= the last change)."""
        return self.od_area + self.bf_area + (self.od.vcpus + self.bf.vcpus) * max(at - self.since, 0.0)


class _Goal:
    __slots__ = ("goal", "start", "residual_at_start", "area_at_start", "finished", "area_at_finish",
                 "sizings", "residuals", "held")

    def __init__(self, goal: Goal, start: float, residual: float, area: float) -> None:
        self.goal, self.start, self.residual_at_start, self.area_at_start = goal, start, residual, area
        self.finished: float | None = None
        self.area_at_finish = 0.0
        self.sizings: list[tuple[float, float, int, int, bool]] = []   # (t, projected, dedicated, volunteers, on track)
        self.residuals: list[tuple[float, float]] = [(start, residual)]
        self.held: list[tuple[float, float]] = [(start, 0.0)]   # the volunteer vCPUs it held


class TenantBook:
    """What the figures are made of, kept as the run goes (TenantSimulation's hooks call it)."""

    def __init__(self, config: Any, ledger: Any, end: float) -> None:
        self.config, self.ledger, self.end = config, ledger, end
        self.tenants = {t.name: _Tenant(t.name, t.kind, t.lower, t.upper) for t in ledger.tenants}
        self.rejections: dict[str, Counter] = {name: Counter() for name in self.tenants}
        self.queued: Counter = Counter()
        self.violating: dict[str, set[str]] = {name: set() for name in self.tenants}
        self.goals: dict[str, _Goal] = {}
        self.over_urr_time = 0.0

    # -- as the run goes ------------------------------------------------------------------------

    def observe(self, now: float) -> None:
        """After a Write: each tenant's held, integrated since its last change; an upper-bound episode counted."""
        tenant_usage, backfill_usage = self.ledger.tenant_usage, self.ledger.backfill_usage
        for tenant in self.tenants.values():
            od, bf = tenant_usage.get(tenant.name, ZERO), backfill_usage.get(tenant.name, ZERO)
            if od == tenant.od and bf == tenant.bf:
                continue
            tenant.integrate(now)
            tenant.since = now
            tenant.od, tenant.bf = od, bf
            self._check_over(tenant)

    @staticmethod
    def _check_over(tenant: _Tenant) -> None:
        over = not tenant.held().fits_in(tenant.upper)
        if over and not tenant.over:
            tenant.upper_violations += 1
        tenant.over = over

    def bounds_changed(self, now: float) -> None:
        """The books' tenants were set anew (a tenant's start, an admin's change): each tenant's
        time so far is counted under its old bounds, its held checked against the new ones."""
        for tenant in self.ledger.tenants:
            mine = self.tenants.get(tenant.name)
            if mine is None:
                mine = self.tenants[tenant.name] = _Tenant(tenant.name, tenant.kind, tenant.lower, tenant.upper)
                mine.since = now
                self.rejections[tenant.name], self.violating[tenant.name] = Counter(), set()
            mine.integrate(now)
            mine.since = now
            mine.lower, mine.upper = tenant.lower, tenant.upper
            mine.bounded = tenant.upper.vcpus < 1_000_000
            self._check_over(mine)

    def refused(self, now: float, kind: str, detail: Mapping[str, Any], store: Any) -> None:
        """A request rejected or queued: counted by tenant and code; a violation if its tenant's
        guarantee covered it (the module's doc)."""
        record = store.requests.get(detail.get("request_id"))
        if record is None:
            return
        name = self.ledger.tenant_named(record.owner).name
        if name not in self.tenants:
            return
        code = detail.get("reason_code", "other")
        if kind == "request.queued":
            self.queued[name] += 1
        else:
            self.rejections[name][code] += 1
        want = Size(record.vcpus, record.memory_mib)
        if kind == "request.rejected" and code in NOT_ROOM:
            return
        if not any(want.fits_in(node.capacity) for node in self.ledger.nodes.values()):
            return   # larger than every node: no room would ever hold it, guaranteed or not
        lower = self.ledger.effective_lower_bound(name)
        held = self.ledger.tenant_usage.get(name, ZERO)
        if (held + want).fits_in(lower):
            self.violating[name].add(record.request_id)

    def started(self, name: str, now: float, residual: float, goal: Goal | None) -> None:
        if goal is not None and name in self.tenants:
            self.observe(now)
            self.goals[name] = _Goal(goal, now, residual, self.tenants[name].held_area_at(now))

    def finished(self, name: str, at: float) -> None:
        goal = self.goals.get(name)
        if goal is not None and goal.finished is None:
            goal.finished = at
            goal.area_at_finish = self.tenants[name].held_area_at(at)

    def tick(self, now: float, allocated_vcpus: float, pool_vcpus: int) -> None:
        """Every TICK_S: the goals' sizings and residual; the batch tenants' backfill when the pool is past URR."""
        for name, goal in self.goals.items():
            deadline = getattr(goal.goal, "deadline_s", math.inf)
            if goal.finished is not None and now > max(goal.finished, deadline if math.isfinite(deadline) else 0):
                continue
            sizing = self.ledger.sizings.get(name)
            if sizing is not None:
                goal.sizings.append((now, sizing.projected_finish_s, sizing.dedicated_vcpus, sizing.volunteer_vcpus,
                                     sizing.on_track))
            goal.residuals.append((now, predicted_residual(self.ledger, name, now)))
            goal.held.append((now, float(self.ledger.backfill_usage.get(name, ZERO).vcpus)))
        if pool_vcpus and allocated_vcpus / pool_vcpus > self.config.urr:
            self.over_urr_time += TICK_S
            for tenant in self.tenants.values():
                if tenant.kind is TenantKind.BATCH:
                    tenant.over_urr_bf += self.ledger.backfill_usage.get(tenant.name, ZERO).vcpus * TICK_S

    # -- the figures ------------------------------------------------------------------------------

    def figures(self, end: float, store: Any, work: Any) -> dict[str, Any]:
        for tenant in self.tenants.values():
            tenant.integrate(end)
        requests: dict[str, Counter] = {name: Counter() for name in self.tenants}
        for record in store.requests.values():
            name = self.ledger.tenant_named(record.owner).name
            if name in requests:
                requests[name][record.outcome] += 1
        batch = [t for t in self.ledger.tenants if t.kind is TenantKind.BATCH]
        bf_total = sum(t.bf_area for t in self.tenants.values() if t.kind is TenantKind.BATCH)
        urr_total = sum(t.over_urr_bf for t in self.tenants.values() if t.kind is TenantKind.BATCH)
        by_tenant = {}
        for tenant in self.ledger.tenants:
            mine = self.tenants[tenant.name]
            row = self._bounds(mine, end)
            row.update(requests=sum(requests[tenant.name].values()), placed=requests[tenant.name]["placed"],
                       rejected=dict(sorted(self.rejections[tenant.name].items())),
                       queued=self.queued[tenant.name],
                       lower_bound_violations=len(self.violating[tenant.name]),
                       upper_bound_violations=mine.upper_violations)
            if tenant.kind is TenantKind.BATCH:
                row.update(psf_vcpus=round(psf(tenant, batch).vcpus, 4),
                           backfill_share=round(mine.bf_area / bf_total, 4) if bf_total else None,
                           backfill_share_over_urr=round(mine.over_urr_bf / urr_total, 4) if urr_total else None)
                row.update(_jobs(getattr(work, "queues", {}).get(tenant.name), end))
            if tenant.name in self.goals:
                row["goal"] = self._goal(tenant.name, end, work)
            if row["requests"] or mine.od_area or mine.bf_area or tenant.name in self.config_names():
                by_tenant[tenant.name] = row
        return dict(tenants=by_tenant,
                    lower_bound_violations=sum(r["lower_bound_violations"] for r in by_tenant.values()),
                    upper_bound_violations=sum(r["upper_bound_violations"] for r in by_tenant.values()))

    def config_names(self) -> set[str]:
        return {s.name for s in self.config.tenants}

    @staticmethod
    def _bounds(tenant: _Tenant, end: float) -> dict[str, Any]:
        span = end or 1.0
        held_area = tenant.od_area + (tenant.bf_area if tenant.kind is TenantKind.BATCH else 0.0)
        return dict(kind=tenant.kind.value, lower_vcpus=tenant.lower.vcpus,
                    upper_vcpus=tenant.upper.vcpus if tenant.bounded else None,
                    on_demand_vcpu_hours=round(tenant.od_area / HOUR, 3),
                    backfill_vcpu_hours=round(tenant.bf_area / HOUR, 3),
                    mean_held_vcpus=round(held_area / span, 2),
                    time_below_lower_share=round(tenant.below / span, 4),
                    time_within_bounds_share=round(tenant.within / span, 4),
                    time_above_upper_share=round(tenant.above / span, 4))

    def _goal(self, name: str, end: float, work: Any) -> dict[str, Any]:
        goal = self.goals[name]
        tenant = self.tenants[name]
        deadline = goal.goal.deadline_s if isinstance(goal.goal, Deadline) else None
        finish = goal.finished
        queue = getattr(work, "queues", {}).get(name)
        done = getattr(queue, "done_vcpu_seconds", 0.0)
        area = (goal.area_at_finish if finish is not None else tenant.held_area_at(end)) - goal.area_at_start
        rate = done / (area / HOUR) if area > 0 else None   # vCPU-seconds of progress per vCPU-hour held
        out: dict[str, Any] = dict(
            kind="deadline" if deadline is not None else "least_cost", start_s=round(goal.start, 1),
            work_vcpu_hours=goal.goal.work_vcpu_hours, deadline_s=None if deadline is None else round(deadline, 1),
            residual_at_start_vcpus=goal.residual_at_start,
            finished_s=None if finish is None else round(finish, 1),
            met=None if deadline is None else (finish is not None and finish <= deadline),
            measured_rate_per_vcpu_hour=None if rate is None else round(rate, 1),
            dedicated_vcpu_hours=round(tenant.od_area / HOUR, 3),
            on_track_at_end=goal.sizings[-1][4] if goal.sizings else None)
        out["projected_finish_at_half_s"], out["finish_error_at_half"] = _at_half(goal, finish)
        out["hindsight_dedicated_vcpu_hours"] = _hindsight(goal, goal.residuals, tenant.lower.vcpus, rate) \
            if deadline is not None else None
        out["hindsight_over_held_dedicated_vcpu_hours"] = _hindsight(goal, goal.held, tenant.lower.vcpus, rate) \
            if deadline is not None else None
        return out


def _jobs(queue: Any, end: float) -> dict[str, Any]:
    if queue is None or not hasattr(queue, "done_vcpu_seconds"):
        return {}
    return dict(jobs=len(queue.jobs), jobs_completed=queue.completed,
                job_vcpu_hours_done=round(queue.done_vcpu_seconds / HOUR, 3),
                job_seconds_lost=round(queue.lost_seconds, 1))


def _at_half(goal: _Goal, finish: float | None) -> tuple[float | None, float | None]:
    """The books' projected finish at half the elapsed time, and its error over the elapsed time."""
    if finish is None or finish <= goal.start:
        return None, None
    half = goal.start + (finish - goal.start) / 2
    seen = [s for s in goal.sizings if s[0] <= half]
    if not seen:
        return None, None
    projected = seen[-1][1]
    if not math.isfinite(projected):
        return None, math.inf
    return round(projected, 1), round(abs(projected - finish) / (finish - goal.start), 4)


def _hindsight(goal: _Goal, residual: list[tuple[float, float]], lower: int, rate: float | None) -> float | None:
    """The least dedicated vCPU-hours that would have met the deadline over `residual`."""
    if rate is None or rate <= 0:
        return None
    total = goal.goal.work_vcpu_hours * HOUR
    best = None
    for dedicated in range(0, lower + 1):
        finish = project(goal.goal, Progress(0.0, total), goal.start, residual, rate, dedicated).finish_s
        if finish <= goal.goal.deadline_s:
            cost = dedicated * (finish - goal.start) / HOUR
            best = cost if best is None else min(best, cost)
            if dedicated == 0:
                break
    return None if best is None else round(best, 3)
