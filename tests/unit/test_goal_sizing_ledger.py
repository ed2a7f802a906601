"""Goal-driven sizing in the books (controller.core.goal_sizing, RHIC): a batch tenant's deadline
met by volunteers alone takes every volunteer it is granted; one that needs more gets dedicated
VMs of its own, within its lower bound, once waiting would be too late; one that cannot be met
is at risk, and says so once; a job done stops every VM of the tenant's and it is granted nothing
more until a new goal."""
from __future__ import annotations

import json

import math

import pytest

from controller.core.goal_sizing import GOAL_INTERVAL_S, GOAL_PADDING_S, HOLD_TASKS, LAST_WAVE_TASKS, _tasks
from controller.core.goals import Deadline, LeastCost, goal_from_dict
from controller.core.job_progress import MAX_TASK_S, Progress
from controller.core.ledger import Ledger
from controller.core.departures import LIFETIMES_KEPT, MIN_LIFETIMES
from controller.core.records import Ask, Launch, Lease, Stop, TenantRecord, Write
from controller.core.tenancy import TenancySettings
from gleaner_common.ids import InvalidField
from protos import controller_pb2

from .test_ledger_reserves import confirm
from .test_ledger import BACKFILL, SETTINGS, Report, Vm, counter

NODES = {f"n{i}": (4, 4096) for i in range(1, 5)}   # 16 vCPUs
T0 = 100_000.0
HOUR = 3600.0


def science(goal: dict | None, lower=(4, 2048), upper=(16, 16384), enabled: bool = True) -> TenantRecord:
    return TenantRecord("science", "batch", lower[0], lower[1], upper[0], upper[1],
                        goal=json.dumps(goal) if goal else None, backfill=None if enabled else '{"enabled": false}')


def crowded_then_goal(goal: dict, ended: list | None = None) -> Ledger:
    """Others' on-demand VMs hold 12 of 16 vCPUs and the built-in tenant's backfill the other 4
    (science's guarantee among them) before science's backfill and goal are on. `ended`: leases
    the store had as ended when the books were loaded."""
    ledger = pool(science(goal, enabled=False), ended=ended or [])
    for i in range(6):
        confirm(ledger, ledger.request(Ask(2, 512, "tiny", "web", f"w{i}"), T0), T0)
    confirm(ledger, sized_fill(ledger, T0), T0)
    ledger.set_tenants([science(goal)])
    return ledger


def pool(*tenants: TenantRecord, ended: list | None = None) -> Ledger:
    ledger = Ledger(SETTINGS, BACKFILL, {}, counter(), ended=ended or [], tenants=tenants, tenancy=TenancySettings())
    for node_id, (cpus, memory) in NODES.items():
        ledger.report(Report(node_id, f"{node_id}:1", cpus, memory, []), T0)
    ledger.select(T0, evaluation=True)
    return ledger


def deadline(work: float, hours: float) -> dict:
    return {"kind": "deadline", "work_vcpu_hours": work, "deadline_s": T0 + hours * HOUR}


def sized_fill(ledger: Ledger, now: float) -> list:
    """The controller's goals job, then its launcher, at `now` (both run every interval)."""
    return ledger.size_goals(now) + ledger.fill(now)


def launched(effects, owner: str, role: str = "backfill") -> list:
    return [e.lease for e in effects if isinstance(e, Launch) and e.lease.owner == owner and e.lease.role == role]


def events(effects, kind: str) -> list:
    return [e for w in effects if isinstance(w, Write) for e in w.events if e.kind == kind]


def test_a_deadline_volunteers_meet_takes_every_volunteer_it_is_granted():
    """7 vCPU-hours in 2 hours (less the padding): 4 volunteers would do it, and it takes the 16
    it is granted (its PSF share is all of it: the built-in tenant's lower bound is 0)."""
    ledger = pool(science(deadline(7, 2)), TenantRecord("backfill", "batch"))
    effects = sized_fill(ledger, T0)
    assert len(launched(effects, "science")) == 16
    sizing = ledger.sizings["science"]
    assert sizing.on_track and sizing.dedicated_vcpus == 0 and sizing.volunteer_vcpus == 16
    assert "(4 would do)" in sizing.explain
    assert events(effects, "tenant.goal_on_track")
    assert not launched(effects, "science", "on_demand")


def test_dedicated_vms_wait_while_the_lower_bound_bought_later_would_still_meet_the_deadline():
    """No residual for science (others hold the pool): 6 vCPU-hours by 2 h are 1.5 h on its lower
    bound of 4 vCPUs, so it waits for volunteers; 7.8 by 2 h (1.95 h, the deadline padded by 2
    minutes) cannot wait 3 minutes."""
    ledger = crowded_then_goal(deadline(6, 2))
    effects = sized_fill(ledger, T0 + 1)
    assert not launched(effects, "science", "on_demand")
    assert ledger.sizings["science"].on_track and "waiting" in ledger.sizings["science"].explain
    ledger = crowded_then_goal(deadline(7.8, 2))
    dedicated = launched(sized_fill(ledger, T0 + 1), "science", "on_demand")
    assert len(dedicated) == 4 and ledger.sizings["science"].dedicated_vcpus == 4


def test_a_lower_bound_the_pool_cannot_place_now_waits_while_the_deadline_is_far():
    """Science's lower bound raised to 12 vCPUs while others' on-demand VMs hold 12 of the 16 and
    the built-in tenant's backfill the other 4: the pool can place 4 of science's now. Those 4
    alone cannot do 20 vCPU-hours by 4 h, but its 12, bought halfway there, still would (no other
    tenant's VM takes that room as the web VMs leave): it waits. 24 vCPU-hours cannot wait, and
    it buys the 4 it can."""
    for work, buys in ((20, 0), (24, 4)):
        ledger = crowded_then_goal(deadline(work, 4))
        ledger.set_tenants([science(deadline(work, 4), lower=(12, 6144))])
        dedicated = launched(sized_fill(ledger, T0 + 1), "science", "on_demand")
        sizing = ledger.sizings["science"]
        assert len(dedicated) == buys == sizing.dedicated_vcpus
        assert sizing.explain.startswith("waiting") == (buys == 0)
        if not buys:
            assert "the pool can place only 4" in sizing.explain and sizing.on_track


