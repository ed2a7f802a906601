"""A goal-driven tenant's job done, through the controller's service in process (a real SQLite
store; the agents stand in, answering every call): its guests' reports say DONE = TOTAL, its
VMs are stopped and it is granted nothing more; `set_tenant_goal` then starts a new job, as the
old job's progress would otherwise say done at once."""
from __future__ import annotations


import json
import logging

import pytest

from controller.config import ControllerConfig
from controller.core.records import BackfillConfig, Lease, Policy, Size
from controller.service import PoolService
from controller.store import Store
from gleaner_common.config import TlsConfig
from controller.gleanctl import goal_state_text
from protos import controller_pb2
from controller.store import StoreError
from tests.unit.test_books_faults import Clock, RecordingAgents, drained, failing

GOAL = {"kind": "deadline", "work_vcpu_hours": 2.0}


def report(vms) -> controller_pb2.NodeReport:
    """Node n1 (2 CPUs, 1 GiB) with its VMs, each (lease, done, total)."""
    out = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=1024,
                                    images=["tiny"], min_memory_mib=32)
    for lease, done, total in vms:
        out.vms.add(name=lease.vm_name, lease_id=lease.lease_id, role="backfill", vcpus=1, memory_mib=256,
                    state="running", image="tiny", progress_done=done, progress_total=total,
                    progress_for_s=1.0 if total else 0.0)
    return out


@pytest.fixture
def service(tmp_path):
    clock, agents = Clock(), RecordingAgents()
    config = ControllerConfig(state_dir=tmp_path / "controller", tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False, host_headroom_mib=128)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=256, grace_seconds=3, retry_seconds=60,
                                      termination_policy=Policy.MOST_RECENT, interruption="terminate"))
    service = PoolService(config, store, agents, clock=clock)
    service.ingest(report([]))
    service.create_tenant("science", "batch", Size(1, 256), Size(2, 512))
    service.set_tenant_goal("science", dict(GOAL, deadline_s=clock.now + 7200))
    service.size_goals()
    service.fill()
    drained(service)
    yield service, clock
    service.close()
    store.close()


def science(service: PoolService) -> list:
    return [l for l in service.live_leases() if l.owner == "science" and l.role == "backfill"]


def events(service: PoolService, kind: str) -> list:
    return [e for e in service.store.events() if e.kind == kind]


def test_a_job_done_stops_its_vms_and_a_new_goal_starts_the_next(service):
    service, clock = service
    running = science(service)
    assert [l.state for l in running] == ["running", "running"]
    clock.now += 30
    service.ingest(report([(running[0], 7200, 7200), (running[1], 7000, 7200)]))   # the job is done
    clock.now += 60
    service.size_goals()
    drained(service)   # the stops answered before any fill (a fill racing them would take the room or not)
    assert not science(service)   # both stopped (the stand-in agents answer at once)
    [done] = events(service, "tenant.goal_done")
    assert done.detail["progress"] == "7200/7200"
    grants = service.ledger.current_grants(clock.now)
    assert not [g for g in grants if g.tenant == "science"]   # granted nothing more
    assert [(g.tenant, g.vms) for g in grants if g.vms] == [("backfill", 2)]   # its room goes to the other batch tenant
    service.set_tenant_goal("science", dict(GOAL, deadline_s=clock.now + 7200))   # the next job
    clock.now += 600
    service.size_goals()
    service.fill()
    drained(service)
    assert len(science(service)) == 2


def restarted(service: PoolService, clock: Clock) -> PoolService:
    """The controller restarted on the same store file: a new store and service, the books as
    the store has them (the progress book as the last goals job saved it)."""
    config, agents = service.config, service.agents
    service.close()
    service.store.close()
    again = PoolService(config, Store(config.store_path), agents, clock=clock)
    again.ingest(report([]))   # n1 reports again, without the tenant's VMs (they were stopped)
    return again


