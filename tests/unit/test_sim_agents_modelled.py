"""The modelled agents (controller/sim/agents.py): their draws are the same per VM and per request
whatever else runs, and each kindness of the ideal agents they take away changes what the ledger
sees: failed launches, varying stop times, late reports, noisy CPU figures."""
from __future__ import annotations

import statistics
from dataclasses import replace
from types import SimpleNamespace

import pytest

from controller.config import ControllerConfig, ledger_settings
from controller.core.ledger import IDLE_CPU_CORES
from controller.core.records import BLANK_LEASE, BackfillConfig, Policy
from controller.sim import cli, traces
from controller.sim.agents import (AgentParamError, ModelledAgents, ModelledParams, SampledVm, draw_key, uniform)
from controller.sim.engine import DAY, SimSettings, Simulation
from controller.sim.jobs import JobLevelWork
from controller.sim.traces import Job
from controller.sim.workload import stretch_to_load
from tests.unit.test_sim import AZURE, AZURE_SMALL, azure  # noqa: F401  (azure is a fixture)


def lease(vm: str, role: str = "backfill", request: str = "", lease_id: str = "lease-1"):
    return replace(BLANK_LEASE, lease_id=lease_id, vm_name=vm, role=role, request_id=request, vcpus=1,
                   node_id="n0", state="starting")


def model(**params) -> ModelledAgents:
    return ModelledAgents(SimSettings(agents="modelled", agent_params=tuple(params.items()), seed=7))


class Recording(ModelledAgents):
    """The modelled agents, keeping every answer they give and every report lag."""

    def __init__(self, settings):
        super().__init__(settings)
        self.launches: list[tuple] = []
        self.stop_answers: list[tuple] = []
        self.lags: list[tuple[str, float, float]] = []

    def launch(self, lease, now):
        answer = super().launch(lease, now)
        self.launches.append((lease, now, answer))
        return answer

    def stop(self, lease, grace_seconds, force, now):
        answer = super().stop(lease, grace_seconds, force, now)
        self.stop_answers.append((lease, grace_seconds, force, answer))
        return answer

    def report_lag(self, node_id, now):
        lag = super().report_lag(node_id, now)
        self.lags.append((node_id, now, lag))
        return lag


def azure_run(backfill: bool, days: float = 0.25, nodes: int = 30, **params) -> tuple[Simulation, Recording]:
    settings = SimSettings(nodes=nodes, days=days, progress_seconds=0, agents="modelled",
                           agent_params=tuple(params.items()), seed=3)
    requests, _ = stretch_to_load(traces.azure_requests(AZURE), days * DAY, 0.6, nodes * 16)
    agents = Recording(settings)
    sim = Simulation(requests, settings, BackfillConfig(enabled=backfill, interruption="terminate"),
                     ledger_settings(ControllerConfig()), agents=agents)
    sim.run()
    return sim, agents


# -- the draws ------------------------------------------------------------------------------------

def test_a_draw_depends_only_on_the_seed_and_its_key():
    assert uniform(1, "vm:a", "stop_s") == uniform(1, "vm:a", "stop_s")
    assert len({uniform(1, "vm:a", "stop_s"), uniform(2, "vm:a", "stop_s"), uniform(1, "vm:b", "stop_s"),
                uniform(1, "vm:a", "launch_s")}) == 4
    assert 0 < min(uniform(0, str(i)) for i in range(1000)) and max(uniform(0, str(i)) for i in range(1000)) < 1


def test_an_on_demand_vms_draws_follow_its_request_not_its_lease_nor_what_was_drawn_before():
    first, second = model(launch_failure=0.3), model(launch_failure=0.3)
    for i in range(50):   # other VMs' launches first, in the second model only
        second.launch(lease(f"vm-{i}"), 0.0)
    a = first.launch(lease("vm-9", "on_demand", "req-42", "lease-9"), 0.0)
    b = second.launch(lease("vm-77", "on_demand", "req-42", "lease-77"), 100.0)
    assert a == b
    assert draw_key(lease("vm-9", "on_demand", "req-42")) == "request:req-42"
    # a second launch of the same request (after a failure) draws afresh
    again = first.launch(lease("vm-10", "on_demand", "req-42", "lease-10"), 5.0)
    assert again.seconds != a.seconds and first.attempts["request:req-42"] == 2


