"""A small simulation with tenants end to end (controller/sim/tenants.py): the live books' bounds
and goal sizing, driven by the simulator, keep every tenant within its bounds and meet a goal."""
from __future__ import annotations

from controller.config import ControllerConfig, ledger_settings
from controller.core.goal_sizing import GOAL_INTERVAL_S
from controller.core.records import ZERO, BackfillConfig
from controller.sim.engine import HOUR, SimSettings
from controller.sim.tenants import TenantSimulation, TenantJobs, tenants_config
from controller.sim.trace_base import Job, OnDemandRequest

NODES = 8   # 16 vCPUs, 64 GiB each: 128 vCPUs
BACKFILL = BackfillConfig(enabled=True, vcpus=1, memory_mb=4096, retry_seconds=60, interruption="terminate")


def size(vcpus: int) -> dict:
    return dict(vcpus=vcpus, memory_mib=vcpus * 4096)


def config(deadline_after_s: float = 8 * HOUR) -> dict:
    return dict(rbt=1.0, urr=0.8, tenants=[
        dict(name="web", kind="on_demand", lower=size(16), upper=size(48), share=1.0),
        dict(name="science", kind="batch", lower=size(16), upper=size(64), start_s=HOUR,
             backfill=dict(vcpus=1, memory_mb=4096),
             goal=dict(kind="deadline", work_vcpu_hours=32, deadline_after_s=deadline_after_s),
             work=dict(vcpu_hours=32, procs=1, runtime_s=600)),
        dict(name="bulk", kind="batch", lower=size(8), upper=size(16), owners=["7"],
             backfill=dict(vcpus=1, memory_mb=4096)),
        dict(name="backfill", kind="batch", lower=size(0), upper=size(0), backfill=dict(enabled=False))])


def requests() -> list[OnDemandRequest]:
    """web asks for 2-vCPU VMs of an hour, one every 2 minutes for 10 hours: up to 60 vCPUs at
    once, past its upper bound of 48 (some are refused by it)."""
    return [OnDemandRequest(at=120.0 * i, vcpus=2, memory_mib=8192, lifetime=HOUR, owner="web",
                            request_id=f"r{i}") for i in range(300)]


def bulk_jobs() -> list[Job]:
    return [Job(30.0 * i, 900.0, 1, f"b{i}", 0, user=7) for i in range(400)]


def simulate(deadline_after_s: float = 8 * HOUR):
    tenants = tenants_config(config(deadline_after_s))
    sim = TenantSimulation(tenants, requests(), SimSettings(nodes=NODES, days=12 * HOUR / 86400, progress_seconds=0.0),
                           BACKFILL, ledger_settings(ControllerConfig()), trace_jobs=bulk_jobs())
    return sim, sim.run()


def test_two_tenants_stay_within_their_bounds_and_the_goal_is_met():
    sim, summary = simulate()
    figures, tenants = summary["figures"], summary["tenants"]
    assert figures["lower_bound_violations"] == 0
    assert figures["upper_bound_violations"] == 0
    web = tenants["web"]
    assert web["rejected"].get("tenant_upper_bound", 0) > 0   # it asked past its upper bound
    assert web["time_above_upper_share"] == 0.0
    goal = tenants["science"]["goal"]
    assert goal["met"] is True, goal
    assert goal["start_s"] == HOUR and goal["deadline_s"] == 9 * HOUR
    assert goal["finished_s"] <= goal["deadline_s"]
    assert goal["finish_error_at_half"] is not None
    # the progress reached the books as the agents' reports would bring it
    progress = sim.ledger.progress.progress("science")
    assert progress is not None and progress.total == 32 * 3600
    assert tenants["science"]["jobs_completed"] == tenants["science"]["jobs"]
    science, bulk = tenants["science"], tenants["bulk"]   # PSF: lower bounds 16 and 8 vCPUs
    assert (science["psf_vcpus"], bulk["psf_vcpus"]) == (round(16 / 24, 4), round(8 / 24, 4))
    assert abs(science["backfill_share"] + bulk["backfill_share"] - 1) < 1e-3
    assert bulk["time_above_upper_share"] == science["time_above_upper_share"] == 0.0


