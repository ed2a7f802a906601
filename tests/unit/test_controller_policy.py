"""The controller's pure decisions: placement, victims, backfill plans, volunteer selection."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from controller.core.snapshot import IDLE, NodeView, Pool, VmView, allocated, is_victim
from controller.core.policy import Place, Preempt, Reject, _victim_cost, choose_victims, place_on_demand
from controller.core.backfill_plan import backfill_room, plan_backfill
from controller.core.records import BackfillConfig, Policy, Size, VmRole
from controller.core.selection import moving_average, potential_productivity, select_volunteers

NOW = 1_000_000.0


def node(node_id: str, vcpus: int = 4, memory: int = 4096, **kw) -> NodeView:
    return NodeView(node_id, Size(vcpus, memory), **kw)


def vm(vm_id: str, node_id: str, role: VmRole = VmRole.BACKFILL, vcpus: int = 1, memory: int = 512,
       age: float = 100.0) -> VmView:
    return VmView(vm_id, node_id, role, Size(vcpus, memory), NOW - age)


# -- examples ------------------------------------------------------------------------------------

def test_free_room_is_used_before_any_backfill_vm_is_touched():
    pool = Pool.of((node("a"), node("b", vcpus=2)), (vm("x", "a", vcpus=4),), NOW)
    assert place_on_demand(pool, Size(2, 1024)) == Place("b")


def test_best_fit_among_nodes_with_room():
    pool = Pool.of((node("big", vcpus=8), node("small", vcpus=2)), (), NOW)
    assert place_on_demand(pool, Size(2, 512)) == Place("small")
    assert place_on_demand(pool, Size(3, 512)) == Place("big")


def test_most_recent_stops_the_youngest_backfill_vm():
    pool = Pool.of((node("a", vcpus=3),), (vm("old", "a", age=500), vm("young", "a", age=5),
                                         vm("mid", "a", age=50)), NOW)
    decision = place_on_demand(pool, Size(1, 256))
    assert decision == Preempt("a", ("young",), 5.0)


def test_most_recent_prefers_the_node_whose_victims_are_youngest():
    pool = Pool.of((node("a", vcpus=1), node("b", vcpus=1)), (vm("va", "a", age=60), vm("vb", "b", age=6)), NOW)
    assert place_on_demand(pool, Size(1, 256)).node_id == "b"


def test_idle_first_prefers_idle_victims_then_the_shortest_busy_spell():
    busy_young = dataclasses.replace(vm("young", "a", age=10), busy_since=NOW - 10)
    idle_old = dataclasses.replace(vm("old", "b", age=1000), busy_since=IDLE)
    pool = Pool.of((node("a", vcpus=1), node("b", vcpus=1)), (busy_young, idle_old), NOW)
    assert place_on_demand(pool, Size(1, 256), Policy.MOST_RECENT).node_id == "a"
    assert place_on_demand(pool, Size(1, 256), Policy.IDLE_FIRST) == Preempt("b", ("old",), 1000.0)
    # the old VM busy again for the last 30 s: the young one's 10-s spell is the shorter
    long_lived = dataclasses.replace(idle_old, busy_since=NOW - 30)
    pool = Pool.of((node("a", vcpus=1), node("b", vcpus=1)), (busy_young, long_lived), NOW)
    assert place_on_demand(pool, Size(1, 256), Policy.IDLE_FIRST).node_id == "a"
    unknown = dataclasses.replace(idle_old, busy_since=None)   # no CPU figure: busy since its launch
    pool = Pool.of((node("a", vcpus=1), node("b", vcpus=1)), (busy_young, unknown), NOW)
    assert place_on_demand(pool, Size(1, 256), Policy.IDLE_FIRST).node_id == "a"


def test_least_loss_takes_one_big_victim_over_two_small_ones():
    pool = Pool.of((node("a", vcpus=5),), (vm("s1", "a", age=1), vm("s2", "a", age=1), vm("big", "a", vcpus=2, age=900),
                                        vm("s3", "a", age=1000)), NOW)
    assert place_on_demand(pool, Size(2, 256), Policy.LEAST_LOSS).victims == ("big",)
    assert set(place_on_demand(pool, Size(2, 256), Policy.MOST_RECENT).victims) == {"s1", "s2"}


def test_impossible_request_is_rejected_with_the_reason():
    pool = Pool.of((node("a", vcpus=4),), (vm("fg", "a", VmRole.ON_DEMAND, vcpus=3), vm("bf", "a")), NOW)
    decision = place_on_demand(pool, Size(2, 256))
    assert isinstance(decision, Reject)
    assert "1 vCPUs" in decision.reason and "2 vCPUs" in decision.reason


def test_nodes_that_are_down_are_never_chosen():
    pool = Pool.of((node("a", up=False), node("b", vcpus=1)), (), NOW)
    assert place_on_demand(pool, Size(2, 256)) == Reject(place_on_demand(pool, Size(2, 256)).reason, "no_room")
    assert place_on_demand(pool, Size(1, 256)) == Place("b")
    none_up = place_on_demand(Pool.of((node("a", up=False),), (), NOW), Size(1, 1))
    assert "no node is up" in none_up.reason and none_up.code == "no_node_up"


def test_every_rejection_says_why_in_a_word_metrics_can_count():
    assert place_on_demand(Pool.of((), (), NOW), Size(1, 1)).code == "no_nodes"
    assert place_on_demand(Pool.of((node("a"),), (), NOW), Size(0, 1)).code == "invalid_size"
    assert place_on_demand(Pool.of((node("a"),), (), NOW), Size(5, 1)).code == "no_room"


def test_any_is_random_but_repeatable_for_a_seed():
    vms = tuple(vm(f"v{i}", "a", age=i) for i in range(8))
    pool = Pool.of((node("a", vcpus=8),), vms, NOW)
    picks = {place_on_demand(pool, Size(1, 256), Policy.ANY, seed=s).victims for s in range(20)}
    assert len(picks) > 1
    assert place_on_demand(pool, Size(1, 256), Policy.ANY, 7) == place_on_demand(pool, Size(1, 256), Policy.ANY, 7)


def test_backfill_fills_room_and_respects_reserves_and_max_instances():
    config = BackfillConfig(enabled=True, vcpus=1, memory_mb=512)
    pool = Pool.of((node("a", vcpus=4, reserve=Size(1, 0)), node("b", vcpus=2, backfill_excluded=True),
                 node("c", vcpus=2)), (vm("fg", "c", VmRole.ON_DEMAND),), NOW)
    assert plan_backfill(pool, config).launches == ("a", "a", "a", "c")
    assert plan_backfill(pool, BackfillConfig(enabled=True, max_instances=2, memory_mb=512)).launches == ("a", "a")
    assert plan_backfill(pool, BackfillConfig(enabled=False)).launches == ()
    assert plan_backfill(pool, config, targets=["c", "a"], cpu_room={"a": 1.4}).launches == ("c", "a")
    assert plan_backfill(pool, config, targets=["a"], cpu_room={"a": 1.5}).launches == ("a", "a")


def test_backfill_recycles_vms_past_their_duration():
    config = BackfillConfig(enabled=True, duration_seconds=60, memory_mb=512)
    pool = Pool.of((node("a", vcpus=2),), (vm("old", "a", age=61), vm("new", "a", age=1)), NOW)
    assert plan_backfill(pool, config).recycles == ("old",)


def test_moving_average_ignores_missing_samples():
    samples = np.array([[1.0, 2.0, 3.0, 4.0], [np.nan, np.nan, 2.0, np.nan], [np.nan] * 4])
    assert moving_average(samples, 2).tolist() == [3.5, 2.0, 0.0]
    assert moving_average(samples, 0).tolist() == [2.5, 2.0, 0.0]


def test_potential_productivity_is_the_tighter_of_cpu_and_memory():
    p = potential_productivity(np.array([4.0, 4.0, 4.0]), np.array([1.0, 3.5, 5.0]),
                               np.array([4096, 4096, 300]), 1024)
    assert p.tolist() == [3.0, 0.5, 0.0]
    assert potential_productivity(np.array([8.0]), np.array([0.0]), np.array([2048]), 1024).tolist() == [2.0]


def test_selection_is_greedy_by_p_and_swaps_only_beyond_the_threshold():
    ids = ["a", "b", "c", "d"]
    p = np.array([1.0, 3.0, 2.0, 0.0])
    assert select_volunteers(ids, p, (), 2, 0.5).chosen == ("b", "c")
    # "a" is used; "c" is better by 1.0 > 0.5: swapped. With threshold 1.5 it stays.
    assert select_volunteers(ids, p, ("b", "a"), 2, 0.5).swaps == (("a", "c"),)
    assert select_volunteers(ids, p, ("b", "a"), 2, 1.5).chosen == ("b", "a")
    # during churn the previous choice stands, less nodes that are gone
    assert select_volunteers(["a", "c"], np.array([1.0, 2.0]), ("b", "a"), 2, 0.5, churn_deferred=True).chosen \
        == ("a",)


# -- properties ----------------------------------------------------------------------------------

@st.composite
def pools(draw):
    count = draw(st.integers(1, 4))
    nodes = [node(f"n{i}", draw(st.integers(1, 8)), draw(st.integers(256, 8192)),
                  up=draw(st.booleans()) or i == 0) for i in range(count)]
    vms = []
    for n in nodes:
        used = Size(0, 0)
        for j in range(draw(st.integers(0, 6))):
            size = Size(draw(st.integers(1, 3)), draw(st.integers(64, 2048)))
            if not (used + size).fits_in(n.capacity):
                break
            used += size
            role = draw(st.sampled_from(list(VmRole)))
            # now and then a backfill VM starting or stopping (not preemptible now)
            vms.append(VmView(f"{n.node_id}-v{j}", n.node_id, role, size, NOW - draw(st.floats(0, 10_000)),
                              preemptible=draw(st.integers(0, 5)) > 0))
    want = Size(draw(st.integers(1, 8)), draw(st.integers(64, 8192)))
    return Pool.of(tuple(nodes), tuple(vms), NOW), want


def free_after_backfill(pool: Pool) -> dict[str, Size]:
    """Each up node's room with every backfill VM gone (starting and stopping ones too), summed
    here by hand (independently of the policy's own sums and helpers)."""
    room = {}
    for n in pool.nodes:
        if not n.up:
            continue
        vcpus, memory = n.capacity.vcpus, n.capacity.memory_mib
        for v in pool.vms:
            if v.node_id == n.node_id and v.role is not VmRole.BACKFILL:
                vcpus, memory = vcpus - v.size.vcpus, memory - v.size.memory_mib
        room[n.node_id] = Size(vcpus, memory)
    return room


@st.composite
def crowded_pools(draw):
    """Pools whose nodes are mostly full of preemptible backfill, and a request that needs
    some of it stopped on at least one up node: the cases where preemption is decided."""
    nodes, vms = [], []
    for i in range(draw(st.integers(1, 4))):
        n = node(f"n{i}", draw(st.integers(2, 8)), draw(st.integers(1024, 8192)), up=draw(st.booleans()) or i == 0)
        nodes.append(n)
        used = Size(0, 0)
        for j in range(draw(st.integers(1, 8))):
            role = draw(st.sampled_from([VmRole.BACKFILL] * 4 + [VmRole.ON_DEMAND]))
            size = Size(draw(st.integers(1, 2)), draw(st.integers(64, n.capacity.memory_mib // 3)))
            if not (used + size).fits_in(n.capacity):
                break
            used += size
            vms.append(VmView(f"{n.node_id}-v{j}", n.node_id, role, size, NOW - draw(st.floats(0, 10_000)),
                              preemptible=draw(st.integers(0, 7)) > 0))
        # Top the node up with backfill until (almost) nothing is free.
        left = n.capacity - used
        for j in range(8, 8 + left.vcpus):
            if left.vcpus < 1 or left.memory_mib < 64 or draw(st.integers(0, 9)) == 0:
                break
            size = Size(1, draw(st.integers(64, max(64, left.memory_mib // max(left.vcpus, 1)))))
            left -= size
            vms.append(VmView(f"{n.node_id}-v{j}", n.node_id, VmRole.BACKFILL, size, NOW - draw(st.floats(0, 10_000))))
    pool = Pool.of(tuple(nodes), tuple(vms), NOW)
    target = draw(st.sampled_from([n for n in pool.nodes if n.up]))
    most = free_after_backfill(pool)[target.node_id]
    free = target.capacity - allocated(pool.on_node(target.node_id))
    # More than is free on the target, no more than it has with its backfill gone.
    if most.vcpus > free.vcpus and most.vcpus >= 1:
        want = Size(draw(st.integers(free.vcpus + 1, most.vcpus)), draw(st.integers(1, max(1, most.memory_mib))))
    elif most.memory_mib > free.memory_mib and most.vcpus >= 1:
        want = Size(draw(st.integers(1, most.vcpus)), draw(st.integers(free.memory_mib + 1, most.memory_mib)))
    else:
        want = Size(draw(st.integers(1, 8)), draw(st.integers(64, 8192)))
    return pool, want


def placement_cases():
    """Any pool (pools()) or a crowded one: together at least a third of them end in a Preempt
    (test_placement_cases_reach_preemption_often_enough proves it)."""
    return st.one_of(pools(), crowded_pools())


def on_demand_room(pool: Pool, node: NodeView) -> Size:
    """The node's room with every backfill VM gone (what on-demand placement compares nodes by)."""
    return node.capacity - allocated([v for v in pool.on_node(node.node_id) if v.role is not VmRole.BACKFILL])


def tied_best_fit(pool: Pool, want: Size) -> list[NodeView]:
    """The definition: among up nodes whose on-demand room holds the request, those with the least
    on-demand room (vCPUs, then memory), then the smallest capacity: all with the same on-demand state."""
    able = [n for n in pool.nodes if n.up and want.fits_in(on_demand_room(pool, n))]
    if not able:
        return []

    def key(n: NodeView) -> tuple:
        room = on_demand_room(pool, n)
        return (room.vcpus, room.memory_mib, n.capacity.vcpus, n.capacity.memory_mib)
    best = min(key(n) for n in able)
    return [n for n in able if key(n) == best]


def check_placement(pool: Pool, want: Size, policy: Policy, seed: int) -> None:
    decision = place_on_demand(pool, want, policy, seed)
    up = {n.node_id: n for n in pool.nodes if n.up}
    tied = tied_best_fit(pool, want)
    if isinstance(decision, Reject):
        # nothing could host it even with every backfill VM gone
        assert not tied
        assert all(not want.fits_in(on_demand_room(pool, n)) for n in up.values())
        return
    # the node is one of the best fits for on-demand, whatever backfill runs where
    assert decision.node_id in {n.node_id for n in tied}
    on_node = pool.on_node(decision.node_id)
    room = up[decision.node_id].capacity - allocated(on_node)
    if isinstance(decision, Place):
        assert want.fits_in(room)
        return
    # no tied node had free room
    assert not any(want.fits_in(n.capacity - allocated(pool.on_node(n.node_id))) for n in tied)
    victims = [v for v in on_node if v.vm_id in decision.victims]
    assert len(victims) == len(decision.victims) > 0
    assert all(v.role is VmRole.BACKFILL for v in victims)   # on-demand VMs are never victims
    assert want.fits_in(room + allocated(victims))
    for spared in victims:  # minimal: no victim could have been spared
        assert not want.fits_in(room + allocated([v for v in victims if v is not spared]))
    rng = random.Random(0)
    costs = []
    for n in tied:
        others = [v for v in pool.on_node(n.node_id) if is_victim(v)]
        found = choose_victims(others, want - (n.capacity - allocated(pool.on_node(n.node_id))), policy, NOW, rng)
        if found is not None:
            costs.append(_victim_cost(found, policy, NOW))
    if not all(is_victim(v) for v in victims):   # backfill in transit waited for only where no tied node had victims
        assert not costs
        return
    if policy is not Policy.ANY:  # no other tied node offered a cheaper victim set
        assert _victim_cost(victims, policy, NOW) <= min(costs)
    age = {Policy.MOST_RECENT: VmView.runtime, Policy.IDLE_FIRST: VmView.at_risk}.get(policy)
    if age is not None:  # no spared backfill VM on the node is younger (on the policy's clock) than a needed victim
        spared_vms = [v for v in on_node if is_victim(v) and v.vm_id not in decision.victims]
        for candidate in spared_vms:
            for needed in victims:
                swapped = [v for v in victims if v is not needed] + [candidate]
                if age(candidate, NOW) < age(needed, NOW):
                    # a younger VM was spared: only allowed if it could not replace the older one
                    assert not want.fits_in(room + allocated(swapped))


@st.composite
def busy_clocks(draw, pool: Pool) -> Pool:
    """The pool with idle_first's clocks on its backfill VMs, as the ledger keeps them under that
    policy: not known (None), idle, or busy since some time after the VM's launch."""
    vms = []
    for v in pool.vms:
        if v.role is VmRole.BACKFILL:
            kind = draw(st.sampled_from(["unknown", "idle", "busy"]))
            if kind == "idle":
                v = dataclasses.replace(v, busy_since=IDLE)
            elif kind == "busy":
                v = dataclasses.replace(v, busy_since=draw(st.floats(v.launched_at, NOW)))
        vms.append(v)
    return Pool.of(pool.nodes, tuple(vms), NOW)


@settings(max_examples=400, deadline=None)
@given(placement_cases(), st.sampled_from(list(Policy)), st.integers(0, 2**16))
def test_placement_properties(case, policy, seed):
    pool, want = case
    check_placement(pool, want, policy, seed)


@settings(max_examples=300, deadline=None)
@given(placement_cases(), st.integers(0, 2**16), st.data())
def test_idle_first_placement_properties_with_its_clocks(case, seed, data):
    pool, want = case
    check_placement(data.draw(busy_clocks(pool)), want, Policy.IDLE_FIRST, seed)


def test_placement_cases_reach_preemption_often_enough():
    """The property above is only as good as the cases that reach a preemption: run its
    strategy through the real place_on_demand and count the outcomes."""
    outcomes = {Place: 0, Preempt: 0, Reject: 0}

    @settings(max_examples=400, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow])
    @given(placement_cases(), st.sampled_from(list(Policy)), st.integers(0, 2**16))
    def count(case, policy, seed):
        pool, want = case
        outcomes[type(place_on_demand(pool, want, policy, seed))] += 1

    count()
    total = sum(outcomes.values())
    assert total >= 300, outcomes
    assert outcomes[Preempt] * 3 >= total, outcomes
    assert outcomes[Place] and outcomes[Reject], outcomes  # the other branches are still exercised


@settings(max_examples=200, deadline=None)
@given(pools(), st.integers(0, 12), st.integers(1, 3), st.integers(64, 2048))
def test_backfill_never_exceeds_max_instances_or_enters_a_reserve(case, max_instances, vcpus, memory):
    pool, _ = case
    reserved = tuple(NodeView(n.node_id, n.capacity, n.up, Size(1, 128), backfill_excluded=(i == 1))
                     for i, n in enumerate(pool.nodes))
    pool = Pool.of(reserved, pool.vms, NOW)
    config = BackfillConfig(enabled=True, max_instances=max_instances, vcpus=vcpus, memory_mb=memory)
    plan = plan_backfill(pool, config)
    existing = sum(v.role is VmRole.BACKFILL for v in pool.vms)
    if max_instances:
        assert existing + len(plan.launches) <= max(max_instances, existing)
    for n in pool.nodes:
        count = plan.launches.count(n.node_id)
        if count:
            assert n.up and not n.backfill_excluded
            assert (allocated(pool.on_node(n.node_id)) + Size(vcpus * count, memory * count)).fits_in(
                n.capacity - n.reserve)
    assert backfill_room(pool.nodes[0]).vcpus <= pool.nodes[0].capacity.vcpus


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 16), min_size=1, max_size=12), st.integers(0, 12), st.floats(0, 4),
       st.data())
def test_selection_prefers_higher_p_and_swaps_only_beyond_threshold(ps, count, threshold, data):
    ids = [f"n{i}" for i in range(len(ps))]
    p = np.array(ps)
    previous = tuple(data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids))))
    result = select_volunteers(ids, p, previous, count, threshold)
    chosen = set(result.chosen)
    assert len(chosen) == len(result.chosen) <= max(count, 0)
    assert all(p[ids.index(n)] > 0 for n in chosen)
    if not previous:  # fresh choice: nothing unused beats anything used
        unused = [p[i] for i, n in enumerate(ids) if n not in chosen and p[i] > 0]
        if unused and chosen:
            assert max(unused) <= min(p[ids.index(n)] for n in chosen)
    else:
        kept_worst = [p[ids.index(n)] for n in chosen]
        unused = [p[i] for i, n in enumerate(ids) if n not in chosen and p[i] > 0]
        if unused and kept_worst and len(chosen) == count:
            assert max(unused) - min(kept_worst) <= threshold + 1e-9
    for dropped, added in result.swaps:
        assert dropped in previous and p[ids.index(added)] - p[ids.index(dropped)] > threshold


def test_choose_victims_with_nothing_needed_takes_nothing():
    assert choose_victims([vm("a", "n")], Size(0, 0), Policy.MOST_RECENT, NOW, random.Random(0)) == []


def check_rejected_and_nothing_terminated(pool: Pool, want: Size, policy: Policy, seed: int = 0) -> None:
    """An infeasible request is rejected, rightly, and stops nothing."""
    # Infeasible by an independent count: no up node could host it even with all its backfill gone.
    assert not any(want.fits_in(room) for room in free_after_backfill(pool).values())
    before = {node_id: list(vms) for node_id, vms in pool.vms_by_node.items()}
    decision = place_on_demand(pool, want, policy, seed)
    assert isinstance(decision, Reject)
    assert not isinstance(decision, Preempt) and not hasattr(decision, "victims")  # no VM would be stopped
    assert {node_id: list(vms) for node_id, vms in pool.vms_by_node.items()} == before  # the pool is untouched
    if any(n.up for n in pool.nodes):
        assert f"{want.vcpus} vCPUs and {want.memory_mib} MiB" in decision.reason
    else:
        assert "no node is up" in decision.reason or "no nodes" in decision.reason


@pytest.mark.parametrize("policy", list(Policy))
def test_infeasible_requests_terminate_nothing(policy):
    pool = Pool.of((node("a", vcpus=2),), (vm("b1", "a"), vm("b2", "a")), NOW)
    assert isinstance(place_on_demand(pool, Size(3, 256), policy), Reject)
    check_rejected_and_nothing_terminated(pool, Size(3, 256), policy)


@st.composite
def infeasible_cases(draw):
    """A pool (often full of backfill) and a request no up node can host even with all its backfill gone."""
    pool, _ = draw(placement_cases())
    rooms = free_after_backfill(pool).values()
    vcpus = draw(st.integers(1, 10))
    # Memory beyond what any node with enough vCPUs has: infeasible on every node, by one
    # dimension or the other.
    enough = [r.memory_mib for r in rooms if r.vcpus >= vcpus]
    memory = draw(st.integers(max(enough, default=0) + 1, max(enough, default=0) + 4096))
    return pool, Size(vcpus, max(memory, 1))


@settings(max_examples=200, deadline=None)
@given(infeasible_cases(), st.sampled_from(list(Policy)), st.integers(0, 2**16))
def test_infeasible_requests_terminate_nothing_in_any_pool(case, policy, seed):
    pool, want = case
    check_rejected_and_nothing_terminated(pool, want, policy, seed)