def test_a_job_done_stays_done_across_a_restart_until_its_goal_is_set_again(service):
    """Its guests said done and went with their VMs: only the store can say it after a restart.
    Without it the restarted books would grant the tenant a round of VMs for a finished job."""
    service, clock = service
    service.set_tenant_backfill("backfill", {"enabled": False}, reset=False)   # the room stays science's
    running = science(service)
    clock.now += 30
    service.ingest(report([(l, 7200, 7200) for l in running]))
    clock.now += 60
    service.size_goals()
    service.fill()
    drained(service)
    assert not science(service) and service.store.goals_done() == ["science"]
    service = restarted(service, clock)
    try:
        clock.now += 600
        service.size_goals()
        service.fill()
        drained(service)
        assert not science(service)   # granted nothing: the job is done
        sizing = service.ledger.sizings["science"]
        assert sizing.done and "as the store kept it" in sizing.explain
        shown = controller_pb2.Tenant(goal_state="done", goal_json="{}")
        assert goal_state_text(shown) == "done"   # not "on track, finish never"
        service.set_tenant_goal("science", dict(GOAL, deadline_s=clock.now + 7200))   # the next job
        assert service.store.goals_done() == []   # forgotten with the goal, in its transaction
        service = restarted(service, clock)
        clock.now += 600
        service.size_goals()
        service.fill()
        drained(service)
        assert len(science(service)) == 2
    finally:
        service.close()
        service.store.close()


def test_a_tenant_made_again_under_a_done_tenants_name_starts_afresh(service):
    service, clock = service
    clock.now += 30
    service.ingest(report([(l, 7200, 7200) for l in science(service)]))
    clock.now += 60
    service.size_goals()
    service.fill()
    drained(service)
    assert service.store.goals_done() == ["science"]
    service.delete_tenant("science", drain=True, wait_seconds=5)
    assert service.store.goals_done() == []


@pytest.mark.parametrize("key", ["goals_done", "goal_progress"])
def test_a_malformed_row_of_jobs_done_or_progress_is_read_as_none_and_the_admin_is_warned(service, caplog, key):
    """A goals_done row that is not a JSON list of names, or a goal_progress row that is not JSON
    (a hand edit, a torn copy), cannot say which jobs were done or how far they got: read as
    none, and said in the log when the books are loaded."""
    service, clock = service
    config, agents = service.config, service.agents
    service.close()
    service.store.close()
    import sqlite3
    db = sqlite3.connect(config.store_path)
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, '{\"science\": true')", (key,))
    db.commit()
    db.close()
    with caplog.at_level(logging.WARNING, logger="controller.service"):
        again = PoolService(config, Store(config.store_path), agents, clock=clock)
    try:
        [warned] = [r for r in caplog.records if r.getMessage() == "store.setting_unreadable"]
        assert warned.setting == key and warned.stored.startswith('{"science"') and key in warned.note
        assert again.store.goals_done() == [] and again.ledger.progress.history("science") == ()
    finally:
        again.close()
        again.store.close()


def test_on_demand_lives_come_back_from_the_store_after_a_restart(tmp_path):
    """The projected finish's departures (controller.core.departures) learn from how long on-demand
    VMs lived: the books read it from the store's ended leases when they load."""
    clock, agents = Clock(), RecordingAgents()
    config = ControllerConfig(state_dir=tmp_path / "controller", tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False, host_headroom_mib=128)
    service = PoolService(config, Store(config.store_path), agents, clock=clock)
    try:
        service.ingest(report([]))
        result = service.request(1, 256, "tiny", "web", "r1", wait_seconds=0)
        drained(service)
        clock.now += 900
        service.release(result.lease.lease_id, wait_seconds=0)
        drained(service)
        [(launched, ended)] = service.ledger.on_demand_lives
        assert ended - launched == 900.0
        service = restarted(service, clock)
        assert list(service.ledger.on_demand_lives) == [(launched, ended)]
        # backfill's ends fill the window of ended leases the books load: the store's own answer still has it
        service.store.put_leases([Lease(f"b{i}", "backfill", "n2", f"bf{i}", 1, 256, "tiny", "backfill", "ended",
                                        clock.now, launched_at=clock.now, ended_at=clock.now + 1 + i)
                                  for i in range(100_000)])
        service = restarted(service, clock)
        assert list(service.ledger.on_demand_lives) == [(launched, ended)]
    finally:
        service.close()
        service.store.close()


