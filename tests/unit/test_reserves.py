"""Balancer's reserves (controller/core/reserves.py): settings, hints, the predictive history,
the combined reserve, which nodes are kept free of backfill, and the wait window.

Properties: a hint is honoured by its start time whenever feasible (its nodes are free of
backfill at start_at, given a lead that covers a fill period and the drain); the predictive
reserve never exceeds the pool and equals the peak of a plain step-function model; the wait
window never lets a request wait past W.
"""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from controller.core.snapshot import NodeView, Pool, VmView
from controller.core.records import Size, VmRole
from controller.core.reserves import (BackfillVm, DemandHistory, NodeLoad, choose_reserved_nodes, hinted_nodes,
                                      late_hint_note, lead_warning, live_hints, may_wait, node_loads,
                                      on_demand_nodes, plan_for_pool, predicted_nodes, reserve_plan,
                                      reserve_target, validate_hint, wait_decision)
from controller.core.reserve_settings import (DAY, HOUR, MAX_HINTS, Hint, PredictiveMode, ReserveError,
                                              ReserveSettings, hint_in_hours)

NOW = 1_700_000_000.0   # 2023-11-14 22:13:20 UTC
MIDNIGHT = NOW - NOW % DAY


def error_field(call) -> str:
    with pytest.raises(ReserveError) as caught:
        call()
    return caught.value.field


# -- settings -------------------------------------------------------------------------------------

def test_gleanctl_and_the_api_offer_exactly_the_reserve_settings():
    import dataclasses
    from controller import checks
    from protos import controller_pb2
    fields = {f.name for f in dataclasses.fields(ReserveSettings)}
    assert set(checks.RESERVE_KEYS) == fields == {f.name for f in controller_pb2.SetReserveSettingsRequest.DESCRIPTOR.fields}


def test_counts_are_bounded_naming_the_field():
    assert error_field(lambda: ReserveSettings(static_nodes=99_999_999_999).validate()) == "static_nodes"
    assert error_field(lambda: ReserveSettings(max_waiting=5_000_000_000).validate()) == "max_waiting"
    assert ReserveSettings(static_nodes=1_000_000, max_waiting=1_000_000).validate()


def test_default_settings_are_valid_and_reject_at_once():
    s = ReserveSettings().validate()
    assert s.static_nodes == 0 and s.predictive is PredictiveMode.OFF and s.wait_seconds == 0
    assert s.slot_seconds == 6 * HOUR   # the paper's four 6-hour slots


@pytest.mark.parametrize("changes, field", [
    (dict(static_nodes=-1), "static_nodes"),
    (dict(static_nodes=1.5), "static_nodes"),
    (dict(static_nodes=True), "static_nodes"),
    (dict(predictive="daily"), "predictive"),
    (dict(slot_seconds=30), "slot_seconds"),
    (dict(slot_seconds=7 * HOUR), "slot_seconds"),
    (dict(slot_seconds=2 * DAY), "slot_seconds"),
    (dict(utc_offset_seconds=13 * HOUR), "utc_offset_seconds"),
    (dict(utc_offset_seconds=-13 * HOUR), "utc_offset_seconds"),
    (dict(wait_seconds=-1), "wait_seconds"),
    (dict(wait_seconds=math.inf), "wait_seconds"),
    (dict(wait_seconds=2 * DAY), "wait_seconds"),
    (dict(lead_seconds=-5), "lead_seconds"),
    (dict(lead_seconds=math.nan), "lead_seconds"),
    (dict(max_waiting=-1), "max_waiting"),
])
def test_each_bad_setting_is_refused_naming_its_field(changes, field):
    assert error_field(lambda: ReserveSettings(**changes).validate()) == field


def test_settings_round_trip_through_plain_values():
    s = ReserveSettings(static_nodes=12, predictive=PredictiveMode.WEEK, slot_seconds=HOUR, wait_seconds=300,
                        lead_seconds=900, utc_offset_seconds=-5 * HOUR)
    plain = s.as_dict()
    assert plain["predictive"] == "week"
    assert ReserveSettings.from_dict(plain) == s


def test_from_dict_refuses_unknown_keys_and_modes():
    assert error_field(lambda: ReserveSettings.from_dict({"static": 3})) == "static"
    with pytest.raises(ReserveError, match="off, day, week, month"):
        ReserveSettings.from_dict({"predictive": "hourly"})


