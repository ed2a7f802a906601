"""The decisions' fast paths give the answers of the plain definitions they replace.

Placement reads the nodes as numpy columns and a victim ladder per node to skip nodes that
cannot be cheapest; the ledger keeps those columns, the selection's inputs and the set of nodes
with backfill room row by row; volunteer selection has a path for when every node fits. Each
is checked here against a brute-force or from-scratch computation of the same thing.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.agentproc import modules_loaded_by
from controller.core.records import Ask, LedgerSettings
from controller.core.snapshot import IDLE, NodeArrays, NodeView, Pool, VmView, is_victim
from controller.core.policy import Place, Preempt, Reject, _victim_cost, choose_victims, place_on_demand
from controller.core.backfill_plan import plan_backfill
from controller.core.records import BackfillConfig, Policy, Size, VmRole
from controller.core.policy import _ascending
from controller.core.selection import (BestFirst, _all_best_first, moving_average, node_potential_productivity,
                                      potential_productivity, select_volunteers)
from controller.core.selection_rows import SelectionRows, exact_total, predictions, row_prediction
from controller.sim.engine import DAY, SimSettings, Simulation
from controller.sim.traces import OnDemandRequest

NOW = 1_000_000.0


# -- placement -----------------------------------------------------------------------------------

def brute_force_placement(pool: Pool, want: Size, policy: Policy) -> Place | Preempt | None:
    """The definition: among up nodes whose room with every backfill VM gone holds the request,
    the best fits for on-demand (the least such room by vCPUs then memory, then the smallest node)
    tie; among them the best fit by free room; else the cheapest preemptible victim set by (cost,
    node id). None for a rejection (or for the rare case where only backfill in transit holds the
    room, which test_controller_policy checks)."""
    def od_key(n):
        fixed = [vm for vm in pool.on_node(n.node_id) if vm.role is not VmRole.BACKFILL]
        room = n.capacity - sum((vm.size for vm in fixed), Size(0, 0))
        return room, (room.vcpus, room.memory_mib, n.capacity.vcpus, n.capacity.memory_mib)
    able = [n for n in pool.nodes if n.up and want.fits_in(od_key(n)[0])]
    if not able:
        return None
    best = min(od_key(n)[1] for n in able)
    tied = [n for n in able if od_key(n)[1] == best]
    fits = [n for n in tied if want.fits_in(n.capacity - n.allocated)]
    if fits:
        best = min(fits, key=lambda n: (n.capacity.vcpus - n.allocated.vcpus, n.capacity.memory_mib -
                                        n.allocated.memory_mib, n.node_id))
        return Place(best.node_id)
    options = []
    for n in tied:
        backfill = [vm for vm in pool.on_node(n.node_id) if is_victim(vm)]
        victims = choose_victims(backfill, want - n.room, policy, pool.now, random.Random(0))
        if victims is not None:
            options.append((_victim_cost(victims, policy, pool.now), n.node_id, victims))
    if not options:
        return None
    _, node_id, victims = min(options, key=lambda o: o[:2])
    return Preempt(node_id, tuple(vm.vm_id for vm in victims), sum(vm.work(pool.now) for vm in victims))


@st.composite
def full_pools(draw, clocks: bool = False):
    """Up to 12 nodes, mostly full of backfill VMs of mixed sizes whose launch times often tie;
    with `clocks`, idle_first's on the backfill VMs (unknown, idle, or busy since a time that
    often ties too)."""
    nodes, vms = [], []
    launch_times = [NOW - t for t in draw(st.lists(st.floats(0, 5000), min_size=1, max_size=4))]
    for i in range(draw(st.integers(1, 12))):
        node = NodeView(f"n{i:02d}", Size(draw(st.integers(2, 16)), draw(st.integers(2048, 16384))),
                        up=draw(st.booleans()) or i == 0)
        used = Size(0, 0)
        for j in range(draw(st.integers(0, 12))):
            size = Size(draw(st.integers(1, 3)), draw(st.integers(128, 4096)))
            if not (used + size).fits_in(node.capacity):
                break
            used += size
            role = draw(st.sampled_from([VmRole.BACKFILL] * 4 + [VmRole.ON_DEMAND]))
            launched = draw(st.sampled_from(launch_times))
            busy_since = None
            if clocks and role is VmRole.BACKFILL:
                busy_since = draw(st.sampled_from([None, IDLE, NOW] + [t for t in launch_times if t >= launched]))
            vms.append(VmView(f"n{i:02d}-v{j}", node.node_id, role, size, launched,
                              preemptible=draw(st.integers(0, 5)) > 0, busy_since=busy_since))
        nodes.append(node)
    want = Size(draw(st.integers(1, 8)), draw(st.integers(128, 8192)))
    return Pool.of(nodes, vms, NOW), want


def policy_cases():
    """(pool and request, policy): idle_first's pools carry its clocks, as the ledger's do."""
    return st.sampled_from([Policy.MOST_RECENT, Policy.LEAST_LOSS, Policy.IDLE_FIRST]).flatmap(
        lambda policy: st.tuples(full_pools(clocks=policy is Policy.IDLE_FIRST), st.just(policy)))


@settings(max_examples=200, deadline=None)
@given(policy_cases())
def test_placement_is_the_brute_force_answer(case_and_policy):
    (pool, want), policy = case_and_policy
    expected = brute_force_placement(pool, want, policy)
    decision = place_on_demand(pool, want, policy)
    if expected is None:
        assert isinstance(decision, Reject) or not all(v in {vm.vm_id for vm in pool.vms if is_victim(vm)}
                                                       for v in decision.victims)
    else:
        assert decision == expected


def without_ladders(pool: Pool) -> Pool:
    """The pool as a caller that keeps only newest_victim_at (no ladder) gives it."""
    return Pool(tuple(NodeView(n.node_id, n.capacity, n.up, n.reserve, n.backfill_excluded, n.allocated, n.pinned,
                               n.newest_victim_at, in_transit=n.in_transit) for n in pool.nodes), pool.vms_by_node, pool.now)


@settings(max_examples=60, deadline=None)
@given(full_pools(), st.sampled_from([Policy.MOST_RECENT, Policy.LEAST_LOSS]))
def test_hand_built_views_without_ladders_decide_the_same(case, policy):
    """The newest victim alone still bounds most_recent's cost from below; least_loss reads the
    VMs of nodes without ladders."""
    pool, want = case
    assert place_on_demand(without_ladders(pool), want, policy) == place_on_demand(pool, want, policy)


@settings(max_examples=300, deadline=None)
@given(full_pools(clocks=True))
def test_hand_built_views_without_ladders_decide_the_same_under_idle_first(case):
    """The newest victim's age bounds nothing under idle_first (an older VM may be idle): nodes
    without ladders have their VMs read (300 cases: fewer often miss the pools where it shows)."""
    pool, want = case
    assert place_on_demand(without_ladders(pool), want, Policy.IDLE_FIRST) == \
        place_on_demand(pool, want, Policy.IDLE_FIRST)


def columns_equal(a: NodeArrays, b: NodeArrays) -> bool:
    width = max(a.ladder_at.shape[1], b.ladder_at.shape[1])

    def padded(m, fill):
        out = np.full((m.shape[0], width), fill, dtype=m.dtype)
        out[:, :m.shape[1]] = m
        return out
    same = a.ids == b.ids and all(np.array_equal(getattr(a, k), getattr(b, k), equal_nan=k.endswith("_at")) for k in (
        "up", "capacity_vcpus", "capacity_memory", "pinned_vcpus", "pinned_memory", "allocated_vcpus",
        "allocated_memory", "room_vcpus", "room_memory", "od_room_vcpus", "od_room_memory", "oldest_victim_at",
        "ladder_length", "name_rank"))
    for columns in (a, b):   # the minimum set_row keeps is the one read afresh
        same = same and np.array_equal(columns.oldest_victim(), np.fmin.reduce(columns.oldest_victim_at, initial=np.nan)
                                       if len(columns.ids) else np.nan, equal_nan=True)
    return same and np.array_equal(padded(a.ladder_at, np.nan), padded(b.ladder_at, np.nan), equal_nan=True) and \
        np.array_equal(padded(a.ladder_vcpus, 2**63 - 1), padded(b.ladder_vcpus, 2**63 - 1)) and \
        np.array_equal(padded(a.ladder_memory, 2**63 - 1), padded(b.ladder_memory, 2**63 - 1))


def busy_simulation(policy: Policy = Policy.MOST_RECENT, use_prediction: bool = True) -> Simulation:
    """6 small nodes and a stream of on-demand VMs of mixed sizes: many preemptions and refills."""
    rng = random.Random(7)
    requests = [OnDemandRequest(30.0 * i, rng.choice([1, 2, 3]), rng.choice([512, 1024, 3000]),
                                rng.choice([60.0, 600.0, 3000.0]), "o", f"r{i}") for i in range(150)]
    settings_ = SimSettings(nodes=6, node_cpus=4, node_memory_mib=8192, days=5000 / DAY, progress_seconds=0)
    return Simulation(requests, settings_, BackfillConfig(enabled=True, memory_mb=512, termination_policy=policy),
                      LedgerSettings(use_prediction=use_prediction))


def test_the_ledgers_columns_and_rows_match_ones_built_afresh():
    sim = busy_simulation()
    ledger = sim.ledger
    checked = 0
    original_fill = ledger.fill

    def fill_and_check(now):
        nonlocal checked
        effects = original_fill(now)
        pool = ledger.snapshot(now)
        assert columns_equal(pool.columns, NodeArrays(pool.nodes))
        fresh = SelectionRows()
        fresh.update(ledger.nodes, ledger._node_views, (), ledger.settings.prediction_window, now)
        rows = ledger._selection_rows
        assert fresh.ids == rows.ids
        for name in ("predicted", "cpu_max", "free_memory", "excluded"):
            assert np.array_equal(getattr(fresh, name), getattr(rows, name)), name
        config = ledger.backfill
        roomy = {n.node_id for n in pool.nodes if n.up and not n.backfill_excluded and
                 config.size.fits_in(n.capacity - n.reserve - n.allocated)}
        assert ledger._nodes_with_backfill_room(config.size) == roomy
        # the plan over the roomy targets is the plan over every selected node
        everyone = plan_backfill(pool, config, list(ledger.selected), ledger.productivity)
        assert everyone == plan_backfill(pool, config, [n for n in ledger.selected if n in roomy], ledger.productivity)
        checked += 1
        return effects

    ledger.fill = fill_and_check
    f = sim.run()["figures"]
    assert checked > 50 and f["preemptions"] > 20


def test_a_snapshot_keeps_its_columns_when_the_books_change_after_it():
    """Snapshots lend the ledger's columns without copying them: a row that changes while one is
    alive is changed in a copy, so the snapshot still reads the books as they were; the lent
    arrays are read-only."""
    sim = busy_simulation()
    sim.run()
    ledger, now = sim.ledger, sim.now
    old = ledger.snapshot(now)
    assert not old.columns.allocated_vcpus.flags.writeable
    for i in range(3):
        ledger.request(Ask(2, 1024, "tiny", "o", f"late{i}"), now)
    new = ledger.snapshot(now)
    assert columns_equal(old.columns, NodeArrays(old.nodes))
    assert columns_equal(new.columns, NodeArrays(new.nodes))
    assert old.nodes != new.nodes and not columns_equal(old.columns, new.columns)


def test_recycling_reads_only_nodes_whose_oldest_victim_is_due():
    nodes = [NodeView("a", Size(4, 4096)), NodeView("b", Size(4, 4096))]
    vms = [VmView("old", "a", VmRole.BACKFILL, Size(1, 512), NOW - 100), VmView("new", "a", VmRole.BACKFILL,
                                                                              Size(1, 512), NOW - 10),
           VmView("starting", "b", VmRole.BACKFILL, Size(1, 512), NOW - 500, preemptible=False),
           VmView("older", "b", VmRole.BACKFILL, Size(1, 512), NOW - 200)]
    plan = plan_backfill(Pool.of(nodes, vms, NOW), BackfillConfig(enabled=True, duration_seconds=50))
    assert plan.recycles == ("older", "old")


# -- volunteer selection ---------------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), min_size=1, max_size=15), st.data())
def test_selection_with_room_for_every_node_is_every_positive_node_best_first(ps, data):
    ids = [f"n{i}" for i in data.draw(st.permutations(range(len(ps))))]
    previous = tuple(data.draw(st.lists(st.sampled_from(ids), unique=True)))
    result = select_volunteers(ids, np.array(ps), previous, len(ids) + data.draw(st.integers(0, 2)), 0.5)
    expected = sorted((n for n, p in zip(ids, ps) if p > 0), key=lambda n: (-ps[ids.index(n)], n))
    assert result.chosen == tuple(expected) and result.swaps == ()


def as_matrix(sample_lists, window: int) -> np.ndarray:
    """The samples as SelectionRows keeps them: one row a node, its last `window` right-aligned, NaN before."""
    matrix = np.full((len(sample_lists), window), np.nan)
    for row, samples in enumerate(sample_lists):
        recent = samples[-window:]
        if recent:
            matrix[row, -len(recent):] = recent
    return matrix


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.one_of(st.floats(0, 64), st.just(float("nan"))), max_size=12), min_size=1, max_size=8),
       st.integers(1, 10))
def test_predictions_row_by_row_match_one_matrix(sample_lists, window):
    matrix = as_matrix(sample_lists, window)
    whole = moving_average(matrix, window)
    for row, samples in enumerate(sample_lists):
        assert predictions([samples], window)[0] == whole[row]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.one_of(st.floats(-1e9, 1e9), st.sampled_from([0.0, -0.0, 1e-9, 16.0, float("nan")])),
                         max_size=150), min_size=1, max_size=4),
       st.integers(1, 140))
def test_predictions_in_plain_floats_sum_as_numpy_does_to_the_last_bit(sample_lists, window):
    # numpy_row_sum copies numpy's pairwise summation order; a numpy that sums otherwise fails here
    matrix = as_matrix(sample_lists, window)
    whole = moving_average(matrix, window)
    got = predictions(sample_lists, window)
    assert [(x, math.copysign(1, x)) for x in got.tolist()] == [(x, math.copysign(1, x)) for x in whole.tolist()]


def bits(values) -> list[tuple[float, float]]:
    """Each value with its sign: 0.0 and -0.0 differ, NaN equals NaN."""
    return [(x if x == x else "nan", math.copysign(1, x)) for x in values]


INTEGERS = st.one_of(st.integers(-64, 64).map(float), st.sampled_from([0.0, -0.0, 2.0 ** 46, -2.0 ** 46, 2.0 ** 47,
                                                                      2.0 ** 53, 2.0 ** 60, -2.0 ** 60]))
ODD = st.sampled_from([0.5, -0.25, 1e-9, 0.1, float("nan"), float("inf"), -float("inf"), 1e300])


def plain(sample_lists, window: int) -> list[float]:
    """predictions without the exact totals: numpy_row_sum's pairwise order for every row."""
    return [row_prediction(list(samples)[-window:], window, None) for samples in sample_lists]


