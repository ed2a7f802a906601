"""Tenants' stages under what a review found: a stored setting that no longer parses does not
stop the books, a dedicated VM no goal steers is released, a lower bound that is not whole VMs
or a pool without room is not asked past every interval, the built-in batch tenant takes no goal,
a tenant being drained gets nothing more, and a tenant's own dedicated VMs do not make it buy
capacity its residual already counts."""
from __future__ import annotations

import json

from controller.core.goal_sizing import GOAL_INTERVAL_S as INTERVAL
from controller.core.ledger import Ledger
from controller.core.records import Ask, Launch, TenantRecord as TR
from controller.core.reserve_settings import ReserveSettings

from .test_goal_sizing_ledger import T0, deadline, events, pool, sized_fill
from .test_ledger import BACKFILL, SETTINGS, counter
from .test_ledger_reserves import confirm


def science(lower=(4, 2048), vcpus=1, goal=deadline(40, 2), enabled=True) -> TR:
    return TR("science", "batch", *lower, 16, 16384, backfill=json.dumps({"vcpus": vcpus, "memory_mb": 256,
                                                                           "enabled": enabled}),
              goal=json.dumps(goal) if goal else None)


def guarantee_held_by_others(**kwargs) -> Ledger:
    """Others' on-demand VMs hold 12 of 16 vCPUs and the built-in tenant's backfill the other 4,
    science's guarantee among them; then science's backfill and goal are switched on: its residual
    is nothing, its dedicated VMs take its guarantee back from that backfill."""
    ledger = crowded(science(enabled=False, **kwargs))
    intervals(ledger, 1)
    ledger.set_tenants([science(**kwargs)])
    return ledger


def crowded(record: TR, web=((2, 6),), *others: TR) -> Ledger:
    """The pool with others' on-demand VMs: (vCPUs, how many); the built-in batch tenant's backfill
    takes the rest unless `others` say otherwise."""
    ledger = pool(record, *others)
    for vcpus, count in web:
        for i in range(count):
            confirm(ledger, ledger.request(Ask(vcpus, 512, "tiny", "web", f"w{vcpus}-{i}"), T0), T0)
    return ledger


def intervals(ledger: Ledger, count: int = 5) -> list:
    out = []
    for k in range(count):
        effects = sized_fill(ledger, T0 + 1 + k * INTERVAL)
        confirm(ledger, effects, T0 + 1 + k * INTERVAL)
        out += effects
    return out


def dedicated(ledger: Ledger, states=("running",)) -> list:
    return [l for l in ledger.leases.values() if l.request_id.startswith("goal-") and l.state in states]


def test_stored_settings_that_no_longer_parse_do_not_stop_the_books_and_are_said():
    ledger = Ledger(SETTINGS, BACKFILL, {}, counter(), tenants=[
        TR("s", "batch", 4, 2048, 16, 16384, goal='{"kind": "deadline"}', backfill="[not json")])
    assert ledger.tenant_goals == {} and ledger.tenant_backfill["s"] == {}
    assert {(t, what) for t, what, _ in ledger.unreadable_settings} == {("s", "goal"), ("s", "backfill")}


def test_clearing_a_goal_releases_its_dedicated_vms():
    ledger = guarantee_held_by_others()
    intervals(ledger, 1)
    assert dedicated(ledger)
    ledger.set_tenants([science(goal=None)])
    intervals(ledger, 1)
    assert not dedicated(ledger)


def test_a_lower_bound_not_whole_vms_is_not_asked_past_every_interval():
    ledger = guarantee_held_by_others(lower=(3, 2048), vcpus=2)
    assert not events(intervals(ledger), "request.rejected")
    assert len(dedicated(ledger)) == 1   # one 2-vCPU VM fits its 3 vCPUs


def test_goal_requests_waiting_for_room_are_not_asked_again_every_interval():
    ledger = crowded(science(vcpus=2), web=((3, 4),))
    ledger.set_reserve_settings(ReserveSettings(wait_seconds=3600))
    intervals(ledger)
    assert len([r for r in ledger.waiting if r.startswith("goal-")]) <= 1
    assert not events(intervals(ledger, 2), "request.rejected")


def test_the_built_in_batch_tenant_takes_no_goal():
    ledger = crowded(TR("backfill", "batch", 4, 2048, 0, 0, goal=json.dumps(deadline(40, 2))))
    assert "backfill" not in ledger.tenant_goals and ledger.unreadable_settings
    assert not events(intervals(ledger, 2), "request.rejected")


def test_a_batch_tenant_being_drained_is_granted_nothing_more():
    ledger = guarantee_held_by_others()
    intervals(ledger, 1)
    ledger.draining.add("science")
    for lease in [l for l in ledger.leases.values() if l.owner == "science" and l.state == "running"]:
        confirm(ledger, ledger.release(lease.lease_id, False, T0 + 2)[1], T0 + 2)
    effects = sized_fill(ledger, T0 + 3 + INTERVAL)
    assert not [e for e in effects if isinstance(e, Launch) and e.lease.owner == "science"]


def test_its_own_dedicated_vms_do_not_make_it_buy_what_its_residual_counts():
    """16 vCPUs, 8 held by others' on-demand VMs, no other backfill: science can have 8 vCPUs
    whatever it buys, so it buys no dedicated capacity for a deadline 8 vCPUs cannot meet."""
    ledger = crowded(science(lower=(8, 4096)), ((2, 4),), TR("backfill", "batch", backfill='{"enabled": false}'))
    intervals(ledger, 3)
    assert not dedicated(ledger, ("running", "starting", "waiting"))
    assert not ledger.sizings["science"].on_track
