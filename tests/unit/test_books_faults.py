"""The books against a failing store and a restart mid-preemption.

- A store write that fails (disk full, read-only, locked) at a request, a release, a report or a fill leaves
  the books exactly as a fresh rebuild from the store would have them, calls no agent, and stops
  no VM later because of it; reads keep answering, and the same call works once the fault clears.
- A victim whose stop expired unconfirmed holds the lease waiting for its memory, in the books
  that were running and in the books rebuilt from the store after a restart; a node reporting
  more than its leases explain never gets a waiting VM beside it.
"""
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from contextlib import contextmanager

import pytest

from controller.agents import Stopped
from controller.config import ControllerConfig
from controller.core.ledger import Ledger
from controller.core.records import Ask, BackfillConfig, Launch, Policy, Write
from controller.service import PoolService
from controller.sim.engine import Store as SimStore
from controller.store import Lease, Store, StoreError
from gleaner_common.config import TlsConfig
from protos import controller_pb2
from tests.unit.test_ledger import SETTINGS, Report, Vm, counter

START = 1000.0


class RecordingAgents:
    """Stands in for the agents (not under test here): every call is recorded and succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def launch(self, node_id, address, name, role, vcpus, memory_mib, image, lease_id, retire_after_seconds=0,
               work_channel=False) -> None:
        self.calls.append(("launch", name))

    def terminate(self, node_id, address, name, grace_seconds, force=False):
        self.calls.append(("stop", name))
        return Stopped("clean_shutdown", 0.0, "stand-in")


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def books(ledger: Ledger) -> dict:
    """What the books hold, to compare with a fresh rebuild from the store."""
    return dict(leases={i: (l.state, l.node_id, l.deadline, l.request_id) for i, l in ledger.leases.items()},
                requests={i: (r.outcome, r.lease_id, r.victims) for i, r in ledger.requests.items()
                          if r.outcome == "pending"},
                waiting=list(ledger.waiting), unconfirmed=sorted(ledger.unconfirmed),
                held={n: ledger.view(n).allocated for n in ledger.by_node if n in ledger.nodes})


def node_report(vms: list[tuple[str, str, str]]) -> controller_pb2.NodeReport:
    report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=1024,
                                       images=["tiny"], min_memory_mib=32)
    for name, lease_id, role in vms:
        report.vms.add(name=name, lease_id=lease_id, role=role, vcpus=1, memory_mib=256)
    return report


@pytest.fixture
def small_disk(tmp_path):
    """A file system of its own, small, for the store: a disk that can really fill up (root only,
    as the controller's set-up and tests run)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    assert done.returncode == 0, f"cannot mount a small tmpfs for the disk-full fault: {done.stderr}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def pool(small_disk):
    """An in-process pool on a real SQLite store; its one node (2 CPUs, 1 GiB) runs two backfill VMs."""
    clock, agents = Clock(), RecordingAgents()
    config = ControllerConfig(state_dir=small_disk / "controller", tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False, notice_seconds=5, host_headroom_mib=128)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=256, grace_seconds=3,
                                      termination_policy=Policy.MOST_RECENT))
    service = PoolService(config, store, agents, clock=clock)
    service.ingest(node_report([]))
    service.fill()
    service.executor.shutdown(wait=True)   # the launches answered
    service.executor = type(service.executor)(max_workers=4)
    running = service.live_leases()
    assert [l.state for l in running] == ["running", "running"]
    service.ingest(node_report([(l.vm_name, l.lease_id, "backfill") for l in running]))
    agents.calls.clear()
    yield service, agents, clock
    service.close()
    store.close()


@contextmanager
def failing(store: Store, fault: str):
    """A real SQLite failure on the store's own connection: the disk full (a filler file takes the
    store's small file system), writes refused (read-only), or the database locked by another
    process's open write transaction."""
    other = None
    filler = store.path.parent.parent / "filler"
    if fault == "disk_full":
        fill(filler)
    elif fault == "read_only":
        store._db.execute("PRAGMA query_only = 1")
    else:
        store._db.execute("PRAGMA busy_timeout = 100")
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        if fault == "disk_full":
            filler.unlink()
        elif other is not None:
            other.execute("ROLLBACK")
            other.close()
            store._db.execute("PRAGMA busy_timeout = 5000")
        else:
            store._db.execute("PRAGMA query_only = 0")