def test_a_lead_shorter_than_fill_plus_drain_is_warned_about():
    assert lead_warning(ReserveSettings(lead_seconds=600), 300, 10, 60) is None
    warning = lead_warning(ReserveSettings(lead_seconds=300), 300, 10, 60)
    assert warning is not None and "lead_seconds 300" in warning


# -- hints ----------------------------------------------------------------------------------------

def test_a_hint_in_hours_starts_and_ends_where_the_admin_said():
    hint = hint_in_hours(4, 2, 3, NOW, label="beamline 7")
    assert hint == Hint(4, NOW + 2 * HOUR, NOW + 5 * HOUR, "beamline 7")
    assert validate_hint(hint, NOW, pool_nodes=10) is hint


@pytest.mark.parametrize("in_hours, for_hours, field", [
    (-1, 1, "in_hours"), (1, 0, "for_hours"), (1, -2, "for_hours"), (math.nan, 1, "in_hours"),
    (1, math.inf, "for_hours"),
])
def test_hint_in_hours_refuses_bad_hours(in_hours, for_hours, field):
    assert error_field(lambda: hint_in_hours(1, in_hours, for_hours, NOW)) == field


@pytest.mark.parametrize("hint, field", [
    (Hint(0, NOW + 60, NOW + 120), "nodes"),
    (Hint(-2, NOW + 60, NOW + 120), "nodes"),
    (Hint(True, NOW + 60, NOW + 120), "nodes"),
    (Hint(11, NOW + 60, NOW + 120), "nodes"),              # more than the pool
    (Hint(1, NOW - 1, NOW + 120), "start_at"),             # in the past
    (Hint(1, NOW + 60, NOW + 60), "until"),                # zero length
    (Hint(1, NOW + 60, NOW + 30), "until"),                # ends before it starts
    (Hint(1, math.nan, NOW + 30), "start_at"),
])
def test_each_bad_hint_is_refused_naming_its_field(hint, field):
    assert error_field(lambda: validate_hint(hint, NOW, pool_nodes=10)) == field


def test_hints_that_together_need_more_than_the_pool_are_refused():
    existing = [Hint(6, NOW + HOUR, NOW + 3 * HOUR)]
    assert validate_hint(Hint(4, NOW + 2 * HOUR, NOW + 4 * HOUR), NOW, 10, existing)
    with pytest.raises(ReserveError, match="11 nodes would be needed at once"):
        validate_hint(Hint(5, NOW + 2 * HOUR, NOW + 4 * HOUR), NOW, 10, existing)
    # the lead widens a hint: one that ends just before another starts still overlaps its drain
    assert validate_hint(Hint(5, NOW + 3 * HOUR, NOW + 4 * HOUR), NOW, 10, existing)
    assert error_field(lambda: validate_hint(Hint(5, NOW + 3 * HOUR, NOW + 4 * HOUR), NOW, 10, existing,
                                             lead_seconds=600)) == "nodes"


def test_the_number_of_live_hints_is_bounded():
    existing = [Hint(1, NOW + i, NOW + DAY) for i in range(MAX_HINTS)]
    assert error_field(lambda: validate_hint(Hint(1, NOW, NOW + 1), NOW, MAX_HINTS * 2, existing)) == "hints"
    over = [Hint(1, NOW - 10, NOW - 1)] * MAX_HINTS    # ended hints do not count
    assert validate_hint(Hint(1, NOW, NOW + 1), NOW, 10, over)


def test_a_hint_given_less_than_the_lead_ahead_is_accepted_with_a_warning():
    assert late_hint_note(Hint(1, NOW + 600, NOW + HOUR), NOW, 600) is None
    note = late_hint_note(Hint(1, NOW + 120, NOW + HOUR), NOW, 600)
    assert note is not None and "starts in 120 s" in note


def test_a_hint_counts_from_its_start_less_the_lead_until_its_end():
    hints = [Hint(3, NOW + 1000, NOW + 2000), Hint(2, NOW + 1500, NOW + 3000)]
    assert hinted_nodes(hints, NOW, lead_seconds=600) == 0
    assert hinted_nodes(hints, NOW + 399, lead_seconds=600) == 0
    assert hinted_nodes(hints, NOW + 400, lead_seconds=600) == 3
    assert hinted_nodes(hints, NOW + 900, lead_seconds=600) == 5
    assert hinted_nodes(hints, NOW + 2000, lead_seconds=600) == 2   # the first one is over
    assert hinted_nodes(hints, NOW + 3000, lead_seconds=600) == 0
    assert live_hints(hints, NOW + 2000) == (hints[1],)


