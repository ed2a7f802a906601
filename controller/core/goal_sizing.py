"""Stage: goal-driven sizing of batch tenants (RHIC, the arithmetic in controller.core.goals).

A batch tenant may state a goal: W vCPU-hours of work by a deadline, or least cost at a price
for dedicated capacity. Every GOAL_INTERVAL_S the books size each such tenant (size_goals, a
job of its own: the controller's scheduler, the simulator's clock) from:

- its progress, as its guests say it (`progress DONE TOTAL`, controller.core.progress; none
  said yet: all of W is left), and its measured rate (job_progress.progress_rate over the samples;
  the goal's own, TOTAL over W, until its guests say MEASURED_AFTER_SHARE of the job done);
- the residual capacity it can be given now: what its backfill holds plus what the launcher
  would grant it (batch_fill), as a flat forecast;
- its own bounds: dedicated capacity stays within its lower bound, volunteers within its upper.

The answer steers the tenant, and only it: it takes every volunteer it is granted (PSF shares
the residual among batch tenants; goals.size_for_goal says why no fewer), and its dedicated
capacity is on-demand VMs of its own (non-preemptible; the request path checks them against its
lower bound like any tenant's) requested or released to match. The sizing is kept for `gleanctl
tenant show` (on track or at risk, the projected finish); a change between the two is an audit
event.

Sized at evenly spaced times, not inside the launcher's fills: a fill runs right after what asks
for it (on-demand VMs taking volunteers' room, a VM gone), so a sizing there read the residual
at its dips. On the tenants bench, moved from the fills to a job of its own, the dedicated
capacity bought over the hindsight search's went from 1.77 to 1.41 and from 2.57 to 1.61 (seeds
0-7 and 200-207; docs/simulator.md).
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from gleaner_common.ids import InvalidField

from .backfill_plan import plan_backfill
from .departures import forecast_offsets, freed_vcpus, residual_forecast
from .goals import (Goal, Sizing, dedicated_releases, goal_from_dict, last_wave_vcpus, project, projection_rate,
                    size_for_goal)
from .job_progress import (MAX_TASK_S, MEASURED_AFTER_SHARE, Progress, rate_measured_yet, report_lag, sizing_rate,
                           task_length, wave_finish)
from .policy import Decision, Preempt, Reject
from .records import (BACKFILL_TENANT, GOAL_REQUEST_PREFIX, HOLDS_ALL, STOPS, VICTIM, ZERO, Ask, Audit, Effect, Size, Write,
                      is_dedicated, is_on_demand_vm)
from .tenancy import TenantKind, total

GOAL_INTERVAL_S = 60.0       # RHIC re-evaluates as residual capacity changes; a minute bounds the churn
# RHIC pads its estimate by the average task length against stragglers; Gleaner pads by half the
# first task its guests said (job_progress.report_lag: the job's last wave ends half a task past the
# fluid finish on average), and by at least five minutes: its own reaction (a sizing a minute, a
# launch) and the last reports. On the tenants bench's 24 seed sets (480 goal runs), dedicated
# capacity bought over the hindsight searches' and deadlines met: 1.069 and 0.956, against 1.379
# and 0.981 padded by the whole first task and two minutes (docs/simulator.md, "Padded by half a
# task").
GOAL_PADDING_S = 300.0
PADDING_TASK_SHARE = 0.5
# A dedicated VM is kept until it has run this many tasks of the job (the first task's length
# each). With its dedicated VMs heard (session 31), one task let the sizing buy and release its
# lower bound as volunteers came and went, each release stopping a task in flight: on the
# bench's 32 seed sets 2.12 x the searches' dedicated capacity and 0.922 met; two gave 1.18 and
# 0.955 (docs/simulator.md, "Dedicated VMs heard").
HOLD_TASKS = 2
# Dedicated capacity waits while the whole lower bound bought this much later would still meet
# the deadline (three sizings): volunteers granted meanwhile need less of it. Measured against
# 300 and 600 s in docs/simulator.md ("Tenants").
GOAL_DEFER_S = 3 * GOAL_INTERVAL_S
# ... and, when the pool cannot place its lower bound now, while the bound bought halfway to the
# deadline would still meet it: no other tenant's VM can take a lower bound
# (tenancy.on_demand_verdict), so a pool full of on-demand VMs for minutes (the tenants bench's
# 6-h starts) does not make it buy the little the pool can place at once, then more as it frees.
# Halfway, not a fixed time: the wait ends with the bound needing at most half the time left,
# whatever the deadline. On the bench's 32 seed sets (768 goal runs), dedicated capacity over
# the hindsight searches' and deadlines met: 1.068 and 0.955, against 1.184 and 0.955 without,
# and 1.063 and 0.953 with an hour (docs/simulator.md, "A guaranteed lower bound waits").
GUARANTEED_WAIT_SHARE = 0.5
# The job's last wave runs on dedicated VMs once the padded deadline is this many tasks away
# (goals.last_wave_vcpus). On the bench's 32 seed sets, the 6-h runs with the deadline on the
# residual met 21 of 32 against 5, all runs 0.981 against 0.955, and dedicated capacity over the
# searches' fell from 1.068 to 1.062 (late purchases of the whole bound are no longer needed);
# from two tasks away, 0.984 met for 1.142 (docs/simulator.md, "The last wave on dedicated VMs").
LAST_WAVE_TASKS = 1.0


class GoalSizing:
    """Stage: each goal-driven batch tenant's sizing, and the dedicated VMs it asks for."""

    def _init_goals(self) -> None:
        self.tenant_goals: dict[str, Goal] = {}
        self.sizings: dict[str, Sizing] = {}
        self._dedicated_seq = 0
        # tenant -> since when its sizings have wanted fewer dedicated VMs (absent: the last did not)
        self._wanted_fewer: dict[str, float] = {}
        # departures.freed_vcpus as last worked out, and for which (now, books' version): one
        # answer for every goal tenant sized at once
        self._freed: tuple[tuple[float, int], list[float] | None] = ((-1.0, -1), None)
        # tenants whose job is done (stored: Write.goals_done): the guests that said so are gone
        # with their VMs, and the progress book lives in memory, so after a restart only this says it
        self.jobs_done: set[str] = set()

    def load_goals_done(self, names) -> None:
        """The tenants whose job was done when the controller stopped (the store's), after the
        tenants: each is shown done until its goal is set again."""
        for name in names:
            if name in self.tenant_goals:
                self.jobs_done.add(name)
                self.sizings[name] = Sizing(0, 0, math.inf, True, "done: its guests said so, as the store kept it; "
                                            "it is granted nothing until its goal is set again (the next job)",
                                            done=True)

    def load_goal_progress(self, saved: Any) -> None:
        """What the guests had said of each tenant's job when the controller stopped (the store's
        ProgressBook.snapshot): its measured rate and task length carry on. An entry not read is
        said (unreadable_settings), and that tenant's history starts afresh."""
        for tenant, why in self.progress.restore(saved, [t.name for t in self.tenants]):
            self.unreadable_settings.append((tenant, "goal_progress", why))

    def _goals_from(self, records) -> None:
        """The goals of the tenants given to set_tenants (their records' JSON)."""
        goals: dict[str, Goal] = {}
        for record in records:
            text = getattr(record, "goal", None)
            if not text:
                continue
            if record.name == BACKFILL_TENANT:   # the built-in tenant takes none (service.set_tenant_goal)
                self.unreadable_settings.append((record.name, "goal", "the built-in batch tenant takes no goal"))
                continue
            try:
                goals[record.name] = goal_from_dict(json.loads(text))
            except (ValueError, InvalidField) as exc:   # never stops the controller: no goal, and said
                self.unreadable_settings.append((record.name, "goal", f"{text[:200]} ({exc})"))
        for name in set(self.tenant_goals) - set(goals):
            self.sizings.pop(name, None)
        self.jobs_done.intersection_update(goals)   # a goal cleared (or its tenant deleted): no job, none done
        self.tenant_goals = goals

    def size_goals(self, now: float) -> list[Effect]:
        """Size every goal-driven tenant, and carry the answer out: the controller's goals job
        (every GOAL_INTERVAL_S), and at once when an admin changes a batch tenant."""
        effects = self._release_unsteered(now)
        steered: set[str] = set()
        if self.backfill.enabled:   # backfill switched off pool-wide: goals steer nothing then
            configs = self.tenant_configs()
            for tenant in self.tenants:
                goal = self.tenant_goals.get(tenant.name)
                if goal is None or tenant.kind is not TenantKind.BATCH or not configs[tenant.name].enabled:
                    continue   # no goal, or its backfill is off: nothing to size
                effects += self._size(tenant, goal, now)
                steered.add(tenant.name)
        for name in set(self._wanted_fewer) - steered:   # not sized now: its next sizing starts the clock afresh
            del self._wanted_fewer[name]
        return effects

    def _size(self, tenant, goal: Goal, now: float) -> list[Effect]:
        said = self.progress.progress(tenant.name)
        progress = said if said is not None else Progress(0.0, goal.work_vcpu_hours)
        history = sorted(self.progress.history(tenant.name))
        rate = sizing_rate(said, history)   # None: the goal's own work figure stands in
        early = said is not None and not rate_measured_yet(said)
        residual = self._residual_for(tenant.name, now)
        # All it can hold: the residual, its dedicated VMs, and what they could take from other
        # tenants' backfill (dedicated VMs placed on free room or on its own backfill add nothing:
        # without this cap it would buy dedicated capacity the residual already counts)
        reachable = residual + self._dedicated_held(tenant.name) + self._others_backfill(tenant.name)
        upper = int(min(tenant.upper.vcpus, reachable))
        # RHIC pads by the average task length: half the first task said stands in for it
        padding = max(GOAL_PADDING_S, PADDING_TASK_SHARE * report_lag(history))
        sizing = size_for_goal(goal, progress, now, [(now, residual)], rate, tenant.lower.vcpus,
                               upper_bound_vcpus=upper, padding_s=padding, defer_s=GOAL_DEFER_S,
                               guaranteed_upper_vcpus=self._guaranteed_upper(tenant, residual),
                               guaranteed_defer_s=_guaranteed_wait(goal, now))
        before = self.sizings.get(tenant.name)
        if sizing.done:
            self._wanted_fewer.pop(tenant.name, None)
            return self._job_done(tenant.name, sizing, progress, now)
        task = task_length(history)   # None before a task is said
        sizing = self._in_waves(tenant.name, goal, progress, history, task, rate, now, sizing) \
            or self._projected(goal, progress, now, residual, rate, upper, sizing)
        sizing = _last_wave(sizing, last_wave_vcpus(goal, progress, rate, task, now, padding, tenant.lower.vcpus,
                                                     LAST_WAVE_TASKS), task)
        if early:
            sizing = dataclasses.replace(sizing, explain=(
                f"{sizing.explain}; sized at the rate its goal states until its guests say "
                f"{MEASURED_AFTER_SHARE:.0%} of the job done ({progress.done:g}/{progress.total:g} so far)"))
        self.sizings[tenant.name] = sizing
        effects, held_back, kept = self._dedicated_to(tenant.name, sizing.dedicated_vcpus, now, task)
        if held_back:   # tenant show says why it holds fewer than the sizing wants
            sizing = self.sizings[tenant.name] = dataclasses.replace(sizing, explain=(
                f"{sizing.explain}; {held_back} of those dedicated vCPUs wait: its volunteers fill its upper bound "
                f"({tenant.upper.vcpus} vCPUs, {tenant.upper.memory_mib} MiB)"))
        if kept:   # or more than it wants
            sizing = self.sizings[tenant.name] = dataclasses.replace(sizing, explain=(
                f"{sizing.explain}; {kept} more dedicated vCPUs stay until each has run {_held_for(task)}: "
                "released sooner, the work in flight on them would be lost"))
        if before is None or before.on_track != sizing.on_track:
            effects.append(Write(events=(Audit("tenant.goal_on_track" if sizing.on_track else "tenant.goal_at_risk",
                                               detail=dict(tenant=tenant.name, explain=sizing.explain,
                                                           projected_finish=_finite(sizing.projected_finish_s),
                                                           dedicated_vcpus=sizing.dedicated_vcpus,
                                                           volunteer_vcpus=sizing.volunteer_vcpus,
                                                           progress=f"{progress.done:g}/{progress.total:g}")),)))
        return effects

    def _in_waves(self, tenant: str, goal: Goal, progress: Progress, history: list[tuple[float, float, float]],
                  task: float | None, rate: float | None, now: float, sizing: Sizing) -> Sizing | None:
        """The sizing with the finish in whole waves of the job's tasks on the vCPUs it holds and
        the dedicated ones this sizing buys (job_progress.wave_finish); None where that does not apply. A
        plan that buys its lower bound later shows it too: that plan meets the deadline only if
        it buys, and on the tenants bench the ones shown so at half time finished late. A least-
        cost goal's cost stays the sizing's."""
        buying = max(0, sizing.dedicated_vcpus - self._dedicated_held(tenant))
        held = self.tenant_held(tenant).vcpus + buying
        try:
            shown = projection_rate(goal, progress, rate)
            finish = wave_finish(progress, history, shown, now, held)
        except (InvalidField, ValueError, ArithmeticError):
            return None
        if finish is None or task is None:   # wave_finish gives one only once a task is said
            return None
        return dataclasses.replace(sizing, projected_finish_s=finish, explain=(
            f"{sizing.explain}{_rate_note(goal, progress, rate, shown)}; projected to finish {_clock(finish - now)} "
            f"from now, in whole waves of its tasks ({_clock(task)} each, as long as its first) on the {held} vCPUs "
            f"it holds{f' with the {buying} dedicated ones it buys now' if buying else ''}"))

    def _projected(self, goal: Goal, progress: Progress, now: float, residual: float, rate: float | None,
                   upper: int, sizing: Sizing) -> Sizing:
        """Where the finish is not in waves (_in_waves: no task said yet, or the tenant's vCPUs
        rising), the sizing with the finish it leads to as `tenant show` gives it: at goals.projection_rate
        (the measured rate, never above what the goal states), and counting the on-demand VMs
        expected to leave (controller.core.departures) when that is sooner, within the same cap on
        what the tenant can hold; what it buys stays sized on the residual now at the measured
        rate. A plan to buy later keeps its finish (the deadline it meets) unless departures
        bring it sooner. A projection that cannot be made leaves the sizing's own: it must never
        stop a fill."""
        try:
            shown = projection_rate(goal, progress, rate)
            slower = rate is not None and shown < rate
            own = None if sizing.buys_later or not slower else \
                project(goal, progress, now, [(now, residual)], shown, sizing.dedicated_vcpus, upper_bound_vcpus=upper)
        except (InvalidField, ValueError, ArithmeticError):
            return sizing
        try:   # apart: a departures forecast that cannot be made leaves the projection above
            forecast = residual_forecast(residual, now, self._freed_by(now))
            leaving = None if len(forecast) == 1 else \
                project(goal, progress, now, forecast, shown, sizing.dedicated_vcpus, upper_bound_vcpus=upper)
        except (InvalidField, ValueError, ArithmeticError):
            leaving = None
        finish = own.finish_s if own is not None else sizing.projected_finish_s
        note = _rate_note(goal, progress, rate, shown)
        if leaving is not None and leaving.finish_s < finish:
            # the forecast only rises: its largest value by the finish is the last
            freed = max(vcpus for at, vcpus in forecast if at <= leaving.finish_s) - residual
            return dataclasses.replace(
                sizing, projected_finish_s=leaving.finish_s, cost=leaving.cost if sizing.cost is not None else None,
                explain=(f"{sizing.explain}{note}; projected to finish {_clock(leaving.finish_s - now)} from now, "
                         f"counting the pool's {freed:.0f} on-demand vCPUs expected to leave by then (by the lives "
                         f"of the last {len(self.on_demand_lives)} on-demand VMs that ended); sized as if none leave"))
        if own is None:
            return sizing
        return dataclasses.replace(sizing, projected_finish_s=own.finish_s, explain=sizing.explain + note,
                                   cost=own.cost if sizing.cost is not None else None)

    def _freed_by(self, now: float) -> list[float] | None:
        """departures.freed_vcpus for the pool now, once for every goal tenant sized at `now`
        with the books unchanged (an ended lease changes their version too)."""
        key = (now, self._books_version)
        if self._freed[0] != key:
            alive = [(l.launched_at if l.launched_at is not None else l.created_at, l.vcpus)
                     for l in self.leases.values() if l.state in HOLDS_ALL and is_on_demand_vm(l)]
            self._freed = (key, freed_vcpus(alive, self.on_demand_lives, now, forecast_offsets()))
        return self._freed[1]

    def goals_done(self) -> set[str]:
        """The goal-driven tenants whose job is done: granted nothing more until a new goal."""
        return self.jobs_done.intersection(self.tenant_goals)

    def tenants_changed(self, records, goal_begins: str | None, size: bool, now: float) -> list[Effect]:
        """The store's tenants after an admin's change (the service's, and a replay of its
        recording): the books take them, a job begins for `goal_begins` (its goal was set), and with
        `size` the goals are sized at once (the goals job would wait up to a minute)."""
        self.set_tenants(records)
        if goal_begins is not None:
            self.new_goal(goal_begins)
        return self.size_goals(now) if size else []

    def new_goal(self, tenant: str) -> None:
        """An admin set `tenant`'s goal: after a job done, a new job begins (the progress said
        so far is the old job's; kept, it would say done at once and the tenant get nothing).
        The store forgets the job done in the goal's own transaction (Store.put_tenant)."""
        if self.progress.job_done(tenant):
            self.progress.forget_tenant(tenant)
        self.jobs_done.discard(tenant)
        self.sizings.pop(tenant, None)
        self._wanted_fewer.pop(tenant, None)

    def progress_kept(self, goal_begins: str | None = None, deleted: str | None = None) -> dict[str, Any]:
        """The progress book's snapshot as it stands once `goal_begins`'s goal is set (new_goal
        forgets a job done) or `deleted` is deleted: what the store writes in that change's own
        transaction, so that a restart never restores what the books forgot."""
        gone = deleted if deleted is not None else \
            goal_begins if goal_begins is not None and self.progress.job_done(goal_begins) else None
        return self.progress.snapshot(leave_out=gone)

    def _job_done(self, tenant: str, sizing: Sizing, progress: Progress, now: float) -> list[Effect]:
        """The job is done (RHIC releases a job's cluster when it ends): every VM of the tenant's
        goes, its dedicated VMs and its volunteers (their guests have nothing left to do), and it
        is granted nothing more (goals_done) until a new goal is set."""
        said = f"{progress.done:g}/{progress.total:g}"
        explain = (f"done: its guests say {said}; its VMs are stopped, and it is granted nothing until its goal "
                   "is set again (the next job)")
        self.sizings[tenant] = dataclasses.replace(sizing, explain=explain)
        self.jobs_done.add(tenant)
        effects: list[Effect] = [Write(goals_done=tuple(sorted(self.jobs_done)), events=(Audit(
            "tenant.goal_done", detail=dict(tenant=tenant, progress=said, explain=explain)),))]
        mine = [l for l in self.leases.values() if l.state not in STOPS and self.tenant_of_lease(l) == tenant
                and (l.role == "backfill" or is_dedicated(l))]
        for lease in sorted(mine, key=lambda l: l.lease_id):
            if lease.state == "running":
                effects += self._stop(lease, self.backfill.grace_seconds, now, f"its tenant's goal is done ({said})")
            else:   # starting, waiting, hibernated: release knows how to end each
                effects += self.release(lease.lease_id, False, now)[1]
        return effects

    def _release_unsteered(self, now: float) -> list[Effect]:
        """Dedicated VMs of a tenant whose goal is gone (cleared, or the tenant deleted or being
        drained) are released: nothing would ever size them again."""
        effects: list[Effect] = []
        for lease in list(self.leases.values()):
            if is_dedicated(lease) and lease.state in ("running", "waiting") \
                    and (lease.owner not in self.tenant_goals or lease.owner in self.draining):
                effects += self.release(lease.lease_id, False, now)[1]
        return effects

    def _residual_for(self, tenant: str, now: float) -> float:
        """vCPUs of residual capacity the tenant can have now: its backfill and its grant."""
        held = self.backfill_usage.get(tenant, ZERO).vcpus
        config = self.tenant_configs()[tenant]
        granted = sum(g.vms for g in self.current_grants(now) if g.tenant == tenant)
        # what the plan could place of that grant now (free capacity spread over nodes in pieces
        # smaller than a VM is no residual), not the grant's capacity
        placeable = self._placeable(config, granted, now) if granted else 0
        return float(held + placeable * config.vcpus)

    def _placeable(self, config, vms: int, now: float) -> int:
        """How many of `vms` of the tenant's VMs the backfill plan would place now (booking nothing)."""
        pool = self.snapshot(now)
        unable = self._unable(config.memory_mb, config.image)
        targets = [n for n in self.selected if n not in unable]
        running = sum(n.backfill_vms for n in pool.nodes)
        limited = dataclasses.replace(config, max_instances=running + vms)
        cpu_room = self.productivity if self.settings.use_prediction else None
        return len(plan_backfill(pool, limited, targets, cpu_room).launches)

    def _guaranteed_upper(self, tenant, residual: float) -> int:
        """The most vCPUs the tenant could hold with its whole lower bound bought: the residual
        beside the bound (as honoured now: tenancy.effective_lower), within its upper bound."""
        return int(min(tenant.upper.vcpus, residual + self.effective_lower_bound(tenant.name).vcpus))

    def _dedicated(self, tenant: str) -> list:
        """The tenant's dedicated VMs (goal- requests' leases not being stopped), oldest first."""
        return sorted((l for l in self.leases.values() if l.role == "on_demand" and l.owner == tenant
                       and is_dedicated(l) and l.state not in STOPS),
                      key=lambda l: (l.created_at, l.lease_id))

    def _dedicated_held(self, tenant: str) -> int:
        return sum(l.vcpus for l in self._dedicated(tenant))

    def _within_upper(self, tenant: str, more: Size, decision: Decision) -> bool:
        """Whether the tenant's backfill and dedicated VMs stay within its upper bound with a
        dedicated VM of `more` placed by `decision` (a VM that preempts the tenant's own
        volunteers takes their place). The sizing keeps dedicated plus volunteers under the bound
        by its forecast of the residual; this holds it whatever that forecast says."""
        upper = self.tenant_named(tenant).upper
        held = self.tenant_held(tenant)
        # its volunteers on their way out: this placement's victims, and earlier ones (a victim on
        # notice still holds its memory until it stops, and would be counted twice)
        chosen = set(decision.victims) if isinstance(decision, Preempt) else set()
        leaving = [l.held for l in self.leases.values() if l.role == "backfill" and
                   (l.lease_id in chosen or l.state in VICTIM) and self.tenant_of_lease(l) == tenant]
        return (held + more - total(leaving)).fits_in(upper)

    def _others_backfill(self, tenant: str) -> int:
        return sum(size.vcpus for name, size in self.backfill_usage.items() if name != tenant)

    def _dedicated_to(self, tenant: str, vcpus: int, now: float,
                      task_s: float | None = None) -> tuple[list[Effect], int, int]:
        """Request or release the tenant's dedicated VMs (on-demand VMs it owns, of its backfill
        size) until they hold `vcpus`, in whole VMs within its lower bound. A request is made only
        when placement would take it now (none is queued or refused each interval), and never
        while one of its goal requests still waits for room. A VM is released only once it has
        run HOLD_TASKS tasks of the job (`task_s`, job_progress.task_length; MAX_TASK_S before a task is
        said): guests say progress as tasks end, so one stopped sooner loses its work in flight.
        Also returns the vCPUs of them its upper bound keeps back (its volunteers fill it), and
        those kept past what `vcpus` wants until their tasks are done."""
        config = self.tenant_configs()[tenant]
        mine = self._dedicated(tenant)
        held = sum(l.vcpus for l in mine)
        effects: list[Effect] = []
        held_back = kept = 0
        if any(r.startswith(f"{GOAL_REQUEST_PREFIX}{tenant}-") for r in self.waiting):
            return effects, 0, 0
        while held < vcpus:
            self._dedicated_seq += 1
            ask = Ask(config.vcpus, config.memory_mb, config.image, tenant, f"{GOAL_REQUEST_PREFIX}{tenant}-{int(now)}-{self._dedicated_seq}")
            decision = self._place(ask, self.snapshot(now))
            if isinstance(decision, Reject):
                break   # no room, or past its lower bound: asked again at the next sizing
            if not self._within_upper(tenant, Size(config.vcpus, config.memory_mb), decision):
                held_back = vcpus - held   # asked again when its volunteers leave room
                break
            effects += self.request(ask, now)
            held += config.vcpus
        # Released only once its sizings have wanted fewer across goals jobs (half an interval apart
        # at least, for the scheduler's jitter): a dip of the residual at one sizing, or two sizings
        # at one instant (an admin's change beside the goals job), would otherwise stop their jobs
        if held > vcpus and now - self._wanted_fewer.setdefault(tenant, now) >= GOAL_INTERVAL_S / 2:
            going, kept = dedicated_releases(
                [(l.lease_id, l.vcpus, l.state, l.launched_at if l.launched_at is not None else l.created_at)
                 for l in mine], vcpus, now, None if task_s is None else HOLD_TASKS * task_s)
            for lease_id in going:
                lease, released = self.release(lease_id, False, now)
                effects += released
                held -= lease.vcpus
        if held <= vcpus:   # none (more) wanted gone: a later dip starts the clock afresh
            self._wanted_fewer.pop(tenant, None)
        return effects, held_back, kept