def numpy_bits(sample_lists, window: int) -> list[tuple[float, float]]:
    """moving_average's figures, but a zero as the plain path's: numpy_row_sum keeps a row of eight or
    more -0.0 at -0.0 where numpy's reduction (starting from 0.0) gives 0.0; that is kept as it was."""
    want = moving_average(as_matrix(sample_lists, window), window).tolist()
    return bits([b if a == 0 and b == 0 else a for a, b in zip(want, plain(sample_lists, window))])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # inf - inf: NaN, as meant
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(INTEGERS, INTEGERS, INTEGERS, ODD), max_size=140), min_size=1, max_size=4),
       st.integers(1, 140))
def test_predictions_of_integer_samples_summed_in_any_order_are_numpys_to_the_last_bit(sample_lists, window):
    # mostly integers (summed exactly, with the built-in sum), some rows not; a zero's sign counts
    got = bits(predictions(sample_lists, window).tolist())
    assert got == bits(plain(sample_lists, window)) == numpy_bits(sample_lists, window)


@pytest.mark.parametrize("window", [5, 8, 30])
def test_a_zero_total_keeps_its_sign_as_the_plain_path_sums_it(window):
    for samples in ([-0.0] * window, [-0.0] * (window - 1), [3.0, -0.0, -3.0] + [-0.0] * (window - 3), [0.0] * window):
        want = bits(plain([samples], window))
        assert bits(predictions([samples], window).tolist()) == want
        assert bits([row_prediction(samples, window, exact_total(samples))]) == want


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # inf - inf: NaN, as meant
@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.lists(st.lists(st.tuples(st.integers(0, 4), st.one_of(INTEGERS, INTEGERS, ODD)),
                                             max_size=4), min_size=1, max_size=25))