def test_runs_with_and_without_backfill_give_each_on_demand_vm_the_same_draws(azure):
    # the draws, not the node's call lanes (tests/unit/test_sim_lanes.py: a call may wait for a slot)
    with_backfill, agents_on = azure_run(True, launch_failure=0.1, calls_per_node=1023)
    without, agents_off = azure_run(False, launch_failure=0.1, calls_per_node=1023)
    on = {(l.request_id, n): a for n, (l, _, a) in enumerate_attempts(agents_on.launches)}
    off = {(l.request_id, n): a for n, (l, _, a) in enumerate_attempts(agents_off.launches)}
    both = set(on) & set(off)
    assert len(both) >= 100, len(both)
    assert all(on[k] == off[k] for k in both)
    assert sum(not on[k].ok for k in both) >= 5   # failures among them, the same ones
    assert len({on[k].seconds for k in both}) == len(both)   # and the times vary
    # the lease ids differ (backfill's leases are numbered among them): keyed by lease, they would not match
    lease_of_on = {(l.request_id, n): l.lease_id for n, (l, _, _) in enumerate_attempts(agents_on.launches)}
    lease_of_off = {(l.request_id, n): l.lease_id for n, (l, _, _) in enumerate_attempts(agents_off.launches)}
    assert sum(lease_of_on[k] != lease_of_off[k] for k in both) > len(both) / 2


def enumerate_attempts(launches):
    """(attempt number within its request, launch) for the on-demand launches."""
    seen: dict[str, int] = {}
    for entry in launches:
        if entry[0].role != "on_demand":
            continue
        n = seen.get(entry[0].request_id, 0)
        seen[entry[0].request_id] = n + 1
        yield n, entry


# -- launch failures --------------------------------------------------------------------------------

def test_failed_launches_go_through_the_ledgers_failure_path_and_backfill_is_refilled(azure):
    sim, agents = azure_run(True, launch_failure=0.05)
    failed = [l for l, _, a in agents.launches if not a.ok]
    assert sim.store.events["vm.launch_failed"] == len(failed) > 10
    leases = sim.store.leases
    assert all(leases[l.lease_id].state == "failed" for l in failed)
    assert all(l.vm_name not in node.vms for l in failed for node in sim.nodes.values())
    refilled = 0
    for l in (l for l in failed if l.role == "backfill"):
        ended = leases[l.lease_id].ended_at
        refilled += any(o.role == "backfill" and o.node_id == l.node_id and o.launched_at and o.launched_at > ended
                        for o in leases.values())
    assert refilled >= 0.8 * sum(l.role == "backfill" for l in failed)
    od_failed = [l for l in failed if l.role == "on_demand"]
    figures = sim.summary()["figures"]
    assert figures["requests_failed"] == len({l.request_id for l in od_failed})
    # with no failures there are none
    none, _ = azure_run(True, launch_failure=0.0)
    assert none.store.events["vm.launch_failed"] == 0


# -- stop times -------------------------------------------------------------------------------------

def test_stop_times_vary_and_follow_the_measured_distribution():
    agents = model()
    p = agents.params
    # one stop at a time on the node: none waits for a slot in its call lanes
    times = [agents.stop(lease(f"vm-{i}"), 3600, False, i * 1e4).seconds for i in range(20000)]
    assert statistics.median(times) == pytest.approx(p.stop_p50_seconds, rel=0.03)
    p99 = sorted(times)[int(0.99 * len(times))]
    assert p99 == pytest.approx(p.stop_p99_seconds, rel=0.08)
    # a shutdown longer than the grace is destroyed at the grace; a forced stop at once
    answers = [agents.stop(lease(f"vm-{i}"), 2, False, 1e9 + i * 1e4) for i in range(2000)]
    assert {a.outcome for a in answers if a.seconds == 2} == {"destroyed_after_grace"}
    assert all(a.outcome == "clean_shutdown" and a.seconds < 2 for a in answers if a.seconds != 2)
    assert 0.05 < sum(a.seconds == 2 for a in answers) / len(answers) < 0.5
    assert agents.stop(lease("vm-x"), 30, True, 2e9) == (0.0, "destroyed_forced", True, "")


def test_launch_times_follow_the_measured_distribution():
    agents = model()
    times = [agents.launch(lease(f"vm-{i}"), i * 1e4).seconds for i in range(20000)]
    assert statistics.median(times) == pytest.approx(agents.params.launch_p50_seconds, rel=0.03)
    assert sorted(times)[int(0.99 * len(times))] == pytest.approx(agents.params.launch_p99_seconds, rel=0.08)


