"""Victims by tenant (issue 26): when batch tenants share a node, an on-demand request's victims
come first from the tenant furthest over its PSF share, then by the termination policy; with one
tenant on the node, the policy alone decides (the simulator's fingerprints hold)."""
from __future__ import annotations

import json
from controller.core.ledger import Ledger
from controller.core.records import Ask, TenantRecord as TR
from .test_ledger import BACKFILL, SETTINGS, Report, counter
from .test_ledger_reserves import confirm
T0 = 100_000.0
def test_the_victim_comes_from_the_tenant_furthest_over_its_psf_not_the_newest_vm():
    b = lambda name, n, on=True: TR(name, "batch", 1, 256, 4, 4096, backfill=json.dumps(
        {"vcpus": 1, "memory_mb": 256, "max_instances": n, "enabled": on}))
    off = TR("backfill", "batch", backfill='{"enabled": false}')
    ledger = Ledger(SETTINGS, BACKFILL, {}, counter(), tenants=[b("alpha", 1, False), b("beta", 3), off])
    ledger.report(Report("n1", "n1:1", 4, 4096, []), T0)
    ledger.select(T0, evaluation=True)
    confirm(ledger, ledger.fill(T0), T0)
    ledger.set_tenants([b("alpha", 1), b("beta", 3), off])   # alpha's one VM comes last: the newest
    confirm(ledger, ledger.fill(T0 + 10), T0 + 10)
    ledger.request(Ask(1, 256, "tiny", "web", "r1"), T0 + 20)
    # beta holds 3 of the 4 backfill vCPUs against a PSF share of 1/2: its VM goes, not alpha's newer one
    assert [ledger.leases[v].owner for v in ledger.requests["r1"].victims] == ["beta"]
    assert len(ledger.requests["r1"].victims) == 1   # one VM's room: a minimal set