def test_the_store_gives_on_demand_lives_apart_from_other_ends(tmp_path):
    """Store.on_demand_lives: on-demand VMs that ran and ended, oldest end first, the newest
    `limit` of them; not backfill, not goals' dedicated VMs, not a launch that never ran.
    Apart from recently_ended, whose window backfill's ends may fill."""
    store = Store(tmp_path / "state.db")
    try:
        def ended(i: int, role: str, request_id: str = "", launched: bool = True) -> Lease:
            return Lease(f"l{i}", role, "n1", f"vm{i}", 1, 256, "tiny", "web", "ended", 100.0 + i,
                         launched_at=110.0 + i if launched else None, ended_at=1000.0 + i, request_id=request_id)
        store.put_leases([ended(0, "on_demand", "r0"), ended(1, "backfill"), ended(2, "on_demand", "goal-science-1"),
                          ended(3, "on_demand", "r3", launched=False), ended(4, "on_demand", "r4"),
                          ended(5, "on_demand", "r5"), *[ended(6 + i, "backfill") for i in range(10)]])
        assert store.on_demand_lives(10) == [(110.0, 1000.0), (114.0, 1004.0), (115.0, 1005.0)]
        assert store.on_demand_lives(2) == [(114.0, 1004.0), (115.0, 1005.0)]
        assert not [l for l in store.recently_ended(10) if l.role == "on_demand"]   # backfill filled that window
    finally:
        store.close()


@pytest.mark.parametrize("state, finish, goal, said", [
    ("at_risk", 5000.0, {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": 6000.0}, "(by the deadline only if on-demand VMs leave"),
    ("at_risk", 7000.0, {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": 6000.0}, None),
    ("on_track", 5000.0, {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": 6000.0}, None),
    ("at_risk", 5000.0, {"kind": "least_cost", "work_vcpu_hours": 1.0, "price_per_dedicated_vcpu_hour": 1}, None),
    ("at_risk", 0.0, {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": 6000.0}, None),   # never finishes
    ("on_track", 7000.0, {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": 6000.0},
     "(on track as sized; the finish projected comes after the deadline: the explanation says why)"),
    ("on_track", 7000.0, {"kind": "least_cost", "work_vcpu_hours": 1.0, "price_per_dedicated_vcpu_hour": 1}, None),
])
def test_show_says_when_the_finish_shown_and_the_goals_state_rest_on_different_figures(state, finish, goal, said):
    """At risk is sized as if no on-demand VM leaves; the finish shown counts those expected to
    leave: one before the deadline is said to rest on them, not left to look on track. On track
    is sized at the measured rate on the residual now; the finish shown is made at no more than
    the goal's own rate, in waves of its tasks on what it holds: one after the deadline says so,
    not left to look at risk."""
    shown = goal_state_text(controller_pb2.Tenant(goal_state=state, goal_projected_finish=finish,
                                                  goal_json=json.dumps(goal)))
    assert shown.startswith(state.replace("_", " "))
    assert (said in shown) if said else "(" not in shown


def test_the_progress_book_the_goals_job_saved_comes_back_after_a_restart(service):
    """Each goals job saves the progress book when it changed; the books loaded again have the
    same history, so the rate and task length measured before carry on."""
    service, clock = service
    running = science(service)
    for done in (0, 100, 200):
        clock.now += 600
        service.ingest(report([(running[0], done, 7200), (running[1], done, 7200)]))
    history = service.ledger.progress.history("science")
    assert [done for _t, done, _v in history] == [0, 100, 200]
    service.size_goals()
    again = restarted(service, clock)
    try:
        assert again.ledger.progress.history("science") == history
        assert again.ledger.progress.progress("science").done == 200
        assert "science" in again.store.goal_progress()
        again.delete_tenant("science", drain=True, wait_seconds=5)   # one made later under its name starts afresh
        assert "science" not in again.store.goal_progress()
    finally:
        again.close()
        again.store.close()



def test_a_reload_after_a_failed_write_keeps_the_progress_not_yet_saved_and_saves_it_later(service):
    """The books reloaded after a write the store refused keep the progress book they had (newer
    than the store's), and the next goals job saves it."""
    service, clock = service
    running = science(service)
    for done in (0, 100):
        clock.now += 600
        service.ingest(report([(running[0], done, 7200), (running[1], done, 7200)]))
    history = service.ledger.progress.history("science")
    assert len(history) == 2 and "science" not in (service.store.goal_progress() or {})
    with failing(service.store, "read_only"):
        with pytest.raises(StoreError):
            service.request(1, 256, "tiny", "web", "r1", wait_seconds=0)
    assert service.ledger.progress.history("science") == history
    service.size_goals()
    assert [s[1] for s in service.store.goal_progress()["science"]["history"]] == [0, 100]