def test_rows_kept_report_by_report_predict_what_numpy_does(window, passes):
    """SelectionRows keeps each row's exact total from pass to pass (one report: less the sample
    that left, plus the new one): its predictions are numpy's, to the last bit, after every pass,
    also when a node goes down and comes back (the rows regroup) and for a node whose samples
    are kept longer than the window."""
    from collections import deque
    from types import SimpleNamespace
    nodes = {f"n{i}": SimpleNamespace(state="up", last_report=0.0, fg_samples=deque(maxlen=window + 3 * (i == 3)))
             for i in range(4)}
    views = {n: NodeView(n, Size(8, 4096)) for n in nodes}
    rows = SelectionRows()
    for now, reports in enumerate(passes, start=1):
        changed = set()
        for node, sample in reports:
            if node == 4:   # n0 goes down, or comes back up
                nodes["n0"].state = "down" if nodes["n0"].state == "up" else "up"
                changed.add("n0")
                continue
            nodes[f"n{node}"].last_report = float(now)
            nodes[f"n{node}"].fg_samples.append(sample)
        rows.update(nodes, views, changed, window, float(now), {f"n{node}" for node, _ in reports if node < 4})
        assert rows.ids == [n for n, node in nodes.items() if node.state == "up"]
        assert bits(rows.predicted.tolist()) == numpy_bits([list(nodes[n].fg_samples) for n in rows.ids], window)