def test_each_batch_tenant_runs_only_its_own_jobs():
    sim, summary = simulate()
    leases = list(sim.store.leases.values())
    for name in ("science", "bulk"):
        queue = sim.work.queues[name]
        assert isinstance(queue, TenantJobs)
        mine = [l for l in leases if l.owner == name and l.launched_at is not None
                and (l.role == "backfill" or l.request_id.startswith("goal-"))]
        assert queue.started == len(mine) > 0   # every VM that ran its jobs is its own
        assert {j.job_id[0] for j in queue.jobs} == ({"s"} if name == "science" else {"b"})
    assert "backfill" not in sim.work.queues   # the built-in tenant has no jobs (and its backfill is off)
    assert sim.ledger.backfill_usage.get("backfill", ZERO) == ZERO


def test_a_deadline_too_tight_is_reported_missed():
    _sim, summary = simulate(deadline_after_s=600)   # 32 vCPU-hours in 10 minutes: no pool does it
    goal = summary["tenants"]["science"]["goal"]
    assert goal["met"] is False
    assert goal["on_track_at_end"] is False or goal["finished_s"] > goal["deadline_s"]


def test_a_pinned_tenant_holds_its_dedicated_vcpus_from_its_start_and_every_volunteer():
    """The hindsight search's what-if (TenantSimulation pinned_dedicated): science's sizing is
    replaced by 6 dedicated vCPUs held from its start, whose VMs run its jobs; without the pin the
    same run buys none (its deadline is met by volunteers)."""
    tenants = tenants_config(config())
    sim = TenantSimulation(tenants, requests(), SimSettings(nodes=NODES, days=12 * HOUR / 86400, progress_seconds=0.0),
                           BACKFILL, ledger_settings(ControllerConfig()), trace_jobs=bulk_jobs(),
                           pinned_dedicated={"science": 6})
    summary = sim.run()
    goal = summary["tenants"]["science"]["goal"]
    assert goal["met"] is True
    dedicated = [l for l in sim.store.leases.values() if l.owner == "science" and l.request_id.startswith("goal-")]
    assert len(dedicated) == 6 and all(l.launched_at is not None and l.launched_at < HOUR + 120 for l in dedicated)
    assert goal["dedicated_vcpu_hours"] >= 6 * (goal["finished_s"] - HOUR) / HOUR   # held to its finish, at least
    assert sim.ledger.sizings["science"].dedicated_vcpus == 6 and "pinned" in sim.ledger.sizings["science"].explain
    _sim, plain = simulate()
    assert plain["tenants"]["science"]["goal"]["dedicated_vcpu_hours"] == 0.0


def test_goals_are_sized_by_their_own_job_at_even_times_not_in_the_fills():
    """As the controller's scheduler does (controller/cli.py, the goals job): sized when the goal
    is set (its start) and every GOAL_INTERVAL_S on the clock, never at a fill's instant,
    which comes right after what asked for it (a dip in the residual)."""
    tenants = tenants_config(config())
    sim = TenantSimulation(tenants, requests(), SimSettings(nodes=NODES, days=4 * HOUR / 86400, progress_seconds=0.0),
                           BACKFILL, ledger_settings(ControllerConfig()), trace_jobs=bulk_jobs())
    sized_at, fills = [], []
    real_size, real_fill = sim.ledger._size, sim.ledger.fill

    def size(tenant, goal, now):
        sized_at.append(now)
        return real_size(tenant, goal, now)

    def fill(now, *args):
        fills.append(now)
        return real_fill(now, *args)

    sim.ledger._size, sim.ledger.fill = size, fill
    sim.run()
    assert sized_at[0] == HOUR and len(sized_at) >= 20   # from its start, every minute until its job is done
    assert all(t % GOAL_INTERVAL_S == 0 for t in sized_at)
    gaps = [b - a for a, b in zip(sized_at, sized_at[1:])]
    assert set(gaps) <= {0.0, GOAL_INTERVAL_S} and gaps.count(0.0) <= 1   # at its start: the goal set, and the job
    assert len([t for t in fills if t % GOAL_INTERVAL_S]) > len(sized_at)   # fills came between, sizing none
