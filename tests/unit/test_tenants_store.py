"""The tenants table (store schema 5 -> 6): an existing pool's store gains the two built-in
tenants and keeps everything else; a tenant and its audit event are written together."""
from __future__ import annotations

import json
import sqlite3

import pytest

from controller.core.records import Audit, BackfillConfig, TenantRecord
from controller.store import MIGRATIONS, SCHEMA_VERSION, Store, StoreError


def store_at_version(path, version: int) -> None:
    """A store as a controller of schema `version` left it: one live lease, backfill settings."""
    db = sqlite3.connect(path)
    for step in MIGRATIONS[:version]:
        db.executescript(step)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute("INSERT INTO leases (lease_id, role, node_id, vm_name, vcpus, memory_mib, image, owner, state, "
               "created_at) VALUES ('od-1', 'on_demand', 'n1', 'vm-od-1', 1, 256, 'tiny', 'alice', 'running', 1.0)")
    db.execute("INSERT INTO settings (key, value) VALUES ('backfill', ?)",
               (json.dumps(BackfillConfig(enabled=True, max_instances=7).as_dict()),))
    db.commit()
    db.close()


def test_an_existing_pool_gains_the_built_in_tenants_and_keeps_the_rest(tmp_path):
    path = tmp_path / "c.sqlite3"
    store_at_version(path, 5)
    store = Store(path)
    assert store.schema_version == SCHEMA_VERSION == 6
    built_in = {t.name: t for t in store.tenants()}
    assert set(built_in) == {"default", "backfill"}
    assert (built_in["default"].kind, built_in["backfill"].kind) == ("on_demand", "batch")
    assert all(t.unbounded and t.lower_vcpus == 0 and t.backfill is None and t.created_at > 0
               for t in built_in.values())   # backfill None: the pool-wide settings, as before
    assert [l.lease_id for l in store.live_leases()] == ["od-1"]
    assert store.backfill() == BackfillConfig(enabled=True, max_instances=7)
    store.close()
    assert [t.name for t in Store(path).tenants()] == ["backfill", "default"]   # made once, not at each open


def test_a_tenant_and_its_event_are_one_transaction(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    store.caller = lambda: "admin/alice"
    alpha = TenantRecord("alpha", "on_demand", 1, 512, 2, 1024, 5.0)
    store.put_tenant(alpha, Audit("tenant.created", detail=dict(tenant="alpha")), new=True, at=6.0)
    assert store.tenant("alpha") == alpha
    (event,) = store.events(kind="tenant.created")
    assert (event.at, event.detail) == (6.0, {"tenant": "alpha", "by": "admin/alice"})
    with pytest.raises(StoreError):   # the name is taken: neither the row nor its event is written
        store.put_tenant(alpha, Audit("tenant.created", detail=dict(tenant="alpha")), new=True)
    assert store.count_events("tenant.created") == 1
    with pytest.raises(StoreError, match="CHECK constraint"):
        store.put_tenant(TenantRecord("beta", "spot"), Audit("tenant.created"), new=True)
    assert store.tenant("beta") is None and store.count_events("tenant.created") == 1
    store.delete_tenant("alpha", Audit("tenant.deleted", detail=dict(tenant="alpha")))
    assert store.tenant("alpha") is None and store.count_events("tenant.deleted") == 1