def test_a_deadline_residual_cannot_meet_gets_dedicated_vms_within_the_lower_bound_and_is_at_risk():
    ledger = crowded_then_goal(deadline(40, 2))
    first: list = []
    effects = sized_fill(ledger, T0 + 1)   # science's guarantee: dedicated VMs in the place of others' backfill
    dedicated = launched(effects, "science", "on_demand")
    assert len(dedicated) == 4 and all(l.request_id.startswith("goal-science-") for l in dedicated)
    sizing = ledger.sizings["science"]
    assert not sizing.on_track and sizing.dedicated_vcpus == 4
    [risk] = events(first + effects, "tenant.goal_at_risk")
    assert risk.detail["tenant"] == "science" and "at risk" in risk.detail["explain"]
    confirm(ledger, effects, T0 + 2 + GOAL_INTERVAL_S)
    again = sized_fill(ledger, T0 + 2 + 2 * GOAL_INTERVAL_S)
    assert not launched(again, "science", "on_demand")          # it holds its 4 already
    assert not events(again, "tenant.goal_at_risk")              # said once


def science_vms(ledger: Ledger, state: str | None = None) -> list:
    return [l for l in ledger.leases.values() if l.owner == "science" and (state is None or l.state == state)]


def test_a_job_done_releases_its_dedicated_vms_at_once():
    ledger = crowded_then_goal(deadline(40, 2))
    confirm(ledger, sized_fill(ledger, T0 + 1), T0 + 1)
    assert len([l for l in science_vms(ledger) if l.role == "on_demand"]) == 4
    ledger.progress.note("any", "science", 100, 100, 0.0, T0 + 90)   # its guests say the job is done
    effects = sized_fill(ledger, T0 + 2 + 2 * GOAL_INTERVAL_S)   # no second sizing waited for: not a dip
    stopping = [l for l in science_vms(ledger, "stopping") if l.role == "on_demand"]
    assert len(stopping) == 4 and ledger.sizings["science"].on_track and ledger.sizings["science"].done
    [done] = events(effects, "tenant.goal_done")
    assert done.detail["tenant"] == "science" and done.detail["progress"] == "100/100"
    # stored with the stops: one list of effects, whose Writes carry_out commits before any call
    [write] = [w for w in effects if isinstance(w, Write) and w.goals_done is not None]
    assert write.goals_done == ("science",)


def test_books_loaded_with_a_job_done_grant_that_tenant_nothing_until_a_new_goal():
    """After a restart the guests that said done are gone: the stored mark alone keeps the
    tenant's finished job from a new round of volunteers. A mark for a tenant without a goal
    (cleared meanwhile) stands for nothing."""
    goal = science(deadline(7, 2))
    ledger = Ledger(SETTINGS, BACKFILL, {}, counter(), tenants=[goal, TenantRecord("backfill", "batch"),
                                                                 TenantRecord("idle", "batch")],
                    tenancy=TenancySettings(), goals_done=["science", "idle", "gone"])
    assert ledger.goals_done() == {"science"} and ledger.sizings["science"].done
    for node_id, (cpus, memory) in NODES.items():
        ledger.report(Report(node_id, f"{node_id}:1", cpus, memory, []), T0)
    ledger.select(T0, evaluation=True)
    effects = sized_fill(ledger, T0)
    assert not launched(effects, "science") and len(launched(effects, "backfill")) == 16
    ledger.set_tenants([science(deadline(7, 3)), TenantRecord("backfill", "batch")])
    ledger.new_goal("science")
    assert ledger.goals_done() == set() and "science" not in ledger.sizings


def test_a_job_done_stops_its_volunteers_and_the_other_batch_tenant_takes_the_room():
    """RHIC releases a job's cluster when the job ends: idle volunteers would hold the pool's
    residual from the other batch tenants for as long as no on-demand VM needed it."""
    ledger = pool(science(deadline(7, 2)), TenantRecord("backfill", "batch"))
    confirm(ledger, sized_fill(ledger, T0), T0)
    assert len(science_vms(ledger, "running")) == 16
    ledger.progress.note(science_vms(ledger)[0].lease_id, "science", 100, 100, 0.0, T0 + 30)
    effects = sized_fill(ledger, T0 + GOAL_INTERVAL_S)
    assert len(science_vms(ledger, "stopping")) == 16
    assert all(l.end_reason == "its tenant's goal is done (100/100)" for l in science_vms(ledger))
    assert len(events(effects, "tenant.goal_done")) == 1
    confirm(ledger, effects, T0 + GOAL_INTERVAL_S)
    assert not science_vms(ledger)
    later = sized_fill(ledger, T0 + 3 * GOAL_INTERVAL_S)
    assert not launched(later, "science") and not events(later, "tenant.goal_done")   # said once
    assert len(launched(later, "backfill")) == 16


def test_a_new_goal_after_a_job_done_is_a_new_job():
    ledger = pool(science(deadline(7, 2)))
    confirm(ledger, sized_fill(ledger, T0), T0)
    ledger.progress.note(science_vms(ledger)[0].lease_id, "science", 100, 100, 0.0, T0 + 30)
    ledger.progress.sample("science", 16, T0 + 30)   # as a report's statements are read: kept past its VMs
    confirm(ledger, sized_fill(ledger, T0 + GOAL_INTERVAL_S), T0 + GOAL_INTERVAL_S)
    assert not science_vms(ledger) and ledger.goals_done() == {"science"}
    assert not [g for g in ledger.current_grants(T0 + 2 * GOAL_INTERVAL_S) if g.tenant == "science" and g.vms]
    ledger.set_tenants([science(deadline(7, 3))])   # as the service sets a goal: new_goal before sizing
    ledger.new_goal("science")
    effects = sized_fill(ledger, T0 + 2 * GOAL_INTERVAL_S)
    assert len(launched(effects, "science")) == 16 and not ledger.sizings["science"].done
    assert ledger.progress.progress("science") is None   # the old job's word is gone


