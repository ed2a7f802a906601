"""The modelled agents' call lanes (controller/sim/agents.py, NodeLanes): the controller's
bulkhead per node (controller/bulkheads.py: at most agent_calls_per_node calls at once, one slot
kept for stops and on-demand launches, which go first) and an agent that works on its stops one
at a time, as the live agents on test:/// do; and their fit to a recording (controller/sim/replay.py)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from controller.core.records import BLANK_LEASE
from controller.sim.agents import AgentParamError, ModelledAgents, ModelledParams, NodeLanes
from controller.sim.engine import SimSettings
from controller.sim.replay_fit import agent_parallel_stops, service_times


def lease(vm: str, node: str = "n0", role: str = "backfill", request: str = ""):
    return replace(BLANK_LEASE, lease_id="l-" + vm, vm_name=vm, role=role, request_id=request, vcpus=1,
                   node_id=node, state="starting")


def model(**params) -> ModelledAgents:
    """Modelled agents whose launches and stops take exactly 1 s (p50 = p99) and never fail."""
    fixed = dict(launch_failure=0.0, launch_p50_seconds=1.0, launch_p99_seconds=1.0, stop_p50_seconds=1.0,
                 stop_p99_seconds=1.0)
    return ModelledAgents(SimSettings(agents="modelled", agent_params=tuple({**fixed, **params}.items()), seed=1))


def test_the_fifth_stop_on_a_node_waits_until_one_of_the_first_four_answered():
    agents = model()   # calls_per_node: the product's default, 4
    answers = [agents.stop(lease(f"v{i}"), 30, False, 0.0).seconds for i in range(5)]
    assert answers == [1.0, 1.0, 1.0, 1.0, 2.0]
    # another node's calls do not wait for this one's
    assert agents.stop(lease("w0", node="n1"), 30, False, 0.0).seconds == 1.0
    # once the first four answered, a stop goes at once again
    assert agents.stop(lease("v5"), 30, False, 1.5).seconds == 1.0


def test_backfill_launches_leave_a_slot_for_stops_and_on_demand_launches():
    agents = model()
    backfill = [agents.launch(lease(f"b{i}"), 0.0).seconds for i in range(4)]
    assert backfill == [1.0, 1.0, 1.0, 2.0]   # at most 3 backfill launches at once on a node
    # the kept slot: an on-demand launch goes at once beside three backfill launches
    assert agents.launch(lease("od", role="on_demand", request="r1"), 0.0).seconds == 1.0


def test_an_urgent_call_goes_before_the_backfill_launches_waiting_for_a_slot():
    lanes = NodeLanes(per_node=4)
    assert [lanes.call("n0", 0.0, 1.0, True, False) for _ in range(3)] == [1.0, 1.0, 1.0]
    assert lanes.call("n0", 0.0, 3.0, False, True) == 3.0          # a long stop holds the kept slot
    queued = [lanes.call("n0", 0.0, 1.0, True, False) for _ in range(4)]
    assert queued == [2.0, 2.0, 2.0, 3.0]                          # each waits for a backfill slot
    # a stop asked at 0.5: every slot is held until 1.0; then it goes first, not after the queued
    # backfill launches (first come first served would answer it at 3.0, 2.5 s after it was asked)
    assert lanes.call("n0", 0.5, 1.0, False, True) == pytest.approx(1.5)


def test_an_agent_that_works_on_one_stop_at_a_time_answers_a_batch_in_turn_but_launches_beside_it():
    agents = model(agent_parallel_stops=1, calls_per_node=8, stop_p50_seconds=0.01, stop_p99_seconds=0.01)
    stops = [agents.stop(lease(f"v{i}"), 30, False, 0.0).seconds for i in range(7)]
    assert stops == pytest.approx([0.01 * (i + 1) for i in range(7)])
    assert agents.launch(lease("od", role="on_demand", request="r1"), 0.0).seconds == 1.0
    # by default the agent works on every stop it is sent at once (only the bulkhead's 4 slots bind)
    agents = model(stop_p50_seconds=0.01, stop_p99_seconds=0.01)
    assert [agents.stop(lease(f"v{i}"), 30, False, 0.0).seconds for i in range(5)] == \
        pytest.approx([0.01, 0.01, 0.01, 0.01, 0.02])


def test_a_forced_stop_is_immediate_once_its_turn_comes_and_a_grace_counts_from_then():
    agents = model(stop_p50_seconds=50.0, stop_p99_seconds=50.0)
    assert [agents.stop(lease(f"v{i}"), 30, False, 0.0) for i in range(4)] == [(30.0, "destroyed_after_grace",
                                                                                 True, "")] * 4
    assert agents.stop(lease("v4"), 30, True, 0.0) == (30.0, "destroyed_forced", True, "")
    assert agents.stop(lease("v5"), 10, False, 0.0) == (40.0, "destroyed_after_grace", True, "")


@pytest.mark.parametrize("name,value", [("calls_per_node", 1), ("calls_per_node", 2.5), ("agent_parallel_stops", -1),
                                        ("agent_parallel_stops", 0.5)])
def test_lane_parameters_out_of_range_or_not_whole_are_refused_by_name(name, value):
    with pytest.raises(AgentParamError) as caught:
        ModelledParams.of([(name, value)])
    assert caught.value.name == name and name in str(caught.value)


# -- the fit --------------------------------------------------------------------------------------

def answers(batches: list[list[float]], gap: float = 10.0) -> SimpleNamespace:
    """A recording's stop answers on one node: batches of stops asked together, each at its own
    time (10 s apart), answered after the given delays."""
    lines = []
    for n, delays in enumerate(batches):
        for i, delay in enumerate(delays):
            asked = n * gap
            lines.append(dict(kind="stop_answer", t=asked + delay, delay_s=delay, node="n0", key=f"bf:n0#{n}-{i}",
                              ok=True))
    return SimpleNamespace(lines=sorted(lines, key=lambda line: line["t"]))


def test_the_fit_finds_an_agent_that_answers_a_batch_of_stops_in_turn():
    lone = [[0.006]] * 5
    serial = answers(lone + [[0.006 * (i + 1) for i in range(k)] for k in (4, 7, 7)])
    assert agent_parallel_stops(serial) == 1
    together = answers(lone + [[0.006] * k for k in (4, 7, 7)])
    assert agent_parallel_stops(together) >= 4
    assert agent_parallel_stops(answers(lone)) == 0   # no batch: nothing to fit, the bulkhead only
    # the stops' own times once their wait for the agent is taken out: each about 6 ms
    service = service_times(serial, 1)
    assert max(service.values()) == pytest.approx(0.006) and min(service.values()) == pytest.approx(0.006)
    assert max(service_times(serial, 0).values()) == pytest.approx(0.042)   # without: the 7th's whole delay


def test_a_batch_answered_in_a_burst_gives_each_stop_the_batchs_mean():
    """Three victims' stops answered 30 ms after they were asked, within 0.4 ms of each other:
    reckoned in turn, one took 30 ms and two 0.2 ms; drawn one by one, such times spread a
    request's wait for its victims far wider than the agent's did. Each takes the mean."""
    lone = [[0.006]] * 5
    burst = answers(lone + [[0.030, 0.0302, 0.0304]])
    service = service_times(burst, 1)
    batch = [service[id(line)] for line in burst.lines if line["key"].startswith("bf:n0#5-")]
    assert batch == pytest.approx([0.0304 / 3] * 3)
    assert sorted(v for k, v in service.items() if v not in batch) == pytest.approx([0.006] * 5)   # lone stops as they were


def test_the_live_p99s_own_spread_is_the_bootstrap_interval_of_its_largest_waits():
    from controller.sim.replay_compare import p99_spread
    waits = [0.04] * 146 + [0.10, 0.12, 0.20, 0.60]   # 150 waits: p99 is the second-largest
    spread = p99_spread(waits)
    assert spread["p99"] == 0.2 and spread == p99_spread(waits)   # seeded: the same every run
    assert spread["bootstrap_p5"] <= 0.12 and spread["bootstrap_p95"] == 0.6
    assert spread["relative_half_width"] > 1.0
    assert p99_spread([0.1] * 300)["relative_half_width"] == 0.0
    assert p99_spread([])["p99"] is None
