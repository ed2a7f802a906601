"""Retention: ended leases, resolved requests and audit events older than retention_days leave
the store in small transactions, outside the pool lock; what is live never does. Lease ids (and
so VM names) carry the second they were made, so pruning never lets a name come back. In-memory
clean-up retries are forgotten with the VMs they describe."""
from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import replace

from controller.agents import AgentLinks
from controller.config import ControllerConfig
from controller.core.ledger import Ledger
from controller.core.records import Audit, RequestRecord, Write
from controller.service import PoolService, random_id
from controller.store import Store
from gleaner_common.config import TlsConfig
from tests.unit.test_controller_parts import lease
from tests.unit.test_ledger import BACKFILL, SETTINGS, Report, Vm, counter

DAY = 86400.0


def request(request_id: str, outcome: str, at: float) -> RequestRecord:
    return RequestRecord(request_id, 1, 128, "tiny", "me", outcome, None, "", (), "", at, 0.0)


def seeded(path, now: float) -> Store:
    store = Store(path)
    old, new = now - 100 * DAY, now - DAY
    store.apply_all([Write(
        created=tuple([lease(f"old{i}", "ended", ended_at=old, end_reason="released") for i in range(7)]
                      + [lease("new", "ended", ended_at=new, end_reason="released"),
                         lease("live-old", "running")]),   # made 100 s after the epoch, still live
        requests=(request("r-old", "placed", old), request("r-new", "placed", new),
                  request("r-pending", "pending", old)))])
    for i in range(5):
        store.record("vm.old", at=old + i)
    store.record("vm.new", at=new)
    return store


def rows(path, table: str) -> list:
    with sqlite3.connect(path) as db:
        key = {"leases": "lease_id", "requests": "request_id", "events": "kind"}[table]
        return sorted(r[0] for r in db.execute(f"SELECT {key} FROM {table}"))


def test_prune_batches_delete_only_what_ended_or_resolved_before_the_cutoff(tmp_path):
    now = 1_800_000_000.0
    path = tmp_path / "c.sqlite3"
    store = seeded(path, now)
    batches = []
    while any((deleted := store.prune_batch(now - 90 * DAY, batch=3)).values()):
        batches.append(deleted)
    assert batches[0] == {"leases": 3, "requests": 1, "events": 3}   # at most `batch` of each a transaction
    assert sum(b["leases"] for b in batches) == 7 and sum(b["events"] for b in batches) == 5
    assert rows(path, "leases") == ["live-old", "new"]
    assert rows(path, "requests") == ["r-new", "r-pending"]
    assert rows(path, "events") == ["vm.new"]


def test_the_service_prunes_by_its_retention_outside_the_pool_lock(tmp_path):
    now = time.time()
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              retention_days=90)
    store = seeded(config.store_path, now)
    pool = PoolService(config, store, AgentLinks(None, 1.0))
    done = {}
    with pool.lock:   # held by someone else all along: pruning never waits for it
        worker = threading.Thread(target=lambda: done.update(pool.prune(batch=2, pause_s=0.0)))
        worker.start()
        worker.join(timeout=30)
    assert done == {"leases": 7, "requests": 1, "events": 5}
    assert rows(config.store_path, "leases") == ["live-old", "new"]
    pool.close()
    store.close()


def test_lease_ids_carry_the_second_they_were_made():
    before = int(time.time())
    made = random_id("bf")
    assert made.startswith("bf-") and len(made) == 19
    assert before <= int(made[3:11], 16) <= int(time.time())
    # 32 random bits a second: 10,000 ids made within a few seconds repeat one with a chance of
    # about 1 % (the birthday bound; the store's UNIQUE constraint refuses it), two or more
    # repeats about 1 in 15,000 runs, three or more about 1 in 4 million
    assert len({random_id("bf") for _ in range(10_000)}) >= 9_998


def test_cleanup_retries_are_forgotten_once_their_vm_is_gone():
    ledger = Ledger(replace(SETTINGS, retire_seconds=60), BACKFILL, {}, counter())
    vm = Vm("zombie", "", "backfill", 1, 64, 1.0)
    ledger.report(Report("n1", "n1:1", 2, 1024, [vm]), 10.0)          # adopted
    lease_id = next(iter(ledger.leases))
    ledger.release(lease_id, False, 11.0)
    ledger.stop_done(lease_id, "clean_shutdown", True, 1.0, "", 12.0)  # ended, yet its VM still runs
    ledger.report(Report("n1", "n1:1", 2, 1024, [vm]), 30.0)          # asked to stop again
    assert "zombie" in ledger._cleanup_at
    ledger.report(Report("n1", "n1:1", 2, 1024, []), 40.0)            # gone
    ledger.tick(80.0)
    assert "zombie" in ledger._cleanup_at          # its next ask was at 32: not yet retire_seconds past
    ledger.tick(200.0)
    assert ledger._cleanup_at == {}