# -- the predictive history -----------------------------------------------------------------------

def test_a_slot_keeps_the_peak_of_its_samples_and_the_level_carried_into_it():
    h = DemandHistory(slot_seconds=HOUR)
    k = h.slot_of(MIDNIGHT)
    h.record(MIDNIGHT + 10, 2)
    h.record(MIDNIGHT + 20, 7)
    h.record(MIDNIGHT + 30, 1)
    assert h.peak(k) == 7
    h.record(MIDNIGHT + 3 * HOUR + 5, 4)
    assert h.peak(k + 1) == h.peak(k + 2) == 1          # the level held through slots without samples
    assert h.peak(k + 3) == 4                          # max(level at its start 1, sample 4)
    assert h.peak(k + 50) == 4                         # after the last sample its level holds
    assert h.peak(k - 1) is None                       # before the first sample nothing is known


def test_late_samples_raise_a_kept_peak_and_too_old_ones_are_ignored():
    h = DemandHistory(slot_seconds=HOUR)
    k = h.slot_of(MIDNIGHT)
    h.record(MIDNIGHT, 1)
    h.record(MIDNIGHT + 2 * HOUR, 1)
    h.record(MIDNIGHT + 30, 9)                          # late, its slot still kept
    assert h.peak(k) == 9 and h.last_value == 1
    h.record(MIDNIGHT + 40 * DAY, 1)
    h.record(MIDNIGHT + 50, 20)                          # older than the ring keeps: dropped
    assert h.peak(k) is None and all(peak == 1 for _, peak in h.snapshot()["peaks"])


def test_the_history_has_a_fixed_size_whatever_the_sampling():
    h = DemandHistory(slot_seconds=HOUR)
    assert h.size == 31 * 24 + 1
    for i in range(10_000):
        h.record(NOW + i * 600, i % 13)
    assert len(h.snapshot()["peaks"]) <= h.size and len(h._peak) == h.size


@pytest.mark.parametrize("nodes", [-1, math.nan, math.inf, "3", True])
def test_bad_demand_samples_are_refused(nodes):
    assert error_field(lambda: DemandHistory().record(NOW, nodes)) == "nodes"


def test_a_snapshot_rebuilds_the_same_history():
    h = DemandHistory(slot_seconds=HOUR)
    for i in range(100):
        h.record(NOW + i * 900, (i * 7) % 5)
    again = DemandHistory.from_snapshot(h.snapshot())
    assert again.snapshot() == h.snapshot()
    assert DemandHistory.from_snapshot(DemandHistory().snapshot()).peak(0) is None
    for k in range(h.slot_of(NOW) - 5, h.slot_of(NOW) + 40):
        assert again.peak(k) == h.peak(k)


def history_with(peaks_by_day: dict[int, float], hour: int, slot: int = HOUR) -> DemandHistory:
    """Demand `peaks_by_day[d]` during hour `hour` of day d before today (0 otherwise)."""
    h = DemandHistory(slot_seconds=slot)
    for day in sorted(peaks_by_day, reverse=True):
        start = MIDNIGHT - day * DAY + hour * HOUR
        h.record(start, peaks_by_day[day])
        h.record(start + HOUR, 0)
    return h


@pytest.mark.parametrize("mode, expected", [
    (PredictiveMode.OFF, 0), (PredictiveMode.DAY, 2), (PredictiveMode.WEEK, 5), (PredictiveMode.MONTH, 9),
])
def test_the_predicted_reserve_is_the_slots_peak_over_the_last_day_week_or_month(mode, expected):
    h = history_with({1: 2, 6: 5, 20: 9, 40: 30}, hour=10)
    assert predicted_nodes(h, mode, MIDNIGHT + 10 * HOUR + 60, lead_seconds=0, pool_nodes=100) == expected


def test_the_next_slot_counts_within_the_lead_and_the_pool_caps_it():
    h = history_with({1: 6}, hour=10)
    at = MIDNIGHT + 9 * HOUR + 45 * 60                  # 09:45: the 10:00 slot is 15 minutes away
    assert predicted_nodes(h, PredictiveMode.DAY, at, lead_seconds=600, pool_nodes=100) == 0
    assert predicted_nodes(h, PredictiveMode.DAY, at, lead_seconds=900, pool_nodes=100) == 6
    assert predicted_nodes(h, PredictiveMode.DAY, at, lead_seconds=900, pool_nodes=4) == 4
    assert predicted_nodes(None, PredictiveMode.DAY, at, 900, 100) == 0


