"""The ledger with Balancer's reserves: reserved nodes get no backfill and their backfill gets
notice, a hinted reserve is drained by its start, a request with no room waits up to W, and a
restart queues the waiting requests again."""
from __future__ import annotations

import pytest

from controller.core.ledger import Ledger
from controller.core.records import Ask, Launch, RequestRecord, Stop, Write
from controller.core.records import BackfillConfig
from controller.core.reserves import plan_for_pool
from controller.core.reserve_settings import Hint, ReserveError, ReserveSettings

from .test_ledger import BACKFILL, SETTINGS, Report, counter

NODES = {"n1": (2, 1024), "n2": (2, 1024), "n3": (2, 1024)}
T0 = 1000.0


def ledger_with(reserves: ReserveSettings, backfill: BackfillConfig = BACKFILL, **kwargs) -> Ledger:
    ledger = Ledger(SETTINGS, backfill, {}, counter(), reserve_settings=reserves, **kwargs)
    for node_id, (cpus, memory) in NODES.items():
        ledger.report(Report(node_id, f"{node_id}:1", cpus, memory, []), T0)
    return ledger


def events(effects, kind: str) -> list:
    return [e for w in effects if isinstance(w, Write) for e in w.events if e.kind == kind]


def launched_nodes(effects) -> set[str]:
    return {e.lease.node_id for e in effects if isinstance(e, Launch)}


def confirm(ledger: Ledger, effects, now: float) -> None:
    """The agents do what they were asked: launches succeed, stops end clean."""
    for effect in effects:
        if isinstance(effect, Launch):
            ledger.launch_done(effect.lease.lease_id, True, "", now)
        elif isinstance(effect, Stop):
            ledger.stop_done(effect.lease.lease_id, "clean_shutdown", True, 1.0, "", now)


def backfill_on(ledger: Ledger) -> set[str]:
    return {l.node_id for l in ledger.leases.values() if l.role == "backfill"}


def test_without_reserves_every_node_gets_backfill():
    ledger = ledger_with(ReserveSettings())
    assert launched_nodes(ledger.fill(T0)) == set(NODES)
    assert not ledger.reserved_nodes


def test_a_static_reserve_keeps_its_nodes_free_of_backfill():
    ledger = ledger_with(ReserveSettings(static_nodes=1))
    effects = ledger.fill(T0)
    assert len(ledger.reserved_nodes) == 1
    assert launched_nodes(effects) == set(NODES) - ledger.reserved_nodes
    [changed] = events(effects, "reserve.changed")
    assert changed.detail["added"] == sorted(ledger.reserved_nodes) and changed.detail["target"]["static"] == 1


def test_a_reserved_nodes_backfill_gets_notice_and_its_work_counts_as_lost():
    ledger = ledger_with(ReserveSettings())
    confirm(ledger, ledger.fill(T0), T0 + 1)
    assert backfill_on(ledger) == set(NODES)
    ledger.set_reserve_settings(ReserveSettings(static_nodes=1))
    effects = ledger.fill(T0 + 100)
    [reserved] = ledger.reserved_nodes
    stops = [e for e in effects if isinstance(e, Stop)]
    assert stops and {s.lease.node_id for s in stops} == {reserved}
    assert all(s.lease.end_reason.startswith("reserved: ") for s in stops)
    assert not launched_nodes(effects)
    drained = []
    for stop in stops:
        drained += events(ledger.stop_done(stop.lease.lease_id, "clean_shutdown", True, 1.0, "", T0 + 102),
                          "vm.drained")
    assert len(drained) == len(stops) and all(e.detail["work_lost_vcpu_seconds"] > 0 for e in drained)
    assert reserved not in launched_nodes(ledger.fill(T0 + 103))   # freed room stays free
    assert reserved not in backfill_on(ledger)