def _last_wave(sizing: Sizing, vcpus: int, task_s: float | None) -> Sizing:
    """The sizing with its dedicated vCPUs raised to the last wave's (goals.last_wave_vcpus)."""
    if vcpus <= sizing.dedicated_vcpus:
        return sizing
    return dataclasses.replace(sizing, dedicated_vcpus=vcpus, buys_later=False, explain=(
        f"{sizing.explain}; its last {vcpus} tasks run on {vcpus} dedicated vCPUs, {_tasks(LAST_WAVE_TASKS)} "
        f"({_clock(LAST_WAVE_TASKS * (task_s or 0.0))}) from the padded deadline: a volunteer preempted now would "
        "lose a task there is no time to run again"))


def _guaranteed_wait(goal: Goal, now: float) -> float:
    """How much later the guaranteed lower bound may be bought (size_for_goal's
    guaranteed_defer_s): GUARANTEED_WAIT_SHARE of the time to a deadline; 0 for least cost."""
    deadline = getattr(goal, "deadline_s", None)
    return 0.0 if deadline is None else max(0.0, GUARANTEED_WAIT_SHARE * (deadline - now))


def _rate_note(goal: Goal, progress: Progress, measured: float | None, shown: float) -> str:
    """Said wherever the finish shown was made at the goal's rate in place of the measured one."""
    if measured is None or shown >= measured:
        return ""
    return (f"; projected at {shown:.4g} progress units per vCPU-hour, what its goal states ({progress.total:g} "
            f"over {goal.work_vcpu_hours:g} vCPU-hours), not the {measured:.4g} measured (its guests say progress as "
            "tasks end: the rate reads high just after)")


def _held_for(task_s: float | None) -> str:
    """How long a dedicated VM is kept at least (_dedicated_to), as tenant show says it."""
    if task_s is None:
        return f"{_clock(MAX_TASK_S)}, the longest task the sizing believes (its guests have said no task done yet)"
    return f"{_tasks(HOLD_TASKS)} of the job ({_clock(task_s)} each, as long as its first)"


def _tasks(count: float) -> str:
    """A count of tasks as tenant show says it: one task, two tasks, 1.5 tasks."""
    return {1: "one task", 2: "two tasks", 3: "three tasks"}.get(count, f"{count:g} tasks")


def _clock(seconds: float) -> str:
    """A span as an admin reads it: 1 h 05 min, 12 min."""
    minutes = max(0, round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 1)