def test_fractional_demand_rounds_up_to_whole_nodes():
    h = history_with({1: 2.2}, hour=3)
    assert predicted_nodes(h, PredictiveMode.DAY, MIDNIGHT + 3 * HOUR, 0, 100) == 3


def test_slots_follow_the_configured_local_time_of_day():
    utc = DemandHistory(slot_seconds=6 * HOUR)
    local = DemandHistory(slot_seconds=6 * HOUR, utc_offset_seconds=-5 * HOUR)
    assert utc.slot_of(MIDNIGHT + 4 * HOUR) % 4 == 0          # 04:00 UTC: the night slot
    assert local.slot_of(MIDNIGHT + 4 * HOUR) % 4 == 3        # 23:00 the day before, local time


# -- the combined reserve -------------------------------------------------------------------------

def test_static_and_predicted_take_the_larger_and_hints_add_idle_nodes():
    h = history_with({1: 4}, hour=10)
    s = ReserveSettings(static_nodes=3, predictive=PredictiveMode.DAY, lead_seconds=600)
    at = MIDNIGHT + 10 * HOUR
    hints = [Hint(2, at + 300, at + HOUR)]
    target = reserve_target(s, at, 20, hints, h)
    assert (target.static, target.predicted, target.hinted, target.nodes, target.idle) == (3, 4, 2, 6, 2)
    assert not target.capped and "2 of them idle" in target.explain()
    assert reserve_target(s, at - HOUR, 20, hints, h).nodes == 3       # before the hint's lead, 09:00 slot
    capped = reserve_target(s, at, 5, hints, h)
    assert capped.nodes == 5 and capped.capped and "capped at the 5 up nodes" in capped.explain()
    assert reserve_target(ReserveSettings(), at, 20).nodes == 0


def test_with_every_policy_off_nothing_is_reserved_whatever_on_demand_uses():
    nodes = [NodeLoad(f"n{i}", on_demand_share=0.5) for i in range(4)]
    nodes.append(NodeLoad("bf", backfill=(BackfillVm("v", 1),)))
    target, reserved = reserve_plan(ReserveSettings(), NOW, nodes)
    assert target.nodes == 0 and reserved == choose_reserved_nodes(nodes, 0) and reserved.nodes == ()


# -- which nodes ----------------------------------------------------------------------------------

def loads() -> list[NodeLoad]:
    return [
        NodeLoad("busy", backfill=(BackfillVm("b1", 500.0), BackfillVm("b2", 10.0))),
        NodeLoad("young", backfill=(BackfillVm("y1", 20.0), BackfillVm("y0", 0.0, "starting"))),
        NodeLoad("empty-b"),
        NodeLoad("empty-a"),
        NodeLoad("od", on_demand_share=0.5),
        NodeLoad("leaving", backfill=(BackfillVm("l1", 900.0, "stopping"),)),
        NodeLoad("down", up=False),
    ]


def test_nodes_without_backfill_go_first_then_draining_then_the_least_work_lost():
    order = choose_reserved_nodes(loads(), 6).nodes
    assert order == ("od", "empty-a", "empty-b", "leaving", "young", "busy")


def test_only_running_backfill_on_reserved_nodes_is_given_notice():
    assert choose_reserved_nodes(loads(), 3).notices == ()
    plan = choose_reserved_nodes(loads(), 5)
    assert plan.notices == ("y1",)                 # y0 still starts: its notice comes once it runs
    assert choose_reserved_nodes(loads(), 6).notices == ("y1", "b1", "b2")


def test_down_nodes_are_never_reserved_and_a_shortfall_is_said():
    plan = choose_reserved_nodes(loads(), 9)
    assert "down" not in plan.nodes and len(plan.nodes) == 6 and plan.short == 3
    assert choose_reserved_nodes(loads(), 0) == choose_reserved_nodes([], 0)


@given(st.lists(st.tuples(st.floats(0, 1), st.lists(st.tuples(st.floats(0, 1e6), st.sampled_from(
    ["starting", "running", "stopping"])), max_size=3)), max_size=12), st.integers(0, 14), st.randoms())