def test_the_ledger_sees_the_stop_times_the_agents_answer(azure):
    sim, agents = azure_run(True)
    clean = [a.seconds for _, _, force, a in agents.stop_answers if not force and a.outcome == "clean_shutdown"]
    assert len(clean) > 50 and len(set(clean)) == len(clean)
    ended = [l for l, _, force, a in agents.stop_answers if not force]
    assert all(sim.store.leases[l.lease_id].state in ("ended", "failed", "preempted") for l in ended)


# -- report lag -------------------------------------------------------------------------------------

def test_reports_come_late_but_within_one_interval_at_each_nodes_own_phase(azure):
    sim, agents = azure_run(True)
    interval = agents.params.report_seconds
    lags = [lag for _, _, lag in agents.lags]
    assert len(lags) > 500
    assert all(0 <= lag < interval for lag in lags)
    # spread over the interval (not uniform: launches asked at one node's report are answered
    # together, a launch time after its tick)
    assert min(lags) < 0.05 * interval and max(lags) > 0.95 * interval
    assert 0.25 * interval < statistics.mean(lags) < 0.75 * interval
    # each node reports at its own phase of the interval
    for node_id, now, lag in agents.lags[:500]:
        assert (now + lag) % interval == pytest.approx(agents.phase[node_id] % interval, abs=1e-6) or \
            abs((now + lag) % interval - agents.phase[node_id]) == pytest.approx(interval, abs=1e-6)
    assert len({round(p, 6) for p in agents.phase.values()}) == len(sim.nodes)


def test_a_nodes_changes_while_its_report_is_on_its_way_go_in_that_one_report():
    settings = SimSettings(nodes=1, node_cpus=4, node_memory_mib=8192, days=0.05, progress_seconds=0,
                           agents="modelled", agent_params=(("launch_failure", 0.0), ("report_seconds", 60.0)))
    agents = Recording(settings)
    sim = Simulation([], settings, BackfillConfig(enabled=True, vcpus=1, memory_mb=1024, interruption="terminate"),
                     ledger_settings(ControllerConfig()), agents=agents)
    reported: list[float] = []
    ledger_report = sim.ledger.report
    sim.ledger.report = lambda report, now: reported.append(now) or ledger_report(report, now)
    sim.run()
    launched = [now + a.seconds for _, now, a in agents.launches]
    assert len(launched) == 4    # the node's four vCPUs filled at once
    # one report after the first report: all four launches (answered within a second or two) in it
    after_start = [t for t in reported if t > 0]
    assert len(after_start) == 1
    assert max(launched) <= after_start[0] < min(launched) + 60


# -- sampled CPU ------------------------------------------------------------------------------------

def sampled(agents: ModelledAgents, true_cores: float, vcpus: int = 4, samples: int = 5000) -> list[float]:
    clock = SimpleNamespace(agents=agents, now=0.0)
    vm = SampledVm(replace(lease("vm-a"), vcpus=vcpus), 0.0, clock)
    vm.cpu_cores = true_cores
    out = []
    for i in range(samples):
        vm.resample(float(i))
        out.append(vm.cpu_cores)
    assert vm.true_cores == true_cores
    return out


def test_noisy_cpu_flips_idleness_only_near_the_threshold():
    agents = model(cpu_noise_cores=0.02)
    for far in (0.0, 1.0, 2.0, 4.0):
        values = sampled(agents, far)
        assert len(set(values)) > 100   # noisy
        assert {v < IDLE_CPU_CORES for v in values} == {far < IDLE_CPU_CORES}
    idle = sampled(agents, 0.0)
    assert min(idle) > 0 and 0.005 < statistics.median(idle) < 0.03   # around the idle floor, folded at 0
    busy = sampled(agents, 1.0)
    assert statistics.mean(busy) == pytest.approx(0.97 + 0.01, abs=0.005) and max(busy) <= 4
    near = sampled(agents, 0.245)   # 0.245 x 0.97 + 0.01 = 0.2477: either side
    share_idle = sum(v < IDLE_CPU_CORES for v in near) / len(near)
    assert 0.2 < share_idle < 0.8