def test_a_new_goal_mid_job_keeps_its_progress():
    ledger = pool(science(deadline(7, 2)))
    confirm(ledger, sized_fill(ledger, T0), T0)
    ledger.progress.note(science_vms(ledger)[0].lease_id, "science", 40, 100, 0.0, T0 + 30)
    sized_fill(ledger, T0 + GOAL_INTERVAL_S)
    ledger.set_tenants([science(deadline(7, 3))])
    ledger.new_goal("science")
    assert ledger.progress.progress("science").done == 40 and not science_vms(ledger, "stopping")


def test_a_tenant_without_a_goal_is_not_sized_and_a_removed_goal_drops_its_sizing():
    ledger = pool(science(deadline(7, 2)))
    sized_fill(ledger, T0)
    assert set(ledger.sizings) == {"science"}
    ledger.set_tenants([science(None)])
    assert ledger.sizings == {} and ledger.tenant_goals == {}


def test_goals_as_stored_parse_or_name_the_problem():
    assert goal_from_dict(deadline(8, 2)) == Deadline(8, T0 + 2 * HOUR)
    assert goal_from_dict({"kind": "least_cost", "work_vcpu_hours": 5, "price_per_dedicated_vcpu_hour": 1.0}) == \
        LeastCost(1.0, 5)
    for bad, field in (({"kind": "soon"}, "goal.kind"), ({"kind": "deadline", "work_vcpu_hours": 1}, "goal"),
                       ({"kind": "deadline", "work_vcpu_hours": -1, "deadline_s": 1}, "goal.work_vcpu_hours")):
        with pytest.raises(InvalidField) as err:
            goal_from_dict(bad)
        assert err.value.field == field


def held_by_science(ledger: Ledger) -> int:
    """vCPUs science holds: its backfill and its dedicated VMs (what its upper bound caps)."""
    return sum(l.vcpus for l in science_vms(ledger) if l.state not in ("stopping", "on_notice", "preempting"))


def test_dedicated_vms_never_take_a_batch_tenant_past_its_upper_bound():
    """Science's volunteers fill its upper bound (8 of the pool's 16 vCPUs; the built-in tenant's
    backfill holds 4, and 4 are free) when its sizing wants dedicated VMs: a residual forecast
    that reads lower than what the tenant holds must not buy dedicated VMs on the free room
    beside its volunteers, past the bound (PhoenixCloud: a batch tenant never holds more than
    its upper bound)."""
    others = TenantRecord("backfill", "batch", backfill='{"max_instances": 4}')
    ledger = pool(science(None, upper=(8, 8192)), others)
    confirm(ledger, sized_fill(ledger, T0), T0)
    assert held_by_science(ledger) == 8 and len(ledger.leases) == 12
    ledger.set_tenants([science(deadline(40, 2), upper=(8, 8192)), others])
    ledger._residual_for = lambda tenant, now: 4.0   # a forecast below the 8 volunteers it holds
    for step in range(1, 4):
        now = T0 + step * GOAL_INTERVAL_S
        confirm(ledger, sized_fill(ledger, now), now)
        assert ledger.sizings["science"].dedicated_vcpus == 4
        assert held_by_science(ledger) == 8, step   # its 8 volunteers, no dedicated VM beside them
        assert ledger.sizings["science"].explain.endswith(
            "; 4 of those dedicated vCPUs wait: its volunteers fill its upper bound (8 vCPUs, 8192 MiB)")


@pytest.mark.parametrize("upper_mib", [8192, 2048])
def test_a_dedicated_vm_may_take_the_place_of_the_tenants_own_volunteers(upper_mib):
    """The pool full (science's 8 volunteers at its upper bound, the built-in tenant's 8): its
    dedicated VMs preempt volunteers of its own, and it holds 8 still (4 of them dedicated).
    With 2048 MiB, its 8 volunteers of 256 MiB fill the bound's memory too: a victim on notice
    still holds its memory, and is not counted against the next dedicated VM."""
    ledger = pool(science(None, upper=(8, upper_mib)), TenantRecord("backfill", "batch"))
    confirm(ledger, sized_fill(ledger, T0), T0)
    assert sum(l.memory_mib for l in science_vms(ledger)) == 2048
    ledger.set_tenants([science(deadline(40, 2), upper=(8, upper_mib)), TenantRecord("backfill", "batch")])
    ledger._residual_for = lambda tenant, now: 0.0   # a forecast of no residual from now on
    confirm(ledger, sized_fill(ledger, T0 + GOAL_INTERVAL_S), T0 + GOAL_INTERVAL_S)
    assert len([l for l in science_vms(ledger, "running") if l.role == "on_demand"]) == 4
    assert held_by_science(ledger) == 8


@pytest.mark.parametrize("seed", range(6))
def test_whatever_the_forecast_says_a_goal_tenant_stays_within_its_upper_bound(seed):
    """A property: the residual forecast drawn at random each minute (0 to 16 vCPUs), volunteers
    of either tenant ending at random, the pool sometimes full and sometimes not: after every
    fill, science's volunteers and dedicated VMs fit its upper bound of 8 vCPUs and 2,048 MiB."""
    import random
    draw = random.Random(seed)
    others = TenantRecord("backfill", "batch", backfill='{"max_instances": 6}')
    ledger = pool(science(None, upper=(8, 2048)), others)
    confirm(ledger, sized_fill(ledger, T0), T0)
    ledger.set_tenants([science(deadline(40, 2), upper=(8, 2048)), others])
    ledger._residual_for = lambda tenant, now: float(draw.randint(0, 16))
    bought = 0
    for step in range(1, 31):
        now = T0 + step * GOAL_INTERVAL_S
        for lease in [l for l in ledger.leases.values() if l.role == "backfill" and l.state == "running"]:
            if draw.random() < 0.15:
                confirm(ledger, ledger.release(lease.lease_id, False, now)[1], now)
        effects = sized_fill(ledger, now)
        bought += len(launched(effects, "science", "on_demand"))
        confirm(ledger, effects, now)
        live = [l for l in science_vms(ledger) if l.state not in ("stopping", "on_notice", "preempting")]
        assert sum(l.vcpus for l in live) <= 8 and sum(l.memory_mib for l in live) <= 2048, step
    assert bought   # the forecast made it buy: the bound was tested, not idle


# -- the projected finish counts the on-demand VMs expected to leave (controller.core.departures)