def test_the_choice_is_deterministic_and_never_skips_a_cheaper_node(raw, count, rng):
    nodes = [NodeLoad(f"n{i}", True, share, tuple(BackfillVm(f"v{i}.{j}", w, s) for j, (w, s) in enumerate(vms)))
             for i, (share, vms) in enumerate(raw)]
    plan = choose_reserved_nodes(nodes, count)
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    assert choose_reserved_nodes(shuffled, count) == plan
    assert len(plan.nodes) == min(count, len(nodes))
    left_out = [n for n in nodes if n.node_id not in plan.nodes]
    free_left = any(not any(vm.stays for vm in n.backfill) for n in left_out)
    for chosen in (n for n in nodes if n.node_id in plan.nodes):
        if any(vm.stays for vm in chosen.backfill):
            assert not free_left


def test_node_loads_read_the_pool_as_the_ledger_keeps_it():
    now = NOW
    pool = Pool.of([NodeView("a", Size(8, 8192)), NodeView("b", Size(8, 8192), up=False)], [
        VmView("od1", "a", VmRole.ON_DEMAND, Size(2, 4096), now - 50),
        VmView("bf1", "a", VmRole.BACKFILL, Size(1, 512), now - 100),
        VmView("bf2", "a", VmRole.BACKFILL, Size(1, 512), now - 5, preemptible=False),
    ], now)
    a, b = node_loads(pool)
    assert a.on_demand_share == 0.5 and not b.up and b.backfill == ()
    assert a.backfill == (BackfillVm("bf1", 100.0, "running"), BackfillVm("bf2", 5.0, "stopping"))
    states = {"bf1": "running", "bf2": "starting"}
    assert node_loads(pool, states.__getitem__)[0].backfill[1].state == "starting"
    assert on_demand_nodes(pool) == 0.5


def test_hinted_nodes_stay_idle_beside_what_on_demand_uses():
    full = [NodeLoad(f"od{i}", on_demand_share=1.0) for i in range(3)]
    empty = [NodeLoad(f"e{i}") for i in range(3)]
    busy = [NodeLoad(f"b{i}", backfill=(BackfillVm(f"v{i}", 10.0 * i),)) for i in range(3)]
    nodes = full + empty + busy
    # static 2 is met by on-demand's own nodes; the 2 hinted ones come on top, idle
    target, reserved = reserve_plan(ReserveSettings(static_nodes=2), NOW, nodes, [Hint(2, NOW + 60, NOW + HOUR)])
    assert (target.nodes, target.idle) == (4, 2)
    assert reserved.nodes == ("od0", "od1", "od2", "e0", "e1") and reserved.idle == 2 and reserved.notices == ()
    # more than the empty nodes: the backfill that loses the least work is given notice
    target, reserved = reserve_plan(ReserveSettings(), NOW, nodes, [Hint(5, NOW, NOW + HOUR)])
    assert reserved.nodes[-2:] == ("b0", "b1") and reserved.notices == ("v0", "v1") and reserved.idle == 5


def test_half_used_nodes_count_half_towards_the_idle_part():
    nodes = [NodeLoad(f"h{i}", on_demand_share=0.5) for i in range(6)] + [NodeLoad("e")]
    reserved = choose_reserved_nodes(nodes, 2, idle=2)
    assert reserved.nodes == ("h0", "h1", "h2", "h3") and reserved.idle == 2
    assert choose_reserved_nodes(nodes, 3, idle=0).nodes == ("h0", "h1", "h2")


def test_an_idle_part_the_pool_cannot_hold_takes_every_up_node():
    reserved = choose_reserved_nodes([NodeLoad("a", on_demand_share=0.9), NodeLoad("b", up=False)], 1, idle=1)
    assert reserved.nodes == ("a",) and reserved.short == 0 and reserved.idle == pytest.approx(0.1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.lists(st.tuples(st.floats(0, 5000), st.booleans()),
                                                                     max_size=3)), max_size=10),
       st.integers(0, 12), st.integers(0, 4))