def test_the_ledger_judges_idleness_from_the_sampled_figures(azure):
    jobs = [Job(60.0 * i, 600.0 + 37 * (i % 11), 1, f"j{i}", 0) for i in range(400)]
    settings = SimSettings(nodes=10, days=0.2, progress_seconds=0, agents="modelled", seed=1)
    requests, _ = stretch_to_load(traces.azure_requests(AZURE), 0.2 * DAY, 0.5, 160)
    sim = Simulation(requests, settings, BackfillConfig(enabled=True, termination_policy=Policy.IDLE_FIRST,
                                                        interruption="terminate"),
                     ledger_settings(ControllerConfig()), work=JobLevelWork(jobs, 1))
    sim.run()
    vms = [vm for node in sim.nodes.values() for vm in node.vms.values() if vm.role == "backfill"]
    assert vms and all(isinstance(vm, SampledVm) for vm in vms)
    # what the ledger reads is a sample (a busy 1-vCPU VM's may be capped at exactly 1 core)
    assert sum(vm.cpu_cores != vm.true_cores for vm in vms) > 0.5 * len(vms)
    assert {vm.cpu_cores < IDLE_CPU_CORES for vm in vms} == {vm.true_cores < IDLE_CPU_CORES for vm in vms}


# -- parameters and the CLI --------------------------------------------------------------------------

@pytest.mark.parametrize("pairs, message", [
    ((("launch_failure", 0.6),), "launch_failure = 0.6: allowed 0 to 0.5"),
    ((("stop_p50_seconds", 3.0), ("stop_p99_seconds", 2.0)), "stop_p99_seconds = 2 is below stop_p50_seconds = 3"),
    ((("jitter", 1.0),), "'jitter' unknown"),
    ((("cpu_noise_cores", -1.0),), "cpu_noise_cores = -1: allowed 0 to 4"),
    ((("backfill_launch_p50_seconds", 0.05),), "or both set, not one"),
    ((("backfill_launch_p50_seconds", 0.2), ("backfill_launch_p99_seconds", 0.1)),
     "backfill_launch_p99_seconds = 0.1 is below backfill_launch_p50_seconds = 0.2"),
])
def test_bad_parameters_are_refused_by_name(pairs, message):
    with pytest.raises(AgentParamError, match=message.replace("(", r"\(")):
        ModelledParams.of(pairs)


