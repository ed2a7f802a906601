"""Tenants' bounds in the ledger (controller.core.bounds): an on-demand request past its tenant's
upper bound is rejected naming it; another tenant's unused lower bound is kept from it, and
backfill on that guaranteed capacity is preempted when the tenant asks; the pool shrinking
below the lower bounds says so; with only the built-in tenants nothing changes."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from controller.core.bounds import UNBOUNDED
from controller.core.ledger import Ledger
from controller.core.records import Ask, Launch, Size, Stop, TenantRecord, Write

from .test_ledger import BACKFILL, SETTINGS, Report, counter
from .test_ledger_reserves import confirm

NODES = {"n1": (4, 4096), "n2": (4, 4096)}   # 8 vCPUs, 8 GiB
T0 = 1000.0


def tenant(name: str, kind: str = "on_demand", lower=(0, 0), upper=(0, 0)) -> TenantRecord:
    return TenantRecord(name, kind, lower[0], lower[1], upper[0], upper[1])


def pool(*tenants: TenantRecord, backfill=BACKFILL, nodes=NODES) -> Ledger:
    ledger = Ledger(SETTINGS, backfill, {}, counter(), tenants=tenants)
    for node_id, (cpus, memory) in nodes.items():
        ledger.report(Report(node_id, f"{node_id}:1", cpus, memory, []), T0)
    return ledger


def events(effects, kind: str) -> list:
    return [e for w in effects if isinstance(w, Write) for e in w.events if e.kind == kind]


def ask(ledger: Ledger, owner: str, vcpus: int, memory: int = 512, now: float = T0 + 1, rid: str | None = None):
    rid = rid or f"r{len(ledger.requests) + 1}"
    effects = ledger.request(Ask(vcpus, memory, "tiny", owner, rid), now)
    return ledger.requests[rid], effects


def test_with_only_the_built_in_tenants_nothing_is_bounded():
    ledger = pool()
    assert not ledger._bounded
    record, _ = ask(ledger, "anyone", 4)
    assert record.outcome == "pending" and record.lease_id
    assert ledger.tenant_usage == {"default": Size(4, 512)}


def test_past_its_upper_bound_a_request_is_rejected_naming_the_bound_and_does_not_wait():
    ledger = pool(tenant("acme", upper=(3, 8192)))
    assert ask(ledger, "acme", 2)[0].lease_id
    record, effects = ask(ledger, "acme", 2)
    assert record.outcome == "rejected" and not ledger.waiting
    [rejected] = events(effects, "request.rejected")
    assert rejected.detail["reason_code"] == "tenant_upper_bound"
    assert "upper bound 3 vCPUs, 8192 MiB" in record.reason and "'acme'" in record.reason
    # another tenant's request is not held back by acme's bound
    assert ask(ledger, "someone-else", 2)[0].lease_id


def test_a_release_makes_room_under_the_upper_bound_again():
    ledger = pool(tenant("acme", upper=(2, 8192)))
    first, effects = ask(ledger, "acme", 2)
    confirm(ledger, effects, T0 + 2)
    assert ask(ledger, "acme", 1)[0].outcome == "rejected"
    _lease, effects = ledger.release(first.lease_id, False, T0 + 3)
    confirm(ledger, effects, T0 + 4)
    assert ledger.tenant_usage["acme"] == Size(0, 0)
    assert ask(ledger, "acme", 2, now=T0 + 5)[0].lease_id


def test_another_tenants_unused_lower_bound_is_kept_from_a_request():
    ledger = pool(tenant("gold", lower=(5, 2048), upper=(8, 8192)))
    assert ask(ledger, "bob", 3)[0].lease_id            # 8 - 5 kept for gold = 3
    record, effects = ask(ledger, "bob", 1)
    assert record.outcome != "placed" and record.lease_id is None
    assert "kept for other tenants' lower bounds" in record.reason
    assert ask(ledger, "gold", 4)[0].lease_id           # gold's guarantee is whole (nodes of 4 vCPUs)
    assert ask(ledger, "gold", 1)[0].lease_id


def test_a_tenant_using_its_lower_bound_releases_it_to_nobody_else():
    """What gold holds counts against its guarantee; only the unused rest is kept from others."""
    ledger = pool(tenant("gold", lower=(4, 2048), upper=(8, 8192)))
    assert ask(ledger, "gold", 2)[0].lease_id
    assert ask(ledger, "bob", 2)[0].lease_id            # 8 - 2 gold - 2 kept for gold = 4 free
    assert ask(ledger, "bob", 2)[0].lease_id
    assert ask(ledger, "bob", 1)[0].lease_id is None
    assert ask(ledger, "gold", 2)[0].lease_id


def test_backfill_on_guaranteed_capacity_is_preempted_when_its_tenant_asks():
    ledger = pool(tenant("gold", lower=(4, 2048), upper=(8, 8192)))
    confirm(ledger, ledger.fill(T0), T0 + 1)
    backfill = [l for l in ledger.leases.values() if l.role == "backfill"]
    assert len(backfill) == 8   # every vCPU holds backfill while gold leaves its bound idle
    record, effects = ask(ledger, "gold", 4, now=T0 + 10)
    assert record.lease_id and record.victims
    assert len([e for e in effects if isinstance(e, Stop)]) == 4


def test_a_batch_tenants_dedicated_vms_stay_within_its_lower_bound():
    ledger = pool(tenant("science", kind="batch", lower=(2, 2048), upper=(6, 8192)))
    assert ask(ledger, "science", 2)[0].lease_id
    record, _ = ask(ledger, "science", 1)
    assert record.outcome == "rejected" and "lower bound" in record.reason


def test_the_pool_shrinking_below_the_lower_bounds_says_so_and_honours_them_in_proportion():
    ledger = pool(tenant("gold", lower=(4, 2048), upper=(8, 8192)), tenant("silver", lower=(2, 1024), upper=(4, 4096)))
    assert events(ledger.tick(T0 + 1), "tenants.lower_bounds_scaled") == []
    ledger.report(Report("n1", "n1:1", 4, 4096, []), T0 + 1)
    later = T0 + 1 + SETTINGS.down_after + 1   # n2 stops reporting: suspect, then down
    ledger.tick(T0 + 1 + SETTINGS.suspect_after + 1)
    ledger.report(Report("n1", "n1:1", 4, 4096, []), later - 1)
    effects = ledger.tick(later)
    [scaled] = events(effects, "tenants.lower_bounds_scaled")
    assert ledger.nodes["n2"].state == "down"
    assert scaled.detail["capacity"] == "4 vCPUs, 4096 MiB" and scaled.detail["lower_sum"] == "6 vCPUs, 3072 MiB"
    assert "gold=3 vCPUs" in scaled.detail["honoured"] and "silver=1 vCPUs" in scaled.detail["honoured"]
    assert events(ledger.tick(later + 1), "tenants.lower_bounds_scaled") == []   # said once
    # within the shrunk pool: gold's 3 are kept from silver, whose own share is 1
    assert ask(ledger, "silver", 2, now=later + 2)[0].lease_id is None
    ledger.report(Report("n2", "n2:1", 4, 4096, []), later + 3)
    assert events(ledger.tick(later + 4), "tenants.lower_bounds_restored")


def test_tenants_changed_recount_what_each_holds():
    ledger = pool()
    assert ask(ledger, "acme", 2)[0].lease_id
    assert ledger.tenant_usage == {"default": Size(2, 512)}
    ledger.set_tenants([tenant("acme", upper=(2, 4096))])
    assert ledger.tenant_usage == {"acme": Size(2, 512)}
    assert ask(ledger, "acme", 1)[0].outcome == "rejected"


# -- the property: no tenant is pushed below its lower bound by another's on-demand VM ------------

OWNERS = ("gold", "silver", "bob")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OWNERS), st.integers(1, 4), st.integers(1, 4), st.booleans()),
                min_size=1, max_size=40),
       st.integers(0, 4), st.integers(0, 3), st.booleans())
def test_no_tenant_is_ever_pushed_below_its_lower_bound_nor_past_its_upper(steps, gold_low, silver_low, backfill_on):
    """Random requests (and releases) of three tenants, with backfill filling the pool or not: the
    capacity left free always covers every tenant's unused lower bound, and no tenant ever holds
    more than its upper bound."""
    tenants = (tenant("gold", lower=(gold_low, gold_low * 512), upper=(6, 6 * 1024)),
               tenant("silver", lower=(silver_low, silver_low * 512), upper=(4, 4 * 1024)))
    ledger = pool(*tenants)
    if backfill_on:
        confirm(ledger, ledger.fill(T0), T0)
    bounds = {t.name: t for t in tenants}
    now = T0 + 1
    for owner, vcpus, memory_k, release in steps:
        now += 1
        if release and ledger.tenant_usage.get(owner, Size(0, 0)).vcpus:
            mine = [l for l in ledger.leases.values() if l.role == "on_demand" and l.owner == owner
                    and l.state == "running"]
            if mine:
                _lease, effects = ledger.release(mine[0].lease_id, False, now)
                confirm(ledger, effects, now)
                continue
        _record, effects = ask(ledger, owner, vcpus, memory_k * 256, now=now)
        confirm(ledger, effects, now)
        confirm(ledger, ledger.tick(now), now)
        capacity = Size(8, 8192)
        used = sum((s for s in ledger.tenant_usage.values()), Size(0, 0))
        unused_lower = Size(0, 0)
        for name, t in bounds.items():
            held = ledger.tenant_usage.get(name, Size(0, 0))
            unused_lower = unused_lower + Size(max(0, t.lower_vcpus - held.vcpus),
                                               max(0, t.lower_memory_mib - held.memory_mib))
            assert held.fits_in(t.upper), f"{name} holds {held}, past its upper bound"
        free = capacity - used
        assert unused_lower.fits_in(free), f"free {free} does not cover the unused lower bounds {unused_lower}"
    assert UNBOUNDED.vcpus > 8


def test_the_metrics_show_each_tenants_allocation_against_its_bounds():
    from prometheus_client import generate_latest

    from controller.metrics import ControllerMetrics, PoolFigures
    figures = PoolFigures(tenants={"gold": (Size(2, 512), Size(4, 2048), Size(8, 8192)),
                                   "default": (Size(1, 256), Size(0, 0), None)})
    text = generate_latest(ControllerMetrics(lambda: figures).registry).decode()
    assert 'gleaner_controller_tenant_allocated_vcpus{tenant="gold"} 2.0' in text
    assert 'gleaner_controller_tenant_lower_memory_bytes{tenant="gold"} 2.147483648e+09' in text
    assert 'gleaner_controller_tenant_upper_vcpus{tenant="gold"} 8.0' in text
    assert 'gleaner_controller_tenant_upper_vcpus{tenant="default"}' not in text   # unbounded: no sample
    assert 'gleaner_controller_tenant_allocated_vcpus{tenant="default"} 1.0' in text