def ended_on_demand(count: int, lived: float, first_end: float = T0 - 10_000) -> list[Lease]:
    """On-demand leases that ended 10 s apart (as the store gives them: the latest end first),
    each having lived `lived` seconds plus its index (so that each is told apart)."""
    leases = [Lease(f"old{i}", "on_demand", "n1", f"old-vm{i}", 2, 512, "tiny", "web", "ended", first_end + 9 * i - lived - 5,
                    launched_at=first_end + 9 * i - lived, ended_at=first_end + 10 * i) for i in range(count)]
    return sorted(leases, key=lambda l: -l.ended_at)


def test_the_books_keep_how_long_on_demand_vms_lived_and_not_dedicated_or_backfill_vms():
    ledger = crowded_then_goal(deadline(40, 2))
    web = sorted((l for l in ledger.leases.values() if l.owner == "web"), key=lambda l: l.lease_id)
    _lease, stops = ledger.release(web[0].lease_id, False, T0 + 600)
    confirm(ledger, stops, T0 + 610)
    assert list(ledger.on_demand_lives) == [(T0, T0 + 610)]   # launched at T0, its stop confirmed at T0 + 610
    confirm(ledger, sized_fill(ledger, T0 + 700), T0 + 700)          # science's dedicated VMs
    ledger.progress.note("any", "science", 100, 100, 0.0, T0 + 790)
    confirm(ledger, sized_fill(ledger, T0 + 800), T0 + 900)          # its job done: its dedicated VMs and volunteers stop
    assert not [l for l in ledger.leases.values() if l.owner == "science"]
    assert list(ledger.on_demand_lives) == [(T0, T0 + 610)]


def test_books_loaded_keep_the_newest_lives_and_forget_the_oldest_ends_first():
    ended = ended_on_demand(LIFETIMES_KEPT + 10, 3600)   # latest end first, as Store.recently_ended gives them
    ledger = pool(ended=ended)
    newest = sorted(ended, key=lambda l: l.ended_at)[10:]
    assert list(ledger.on_demand_lives) == [(l.launched_at, l.ended_at) for l in newest]
    assert next(iter(ledger.retired)) == "old-vm0"   # the oldest end is the first the bounded table drops


def sized(goal: dict, ended: list[Lease]):
    ledger = crowded_then_goal(goal, ended)
    effects = sized_fill(ledger, T0 + 1)
    return ledger, ledger.sizings["science"], effects


def launches(effects) -> list:
    return [e.lease for e in effects if isinstance(e, Launch)]


def test_the_projected_finish_counts_on_demand_vms_expected_to_leave_and_buys_as_if_none_do():
    """web's 12 vCPUs were launched at T0; every on-demand VM seen lived about 20 minutes. Without
    that history science waits for volunteers (5 vCPU-hours on its lower bound bought later would
    still do) and projects the deadline; with it, the same decision and explanation, and a finish
    projected from the 4 vCPUs it can reach once web's VMs are expected gone (by T0 + 30 min)."""
    _, flat, flat_effects = sized(deadline(5, 2), [])
    _, history, effects = sized(deadline(5, 2), ended_on_demand(MIN_LIFETIMES, 1200))
    assert (history.dedicated_vcpus, history.volunteer_vcpus, history.on_track) == \
        (flat.dedicated_vcpus, flat.volunteer_vcpus, flat.on_track)
    assert history.explain.startswith(flat.explain + "; ") and flat.explain.startswith("waiting")
    assert launches(effects) == launches(flat_effects)
    # the lives seen were 1200 to 1229 s: 2 of 30 ended by age 1201, so 12 x 2/30 vCPUs are
    # expected free 20 minutes on, all 12 at 30 (science reaches 4 of them)
    assert history.projected_finish_s == pytest.approx(T0 + 1 + 1800 + (5 * HOUR - 12 * 2 / 30 * 600) / 4)
    assert flat.projected_finish_s == T0 + 2 * HOUR - GOAL_PADDING_S   # the padded deadline
    assert "the pool's 12 on-demand vCPUs expected to leave" in history.explain
    assert "sized as if none leave" in history.explain and f"the last {MIN_LIFETIMES} on-demand VMs" in history.explain


def test_dedicated_vms_are_bought_as_if_no_on_demand_vm_leaves():
    _, flat, flat_effects = sized(deadline(7.8, 2), [])
    _, history, effects = sized(deadline(7.8, 2), ended_on_demand(MIN_LIFETIMES, 1200))
    assert flat.dedicated_vcpus == history.dedicated_vcpus == 4
    assert launches(effects) == launches(flat_effects) and len(launches(effects)) == 4
    assert history.explain.startswith(flat.explain)


def test_too_few_on_demand_lives_leave_the_projection_as_the_sizing_made_it():
    _, flat, _ = sized(deadline(5, 2), [])
    _, few, _ = sized(deadline(5, 2), ended_on_demand(MIN_LIFETIMES - 1, 1200))
    assert few == flat


def test_a_projection_that_cannot_be_made_leaves_the_sizing_and_the_fill_goes_on():
    """Lives the estimator refuses (one that ended before it began): never an error out of a fill."""
    ledger = crowded_then_goal(deadline(5, 2), ended_on_demand(MIN_LIFETIMES, 1200))
    ledger.on_demand_lives.append((T0, T0 - 1))
    sized_fill(ledger, T0 + 1)
    _, flat, _ = sized(deadline(5, 2), [])
    assert ledger.sizings["science"] == flat


def test_a_plan_to_buy_later_keeps_its_finish_when_departures_would_not_meet_the_deadline():
    """6 vCPU-hours: science waits, its lower bound bought later meeting the padded deadline. The
    4 vCPUs it can reach once web's VMs are gone would finish 2 minutes past it, so the plan's
    finish (buying later) stands, not the later one of volunteers alone."""
    _, flat, _ = sized(deadline(6, 2), [])
    _, history, _ = sized(deadline(6, 2), ended_on_demand(MIN_LIFETIMES, 1200))
    assert flat.explain.startswith("waiting") and history == flat