def fill(path) -> None:
    """Write zeros to `path` until its file system has no room left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        try:
            while True:
                os.write(fd, b"\0" * 512)
        except OSError:
            pass
    finally:
        os.close(fd)


def drained(service: PoolService) -> None:
    """Wait for the calls the service started (none, if it started none)."""
    service.executor.shutdown(wait=True)
    service.executor = type(service.executor)(max_workers=4)


POINTS = ["request", "release", "report", "fill"]
SQLITE_SAYS = dict(disk_full="database or disk is full", read_only="readonly", locked="database is locked")


def act(service: PoolService, point: str) -> None:
    if point == "request":   # 2 vCPUs: both backfill VMs are victims (the instant path)
        service.request(2, 256, "tiny", "alice", "r1", wait_seconds=0)
    elif point == "release":
        service.release(service.live_leases()[0].lease_id, wait_seconds=0)
    elif point == "report":   # a Gleaner VM the books do not know: adopted
        running = service.live_leases()
        service.ingest(node_report([(l.vm_name, l.lease_id, "backfill") for l in running] +
                                   [("gleaner-stray", "stray-1", "on_demand")]))
    else:   # room freed by a confirmed stop: the fill launches into it
        service.fill()


@pytest.mark.parametrize("fault", ["disk_full", "read_only", "locked"])
@pytest.mark.parametrize("point", POINTS)
def test_a_failed_write_leaves_the_books_as_the_store_has_them_and_calls_no_agent(pool, point, fault):
    service, agents, clock = pool
    if point == "fill":   # free a slot first, fault-free: the fill then has something to launch
        victim = service.live_leases()[1]
        service.release(victim.lease_id, wait_seconds=5)
        drained(service)
        service.ingest(node_report([(l.vm_name, l.lease_id, "backfill") for l in service.live_leases()]))
        agents.calls.clear()
    events_before = service.store.count_events("vm.launched") + service.store.count_events("vm.stopping")
    with failing(service.store, fault):
        with pytest.raises(StoreError, match=SQLITE_SAYS[fault]):
            act(service, point)
        drained(service)
        assert agents.calls == []                        # nothing was asked of any agent
        fresh = service._load_ledger(service.ledger.reserve_settings)
        assert books(service.ledger) == books(fresh)     # memory is what the store holds
        assert service.live_leases() == fresh.live_leases()   # reads keep answering
    assert service.store.count_events("vm.launched") + service.store.count_events("vm.stopping") == events_before
    # Time passes with the node reporting what it runs: no VM is stopped because of the failure.
    still = [(l.vm_name, l.lease_id, "backfill") for l in service.live_leases()]
    for _ in range(3):
        clock.now += 40
        service.ingest(node_report(still))
        service.tick()
    drained(service)
    assert not [c for c in agents.calls if c[0] == "stop"], agents.calls
    assert {l.state for l in service.live_leases()} == {"running"}
    # The fault cleared: the same call goes through.
    agents.calls.clear()
    act(service, point)
    drained(service)
    if point == "report":
        assert "gleaner-stray" in {l.vm_name for l in service.live_leases()}
    else:
        assert agents.calls, f"the {point} asked nothing of the agent once the store worked"


def test_a_failed_write_whose_reload_also_fails_is_reloaded_before_the_next_change(pool):
    service, agents, _clock = pool
    with failing(service.store, "read_only"):
        original = service._load_ledger
        service._load_ledger = lambda *a, **k: (_ for _ in ()).throw(StoreError("the store cannot be read"))
        with pytest.raises(StoreError):
            service.request(2, 256, "tiny", "alice", "r1", wait_seconds=0)
        assert service._stale is not None
        service._load_ledger = original
    # the next change reloads first, then goes through
    service.request(2, 256, "tiny", "alice", "r2", wait_seconds=0)
    drained(service)
    assert service._stale is None and ("launch", ) == agents.calls[0][:1]


# -- a restart while a victim's stop is unconfirmed (after_victims path) ----------------------

NODE = ("n1", 2, 1024)
BACKFILL = BackfillConfig(enabled=True, memory_mb=256, vcpus=1, grace_seconds=3, termination_policy=Policy.MOST_RECENT)


def rebuilt(store: SimStore) -> Ledger:
    """The books a restarted controller reads from the store's rows."""
    rows = list(store.leases.values())
    live = [l for l in rows if l.ended_at is None]
    ended = sorted((l for l in rows if l.ended_at is not None), key=lambda l: -l.ended_at)
    return Ledger(SETTINGS, BACKFILL, {}, counter(), leases=live, requests=list(store.requests.values()),
                  ended=ended)