def test_a_huge_sample_after_small_ones_is_summed_numpys_way():
    # 15 x 12 + 2**60 is 2**60 + 256 exactly rounded, but 2**60 in numpy's pairwise order
    from collections import deque
    from types import SimpleNamespace
    node = SimpleNamespace(state="up", last_report=0.0, fg_samples=deque(maxlen=16))
    rows = SelectionRows()
    for now, sample in enumerate([12.0] * 16 + [2.0 ** 60], start=1):
        node.last_report = float(now)
        node.fg_samples.append(sample)
        rows.update({"n": node}, {"n": NodeView("n", Size(8, 4096))}, (), 16, float(now), {"n"})
    assert rows.predicted.tolist() == moving_average(as_matrix([list(node.fg_samples)], 16), 16).tolist() == [2.0 ** 56]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([0.0, 1.0, 16.0, 64.0]),
       st.one_of(st.floats(0, 64), st.sampled_from([0.0, -0.0, float("nan"), float("inf")])),
       st.one_of(st.floats(-1e6, 1e6), st.sampled_from([0.0, -0.0, 127.0, 128.0, float("nan")])),
       st.sampled_from([-5, 0, 1, 96, 128, 1000]))
def test_one_nodes_potential_productivity_is_the_arrays_to_the_last_bit(cpu_max, predicted, free_memory, slot):
    whole = potential_productivity(np.array([cpu_max]), np.array([predicted]), np.array([free_memory]), slot)[0]
    one = node_potential_productivity(cpu_max, predicted, free_memory, slot)
    assert (one == whole or one != one and whole != whole) and math.copysign(1, one) == math.copysign(1, whole)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.data())