def test_a_soft_reserve_gives_no_notice_and_takes_no_new_backfill():
    ledger = ledger_with(ReserveSettings())
    confirm(ledger, ledger.fill(T0), T0 + 1)
    assert backfill_on(ledger) == set(NODES)
    ledger.set_reserve_settings(ReserveSettings(static_nodes=1, drain=False))
    effects = ledger.fill(T0 + 100)
    [reserved] = ledger.reserved_nodes
    assert not [e for e in effects if isinstance(e, Stop)] and not events(effects, "vm.drained")
    assert reserved in backfill_on(ledger)   # what runs there keeps running ...
    for lease in [l for l in ledger.leases.values() if l.node_id == reserved]:
        confirm(ledger, ledger.release(lease.lease_id, True, T0 + 101)[1], T0 + 102)
    assert reserved not in launched_nodes(ledger.fill(T0 + 103))   # ... and its freed room stays free
    assert reserved not in backfill_on(ledger)


def test_a_soft_reserve_stays_on_its_nodes_while_others_come_free_and_across_a_restart():
    ledger = ledger_with(ReserveSettings())
    confirm(ledger, ledger.fill(T0), T0 + 1)
    soft = ReserveSettings(static_nodes=1, drain=False)
    ledger.set_reserve_settings(soft)
    [write] = [e for e in ledger.fill(T0 + 100) if isinstance(e, Write) and e.reserved is not None]
    [reserved] = ledger.reserved_nodes
    assert write.reserved == (reserved,)   # written with its reserve.changed event, for a restart
    other = next(n for n in NODES if n != reserved)
    lease = next(l for l in ledger.leases.values() if l.node_id == other)   # now the node with least backfill
    confirm(ledger, ledger.release(lease.lease_id, True, T0 + 101)[1], T0 + 102)
    effects = ledger.fill(T0 + 103)
    assert ledger.reserved_nodes == {reserved} and not events(effects, "reserve.changed")
    assert other in launched_nodes(effects)   # backfill refills the node that is not reserved
    # a restart keeps the reserve where it was, though a fresh choice would take `other` now
    lease = next(l for l in ledger.leases.values() if l.node_id == other)
    confirm(ledger, ledger.release(lease.lease_id, True, T0 + 150)[1], T0 + 151)
    assert plan_for_pool(soft, ledger.snapshot(T0 + 152))[1].nodes == (other,)
    again = ledger_with(soft, leases=list(ledger.leases.values()), reserved_nodes=[reserved])
    effects = again.fill(T0 + 200)
    assert again.reserved_nodes == {reserved} and not events(effects, "reserve.changed")


def test_a_soft_reserve_still_drains_for_a_live_hint():
    ledger = ledger_with(ReserveSettings(lead_seconds=120.0, drain=False))
    confirm(ledger, ledger.fill(T0), T0 + 1)
    ledger.add_hint(Hint(1, T0 + 1000, T0 + 4600, "exam"), T0 + 10)
    effects = ledger.fill(T0 + 1000 - 120)
    [reserved] = ledger.reserved_nodes
    stops = [e for e in effects if isinstance(e, Stop)]
    assert stops and {s.lease.node_id for s in stops} == {reserved}


def test_a_hinted_reserve_is_free_of_backfill_by_its_start():
    lead = 120.0
    ledger = ledger_with(ReserveSettings(lead_seconds=lead))
    confirm(ledger, ledger.fill(T0), T0 + 1)
    start = T0 + 1000
    write = ledger.add_hint(Hint(2, start, start + 3600, "exam"), T0 + 10)
    assert events([write], "reserve.hint")[0].detail["label"] == "exam"
    ledger.fill(start - lead - 1)
    assert not ledger.reserved_nodes   # not yet: it counts from start - lead
    effects = ledger.fill(start - lead)
    assert len(ledger.reserved_nodes) == 2
    confirm(ledger, effects, start - lead + 5)
    ledger.fill(start - lead + 6)
    assert not backfill_on(ledger) & ledger.reserved_nodes
    assert ledger.reserve_target(start).hinted == 2
    # Once the hint is over its nodes take backfill again.
    ledger.fill(start + 3600)
    assert not ledger.reserved_nodes