@pytest.mark.parametrize("flags, message", [
    (["--launch-failure", "0.9"], "--launch-failure: agent parameter launch_failure = 0.9: allowed 0 to 0.5"),
    (["--agents", "ideal", "--stop-p50-seconds", "2"], "--stop-p50-seconds sets the modelled agents"),
    (["--stop-seconds", "2"], "--stop-seconds is the ideal agents' fixed time: it needs --agents ideal"),
    (["--agents", "ideal", "--launch-seconds", "-1"], "--launch-seconds -1: allowed 0 to 3600"),
    (["--compare", "agents=perfect"], "agents is one of ideal, modelled"),
])
def test_the_cli_refuses_bad_agent_flags_with_a_clear_error(flags, message, capsys):
    assert cli.main(["--requests", str(AZURE_SMALL), "--format", "azure", "--quiet", *flags]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_runs_modelled_agents_by_default_and_the_header_records_them(tmp_path, capsys):
    assert cli.main(["--requests", str(AZURE_SMALL), "--format", "azure", "--quiet", "--nodes", "4", "--days", "0.1",
                     "--backfill", "enabled=true", "interruption=terminate", "--launch-failure", "0.2", "--seed", "5",
                     "--out", str(tmp_path)]) == 0
    import json
    header = json.loads((tmp_path / "summary.json").read_text())["header"]
    assert header["agents"]["model"] == "modelled" and header["agents"]["launch_failure"] == 0.2
    assert header["agents"]["seed"] == 5 and header["agents"]["stop_p50_seconds"] == ModelledParams().stop_p50_seconds
    assert header["sim"]["agent_params"] == [["launch_failure", 0.2]]
    capsys.readouterr()
    assert cli.main(["--requests", str(AZURE_SMALL), "--format", "azure", "--quiet", "--nodes", "4", "--days", "0.1",
                     "--backfill", "enabled=true", "interruption=terminate",
                     "--compare", "agents=ideal,agents=modelled"]) == 0
    assert "agents=ideal" in capsys.readouterr().out


def test_backfill_launches_take_their_own_times_and_on_demand_launches_keep_theirs():
    """The replay fits backfill launches to the recorded refills (slower: they launch beside
    others); an on-demand launch's draw is the same whether or not they are set, so that runs with
    and without them compare the same on-demand VMs."""
    def agents(**own):
        made = model(launch_p50_seconds=0.04, launch_p99_seconds=0.08, **own)
        made.bind(SimSettings(agents="modelled"), ["n0"])
        return made

    def launched(made, leases):   # one at a time, each after the last answered: no wait in the lanes
        return [made.launch(l, 100.0 * i).seconds for i, l in enumerate(leases)]
    own = dict(backfill_launch_p50_seconds=0.4, backfill_launch_p99_seconds=0.8)
    on_demand = [lease(f"od{i}", "on_demand", f"r{i}", f"od-{i}") for i in range(50)]
    backfill = [lease(f"bf{i}", "backfill", "", f"bf-{i}") for i in range(50)]
    assert launched(agents(), on_demand) == launched(agents(**own), on_demand)
    quick, slow = launched(agents(), backfill), launched(agents(**own), backfill)
    assert slow == pytest.approx([10 * q for q in quick])   # the same draws, through a median 10 times longer


# -- the launcher's delay -------------------------------------------------------------------------------

class FillsAsked(Simulation):
    """The simulation, noting when each fill was scheduled and for when (an event asked for it),
    and when each fill ran, periodic or asked."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scheduled: list[tuple[float, float]] = []
        self.ran: list[tuple[float, bool]] = []   # (when, periodic)
        self._periodic_now = False

    def at(self, when, callback, arg=None) -> None:
        if getattr(callback, "__name__", "") == "_fill":
            self.scheduled.append((self.now, when))
        super().at(when, callback, arg)

    def _fill(self, arg=None) -> None:
        self.ran.append((self.now, self._periodic_now))
        super()._fill(arg)

    def _periodic_fill(self, arg) -> None:
        self._periodic_now = True
        try:
            super()._periodic_fill(arg)
        finally:
            self._periodic_now = False


def fills_asked(delay: float) -> FillsAsked:
    settings = SimSettings(nodes=30, days=0.25, progress_seconds=0, agents="modelled",
                           agent_params=(("fill_delay_seconds", delay),), seed=3)
    requests, _ = stretch_to_load(traces.azure_requests(AZURE), 0.25 * DAY, 0.6, 30 * 16)
    sim = FillsAsked(requests, settings, BackfillConfig(enabled=True, interruption="terminate"),
                     ledger_settings(ControllerConfig()))
    sim.run()
    return sim


def test_a_fill_runs_the_launchers_delay_after_it_is_asked_and_serves_what_asks_meanwhile(azure):
    """Live, a fill asked for runs on the scheduler's thread a few ms later, and the events that
    ask meanwhile (a batch of victims' stops answering ms apart) make that one fill."""
    at_once, delayed = fills_asked(0.0), fills_asked(0.0056)
    assert at_once.scheduled and all(when == now for now, when in at_once.scheduled)
    assert all(when - now == pytest.approx(0.0056) for now, when in delayed.scheduled)
    assert len(delayed.scheduled) < len(at_once.scheduled)   # answers within the delay share a fill
    assert ModelledAgents(SimSettings(agents="modelled")).fill_delay == ModelledParams().fill_delay_seconds > 0


def test_the_periodic_fill_comes_retry_seconds_after_the_last_fill_as_live(azure):
    """Live, the periodic fill and an asked one are one scheduler job: each run sets the next to
    that run + retry_seconds. So a periodic fill comes only after retry_seconds without a fill,
    never beside a fill asked for and on its way (which is that run: it serves what asks
    meanwhile), and no gap between fills is longer than retry_seconds (and the launcher's delay,
    when an ask came just before the period ended)."""
    for delay in (0.0056, 30.0):   # 30 s: asked fills are often on their way when the period ends
        sim = fills_asked(delay)
        retry = sim.ledger.backfill.retry_seconds
        periodic = [i for i, (_when, is_periodic) in enumerate(sim.ran) if is_periodic]
        assert len(periodic) > 3 and len(sim.ran) > 10 * len(periodic)
        assert all(sim.ran[i][0] - sim.ran[i - 1][0] >= retry - 1e-6 for i in periodic if i)
        assert all(b[0] - a[0] <= retry + delay + 1e-6 for a, b in zip(sim.ran, sim.ran[1:]))
        # an asked fill is never scheduled while another is on its way
        assert all(later[0] >= earlier[1] for earlier, later in zip(sim.scheduled, sim.scheduled[1:]))