def test_plan_for_pool_reads_vms_lazily_but_decides_as_reserve_plan(raw, static, hinted):
    """plan_for_pool skips the VM lists while nodes without backfill suffice; the answer is the
    one reserve_plan gives over every node's full load."""
    nodes, vms = [], []
    for i, (up, on_demand_gib, backfill) in enumerate(raw):
        nodes.append(NodeView(f"n{i}", Size(8, 4096), up=up))
        if on_demand_gib:
            vms.append(VmView(f"od{i}", f"n{i}", VmRole.ON_DEMAND, Size(1, 1024 * on_demand_gib), NOW - 10))
        vms += [VmView(f"bf{i}.{j}", f"n{i}", VmRole.BACKFILL, Size(1, 256), NOW - age, preemptible)
                for j, (age, preemptible) in enumerate(backfill)]
    pool = Pool.of(nodes, vms, NOW)
    s = ReserveSettings(static_nodes=static)
    hints = [Hint(hinted, NOW + 60, NOW + HOUR)] if hinted else []
    assert plan_for_pool(s, pool, hints) == reserve_plan(s, NOW, node_loads(pool), hints)


def pool_of(backfill_counts: dict[str, int], on_demand_gib: dict[str, int] | None = None,
            down: tuple[str, ...] = ()) -> Pool:
    """Nodes of 8 vCPUs and 4 GiB with so many 256-MiB backfill VMs (and on-demand GiB) each."""
    nodes = [NodeView(n, Size(8, 4096), up=n not in down) for n in backfill_counts]
    vms = [VmView(f"bf-{n}-{j}", n, VmRole.BACKFILL, Size(1, 256), NOW - 100) for n, k in backfill_counts.items()
           for j in range(k)]
    vms += [VmView(f"od-{n}", n, VmRole.ON_DEMAND, Size(1, 1024 * gib), NOW - 10)
            for n, gib in (on_demand_gib or {}).items()]
    return Pool.of(nodes, vms, NOW)


SOFT = ReserveSettings(static_nodes=2, drain=False)


def test_a_soft_reserve_takes_the_nodes_with_the_least_backfill_and_gives_no_notice():
    target, chosen = plan_for_pool(SOFT, pool_of({"a": 3, "b": 1, "c": 2, "d": 1}, {"d": 2}))
    assert chosen.nodes == ("d", "b") and chosen.notices == () and target.nodes == 2   # d: on-demand beside


def test_a_soft_reserve_keeps_its_nodes_while_they_come_free():
    # b and c were chosen when they had the least backfill; now a has less, but the reserve
    # stays where it is (moving it would start coming free elsewhere all over again)
    pool = pool_of({"a": 1, "b": 3, "c": 2, "d": 4})
    assert plan_for_pool(SOFT, pool, kept={"b", "c"})[1].nodes == ("c", "b")
    # a kept node gone down is replaced by the cheapest other; a larger target adds the cheapest
    assert plan_for_pool(SOFT, pool_of({"a": 1, "b": 3, "c": 2, "d": 4}, down=("b",)), kept={"b", "c"})[1].nodes \
        == ("c", "a")
    assert plan_for_pool(ReserveSettings(static_nodes=3, drain=False), pool, kept={"b", "c"})[1].nodes == ("c", "b", "a")
    # a smaller target keeps the kept node soonest free
    assert plan_for_pool(ReserveSettings(static_nodes=1, drain=False), pool, kept={"b", "c"})[1].nodes == ("c",)


def test_a_soft_reserve_takes_a_node_free_of_backfill_before_its_own():
    # a node with no backfill is free now: nothing is lost by moving there
    pool = pool_of({"a": 0, "b": 3, "c": 2, "d": 4})
    assert plan_for_pool(SOFT, pool, kept={"b", "c"})[1].nodes == ("a", "c")


def test_a_soft_reserve_drains_while_a_hint_counts_and_not_before():
    pool = pool_of({"a": 3, "b": 1, "c": 2})
    hint = Hint(1, NOW + 60, NOW + HOUR)   # within lead_seconds of its start: it counts
    assert plan_for_pool(SOFT, pool, [hint], kept={"a"}) == reserve_plan(SOFT, NOW, node_loads(pool), [hint])
    assert plan_for_pool(SOFT, pool, [hint])[1].notices   # the hinted node's backfill gets notice
    later = Hint(1, NOW + 6 * DAY, NOW + 7 * DAY)   # days away: the reserve stays soft, and where it was
    target, chosen = plan_for_pool(SOFT, pool, [later], kept={"a", "c"})
    assert target.hinted == 0 and chosen.nodes == ("c", "a") and chosen.notices == ()


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 4), min_size=1),
       st.sets(st.sampled_from("abcdefgh")), st.sets(st.sampled_from("abcdefgh")), st.integers(0, 9))