def test_a_least_cost_goal_projects_its_finish_and_cost_with_departures_and_buys_the_same():
    goal = {"kind": "least_cost", "work_vcpu_hours": 5, "price_per_dedicated_vcpu_hour": 1.0,
            "price_per_volunteer_vcpu_hour": 0.1}
    _, flat, flat_effects = sized(goal, [])
    _, history, effects = sized(goal, ended_on_demand(MIN_LIFETIMES, 1200))
    assert history.dedicated_vcpus == flat.dedicated_vcpus and launches(effects) == launches(flat_effects)
    assert history.projected_finish_s < flat.projected_finish_s and history.cost < flat.cost
    assert history.explain.startswith(flat.explain + "; ")


def test_a_fill_sizes_no_goal_the_goals_job_does():
    """The launcher's fill grants volunteers and sizes nothing (it runs right after dips: the
    controller sizes goals by a job of its own); size_goals sizes, and buys the dedicated VMs."""
    ledger = crowded_then_goal(deadline(7.8, 2))   # needs its 4 dedicated vCPUs at once (above)
    effects = ledger.fill(T0 + 1)
    assert "science" not in ledger.sizings and not launched(effects, "science", "on_demand")
    effects = ledger.size_goals(T0 + 1)
    assert ledger.sizings["science"].dedicated_vcpus == 4 and len(launched(effects, "science", "on_demand")) == 4


def test_dedicated_vms_go_only_when_sizings_a_goals_interval_apart_want_fewer():
    """A tenant holding 4 dedicated VMs whose goal then needs none: the sizing that first wants
    fewer keeps them (a dip of the residual at one sizing must not stop their jobs), and so does
    a second one at the same instant (an admin's change sized beside the goals job); the goals
    job an interval later releases them (they have run longer than any task: _dedicated_to keeps
    them that long, tested below)."""
    ledger = crowded_then_goal(deadline(40, 2))
    effects = sized_fill(ledger, T0 + 1)
    assert len(launched(effects, "science", "on_demand")) == 4
    confirm(ledger, effects, T0 + 2)
    ledger.set_tenants([science(deadline(0.5, 2))])   # the goal lightened: lower bound bought late still meets it
    now = T0 + 2 + MAX_TASK_S
    assert ledger.sizings["science"].dedicated_vcpus == 4
    first = ledger.size_goals(now)
    assert ledger.sizings["science"].dedicated_vcpus == 0 and not released(first)
    assert not released(ledger.size_goals(now))   # the same instant: still one sizing's word
    later = released(ledger.size_goals(now + GOAL_INTERVAL_S))
    assert len(later) == 4 and all(l.request_id.startswith("goal-science-") for l in later)


def released(effects) -> list:
    """science's dedicated VMs that `effects` stop."""
    return [e.lease for e in effects if isinstance(e, Stop) and e.lease.owner == "science" and e.lease.role == "on_demand"]


def bought_then_lightened(launch_times: list[float]) -> Ledger:
    """science holds 4 dedicated VMs launched at `launch_times`, then its goal needs none."""
    ledger = crowded_then_goal(deadline(40, 2))
    effects = sized_fill(ledger, T0 + 1)
    bought = launched(effects, "science", "on_demand")
    assert len(bought) == len(launch_times) == 4
    confirm(ledger, [e for e in effects if getattr(e, "lease", None) not in bought], T0 + 2)
    for lease, at in zip(sorted(bought, key=lambda l: l.lease_id), launch_times):
        confirm(ledger, [e for e in effects if getattr(e, "lease", None) is lease], at)
    ledger.set_tenants([science(deadline(0.5, 2))])
    return ledger


def test_no_dedicated_vm_goes_before_the_longest_task_while_no_task_is_said():
    """Guests say progress as tasks end: a dedicated VM stopped before its task ends loses the
    work in flight. Before any task is said the task's length is unknown, so one is kept up to
    MAX_TASK_S, and tenant show says why it holds more than the sizing wants."""
    ledger = bought_then_lightened([T0 + 2] * 4)
    assert not released(ledger.size_goals(T0 + 2 + GOAL_INTERVAL_S))   # the release clock starts
    for now in (T0 + 2 + 2 * GOAL_INTERVAL_S, T0 + MAX_TASK_S - GOAL_INTERVAL_S, T0 + MAX_TASK_S):
        assert not released(ledger.size_goals(now))
        assert "4 more dedicated vCPUs stay until each has run 1 h 00 min" in ledger.sizings["science"].explain
    assert len(released(ledger.size_goals(T0 + 2 + MAX_TASK_S))) == 4


def test_a_dedicated_vm_goes_once_it_has_run_its_tasks_and_older_ones_go_in_place_of_younger():
    """Its guests said the first task 600 s after the tenant first held vCPUs: a task is 600 s,
    and a dedicated VM stays HOLD_TASKS of them (`keep`). Of four VMs no longer wanted, the two
    that have run that long go at once; the two younger ones stay until they have (the youngest
    first, as always, once they are old enough)."""
    keep = HOLD_TASKS * 600
    assert 810 < keep <= 1308   # what the launch times below tell apart
    ledger = bought_then_lightened([T0 + 2, T0 + 2, T0 + 500, T0 + 900])
    lease_id = ledger._dedicated("science")[0].lease_id
    for at, done in ((T0, 0), (T0 + 600, 10)):
        ledger.progress.note(lease_id, "science", done, 1000, 0.0, at)
        ledger.progress.sample("science", 4, at)
    now = T0 + 1250
    ledger.size_goals(now)   # the first sizing that wants fewer: the release clock starts
    first = released(ledger.size_goals(now + GOAL_INTERVAL_S))
    assert sorted(l.launched_at for l in first) == [T0 + 2, T0 + 2]
    assert f"2 more dedicated vCPUs stay until each has run {_tasks(HOLD_TASKS)} of the job (10 min each" in \
        ledger.sizings["science"].explain
    for launched in (T0 + 500, T0 + 900):
        assert not released(ledger.size_goals(launched + keep - 50))
        assert [l.launched_at for l in released(ledger.size_goals(launched + keep))] == [launched]
    assert "stay until" not in ledger.sizings["science"].explain


# -- the projected finish is made at the measured rate, never above what the goal states ------------

