"""Batch tenants own backfill (controller.core.batch_fill): each launches its own VMs with its own
settings, granted idle capacity after PhoenixCloud's lower-priority branch: below URR what it asks
if it fits, above URR its PSF share of the unallocated capacity; never past its upper bound."""
from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from controller.core.batch_fill import batch_grants, tenant_config
from controller.core.ledger import Ledger
from controller.core.records import Ask, BackfillConfig, Launch, Size, TenantRecord
from controller.core.tenancy import Tenant, TenancySettings

from .test_ledger import BACKFILL, SETTINGS, Report, counter
from .test_bounds_ledger import tenant
from .test_ledger_reserves import confirm

NODES = {f"n{i}": (4, 4096) for i in range(1, 5)}   # 16 vCPUs, 16 GiB
T0 = 1000.0


def pool(*tenants: TenantRecord, urr: float = 1.0, backfill: BackfillConfig = BACKFILL) -> Ledger:
    ledger = Ledger(SETTINGS, backfill, {}, counter(), tenants=tenants, tenancy=TenancySettings(urr=urr))
    for node_id, (cpus, memory) in NODES.items():
        ledger.report(Report(node_id, f"{node_id}:1", cpus, memory, []), T0)
    ledger.select(T0, evaluation=True)   # four nodes joining at once is a burst: selection waits for its evaluation
    return ledger


def batch(name: str, lower=(0, 0), upper=(16, 16384), **own) -> TenantRecord:
    record = tenant(name, "batch", lower, upper)
    return TenantRecord(**{**record.__dict__, "backfill": json.dumps(own) if own else None})


def launched(effects) -> dict[str, list]:
    found: dict[str, list] = {}
    for effect in effects:
        if isinstance(effect, Launch):
            found.setdefault(effect.lease.owner, []).append(effect.lease)
    return found


def vcpus_by_tenant(ledger: Ledger) -> dict[str, int]:
    return {name: size.vcpus for name, size in ledger.backfill_usage.items() if size.vcpus}


def test_with_only_the_built_in_batch_tenant_the_pool_wide_launcher_runs():
    ledger = pool()
    assert not ledger._batch_fill
    assert set(launched(ledger.fill(T0))) == {"backfill"}


def test_each_batch_tenant_launches_its_own_vms_with_its_own_settings_within_its_upper_bound():
    ledger = pool(batch("science", upper=(6, 16384), vcpus=2, memory_mb=256, image="tiny"),
                  batch("render", upper=(4, 16384), max_instances=3))
    ledger.set_tenants([batch("science", upper=(6, 16384), vcpus=2, memory_mb=256),
                        batch("render", upper=(4, 16384), max_instances=3),
                        batch("backfill", upper=(16, 16384), enabled=False)])
    effects = ledger.fill(T0)
    by_tenant = launched(effects)
    assert {l.vcpus for l in by_tenant["science"]} == {2} and {l.memory_mib for l in by_tenant["science"]} == {256}
    assert len(by_tenant["science"]) == 3            # 6 vCPUs: its upper bound
    assert len(by_tenant["render"]) == 3             # its max_instances
    assert "backfill" not in by_tenant               # disabled for the built-in tenant
    confirm(ledger, effects, T0 + 1)
    assert vcpus_by_tenant(ledger) == {"science": 6, "render": 3}
    assert not launched(ledger.fill(T0 + 2))         # both at their limits: nothing more


def test_when_the_pool_is_busy_two_tenants_share_the_idle_capacity_by_psf():
    """URR 0.25 with 8 of 16 vCPUs held by on-demand VMs: the pool is busy, so each batch tenant
    gets its PSF share (lower bounds 2 and 6: 1/4 and 3/4) of the 8 unallocated vCPUs."""
    ledger = pool(batch("small", lower=(2, 0), upper=(8, 16384)), batch("large", lower=(6, 0), upper=(8, 16384)),
                  batch("backfill", upper=(16, 16384), enabled=False), urr=0.25)
    for i in range(4):
        confirm(ledger, ledger.request(Ask(2, 512, "tiny", "web", f"r{i}"), T0), T0)
    effects = ledger.fill(T0 + 1)
    assert {k: len(v) for k, v in launched(effects).items()} == {"small": 2, "large": 6}