def test_a_soft_reserve_takes_free_nodes_then_its_own_and_never_exceeds_the_up_nodes(counts, kept, down, static):
    pool = pool_of(counts, down=tuple(down))
    up = {n for n in counts if n not in down}
    target, chosen = plan_for_pool(ReserveSettings(static_nodes=static, drain=False), pool, kept=kept)
    assert set(chosen.nodes) <= up and len(set(chosen.nodes)) == len(chosen.nodes) and chosen.notices == ()
    assert len(chosen.nodes) == min(target.nodes, len(up)) and chosen.short == target.nodes - len(chosen.nodes)
    taken, free = set(chosen.nodes), {n for n in up if not counts[n]}
    if taken - free:          # a node with backfill only once every node free of it is taken ...
        assert free <= taken
    if taken - free - kept:   # ... and one the reserve did not hold only once every node it held is
        assert kept & up <= taken


# -- the wait window ------------------------------------------------------------------------------

def test_without_a_window_an_unplaceable_request_is_rejected_at_once():
    decision = wait_decision(NOW, NOW, placeable=False, wait_seconds=0, cause="no node can host 64 vCPUs")
    assert decision.action == "reject"
    assert decision.reason == "no room within the wait window of 0 s: no node can host 64 vCPUs"
    assert wait_decision(NOW, NOW, placeable=True, wait_seconds=0).action == "place"


def test_a_request_waits_inside_its_window_and_is_rejected_at_its_end():
    assert wait_decision(NOW, NOW + 10, False, 300) == wait_decision(NOW, NOW + 10, False, 300)
    assert wait_decision(NOW, NOW + 10, False, 300).action == "wait"
    assert wait_decision(NOW, NOW + 10, False, 300).deadline == NOW + 300
    assert wait_decision(NOW, NOW + 299, True, 300).action == "place"
    assert wait_decision(NOW, NOW + 300, True, 300).action == "place"
    end = wait_decision(NOW, NOW + 300, False, 300)
    assert end.action == "reject" and end.reason == "no room within the wait window of 300 s"
    late = wait_decision(NOW, NOW + 301, True, 300)     # a check that comes late never places
    assert late.action == "reject"


def test_the_waiting_queue_is_bounded():
    s = ReserveSettings(wait_seconds=60, max_waiting=2)
    assert may_wait(1, s) is None
    assert "at most 2" in may_wait(2, s)
    assert may_wait(0, ReserveSettings()) == "no room within the wait window of 0 s"


# -- properties -----------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_hint_is_honoured_by_its_start_whenever_feasible(data):
    """A model of the ledger's fill: every fill period the reserve plan is taken, the running
    backfill on reserved nodes is given notice (gone `drain` s later), and an adversarial launcher
    puts a new backfill VM on every node not reserved. Feasible: the hint comes at least a lead
    before its start, the lead covers a fill period plus the drain, and the pool holds the
    reserve. Then at start_at every reserved node is free of backfill, and they are enough."""
    count = data.draw(st.integers(1, 10), "nodes")
    lead = 600.0
    period = data.draw(st.floats(30, 300), "fill period")
    drain = data.draw(st.floats(0, lead - period), "drain")
    shares = data.draw(st.lists(st.sampled_from([0.0, 0.0, 0.25, 1.0]), min_size=count, max_size=count))
    static = data.draw(st.integers(0, count), "static")
    room = min(count - static, math.floor(sum(1 - share for share in shares) + 1e-9))
    if room < 1:
        return   # no hint fits beside the static reserve and on-demand's use: infeasible
    hinted = data.draw(st.integers(1, room), "hint nodes")
    start_at = NOW + data.draw(st.floats(lead, 3 * lead), "start in")
    hint = validate_hint(Hint(hinted, start_at, start_at + HOUR), NOW, count, lead_seconds=lead)
    s = ReserveSettings(static_nodes=static, lead_seconds=lead)
    vms: dict[str, list[dict]] = {f"n{i}": [dict(id=f"n{i}.0", at=NOW - 100 * i, state="running", gone=math.inf)]
                                  for i in range(count) if data.draw(st.booleans())}
    serial = 0
    reserved: tuple[str, ...] = ()
    t = NOW
    while t <= start_at:
        for node in vms:
            vms[node] = [vm for vm in vms[node] if vm["gone"] > t]
        loads_now = [NodeLoad(f"n{i}", True, shares[i], tuple(BackfillVm(vm["id"], t - vm["at"], vm["state"])
                                                             for vm in vms.get(f"n{i}", ())))
                     for i in range(count)]
        target, plan = reserve_plan(s, t, loads_now, [hint])
        reserved = plan.nodes
        for node in vms:
            for vm in vms[node]:
                if vm["id"] in plan.notices:
                    vm.update(state="stopping", gone=t + drain)
        for i in range(count):   # where backfill could go (room beside on-demand) and none stays
            if f"n{i}" not in reserved and shares[i] < 1 and \
                    not any(vm["state"] == "running" for vm in vms.get(f"n{i}", ())):
                serial += 1
                vms.setdefault(f"n{i}", []).append(dict(id=f"new{serial}", at=t, state="running", gone=math.inf))
        t += period
    assert len(reserved) >= static + hinted
    idle = sum(1 - shares[int(node[1:])] for node in reserved)
    assert idle >= hinted - 1e-9, "the hinted nodes are not idle beside on-demand's use"
    still = {node for node, node_vms in vms.items() if any(vm["gone"] > start_at for vm in node_vms)}
    assert not still & set(reserved), f"backfill still runs at the hint's start on {sorted(still & set(reserved))}"