def said(ledger: Ledger, samples: list[tuple[float, int]], total: int = 700, vcpus: int = 16) -> None:
    """science's guests say `done` of `total` at each (time, done), the samples saying it held
    `vcpus` (16, what it holds in these books, unless told)."""
    lease_id = science_vms(ledger)[0].lease_id
    for at, done in samples:
        ledger.progress.note(lease_id, "science", done, total, 0.0, at)
        ledger.progress.sample("science", vcpus, at)


@pytest.mark.parametrize("last_done, shown_rate", [(300, 100.0), (60, None)])
def test_a_projection_is_made_at_the_measured_rate_but_never_above_what_the_goal_states(last_done, shown_rate):
    """7 vCPU-hours stated for 700 units: 100 units per vCPU-hour. Progress first said 600 s after
    the volunteers began, so the rate counts their vCPU-time up to 600 s before the last word:
    300 units read as 281 per vCPU-hour (the tasks that ended just now counted against a quarter
    hour's vCPU-time), and the finish shown is made at 100, the decision at 281 as before; 60
    units read as 56, slower than stated, and the finish shown is made at 56. The 16 vCPUs held
    steady, so the finish is in waves of 600-s tasks (the report lag): the wave in flight ends at
    T0 + 1500 (a task after the last word), and each later one does 16 x 600 vCPU-seconds."""
    ledger = pool(science(deadline(7, 2)))
    confirm(ledger, sized_fill(ledger, T0), T0)
    said(ledger, [(T0 + 60, 0), (T0 + 660, last_done // 3), (T0 + 900, last_done)])
    now = T0 + 960
    effects = sized_fill(ledger, now)
    sizing = ledger.sizings["science"]
    measured = last_done / (16 * 240 / HOUR)
    rate = measured if shown_rate is None else shown_rate
    waves_after = math.ceil((700 - last_done) / rate * HOUR / (16 * 600)) - 1
    assert (sizing.dedicated_vcpus, sizing.volunteer_vcpus) == (0, 16) and not launched(effects, "science", "on_demand")
    assert sizing.projected_finish_s == T0 + 1500 + 600 * waves_after
    assert "in whole waves of its tasks (10 min each, as long as its first) on the 16 vCPUs it holds" in sizing.explain
    if shown_rate is None:   # slower than stated: made at the rate measured, said as it was
        assert waves_after == 4 and "projected at" not in sizing.explain
    else:
        assert waves_after == 1
        assert f"projected at 100 progress units per vCPU-hour, what its goal states (700 over 7 vCPU-hours), " \
               f"not the {measured:.4g} measured" in sizing.explain
        # the decision's own figure is the measured rate's (the deadline padded by half the 600-s
        # report lag, the five minutes' least)
        before = float(sizing.explain.split("finishing ")[1].split(" s before")[0])
        left = 700 - last_done
        assert before == pytest.approx(T0 + 2 * HOUR - 300 - (now + left / measured / 16 * HOUR), abs=1)


def test_a_tenant_whose_vcpus_are_rising_is_projected_on_the_residual_not_in_waves():
    """The samples say it held 8 vCPUs over the last 15 minutes; it holds 16 now, past 1.2 x that
    mean: capacity is still coming, so the finish is the fluid one on the residual at the
    projection's rate (100 units per vCPU-hour, as stated: 400 left over 16 vCPUs, 15 minutes),
    where the waves on 16 vCPUs would say T0 + 2100."""
    ledger = pool(science(deadline(7, 2)))
    confirm(ledger, sized_fill(ledger, T0), T0)
    said(ledger, [(T0 + 60, 0), (T0 + 660, 100), (T0 + 900, 300)], vcpus=8)
    now = T0 + 960
    sized_fill(ledger, now)
    sizing = ledger.sizings["science"]
    assert sizing.projected_finish_s == pytest.approx(now + 400 / 100 / 16 * HOUR)
    assert "whole waves" not in sizing.explain and "projected at 100 progress units" in sizing.explain


@pytest.mark.parametrize("done, measured", [(40, False), (60, True)])
def test_the_measured_rate_steers_the_sizing_only_once_a_twentieth_of_the_job_is_done(done, measured):
    """16 vCPU-hours stated for 1000 units by 3 h, on 16 volunteers. Its guests say `done` units
    for 10.4 vCPU-hours of its 16 volunteers (counted up to the 600-s report lag): a rate of 4 to
    6 units per vCPU-hour, against 62.5 stated. Below 5 % of the job (40 units), that reads the
    first volunteers' lost work as the job's pace: it is sized at the stated rate, met by its
    volunteers, and says so; from 5 % (60) on, at the measured one, which no dedicated capacity
    within its lower bound can meet."""
    ledger = pool(science(deadline(16, 3)))
    confirm(ledger, sized_fill(ledger, T0), T0)
    said(ledger, [(T0 + 60, 0), (T0 + 660, done // 2), (T0 + 3000, done)], total=1000)
    sized_fill(ledger, T0 + 3060)
    sizing = ledger.sizings["science"]
    if measured:
        assert not sizing.on_track and "so far" not in sizing.explain
    else:
        assert sizing.on_track and sizing.dedicated_vcpus == 0 and sizing.explain.startswith("met by volunteers alone")
        assert sizing.explain.endswith("sized at the rate its goal states until its guests say 5% of the job done "
                                       "(40/1000 so far)")


@pytest.mark.parametrize("lag, padding", [(300, 300), (600, 300), (1200, 600)])
def test_a_plan_to_buy_later_keeps_the_deadline_it_meets_whatever_the_rate(lag, padding):
    """Waiting for volunteers (its lower bound bought later meets the deadline): the finish shown
    is the plan's, the padded deadline, even when the measured rate reads above the goal's. The
    padding is half the first task said (the report lag), five minutes at least."""
    ledger = crowded_then_goal(deadline(6, 2))
    confirm(ledger, sized_fill(ledger, T0 + 1), T0 + 1)
    ledger.set_tenants([science(deadline(6, 2))])
    lease = next(l for l in ledger.leases.values() if l.role == "backfill")   # any lease: the word is filed by tenant
    for at, done in [(T0 + 60, 0), (T0 + 60 + lag, 10), (T0 + 300 + lag, 30)]:
        ledger.progress.note(lease.lease_id, "science", done, 600, 0.0, at)
        ledger.progress.sample("science", 4, at)
    sized_fill(ledger, T0 + 360 + lag)
    sizing = ledger.sizings["science"]
    assert sizing.buys_later and sizing.explain.startswith("waiting")
    assert sizing.projected_finish_s == T0 + 2 * HOUR - padding


def test_a_sizing_skipped_starts_the_release_clock_afresh():
    """Wanting fewer dedicated VMs, then not sized for an hour (backfill off pool-wide): the first
    sizing after that is one sizing's word again, not an hour's."""
    from dataclasses import replace
    ledger = crowded_then_goal(deadline(40, 2))
    effects = sized_fill(ledger, T0 + 1)
    confirm(ledger, effects, T0 + 2)
    ledger.set_tenants([science(deadline(0.5, 2))])
    now = T0 + 2 + GOAL_INTERVAL_S
    ledger.size_goals(now)   # wants fewer from now
    ledger.backfill = replace(ledger.backfill, enabled=False)
    ledger.size_goals(now + GOAL_INTERVAL_S)   # goals steer nothing: not sized
    ledger.backfill = replace(ledger.backfill, enabled=True)
    stops = [e for e in ledger.size_goals(now + HOUR) if isinstance(e, Stop) and e.lease.owner == "science"]
    assert not stops
    stops = [e for e in ledger.size_goals(now + HOUR + GOAL_INTERVAL_S) if isinstance(e, Stop)
             and e.lease.owner == "science"]
    assert len(stops) == 4


def test_a_deleted_tenants_progress_goes_with_it():
    """A tenant made again under a deleted one's name starts afresh: its progress and history
    go when the books' tenants no longer have it (the service and a replay alike)."""
    ledger = pool(science(deadline(7, 2)))
    confirm(ledger, sized_fill(ledger, T0), T0)
    said(ledger, [(T0 + 60, 0), (T0 + 660, 100)])
    assert ledger.progress.progress("science") is not None and ledger.progress.history("science")
    ledger.set_tenants([])
    ledger.set_tenants([science(deadline(7, 2))])
    assert ledger.progress.history("science") == ()


# -- the progress book outlives a restart ------------------------------------------------------------

def restarted(ledger: Ledger, saved) -> Ledger:
    """The books loaded again from what the store keeps (the live leases, the tenants, the progress
    book's snapshot as JSON), then each node's report showing its VMs."""
    leases = list(ledger.leases.values())
    again = Ledger(SETTINGS, BACKFILL, {}, counter(), leases, tenants=[science(deadline(0.5, 2))],
                   tenancy=TenancySettings(), goal_progress=None if saved is None else json.loads(json.dumps(saved)))
    for node_id, (cpus, memory) in NODES.items():
        vms = [Vm(l.vm_name, l.lease_id, l.role, l.vcpus, l.memory_mib, l.launched_at or T0)
               for l in leases if l.node_id == node_id and l.state == "running"]
        again.report(Report(node_id, f"{node_id}:1", cpus, memory, vms), T0 + 950)
    again.select(T0 + 950, evaluation=True)
    return again


@pytest.mark.parametrize("kept", [True, False])
def test_after_a_restart_the_task_length_said_before_still_keeps_dedicated_vms(kept):
    """The guests said their first task 600 s after the tenant first held vCPUs, then the
    controller restarted. With the progress book saved, the sizing still knows a task is 600 s:
    the two VMs that have run two go, the two younger stay. Begun afresh (kept False), its history
    starts mid-task: the first task said after the restart (50 s later) would read as a task of a
    minute and every VM would go, the work in flight on the younger ones lost."""
    ledger = bought_then_lightened([T0 + 2, T0 + 2, T0 + 500, T0 + 900])
    lease_id = ledger._dedicated("science")[0].lease_id
    for at, done in ((T0, 0), (T0 + 600, 10)):
        ledger.progress.note(lease_id, "science", done, 1000, 0.0, at)
        ledger.progress.sample("science", 4, at)
    again = restarted(ledger, ledger.progress.snapshot() if kept else None)
    assert again.progress.history("science") == (ledger.progress.history("science") if kept else ())
    for at, done in ((T0 + 1200, 10), (T0 + 1250, 12)):   # the guests speak again after the restart
        again.progress.note(lease_id, "science", done, 1000, 0.0, at)
        again.progress.sample("science", 4, at)
    now = T0 + 1250
    again.size_goals(now)   # the first sizing that wants fewer: the release clock starts
    first = sorted(l.launched_at for l in released(again.size_goals(now + GOAL_INTERVAL_S)))
    if kept:
        assert first == [T0 + 2, T0 + 2]
        assert f"{_tasks(HOLD_TASKS)} of the job (10 min" in again.sizings["science"].explain
    else:
        assert first == [T0 + 2, T0 + 2, T0 + 500, T0 + 900]


def test_a_progress_book_saved_reads_back_and_a_bad_entry_is_said_and_left_out_whole():
    """ProgressBook.snapshot through JSON restores each known tenant's last progress and history;
    an entry not read (not a table, DONE past TOTAL, samples out of order or out of bounds, too
    many) is named in unreadable_settings and leaves that tenant afresh, never half read; a
    tenant deleted meanwhile is dropped."""
    from controller.core.progress import ProgressBook
    book = ProgressBook(max_samples=4)
    for at, done in ((T0, 0), (T0 + 600, 10), (T0 + 1200, 20)):
        book.note("bf-1", "science", done, 1000, 0.0, at)
        book.sample("science", 4, at)
    saved = json.loads(json.dumps(book.snapshot()))
    assert saved == {"science": {"done": 20, "total": 1000,
                                 "history": [[T0, 0, 4], [T0 + 600, 10, 4], [T0 + 1200, 20, 4]]}}
    bad = {"not a table": 3, "past total": dict(done=5, total=4, history=[]),
           "out of order": dict(done=1, total=4, history=[[T0 + 1, 0, 1], [T0, 1, 1]]),
           "negative": dict(done=1, total=4, history=[[T0, -1, 1]]),
           "nan": dict(done=1, total=4, history=[[float("nan"), 1, 1]]),
           "too many": dict(done=1, total=4, history=[[T0 + i, 1, 1] for i in range(5)]),
           "sample past total": dict(done=1, total=4, history=[[T0, 9, 1]])}
    restored = ProgressBook(max_samples=4)
    problems = dict(restored.restore({**saved, **bad, "deleted": saved["science"]}, ["science", *bad]))
    assert set(problems) == set(bad), problems
    assert "history" in problems["out of order"] and "time order" in problems["out of order"]
    assert "at most 4" in problems["too many"] and "progress.done" in problems["past total"]
    assert restored.history("science") == book.history("science")
    assert restored.progress("science") == book.progress("science")
    assert all(restored.progress(t) is None and restored.history(t) == () for t in [*bad, "deleted"])
    assert restored.restore("[1, 2]", ["science"]) and restored.history("science") == book.history("science")
    ledger = Ledger(SETTINGS, BACKFILL, {}, counter(), tenants=[science(deadline(7, 2))], tenancy=TenancySettings(),
                    goal_progress={"science": bad["past total"]})
    assert [(t, what) for t, what, _why in ledger.unreadable_settings] == [("science", "goal_progress")]
    assert ledger.progress.history("science") == ()


def test_the_progress_books_version_moves_with_what_a_snapshot_shows():
    """The service saves the snapshot when the version moved since its last save: a report saying
    nothing new leaves it, a new DONE or a tenant forgotten moves it."""
    from controller.core.progress import ProgressBook
    book = ProgressBook()
    book.note("bf-1", "science", 1, 10, 0.0, T0)
    book.sample("science", 2, T0)
    version = book.version
    book.sample("science", 2, T0 + 5)
    assert book.version == version
    book.note("bf-1", "science", 2, 10, 0.0, T0 + 9)
    book.sample("science", 2, T0 + 9)
    assert book.version > version
    version = book.version
    book.forget_tenant("science")
    assert book.version > version and book.snapshot() == {}


def reports_saying(ledger: Ledger, said: dict[str, tuple[int, int]]) -> list[controller_pb2.NodeReport]:
    """Each node's report of every VM the books have there, running, with `said[owner]`'s
    progress from the guests of that owner's VMs (whatever their role)."""
    reports = []
    for node_id, (cpus, memory) in NODES.items():
        vms = [controller_pb2.ReportedVm(name=l.vm_name, lease_id=l.lease_id, role=l.role, state="running",
                                         vcpus=l.vcpus, memory_mib=l.memory_mib, launched_at=T0, image=l.image,
                                         progress_done=said.get(l.owner, (0, 0))[0],
                                         progress_total=said.get(l.owner, (0, 0))[1], progress_for_s=1.0)
               for l in ledger.leases.values() if l.node_id == node_id]
        reports.append(controller_pb2.NodeReport(node_id=node_id, agent_address=f"{node_id}:1", cpus=cpus,
                                                 memory_mib=memory, images=["tiny"], min_memory_mib=32,
                                                 agent_version="t", vms=vms))
    return reports


def test_a_goals_dedicated_vms_say_its_progress_and_other_on_demand_vms_say_nothing():
    """A job run on dedicated VMs alone (others hold the rest of the pool) is heard to progress and
    to end: its dedicated VMs' guests speak for their tenant as its volunteers' do. An on-demand
    VM's guest, even one saying the most there is, steers no tenant."""
    ledger = crowded_then_goal(deadline(40, 2))
    confirm(ledger, sized_fill(ledger, T0 + 1), T0 + 1)
    dedicated = [l for l in science_vms(ledger) if l.role == "on_demand"]
    assert len(dedicated) == 4 and not [l for l in science_vms(ledger) if l.role == "backfill"]
    for report in reports_saying(ledger, {"science": (12, 100), "web": (10**15, 10**15)}):
        ledger.report(report, T0 + 30)
    assert ledger.progress.progress("science") == Progress(12, 100)
    assert ledger.progress.history("science") == ((T0 + 30, 12, 4),)   # the 4 dedicated vCPUs it holds
    assert all(ledger.progress.statement(l.lease_id) is None for l in ledger.leases.values() if l.owner == "web")
    assert ledger.progress.progress("web") is None and ledger.progress.progress("default") is None
    for report in reports_saying(ledger, {"science": (100, 100)}):   # the dedicated guests say it is done
        ledger.report(report, T0 + 60)
    effects = sized_fill(ledger, T0 + 2 + 2 * GOAL_INTERVAL_S)
    assert ledger.sizings["science"].done and events(effects, "tenant.goal_done")
    assert len([l for l in science_vms(ledger, "stopping") if l.role == "on_demand"]) == 4


def test_the_last_wave_runs_on_dedicated_vms_though_volunteers_alone_would_meet_the_deadline():
    """700 units by 2 h (7 vCPU-hours stated); tasks of 600 s (the first said 600 s after its 4
    vCPUs began), so the deadline is padded by 300 s, to 6,900 s. At 6,000 s, 680 done at 113
    units per vCPU-hour measured (680 over 4 vCPUs for 5,400 s): 0.18 vCPU-hour left, two tasks,
    and volunteers alone meet the deadline. A task and a half before the padded deadline: no
    dedicated VM. Less than a task before it (6,310 s): two, though the 16 volunteers alone would
    finish in time, so that a volunteer preempted in the last wave does not cost a task there is
    no time to run again."""
    assert LAST_WAVE_TASKS == 1
    ledger = pool(science(deadline(7, 2)), TenantRecord("backfill", "batch"))
    confirm(ledger, sized_fill(ledger, T0), T0)
    said(ledger, [(T0, 0), (T0 + 600, 100), (T0 + 6000, 680)], total=700, vcpus=4)
    assert not launched(sized_fill(ledger, T0 + 6000), "science", "on_demand")
    assert ledger.sizings["science"].explain.startswith("met by volunteers alone")
    assert "last" not in ledger.sizings["science"].explain
    dedicated = launched(sized_fill(ledger, T0 + 6310), "science", "on_demand")
    sizing = ledger.sizings["science"]
    assert len(dedicated) == 2 == sizing.dedicated_vcpus and sizing.on_track
    assert sizing.explain.startswith("met by volunteers alone")
    assert "its last 2 tasks run on 2 dedicated vCPUs, one task (10 min) from the padded deadline" in sizing.explain