def test_a_hint_larger_than_the_pool_is_refused_naming_the_field():
    ledger = ledger_with(ReserveSettings())
    with pytest.raises(ReserveError) as error:
        ledger.add_hint(Hint(4, T0 + 100, T0 + 200), T0)
    assert error.value.field == "nodes" and not ledger.hints


def test_hints_can_be_cancelled_by_label():
    ledger = ledger_with(ReserveSettings())
    ledger.add_hint(Hint(1, T0 + 100, T0 + 200, "a"), T0)
    ledger.add_hint(Hint(1, T0 + 100, T0 + 200, "b"), T0)
    assert events([ledger.cancel_hints("a", T0)], "reserve.hint_cancelled")[0].detail["dropped"] == 1
    assert [h.label for h in ledger.hints] == ["b"]


NO_BACKFILL = BackfillConfig(enabled=False)


def fill_with_on_demand(ledger: Ledger) -> list[str]:
    leases = []
    for i, node_id in enumerate(NODES):
        effects = ledger.request(Ask(2, 512, "tiny", "alice", f"full{i}"), T0)
        confirm(ledger, effects, T0)
        leases += [e.lease.lease_id for e in effects if isinstance(e, Launch)]
    return leases


def test_a_request_with_no_room_waits_and_is_placed_when_room_frees():
    ledger = ledger_with(ReserveSettings(wait_seconds=60), NO_BACKFILL)
    leases = fill_with_on_demand(ledger)
    effects = ledger.request(Ask(2, 512, "tiny", "bob", "late"), T0 + 1)
    [queued] = events(effects, "request.queued")
    assert queued.detail["deadline"] == T0 + 61
    assert ledger.pending("late").outcome == "pending" and ledger.pending("late").path == "queued"
    assert "late" in ledger.waiting
    _lease, stop = ledger.release(leases[0], True, T0 + 10)
    confirm(ledger, stop, T0 + 11)
    effects = ledger.fill(T0 + 12)
    [placed] = events(effects, "request.placed")
    assert placed.detail["request_id"] == "late" and placed.detail["waited_s"] == 11
    assert [e for e in effects if isinstance(e, Launch)] and not ledger.waiting
    record = ledger.pending("late")
    assert record.lease_id and record.created_at == T0 + 1


def test_a_waiting_request_is_rejected_at_the_end_of_its_window():
    ledger = ledger_with(ReserveSettings(wait_seconds=60), NO_BACKFILL)
    fill_with_on_demand(ledger)
    ledger.request(Ask(2, 512, "tiny", "bob", "late"), T0 + 1)
    assert not events(ledger.tick(T0 + 30), "request.rejected")
    [rejected] = events(ledger.tick(T0 + 61), "request.rejected")
    assert rejected.detail["waited_s"] == 60 and "wait window" in rejected.detail["reason"]
    assert ledger.pending("late").outcome == "rejected" and not ledger.waiting


def test_a_cancelled_waiting_request_is_written_cancelled_and_never_placed():
    ledger = ledger_with(ReserveSettings(wait_seconds=60), NO_BACKFILL)
    leases = fill_with_on_demand(ledger)
    ledger.request(Ask(2, 512, "tiny", "bob", "late"), T0 + 1)
    effects = ledger.cancel_waiting("late", T0 + 5)
    [write] = effects
    assert [(r.request_id, r.outcome, r.reason) for r in write.requests] == \
        [("late", "cancelled", "cancelled after waiting 4 s for room")]
    [cancelled] = events(effects, "request.cancelled")
    assert cancelled.detail["waited_s"] == 4 and cancelled.detail["owner"] == "bob"
    assert not ledger.waiting and ledger.pending("late").outcome == "cancelled"
    _lease, stop = ledger.release(leases[0], True, T0 + 10)   # room frees: nothing takes it
    confirm(ledger, stop, T0 + 11)
    assert not events(ledger.fill(T0 + 12) + ledger.tick(T0 + 70), "request.placed")
    assert not any(r.lease_id for r in ledger.requests.values() if r.request_id == "late")
    # a request that is not waiting (answered, placed or unknown) is left as it is
    assert ledger.cancel_waiting("late", T0 + 80) == [] and ledger.cancel_waiting("full0", T0 + 80) == []
    assert ledger.cancel_waiting("nobody", T0 + 80) == [] and ledger.pending("full0").lease_id


