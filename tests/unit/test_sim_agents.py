"""The simulator's agent models (controller/sim/agents.py): the interface the engine calls, and the
ideal agents reproducing the simulator's results from before agent models existed."""
from __future__ import annotations

from controller.core.records import BackfillConfig, LedgerSettings, Policy
from controller.sim.agents import AgentModel, IdealAgents, LaunchAnswer, StopAnswer, agent_model
from controller.sim.engine import DAY, SimSettings, Simulation
from controller.sim.traces import OnDemandRequest
from tests.unit.test_sim import REQUESTS, azure, scenario  # noqa: F401  (azure is a fixture)

END = 4000.0


def small(model: AgentModel | None = None, requests=REQUESTS, **settings) -> Simulation:
    """The hand-worked scenario of tests/unit/test_sim.py (2 nodes of 4 vCPUs, 1-vCPU backfill)."""
    base = SimSettings(nodes=2, node_cpus=4, node_memory_mib=8192, days=END / DAY, launch_seconds=5,
                       launch_jitter=0, stop_seconds=5, progress_seconds=0)
    config = BackfillConfig(enabled=True, vcpus=1, memory_mb=1024, grace_seconds=10,
                            termination_policy=Policy.MOST_RECENT, interruption="terminate")
    return Simulation(requests, SimSettings(**{**base.__dict__, **settings}), config,
                      LedgerSettings(use_prediction=False), agents=model)


def without_wall(summary):
    return {k: v for k, v in summary["figures"].items() if k not in ("wall_seconds", "sim_events_per_s")}


def test_the_default_agents_are_the_ideal_ones_and_the_header_says_so():
    sim = scenario(REQUESTS)
    summary = sim.run()
    assert isinstance(sim.agents, IdealAgents)
    assert summary["header"]["agents"] == dict(model="ideal", launch_seconds=5, launch_jitter=0, stop_seconds=5)
    assert summary["header"]["sim"]["agents"] == "ideal"
    assert without_wall(summary) == without_wall(small(IdealAgents(sim.settings)).run())


def test_an_unknown_model_is_refused_by_name():
    try:
        agent_model(SimSettings(agents="perfect"))
    except ValueError as exc:
        assert "'perfect'" in str(exc) and "ideal" in str(exc)
    else:
        raise AssertionError("an unknown model was accepted")


class Scripted(AgentModel):
    """A model whose answers a test sets: the first launch of each listed VM fails."""
    name = "scripted"

    def __init__(self, settings, failing=(), stop_seconds=5.0):
        super().__init__(settings)
        self.failing = set(failing)
        self.stop_seconds = stop_seconds
        self.calls: list[tuple] = []

    def launch(self, lease, now):
        self.calls.append(("launch", lease.vm_name, now))
        if lease.vm_name in self.failing:
            return LaunchAnswer(2.0, False, "no room on the node's disk")
        return LaunchAnswer(5.0, True)

    def stop(self, lease, grace_seconds, force, now):
        self.calls.append(("stop", lease.vm_name, now))
        return StopAnswer(0.0 if force else self.stop_seconds, "destroyed_forced" if force else "clean_shutdown")


def test_the_engine_answers_a_failed_launch_through_the_ledgers_failure_path():
    base = small()
    base.run()
    first_backfill = sorted(l.vm_name for l in base.store.leases.values() if l.role == "backfill")[0]
    model = Scripted(base.settings, failing={first_backfill})
    sim = small(model)
    sim.run()
    assert sim.store.events["vm.launch_failed"] == 1
    failed = [d for d in sim.store.details["vm.launch_failed"]]
    assert failed[0]["vm"] == first_backfill and failed[0]["reason"] == "no room on the node's disk"
    lease = next(l for l in sim.store.leases.values() if l.vm_name == first_backfill)
    assert lease.state == "failed"
    assert all(vm.name != first_backfill for node in sim.nodes.values() for vm in node.vms.values())
    # the ledger filled the room again later (the node's backfill backs off, then resumes)
    assert sim.summary()["figures"]["backfill_vms_launched"] >= base.summary()["figures"]["backfill_vms_launched"] - 1


def test_ideal_agents_reproduce_the_fingerprints_recorded_before_agent_models(azure):
    """The golden fingerprints of tests/data/sim_regression.json were written before agent models
    existed: the ideal agents, passed explicitly, give them again (every placement, victim and
    launch time)."""
    import json

    from controller.config import ControllerConfig, ledger_settings
    from controller.sim import traces
    from controller.sim.workload import stretch_to_load
    from tests.bench import simulate as bench
    from tests.unit.test_sim_regression import GOLDEN, digest

    golden = json.loads(GOLDEN.read_text())
    nodes, days = golden["nodes"], golden["days"]
    requests, _ = stretch_to_load(traces.azure_requests(azure), days * DAY, 0.6, nodes * 16)
    run = bench.settings_compared(nodes, days)["most_recent"]   # the default when they were written
    settings = SimSettings(nodes=nodes, days=days, progress_seconds=0.0)
    sim = Simulation(requests, settings, run["backfill"], ledger_settings(ControllerConfig()),
                     reserves=run["reserves"], agents=IdealAgents(settings))
    summary = sim.run()
    assert summary["events"] == golden["most_recent"]["events"]
    assert digest(sim.vm_rows()) == golden["most_recent"]["vm_rows"]
    assert digest(sim.store.details) == golden["most_recent"]["details"]