def test_best_first_kept_row_by_row_is_every_positive_node_best_first(count, data):
    ids = [f"n{i:02d}" for i in data.draw(st.permutations(range(count)))]
    values = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 7.25])
    kept = BestFirst()
    p = np.array(data.draw(st.lists(values, min_size=count, max_size=count)))
    for _ in range(data.draw(st.integers(1, 6))):
        assert kept.update(ids, p) == tuple(_all_best_first(ids, p))
        p = p.copy()   # a pass's P is a new array: a few rows change
        for row in data.draw(st.lists(st.integers(0, count - 1), max_size=5)):
            p[row] = data.draw(values)
    other = list(ids)   # new rows (a node came or went): sorted afresh
    assert kept.update(other, p) == tuple(_all_best_first(other, p))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 1.5, 2.0, 9.0, 30.0]), max_size=120))
def test_lazy_ascending_order_is_the_stable_argsort(values):
    array = np.array(values, dtype=float)
    assert list(_ascending(array)) == np.argsort(array, kind="stable").tolist()


def busy_pool_simulation(nodes: int) -> Simulation:
    """`nodes` nodes of 16 vCPUs and a stream of on-demand VMs of mixed sizes over an hour and a
    half: enough load to cap backfill by prediction on some nodes, and enough nodes that a fill
    sorts the few with room rather than reading the whole selection."""
    rng = random.Random(11)
    requests = [OnDemandRequest(7.0 * i, rng.choice([1, 2, 4, 8]), rng.choice([1024, 4096, 16384]),
                                rng.choice([120.0, 900.0, 3000.0]), "o", f"r{i}") for i in range(700)]
    settings_ = SimSettings(nodes=nodes, days=5400 / DAY, progress_seconds=0)
    return Simulation(requests, settings_, BackfillConfig(enabled=True))