def test_without_a_window_and_for_impossible_sizes_rejection_is_immediate():
    ledger = ledger_with(ReserveSettings(), NO_BACKFILL)
    fill_with_on_demand(ledger)
    assert events(ledger.request(Ask(2, 512, "tiny", "bob", "r1"), T0 + 1), "request.rejected")
    waiting = ledger_with(ReserveSettings(wait_seconds=60), NO_BACKFILL)
    assert events(waiting.request(Ask(4, 512, "tiny", "bob", "big"), T0 + 1), "request.rejected")
    assert events(waiting.request(Ask(1, 512, "nope", "bob", "img"), T0 + 1), "request.rejected")
    assert not waiting.waiting


def test_the_waiting_queue_is_bounded():
    ledger = ledger_with(ReserveSettings(wait_seconds=60, max_waiting=1), NO_BACKFILL)
    fill_with_on_demand(ledger)
    assert events(ledger.request(Ask(2, 512, "tiny", "bob", "a"), T0 + 1), "request.queued")
    assert events(ledger.request(Ask(2, 512, "tiny", "bob", "b"), T0 + 1), "request.rejected")


def test_a_restart_queues_the_waiting_requests_again_from_when_they_were_made():
    record = RequestRecord("late", 2, 512, "tiny", "bob", "pending", None, "", (), "no room", T0 + 1, 0.1, "queued")
    ledger = ledger_with(ReserveSettings(wait_seconds=60), NO_BACKFILL, requests=[record])
    assert ledger.waiting["late"][1] == T0 + 1
    fill_with_on_demand(ledger)
    [rejected] = events(ledger.tick(T0 + 61), "request.rejected")
    assert rejected.detail["request_id"] == "late"
    # ... and one that finds room after the restart is placed.
    again = ledger_with(ReserveSettings(wait_seconds=60), NO_BACKFILL, requests=[record])
    assert events(again.fill(T0 + 2), "request.placed")


def starting_backfill_everywhere() -> tuple[Ledger, list[Launch]]:
    """Every node's room taken by backfill VMs whose launches the agents have not answered yet:
    they cannot be preempted, and there is no wait window."""
    ledger = ledger_with(ReserveSettings())
    launches = [e for e in ledger.fill(T0) if isinstance(e, Launch)]
    assert {l.lease.node_id for l in launches} == set(NODES)
    assert all(l.lease.state == "starting" for l in launches)
    return ledger, launches