def run(ledger: Ledger, store: SimStore, effects: list) -> list:
    for effect in effects:
        if isinstance(effect, Write):
            store.apply(effect)
    return effects


def after_victims_with_unanswered_stops() -> tuple[Ledger, SimStore, list[Vm], Lease, float]:
    """A node full of backfill; an on-demand VM too large to start beside its victims waits for
    their memory; the victims' stops are never answered and the node keeps reporting them until
    their deadline passes. Returns the books, the store, the VMs, the waiting lease, and a time
    after the victims' deadline but before the waiting lease's."""
    store = SimStore()
    ledger = Ledger(SETTINGS, BACKFILL, {}, counter())
    node_id, cpus, memory = NODE
    run(ledger, store, ledger.report(Report(node_id, "n1:1", cpus, memory, []), START))
    launches = [e for e in run(ledger, store, ledger.fill(START)) if isinstance(e, Launch)]
    vms = []
    for launch in launches:
        run(ledger, store, ledger.launch_done(launch.lease.lease_id, True, "", START + 1))
        lease = launch.lease
        vms.append(Vm(lease.vm_name, lease.lease_id, "backfill", lease.vcpus, lease.memory_mib, START + 1))
    assert len(vms) == 2
    run(ledger, store, ledger.request(Ask(2, 700, "tiny", "alice", "r1"), START + 10))
    waiting = next(l for l in ledger.leases.values() if l.state == "waiting")
    victims = [l for l in ledger.leases.values() if l.state == "preempting"]
    assert len(victims) == 2 and ledger.requests["r1"].path == "after_victims"
    expired = max(v.deadline for v in victims) + 0.5
    assert expired < waiting.deadline
    run(ledger, store, ledger.report(Report(node_id, "n1:1", cpus, memory, vms), expired - 1))
    effects = run(ledger, store, ledger.tick(expired))
    assert [e.kind for w in effects if isinstance(w, Write) for e in w.events].count("vm.stop_expired") == 2
    return ledger, store, vms, waiting, expired


def launched(effects: list) -> list[str]:
    return [e.lease.lease_id for e in effects if isinstance(e, Launch)]


def test_a_waiting_vm_never_starts_beside_victims_whose_stop_expired_unconfirmed():
    ledger, store, vms, waiting, expired = after_victims_with_unanswered_stops()
    node_id, cpus, memory = NODE
    effects = ledger.report(Report(node_id, "n1:1", cpus, memory, vms), expired + 1)
    assert waiting.lease_id not in launched(effects)
    assert ledger.leases[waiting.lease_id].state == "waiting"


def test_after_a_restart_the_unconfirmed_victims_still_hold_the_waiting_vm():
    _ledger, store, vms, waiting, expired = after_victims_with_unanswered_stops()
    node_id, cpus, memory = NODE
    restarted = rebuilt(store)
    assert restarted.unconfirmed == {vm.lease_id for vm in vms}
    for step in range(3):   # the node's reports still show both victims running
        effects = restarted.report(Report(node_id, "n1:1", cpus, memory, vms), expired + 1 + step)
        assert waiting.lease_id not in launched(effects)
    view = restarted.view(node_id)
    assert view.allocated.memory_mib > view.capacity.memory_mib   # victims' memory + the waiting VM's
    # The waiting lease's deadline ends it; its victims then hold nothing up in memory.
    restarted.tick(waiting.deadline + 1)
    assert waiting.lease_id not in restarted.leases and not restarted.unconfirmed


def test_a_waiting_vm_never_starts_on_a_node_that_runs_more_than_its_leases_explain():
    """Even with its victims' stops forgotten (the books of an older controller), the node's own
    report of what it runs keeps the waiting VM from starting beside them."""
    _ledger, store, vms, waiting, expired = after_victims_with_unanswered_stops()
    node_id, cpus, memory = NODE
    restarted = rebuilt(store)
    restarted.unconfirmed.clear()
    effects = restarted.report(Report(node_id, "n1:1", cpus, memory, vms), expired + 1)
    assert waiting.lease_id not in launched(effects)
    # Once the node no longer runs them, the waiting VM starts.
    later = restarted.report(Report(node_id, "n1:1", cpus, memory, []), expired + 2)
    assert waiting.lease_id in launched(later)