def step_peak(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The peak of the demand step function over [start, end): the level at start, and every
    sample inside; None before the first sample."""
    before = [v for t, v in samples if t <= start]
    inside = [v for t, v in samples if start < t < end]
    values = ([before[-1]] if before else []) + inside
    return max(values) if values else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 40 * DAY), st.floats(0, 50)), min_size=1, max_size=40),
       st.sampled_from(list(PredictiveMode)), st.sampled_from([HOUR, 3 * HOUR, 6 * HOUR]),
       st.floats(0, DAY), st.floats(0, 2 * HOUR), st.integers(0, 60))
def test_the_predicted_reserve_is_the_slots_peak_and_never_exceeds_the_pool(raw, mode, slot, after, lead, pool):
    samples = sorted((NOW + t, v) for t, v in raw)
    history = DemandHistory(slot_seconds=slot)
    for t, v in samples:
        history.record(t, v)
    now = samples[-1][0] + after
    got = predicted_nodes(history, mode, now, lead, pool)
    assert 0 <= got <= pool
    days = {PredictiveMode.OFF: 0, PredictiveMode.DAY: 1, PredictiveMode.WEEK: 7, PredictiveMode.MONTH: 30}[mode]
    peaks = []
    for at in (now, now + lead):
        slot_start = math.floor(at / slot) * slot
        for day in range(1, days + 1):
            peaks.append(step_peak(samples, slot_start - day * DAY, slot_start - day * DAY + slot))
    expected = max((p for p in peaks if p is not None), default=0.0)
    assert got == min(math.ceil(expected - 1e-9), pool)
    s = ReserveSettings(static_nodes=min(pool, 3), predictive=mode, lead_seconds=lead, slot_seconds=slot)
    target = reserve_target(s, now, pool, [Hint(pool + 1, now, now + 1)], history)
    assert target.nodes <= pool and target.idle <= pool


@settings(max_examples=300)
@given(st.floats(0, 600), st.lists(st.tuples(st.floats(0, 1200), st.booleans()), max_size=30))
def test_the_window_never_lets_a_request_wait_past_w(window, checks):
    """A request queued at NOW is asked again at increasing times, room coming and going; it
    is only ever waiting or placed within its window, and it is answered once."""
    answered = None
    for offset, placeable in [(0.0, False)] + sorted(checks):
        now = NOW + offset
        decision = wait_decision(NOW, now, placeable, window)
        assert decision.deadline == NOW + window
        if decision.action in ("wait", "place"):
            assert now <= NOW + window
        if decision.action == "wait":
            assert now < NOW + window
        else:
            answered = decision
            break
    if window == 0:
        assert answered is not None and answered.action == "reject"


def test_hinted_nodes_are_the_sum_of_the_hints_counting_now():
    rng = random.Random(7)
    hints = [Hint(rng.randint(1, 5), NOW + rng.uniform(0, 5000), 0) for _ in range(20)]
    hints = [Hint(h.nodes, h.start_at, h.start_at + rng.uniform(1, 3000)) for h in hints]
    for t in range(0, 9000, 250):
        now = NOW + t
        assert hinted_nodes(hints, now, 600) == sum(h.nodes for h in hints if h.start_at - 600 <= now < h.until)