def test_below_urr_a_tenant_gets_what_it_asks_if_it_fits():
    ledger = pool(batch("small", lower=(2, 0), upper=(8, 16384), max_instances=5),
                  batch("large", lower=(6, 0), upper=(8, 16384), max_instances=5),
                  batch("backfill", upper=(16, 16384), enabled=False), urr=1.0)
    assert {k: len(v) for k, v in launched(ledger.fill(T0)).items()} == {"large": 5, "small": 5}


def test_a_batch_tenants_backfill_is_preempted_for_on_demand_like_any():
    ledger = pool(batch("science", upper=(16, 16384)), batch("backfill", upper=(16, 16384), enabled=False))
    confirm(ledger, ledger.fill(T0), T0 + 1)
    assert vcpus_by_tenant(ledger) == {"science": 16}
    record_effects = ledger.request(Ask(4, 1024, "tiny", "web", "od-1"), T0 + 10)
    assert ledger.requests["od-1"].lease_id and len(ledger.requests["od-1"].victims) == 4
    confirm(ledger, record_effects, T0 + 11)
    assert vcpus_by_tenant(ledger) == {"science": 12}


def test_the_pool_wide_switch_disables_every_tenant():
    off = BackfillConfig(**{**BACKFILL.__dict__, "enabled": False})
    assert not tenant_config(off, {"enabled": True}).enabled


# -- the grants, pure ------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 16), st.integers(0, 6), st.integers(1, 4)),
                min_size=1, max_size=4),
       st.integers(0, 16), st.sampled_from([0.25, 0.5, 1.0]))
def test_no_grant_passes_an_upper_bound_nor_the_unallocated_capacity(specs, allocated_vcpus, urr):
    tenants, configs, held, counts = [], {}, {}, {}
    for i, (lower, upper, running, vcpus) in enumerate(specs):
        name = f"t{i}"
        upper = max(upper, lower)
        tenants.append(Tenant(name, "batch", Size(lower, 0), Size(upper, 1 << 20)))
        configs[name] = BackfillConfig(enabled=True, vcpus=vcpus, memory_mb=128)
        held[name] = Size(min(running * vcpus, upper), 0)
        counts[name] = min(running, upper // vcpus)
    capacity = Size(16, 1 << 20)
    allocated = Size(max(allocated_vcpus, sum(h.vcpus for h in held.values())), 0)
    grants = batch_grants(tenants, configs, held, counts, allocated, capacity, TenancySettings(urr=urr))
    by_name = {t.name: t for t in tenants}
    launched_vcpus = 0
    for grant in grants:
        size = configs[grant.tenant].size
        assert held[grant.tenant].vcpus + grant.vms * size.vcpus <= by_name[grant.tenant].upper.vcpus
        launched_vcpus += grant.vms * size.vcpus
    assert launched_vcpus <= max(capacity.vcpus - allocated.vcpus, 0)


def test_a_tenant_with_no_lower_bound_is_still_served_below_urr_when_the_pool_is_partly_used():
    """Without max_instances a tenant asks for what is unallocated: below URR it gets it, where the
    paper's "else unallocated x PSF" would give a PSF of 0 nothing once anything is allocated."""
    ledger = pool(batch("science", lower=(4, 1024), upper=(16, 16384), max_instances=4),
                  batch("backfill", upper=(16, 16384), enabled=False))
    confirm(ledger, ledger.fill(T0), T0)
    assert vcpus_by_tenant(ledger) == {"science": 4}
    ledger.set_tenants([batch("science", lower=(4, 1024), upper=(16, 16384), max_instances=4),
                        batch("backfill", upper=(16, 16384))])
    confirm(ledger, ledger.fill(T0 + 5), T0 + 5)
    assert vcpus_by_tenant(ledger) == {"science": 4, "backfill": 12}