def test_a_request_held_up_only_by_starting_backfill_is_booked_at_once_and_waits_for_it():
    """Backfill is invisible to placement: room held by a backfill VM still starting is the
    request's at once (its lease booked, waiting), the starting VM is stopped as a victim once
    its launch is answered, and the on-demand VM launches when that stop is confirmed."""
    ledger, launches = starting_backfill_everywhere()
    effects = ledger.request(Ask(2, 512, "tiny", "bob", "r1"), T0 + 1)
    assert not events(effects, "request.rejected") and not events(effects, "request.queued")
    [placed] = events(effects, "request.placed")
    record = ledger.pending("r1")
    assert placed.detail["path"] == "after_victims" and len(record.victims) >= 1 and not ledger.waiting
    victims = [ledger.leases[v] for v in record.victims]
    assert all(v.state == "cancelling" and v.end_reason.startswith("preempted: ") for v in victims)
    [waiting] = [l for l in ledger.leases.values() if l.role == "on_demand"]
    assert waiting.state == "waiting" and {v.node_id for v in victims} == {waiting.node_id}
    assert not [e for e in effects if isinstance(e, Launch)]   # nothing launches beside the starting VMs
    for i, victim in enumerate(victims):   # each launch answered: stopped, as a preemption
        stop_effects = ledger.launch_done(victim.lease_id, True, "", T0 + 2)
        [stop] = [e for e in stop_effects if isinstance(e, Stop)]
        assert stop.lease.lease_id == victim.lease_id and ledger.leases[victim.lease_id].state == "preempting"
        done = ledger.stop_done(victim.lease_id, "clean_shutdown", True, 1.0, "", T0 + 3)
        assert events(done, "vm.preempted")
        launched = [e.lease.lease_id for e in done if isinstance(e, Launch)]
        assert launched == ([waiting.lease_id] if i == len(victims) - 1 else [])   # only once all are gone
    assert ledger.leases[waiting.lease_id].state == "starting"


def test_a_starting_victim_whose_launch_fails_lets_the_waiting_request_start():
    ledger, _launches = starting_backfill_everywhere()
    ledger.request(Ask(2, 512, "tiny", "bob", "r1"), T0 + 1)
    victim_ids = ledger.pending("r1").victims
    [waiting] = [l for l in ledger.leases.values() if l.role == "on_demand"]
    for i, victim_id in enumerate(victim_ids):
        effects = ledger.launch_done(victim_id, False, "no such image", T0 + 2)
        assert victim_id not in ledger.leases or ledger.leases[victim_id].state == "ended"
        launched = [e.lease.lease_id for e in effects if isinstance(e, Launch)]
        assert launched == ([waiting.lease_id] if i == len(victim_ids) - 1 else [])


def test_a_request_no_transit_could_make_room_for_is_still_rejected_at_once():
    ledger, _launches = starting_backfill_everywhere()
    assert events(ledger.request(Ask(2, 2048, "tiny", "bob", "huge"), T0 + 1), "request.rejected")
    full = ledger_with(ReserveSettings(), NO_BACKFILL)
    fill_with_on_demand(full)   # on-demand VMs, not backfill, hold the room
    assert events(full.request(Ask(1, 256, "tiny", "bob", "r2"), T0 + 1), "request.rejected")


def test_the_predictive_reserve_keeps_free_what_on_demand_used_in_the_same_slot_yesterday():
    from controller.core.reserve_settings import DAY, PredictiveMode
    ledger = ledger_with(ReserveSettings(predictive=PredictiveMode.DAY, slot_seconds=6 * 3600, lead_seconds=60))
    effects = ledger.request(Ask(2, 1024, "tiny", "alice", "busy1"), T0)
    effects += ledger.request(Ask(2, 1024, "tiny", "alice", "busy2"), T0)
    confirm(ledger, effects, T0)
    confirm(ledger, ledger.fill(T0 + 1), T0 + 1)          # samples 2 nodes of on-demand demand
    for lease in [l for l in ledger.leases.values() if l.role == "on_demand"]:
        confirm(ledger, ledger.release(lease.lease_id, True, T0 + 2)[1], T0 + 3)
    confirm(ledger, ledger.fill(T0 + 4), T0 + 5)          # and then none: backfill everywhere
    assert backfill_on(ledger) == set(NODES) and not ledger.reserved_nodes
    assert ledger.reserve_target(T0 + 4).predicted == 0   # no history of the day before yet
    effects = ledger.fill(T0 + DAY)                       # the same slot a day later
    assert ledger.reserve_target(T0 + DAY).predicted == 2 and len(ledger.reserved_nodes) == 2
    stops = {e.lease.node_id for e in effects if isinstance(e, Stop)}
    assert stops == set(ledger.reserved_nodes) and not launched_nodes(effects) & ledger.reserved_nodes