def test_fills_plan_for_the_few_changed_nodes_what_they_would_plan_for_every_selected_node(monkeypatch):
    """A fill plans only for the selected nodes with room that changed since a plan gave them
    nothing (_backfill_idle), and sorts them by P when they are few: the plan is the plan over
    every selected node with room, in the selection's order."""
    from controller.core import filling as ledger_module   # where the fill calls plan_backfill
    real = ledger_module.plan_backfill
    seen = dict(plans=0, skipped=0)   # over both runs (packed on-demand VMs leave the small pool few to skip)
    for sim in (busy_simulation(), busy_pool_simulation(40)):
        ledger = sim.ledger

        def plan(pool, config, targets, cpu_room):
            roomy, unable = ledger._nodes_with_backfill_room(config.size), ledger._unable(config.memory_mb,
                                                                                          config.image)
            every = [n for n in ledger.selected if n in roomy and n not in unable
                     and pool.now >= ledger.launch_backoff.get(n, (0.0, 0))[0]]
            got = real(pool, config, targets, cpu_room)
            assert got == real(pool, config, every, cpu_room)
            assert [n for n in every if n in targets] == list(targets)   # the selection's order
            seen["plans"] += 1
            seen["skipped"] += len(every) > len(targets)
            return got

        monkeypatch.setattr(ledger_module, "plan_backfill", plan)
        sim.run()
    assert seen["plans"] > 100 and seen["skipped"] > 5, seen


# -- the pure core stays pure ------------------------------------------------------------------------

def test_the_simulator_loads_no_grpc_sqlite_or_hypervisor_module():
    assert modules_loaded_by(["controller.sim.engine", "controller.sim.progress"],
                             ("grpc", "sqlite3", "libvirt", "pyroute2", "controller.service")) == []


# -- records -------------------------------------------------------------------------------------

def test_a_record_made_by_plain_init_is_the_one_dataclass_makes():
    import dataclasses
    from controller.core.records import plain_init

    def record():
        @dataclasses.dataclass(frozen=True)
        class Record:
            name: str
            count: int = 0
            detail: dict = dataclasses.field(default_factory=dict)
        return Record

    generated, plain = record(), plain_init(record())
    for args, kwargs in [(("a",), {}), (("a", 2), {}), (("a",), dict(detail={"x": 1})), ((), dict(name="b", count=3))]:
        made = plain(*args, **kwargs)
        assert vars(made) == vars(generated(*args, **kwargs)) and list(vars(made)) == ["name", "count", "detail"]
    assert plain("a").detail is not plain("a").detail   # a fresh default per record
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain("a").count = 1
    with pytest.raises(TypeError):
        plain()

    @dataclasses.dataclass(frozen=True)
    class Checked:
        name: str

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class OwnInit:
        name: str

        def __init__(self, name: str) -> None:
            object.__setattr__(self, "name", name.upper())

    @dataclasses.dataclass(frozen=True)
    class Values:   # a field named as the generated code's own local
        values: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        name: str
    for unfit in (Checked, OwnInit, Values, Slotted):
        with pytest.raises(TypeError, match="plain fields only"):
            plain_init(unfit)
