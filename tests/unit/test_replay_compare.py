"""Replay (controller/sim/replay.py) and its comparison (controller/sim/replay_compare.py), in one
process: a recording made by driving the real Ledger directly, as the live service does (random
lease ids, the Recorder's hooks at the service's points, agents that answer after delays of their
own, nodes that report as their VMs change, periodic and triggered fills, ticks), replays
identically through the simulator; a tampered recording shows the difference, unexplained.
The live pool itself is tests/integration/test_replay_pool.py and tests/bench/replay.py."""
from __future__ import annotations

import heapq
import io
import itertools
import json
import random
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from controller.core.ledger import Ledger
from controller.core.records import Ask, BackfillConfig, Launch, LedgerSettings, Stop
from controller.effects import carry_out
from controller.recording import Recorder
from controller.sim.replay import IN_STEP_S, answer_delay, load, predict, replay
from controller.sim.replay_fit import answer_figures, fill_delay
from controller.sim.replay_compare import aggregates, backfill_made, compare, decisions, prediction_error
from controller.sim.world import Report, SimNode, SimVm

NODE_CPUS, NODE_MIB = 16, 24576
BACKFILL = BackfillConfig(enabled=True, vcpus=1, memory_mb=1024, interruption="terminate")
SMALL, LARGE = (2, 512), (4, NODE_MIB - 16 * 1024 - 256 + 512)   # instant path; after_victims path


def delay(name: str, low: float, spread: float) -> float:
    """An agent's time for a call about `name`: its own, spread over [low, low + spread)."""
    return low + spread * (zlib.crc32(name.encode()) % 1000) / 1000


class LedgerDriver:
    """The live service's loop in one process: the real Ledger with random lease ids, its effects
    carried out by controller.effects, the Recorder called where the service calls it."""

    def __init__(self, nodes: int = 3, stale_reports: bool = False) -> None:
        self.now = 0.0
        # a node's report sent as a stop ends arrives just after its answer, still showing the
        # VM (its next report is its heartbeat's), as a live agent's can
        self.stale_reports = stale_reports
        self.ledger = Ledger(LedgerSettings(use_prediction=False), BackfillConfig(interruption="terminate"), {},
                             lambda prefix: f"{prefix}-{uuid.uuid4().hex[:12]}")
        self.out = io.StringIO()
        self.recorder = Recorder(self.out, 2**40, clock=lambda: self.now)
        self.recorder.started(self.ledger.settings, self.ledger.backfill, self.ledger.reserve_settings.as_dict())
        self.nodes = {f"n{i}": SimNode(f"n{i}", NODE_CPUS, NODE_MIB, ("tiny",)) for i in range(nodes)}
        self.heap: list = []
        self.seq = itertools.count()
        self.answer_at: dict[str, float] = {}
        self.placed: dict[str, str] = {}   # request id -> lease id

    def at(self, when: float, call: Callable, *args: Any) -> None:
        heapq.heappush(self.heap, (when, next(self.seq), call, args))

    def run(self, until: float) -> list[dict[str, Any]]:
        while self.heap and self.heap[0][0] <= until:
            self.now, _seq, call, args = heapq.heappop(self.heap)
            call(*args)
        return [json.loads(line) for line in self.out.getvalue().splitlines()]

    def apply(self, effects: list) -> None:
        if carry_out(effects, self):
            self.at(self.now + 0.004, self.fill)   # the launcher's thread, a moment later
        self.recorder.effects(effects)

    # the carrier (controller.effects.Carrier)
    def commit(self, writes) -> None:
        pass

    def logged(self, event) -> None:
        pass

    def launch(self, launch: Launch) -> None:
        answered = self.now + delay(launch.lease.vm_name, 0.02, 0.5)
        self.answer_at.setdefault(launch.lease.lease_id, answered)
        self.at(answered, self.launched, launch.lease)

    def stop(self, stop: Stop, after: Launch | None) -> None:
        when = self.answer_at[after.lease.lease_id] if after else self.now
        self.at(when, lambda: self.at(self.now + delay(stop.lease.vm_name, 0.005, 0.02), self.stopped, stop.lease))

    # the agents' answers and the nodes' reports
    def launched(self, lease) -> None:
        self.nodes[lease.node_id].vms[lease.vm_name] = SimVm(lease, self.now)
        self.recorder.launch_answer(lease, True, "")
        self.apply(self.ledger.launch_done(lease.lease_id, True, "", self.now))
        self.report(lease.node_id)

    def stopped(self, lease) -> None:
        sent = Report(self.nodes[lease.node_id], 0.0)
        self.nodes[lease.node_id].vms.pop(lease.vm_name, None)
        self.recorder.stop_answer(lease, True, "clean_shutdown", 0.01, "")
        self.apply(self.ledger.stop_done(lease.lease_id, "clean_shutdown", True, 0.01, "", self.now))
        if self.stale_reports:
            self.at(self.now + 0.0005, self.report, lease.node_id, sent)
        else:
            self.report(lease.node_id)

    def report(self, node_id: str, report: Report | None = None) -> None:
        report = report or Report(self.nodes[node_id], 0.0)
        self.recorder.report(report)
        self.apply(self.ledger.report(report, self.now))

    # the inputs and the periodic jobs
    def fill(self) -> None:
        effects = self.ledger.fill(self.now)
        self.apply(effects)
        self.recorder.job("fill", effects)

    def heartbeat(self, node_id: str) -> None:
        """An agent reports every 2 s, changed or not."""
        self.report(node_id)
        self.at(self.now + 2.0, self.heartbeat, node_id)

    def tick(self) -> None:
        effects = self.ledger.tick(self.now)
        self.apply(effects)
        self.recorder.job("tick", effects)
        self.at(self.now + 1.0, self.tick)

    def set_backfill(self, config: BackfillConfig) -> None:
        self.ledger.backfill = config
        self.recorder.backfill(config)
        self.at(self.now + 0.004, self.fill)

    def request(self, request_id: str, size: tuple[int, int], hold: float) -> None:
        self.recorder.request(size[0], size[1], "tiny", "alice", request_id)
        self.apply(self.ledger.request(Ask(size[0], size[1], "tiny", "alice", request_id), self.now))
        record = self.ledger.pending(request_id)
        if record is not None and record.lease_id:
            self.at(self.now + hold, self.release, record.lease_id)

    def release(self, lease_id: str) -> None:
        lease, effects = self.ledger.release(lease_id, False, self.now)
        self.recorder.release(lease, False)
        self.apply(effects)


def script_pool(driver: LedgerDriver, requests: int = 24) -> None:
    """The pool every recording here is made of: the nodes' heartbeats, the ticks, backfill on at
    1 s, and `requests` on-demand requests from 10 s, a third of them large (the after_victims path)."""
    for i, node_id in enumerate(driver.nodes):
        driver.at(0.1 + 0.05 * i, driver.heartbeat, node_id)
    driver.at(0.5, driver.tick)
    driver.at(1.0, driver.set_backfill, BACKFILL)
    for n in range(requests):
        size = LARGE if n % 3 == 1 else SMALL
        driver.at(10.0 + 2.7 * n, driver.request, f"req-{n:02d}", size, 9.0 + (n * 7) % 25)


def live_run(requests: int = 24, stale_reports: bool = False) -> list[dict[str, Any]]:
    driver = LedgerDriver(stale_reports=stale_reports)
    script_pool(driver, requests)
    return driver.run(until=10.0 + 2.7 * requests + 60)


@pytest.fixture(scope="module")
def live() -> list[dict[str, Any]]:
    return live_run()


def test_the_live_run_made_both_preemption_paths_and_refills(live):
    paths = {d.path for d in decisions(live).values()}
    assert {"instant", "after_victims"} <= paths
    first_request = min(line["t"] for line in live if line["kind"] == "request")
    assert any(line["kind"] == "lease" and line["role"] == "backfill" and line["t"] > first_request for line in live)
    assert aggregates(live)["preemptions"] > 20


def test_a_recording_of_the_ledger_replays_identically(live):
    recording = load(live)
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.items >= 40
    assert result.differences == [] and result.identical_share == 1.0
    assert all(counts["live"] == counts["replay"] for counts in result.backfill_made.values())
    assert sim.agents.unrecorded == [] and sim.released_unknown == []
    live_figures, replay_figures = aggregates(recording.lines), aggregates(replayed)
    assert replay_figures["preemptions"] == live_figures["preemptions"]
    assert replay_figures["wait_p99_s"] == pytest.approx(live_figures["wait_p99_s"], abs=1e-5)


@pytest.mark.parametrize("tamper", ["victims", "node"])
def test_a_tampered_recording_shows_the_difference_unexplained(live, tamper):
    lines = [dict(line) for line in live]
    placed = [line for line in lines if line.get("event") == "request.placed" and line["victims"]]
    target = placed[len(placed) // 2]
    if tamper == "victims":
        target["victims"] = sorted(target["victims"])[:-1] + ["bf:n9#1"]
    else:
        target["node"] = next(n for n in ("n0", "n1", "n2") if n != target["node"])
    recording = load(lines)
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    (difference,) = result.differences
    assert difference["request_id"] == target["request_id"]
    assert difference["item"] == ("victims" if tamper == "victims" else "placement")
    assert difference["explained"] is False and result.unexplained == 1
    assert result.identical_share == (result.items - 1) / result.items


def test_another_answer_order_explains_other_victims(live):
    """Two backfill VMs' launch answers swapped in the recording: the youngest is another one, and
    the comparison says why (the pools, keys and states, were the same before the decision)."""
    lines = [dict(line) for line in live]
    recording = load(lines)
    decision = next(d for d in decisions(lines).values() if d.path == "instant" and len(d.victims) == 2)
    node = decision.node
    made_before = [line for line in lines[:decision.index] if line["kind"] == "lease" and line["node"] == node
                   and line["role"] == "backfill"]
    answers = recording.launch_answers
    youngest = max((l["key"] for l in made_before if l["key"] in answers),
                   key=lambda k: next(a["t"] for a in lines if a.get("event") == "vm.launched" and a["key"] == k))
    oldest = min((l["key"] for l in made_before if l["key"] in answers and l["key"] not in decision.victims),
                 key=lambda k: next(a["t"] for a in lines if a.get("event") == "vm.launched" and a["key"] == k))
    answers[youngest][0]["delay_s"], answers[oldest][0]["delay_s"] = 0.0, 1000.0
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.differences, "the tampered delays changed nothing"
    assert all(isinstance(d["explanation"], str) and d["explanation"] for d in result.differences)


def test_reports_that_arrive_after_a_stop_answer_replay_as_they_came():
    """Live, a report sent before a stop ended arrives after its answer: the books count the VM
    it still shows as room taken until the node's next report, and decide otherwise meanwhile.
    Fed the recorded reports, the replay decides as live did; with its nodes' own reports (sent
    the instant a VM changes) it does not."""
    lines = live_run(stale_reports=True)
    counted = [line for line in lines if line["kind"] == "report" and line["vms"]]
    recording = load(lines)
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.items >= 40 and counted
    assert result.differences == [] and sim.agents.unrecorded == []
    assert sim.recorded_reports.left_out == 0
    own, own_replayed = replay(recording, reports="simulated")
    unfed = compare(recording.lines, own_replayed, own.agents.unrecorded)
    assert unfed.differences, "the stale reports changed no decision: the test shows nothing"
    assert unfed.unexplained >= 1


def test_a_reported_vm_the_replay_placed_elsewhere_is_left_out_not_adopted(live):
    """A recorded report names a VM whose lease the replay's books made on another node (here by
    tampering): adopting it would book a VM no replayed agent launched. It is left out, counted."""
    lines = [dict(line) for line in live]
    reports = [(i, line) for i, line in enumerate(lines) if line["kind"] == "report" and line["vms"]]
    index, target = next((i, r) for i, r in reversed(reports) if r["node"] == "n1")
    donor = next(r for i, r in reversed(reports) if i < index and r["node"] == "n0")
    lines[index] = {**target, "vms": [*target["vms"], donor["vms"][0]]}
    recording = load(lines)
    sim, replayed = replay(recording)
    assert sim.recorded_reports.left_out == 1
    [why] = sim.recorded_reports.left_out_first
    assert why == dict(t=pytest.approx(target["t"] - recording.t0), node="n1",
                       key=recording.lease_keys[donor["vms"][0][1]], why="the replay made it on n0")
    assert not any(line.get("event") == "vm.adopted" for line in replayed)
    assert not any(lease.owner == "adopted" for lease in sim.ledger.leases.values())


def test_an_answer_to_a_call_in_step_comes_when_the_live_one_came():
    """Live asked at 10.0010 (the controller took a millisecond to decide) and was answered at
    10.0270; the replay asks at 10.0000, the instant the request was recorded: in step, its
    answer comes at 10.0270 too, not 1 ms early (a report recorded at 10.0265 stays after it).
    Asked out of step (the runs decided otherwise before), it takes the live call's time."""
    answer = {"t": 10.027, "delay_s": 0.026}
    assert 10.0 + answer_delay(answer, 10.0) == pytest.approx(10.027)
    assert answer_delay(answer, 10.0 - IN_STEP_S - 0.002) == 0.026   # asked well before
    assert answer_delay(answer, 10.05) == 0.026                       # asked after the live answer came


def test_an_unknown_reports_mode_is_refused_by_name(live):
    with pytest.raises(ValueError, match="reports 'live': recorded or simulated"):
        replay(load(live), reports="live")


def test_prediction_runs_the_same_requests_with_the_simulators_agents(live):
    recording = load(live)
    sim, predicted = predict(recording, report_seconds=0.5)
    assert sim.agents.name in ("modelled", "ideal")
    live_figures, figures = aggregates(recording.lines), aggregates(predicted)
    assert figures["placed"] == live_figures["placed"]
    error, parts = prediction_error(live_figures, figures)
    assert set(parts) == {"preemptions", "wait_p50_s", "wait_p99_s", "lost_work_vcpu_s"}
    assert error == max(parts.values())
    fitted = answer_figures(recording)
    assert fitted["launch_p50_s"] > 0 and fitted["refill_launch_p50_s"] > 0
    assert fitted["fill_delay_s"] == pytest.approx(0.004)   # the driver's launcher runs a fill 4 ms after it is asked
    if sim.agents.name == "modelled":   # backfill launches take the refills' times; fills the launcher's delay
        assert sim.agents.params.backfill_launch_p50_seconds == pytest.approx(max(fitted["refill_launch_p50_s"], 0.001))
        assert sim.agents.fill_delay == pytest.approx(0.004)


def test_prediction_error_is_the_largest_relative_difference():
    live = dict(preemptions=10, wait_p50_s=1.0, wait_p99_s=4.0, lost_work_vcpu_s=100.0)
    predicted = dict(preemptions=11, wait_p50_s=0.9, wait_p99_s=4.0, lost_work_vcpu_s=130.0)
    error, parts = prediction_error(live, predicted)
    assert parts == dict(preemptions=0.1, wait_p50_s=0.1, wait_p99_s=0.0, lost_work_vcpu_s=0.3) and error == 0.3
    assert prediction_error(dict(live, preemptions=0), dict(predicted, preemptions=0))[1]["preemptions"] == 0.0
    assert prediction_error(dict(live, preemptions=0), predicted)[1]["preemptions"] == 1.0


def test_a_file_without_a_start_is_refused_by_name(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"t": 1, "kind": "request"}\n')
    with pytest.raises(ValueError, match="no `start` line"):
        load(path)


@pytest.mark.parametrize("tamper, said", [
    (lambda t: [{**t[0], "colour": "blue"}], r"tenants at 20\.000 s: 'science': .*colour"),
    (lambda t: [{**t[0], "kind": "gold"}], r"tenants at 20\.000 s: 'science': .*gold"),
    (lambda t: [{**t[0], "lower_vcpus": 99}], r"tenants at 20\.000 s: 'science': .*above its upper bound"),
    (lambda t: ["science"], r"tenants at 20\.000 s: '\?': 'science' is not a tenant's fields"),
    (lambda t: None, r"tenants at 20\.000 s: None is not a list of tenants"),
])
def test_a_tenants_line_the_books_cannot_take_is_refused_naming_the_tenant_and_time(tenant_live, tamper, said):
    _driver, lines = tenant_live
    changed = next(i for i, line in enumerate(lines) if line["kind"] == "tenants" and line["goal_begins"])
    bad = [dict(line) for line in lines]
    bad[changed]["tenants"] = tamper(bad[changed]["tenants"])
    with pytest.raises(ValueError, match=said):
        load(bad)


@pytest.mark.parametrize("field, value, said", [
    ("tenancy", {"rbt": 1.0, "urr": 3.0}, "tenancy .*urr"),
    ("tenancy", {"colour": 1}, "tenancy .*colour"),
    ("goals_done", "science", "goals_done 'science' is not a list of names"),
])
def test_a_start_line_with_tenancy_or_jobs_done_the_books_cannot_take_is_refused_by_name(tenant_live, field, value,
                                                                                      said):
    _driver, lines = tenant_live
    bad = [dict(line) for line in lines]
    bad[0][field] = value
    with pytest.raises(ValueError, match=said):
        load(bad)


def test_the_launchers_delay_is_fitted_only_to_fills_that_answered_an_ask():
    """An event that frees room asks for a fill only while backfill is on; a fill long after it is
    the periodic one. Neither is the launcher's delay (a fit of 150 s would be refused as a
    parameter, and the prediction with it)."""
    def event(t):
        return {"t": t, "kind": "event", "event": "vm.released"}

    def fill(t):
        return {"t": t, "kind": "job", "name": "fill"}
    off, on = {"kind": "backfill", "backfill": {"enabled": False}}, {"kind": "backfill", "backfill": {"enabled": True}}
    lines = [{"t": 0.0, "kind": "start", "backfill": {"enabled": False}}, event(1.0), fill(151.0),
             {**on, "t": 200.0}, event(201.0), event(201.002), fill(201.006), event(300.0), fill(420.0),
             event(500.0), fill(500.004), {**off, "t": 600.0}, event(601.0), fill(601.005)]
    assert fill_delay(lines) == pytest.approx(0.004)   # the two pairs it counts, 6 and 4 ms: their nearest-rank median
    assert fill_delay(lines[:3]) == 0.0


def test_a_recorded_reports_hibernated_vms_budget_and_left_out_repeats_reach_the_replays_books(live):
    """An agent that hibernates lists its saved VMs and the disk they may use; the books read both
    (a budget of 0 would turn every save into a termination). A line from before the recorder
    kept them gets the simulated node's budget. The repeats the recorder left out come as held
    foreground samples."""
    from controller.core.matching import reported_vms
    from controller.sim.replay import RecordedReports
    recording = load(live)
    reports = RecordedReports(recording)
    lease_id, key = next(iter(recording.lease_keys.items()))
    made = type("Made", (), dict(vm_name="vm-replayed", lease_id="bf-replayed", node_id="n0"))
    reports.made_lease(key, made)
    line = {"t": 5.0, "node": "n0", "cpus": 16, "memory_mib": 24576, "fg": 0.0, "images": ["tiny"],
            "min_memory_mib": 32, "vms": [], "saved": [["vm-live", lease_id, 1, 1024, "tiny"]],
            "hibernation_budget_bytes": 8 << 30, "skipped": 3}
    report = reports.report(line, "n0:1", {"backfill": "tiny", "on_demand": "tiny"}, budget_bytes=1 << 20)
    [saved] = reported_vms(report)
    assert (saved.name, saved.lease_id, saved.hibernated, saved.role) == ("vm-replayed", "bf-replayed", True, "backfill")
    assert report.hibernation_budget_bytes == 8 << 30
    assert report.held_samples == 3   # the repeats left out: foreground samples at the last figure
    older = {k: v for k, v in line.items() if k not in ("saved", "hibernation_budget_bytes", "skipped")}
    report = reports.report(older, "n0:1", {"backfill": "tiny", "on_demand": "tiny"}, budget_bytes=1 << 20)
    assert report.hibernation_budget_bytes == 1 << 20 and reported_vms(report) == [] and report.held_samples == 0


# -- a pool with tenants: a goal-driven batch tenant, its guests' progress, a tenant changed -------

GOAL_TENANT = "science"
UPPER = 24
SEED = 0


class GuestVm(SimVm):
    """A backfill VM whose guest says its tenant's progress (`progress DONE TOTAL`) and that it is busy."""
    __slots__ = ("progress_done", "progress_total", "progress_for_s")

    def __init__(self, lease, now: float) -> None:
        super().__init__(lease, now)
        self.progress_done = self.progress_total = 0
        self.progress_for_s = 0.0


class TenantDriver(LedgerDriver):
    """LedgerDriver with tenants: `science`, a batch tenant whose goal is set a while in (the
    tenants changed as the service changes them, recorded), its guests saying the job's progress
    (vCPU-seconds its volunteers ran since the goal), and the goals job every 60 s."""

    def __init__(self, work_vcpu_hours: float, deadline_after_s: float, seed: int) -> None:
        super().__init__()
        ids = random.Random(seed)   # random lease ids, as live, but the same run each time: the
        self.ledger.new_id = lambda prefix: f"{prefix}-{ids.getrandbits(48):012x}"   # victims' ties are by id
        self.work_vcpu_hours, self.deadline_after_s = work_vcpu_hours, deadline_after_s
        self.worked, self.worked_at = 0.0, None   # vCPU-seconds of its volunteers since the goal, and when counted

    def set_tenants(self, goal: bool) -> None:
        from controller.core.records import TenantRecord
        text = json.dumps(dict(kind="deadline", work_vcpu_hours=self.work_vcpu_hours,
                               deadline_s=self.now + self.deadline_after_s)) if goal else None
        records = [TenantRecord(GOAL_TENANT, "batch", 4, 4 * 1024, UPPER, UPPER * 1024, goal=text)]
        self.ledger.set_tenants(records)
        if goal:
            self.ledger.new_goal(GOAL_TENANT)
            self.worked_at = self.now
        self.recorder.tenants(records, GOAL_TENANT if goal else None, sized=goal)
        if goal:   # a batch tenant changed: sized at once (a tenant created is not)
            self.apply(self.ledger.size_goals(self.now))
        self.at(self.now + 0.004, self.fill)

    def goals(self) -> None:
        effects = self.ledger.size_goals(self.now)
        self.apply(effects)
        self.recorder.job("goals", effects)
        self.at(self.now + 60.0, self.goals)

    def launched(self, lease) -> None:
        if lease.role == "backfill" and self.ledger.tenant_of_lease(lease) == GOAL_TENANT:
            self.nodes[lease.node_id].vms[lease.vm_name] = GuestVm(lease, self.now)
            self.recorder.launch_answer(lease, True, "")
            self.apply(self.ledger.launch_done(lease.lease_id, True, "", self.now))
            self.report(lease.node_id)
        else:
            super().launched(lease)

    def report(self, node_id: str, report: Report | None = None) -> None:
        guests = [vm for node in self.nodes.values() for vm in node.vms.values() if isinstance(vm, GuestVm)]
        if self.worked_at is not None:
            self.worked += len(guests) * (self.now - self.worked_at)
            self.worked_at = self.now
            total = int(self.work_vcpu_hours * 3600)
            for vm in guests:
                vm.progress_done, vm.progress_total, vm.work_state = min(int(self.worked), total), total, "busy"
        super().report(node_id, report)


def tenant_run(work_vcpu_hours: float = 2.0, deadline_after_s: float = 400.0, seed: int = SEED
               ) -> tuple[TenantDriver, list]:
    driver = TenantDriver(work_vcpu_hours, deadline_after_s, seed)
    script_pool(driver)
    driver.at(0.7, driver.set_tenants, False)
    driver.at(20.0, driver.set_tenants, True)
    driver.at(30.0, driver.goals)
    return driver, driver.run(until=400.0)


@pytest.fixture(scope="module")
def tenant_live() -> tuple[TenantDriver, list]:
    return tenant_run()


def test_a_pool_with_a_goal_driven_tenant_replays_identically(tenant_live):
    """The tenants as set, the goal set later (its job begun), the guests' progress and work word
    in the reports, the goals jobs: the replay's books size the goal as the live ones did and buy
    the same dedicated VMs, on the same nodes, at the same times."""
    driver, lines = tenant_live
    goal_leases = [line for line in lines if line["kind"] == "lease" and line["rid"].startswith("goal-")]
    assert goal_leases, "the live run bought no dedicated VM: the test shows nothing"
    assert any(line["kind"] == "tenants" and line["goal_begins"] == GOAL_TENANT for line in lines)
    guests = [vm for line in lines if line["kind"] == "report" for vm in line["vms"] if vm[11]]
    assert guests and all(vm[8] == "busy" for vm in guests)   # progress and the work word are recorded
    recording = load(lines)
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.differences == [] and sim.agents.unrecorded == []
    assert result.items >= 40
    replayed_goal = [line for line in replayed if line["kind"] == "lease" and line["rid"].startswith("goal-")]
    assert [(l["key"], l["node"], l["t"]) for l in replayed_goal] == \
        [(l["key"], l["node"], pytest.approx(l["t"] - recording.t0, abs=1e-6)) for l in goal_leases]
    assert sim.ledger.progress.progress(GOAL_TENANT) == driver.ledger.progress.progress(GOAL_TENANT)
    assert sim.ledger.sizings[GOAL_TENANT] == driver.ledger.sizings[GOAL_TENANT]


def test_without_the_tenants_or_the_guests_word_the_replay_decides_otherwise(tenant_live):
    """What the recording now keeps is what the replay needs: stripped of its tenants (as a
    recording from before they were kept), the replay buys no dedicated VM; stripped of the
    guests' word only, its books hear no progress and size the goal on all of its work left."""
    driver, lines = tenant_live
    bare = [{k: v for k, v in line.items() if k not in ("tenants", "tenancy", "goals_done")}
            for line in lines if line["kind"] != "tenants"]
    sim, replayed = replay(load(bare))
    assert not any(line["kind"] == "lease" and line["rid"].startswith("goal-") for line in replayed)
    assert compare(bare, replayed, sim.agents.unrecorded).differences
    wordless = [{**line, "vms": [vm[:7] for vm in line["vms"]]} if line["kind"] == "report" else line
                for line in lines]
    sim, replayed = replay(load(wordless))
    assert sim.ledger.progress.progress(GOAL_TENANT) is None
    live_sizing, sizing = driver.ledger.sizings[GOAL_TENANT], sim.ledger.sizings[GOAL_TENANT]
    assert sizing.projected_finish_s > live_sizing.projected_finish_s + 60


def test_a_prediction_sizes_the_goals_every_interval_as_the_controllers_goals_job(tenant_live):
    """With its own schedule of jobs the simulator runs the controller's goals job too (every
    GOAL_INTERVAL_S on its clock), and sizes at once and asks for a fill when the recorded
    tenants change, as the service does."""
    from controller.core.goal_sizing import GOAL_INTERVAL_S
    from controller.recording import LeaseKeys
    from controller.sim.replay import ReplaySimulation, model_settings, sim_settings
    _driver, lines = tenant_live
    recording = load(lines)
    settings = sim_settings(recording, **model_settings(recording, "ideal", 0.5))
    sim = ReplaySimulation(recording, settings, None, LeaseKeys(), "simulated", reports="simulated")
    sized_at: list[float] = []
    filled_at: list[float] = []
    size_goals, fill = sim.ledger.size_goals, sim.ledger.fill

    def counted(now: float) -> list:
        sized_at.append(now)
        return size_goals(now)

    def filled(now: float, *args) -> list:
        filled_at.append(now)
        return fill(now, *args)
    sim.ledger.size_goals, sim.ledger.fill = counted, filled
    sim.run()
    goal_set = next(line["t"] for line in recording.tenant_changes if line["goal_begins"])
    assert sized_at[0] == pytest.approx(goal_set)   # the tenants line: sized at once
    assert goal_set + sim.agents.fill_delay in filled_at   # and the launcher asked, as the service asks it
    every = sized_at[1:]
    assert every == pytest.approx([GOAL_INTERVAL_S * k for k in range(1, len(every) + 1)])
    assert len(every) == int(sim.end // GOAL_INTERVAL_S)
    assert sim.ledger.sizings[GOAL_TENANT].projected_finish_s > 0


# -- a batch tenant deleted with --drain --------------------------------------------------------

DRAINED = "bulk"


class DrainDriver(LedgerDriver):
    """LedgerDriver with a batch tenant `bulk` whose backfill fills the pool, deleted with --drain
    as the service's delete_tenant does it: marked draining (the launcher grants it nothing), its
    VMs released (each recorded as a release), then, once they have stopped, unmarked and deleted
    (the tenants line)."""

    def __init__(self) -> None:
        super().__init__()
        ids = random.Random(SEED)   # random lease ids, as live, but the same run each time
        self.ledger.new_id = lambda prefix: f"{prefix}-{ids.getrandbits(48):012x}"
        self.drained: list[str] = []

    def records(self, with_bulk: bool) -> list:
        from controller.core.records import TenantRecord
        return [TenantRecord(DRAINED, "batch", 2, 2048, UPPER, UPPER * 1024)] if with_bulk else []

    def set_tenants(self, with_bulk: bool) -> None:
        records = self.records(with_bulk)
        self.apply(self.ledger.tenants_changed(records, None, False, self.now))
        self.recorder.tenants(records)
        self.at(self.now + 0.004, self.fill)

    def delete_drain(self) -> None:
        self.ledger.draining.add(DRAINED)
        self.recorder.drain(DRAINED, True)
        for lease in [l for l in self.ledger.live_leases() if self.ledger.tenant_of_lease(l) == DRAINED]:
            lease, effects = self.ledger.release(lease.lease_id, False, self.now)
            self.drained.append(lease.lease_id)
            self.recorder.release(lease, False)
            self.apply(effects)
        self.at(self.now + 5.0, self.drain_ended)   # the service waits for the stops, fills running meanwhile

    def drain_ended(self) -> None:
        self.ledger.draining.discard(DRAINED)
        self.recorder.drain(DRAINED, False)
        self.set_tenants(False)


@pytest.fixture(scope="module")
def drain_live() -> tuple[DrainDriver, list]:
    """The pool with `bulk` from the start, deleted with --drain at 30 s."""
    driver = DrainDriver()
    script_pool(driver)
    driver.at(0.7, driver.set_tenants, True)
    driver.at(30.0, driver.delete_drain)
    return driver, driver.run(until=130.0)


def test_a_tenant_deleted_with_drain_replays_identically(drain_live):
    """The drain's start and end and its VMs' releases are recorded: the replay's books release
    the same VMs, grant the draining tenant nothing meanwhile, and decide every later request as
    the live ones did."""
    driver, lines = drain_live
    assert len(driver.drained) >= 4, "the drain released few VMs: the test shows little"
    drains = [(line["tenant"], line["draining"]) for line in lines if line["kind"] == "drain"]
    assert drains == [(DRAINED, True), (DRAINED, False)]
    drained_keys = {line["key"] for line in lines if line["kind"] == "release" and line["lease"] in driver.drained}
    assert len(drained_keys) == len(driver.drained)
    recording = load(lines)
    sim, replayed = replay(recording)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.differences == [] and sim.agents.unrecorded == [] and sim.released_unknown == []
    assert all(made["live"] == made["replay"] for made in result.backfill_made.values())
    assert {line["key"] for line in replayed if line["kind"] == "release"} >= drained_keys
    assert not [l for l in sim.ledger.live_leases() if sim.ledger.tenant_of_lease(l) == DRAINED]
    assert not sim.ledger.draining


@pytest.mark.parametrize("left_out", ["drain", "release"])
def test_without_the_drain_lines_or_the_drained_releases_the_replay_decides_otherwise(drain_live, left_out):
    """Each is needed: without the drain lines (the launcher grants the draining tenant its room
    again at once) or without the releases (as before a drain recorded them: the tenants line
    alone, its VMs left running), later requests meet another pool."""
    driver, lines = drain_live
    if left_out == "drain":
        old = [line for line in lines if line["kind"] != "drain"]
    else:
        old = [line for line in lines if not (line["kind"] == "release" and line["lease"] in driver.drained)]
    sim, replayed = replay(load(old))
    assert compare(old, replayed, sim.agents.unrecorded).differences


def test_a_drain_line_that_names_no_tenant_is_refused_by_name(drain_live):
    _driver, lines = drain_live
    bad = [{**line, "draining": "yes"} if line["kind"] == "drain" else line for line in lines]
    with pytest.raises(ValueError, match=r"drain at .* names no tenant and whether it drains"):
        load(bad)


# -- a node silent long enough to be found down -------------------------------------------------

SILENT_NODE, SILENT_FROM, SILENT_UNTIL = "n1", 33.0, 60.0


class SilentDriver(LedgerDriver):
    """LedgerDriver whose node n1 sends no report from 33 s to 60 s (its agent still answers
    calls): the ticks find it suspect after 6 s and down after 20 s, its running VMs lost; its
    next report brings it back."""

    def __init__(self) -> None:
        super().__init__()
        ids = random.Random(SEED)   # random lease ids, as live, but the same run each time
        self.ledger.new_id = lambda prefix: f"{prefix}-{ids.getrandbits(48):012x}"

    def report(self, node_id: str, report: Report | None = None) -> None:
        if node_id == SILENT_NODE and SILENT_FROM <= self.now < SILENT_UNTIL:
            return
        super().report(node_id, report)


@pytest.fixture(scope="module")
def silent_live() -> list:
    driver = SilentDriver()
    script_pool(driver)
    return driver.run(until=130.0)


def liveness(lines: list) -> list[tuple[str, str, float]]:
    return [(line["event"], line["node"], round(line["t"], 3)) for line in lines
            if line["kind"] == "event" and line["event"] in ("node.suspect", "node.down", "node.rejoined")]


def test_a_node_silent_until_found_down_replays_identically(silent_live):
    """The replay's books find the silent node suspect and down at the recorded ticks that did
    (not between: the recorder leaves repeated reports out), lose the same VMs, and decide every
    request as the live ones did."""
    lines = silent_live
    live = liveness(lines)
    assert [kind for kind, node, _t in live] == ["node.suspect", "node.down", "node.rejoined"]
    lost = [line for line in lines if line["kind"] == "event" and line["event"] == "vm.lost"]
    assert lost, "the silent node held no running VM: the test shows little"
    recording = load(lines)
    sim, replayed = replay(recording)
    assert liveness(replayed) == [(kind, node, round(t - recording.t0, 3)) for kind, node, t in live]
    assert sorted(l["key"] for l in replayed if l["kind"] == "event" and l["event"] == "vm.lost") == \
        sorted(l["key"] for l in lost)
    result = compare(recording.lines, replayed, sim.agents.unrecorded)
    assert result.differences == [] and sim.agents.unrecorded == []
    assert sim.ledger.settings.down_after > 1e6   # the far timers are back after the ticks


def test_the_liveness_rule_takes_one_step_per_silence():
    """liveness_verdict, the rule tick applies and the replay checks recorded verdicts against."""
    from controller.core.lifecycle import liveness_verdict
    assert liveness_verdict("up", 6.5, 6.0, 20.0) == "suspect"
    assert liveness_verdict("up", 60.0, 6.0, 20.0) == "suspect"   # one step per tick, never up to down
    assert liveness_verdict("up", 6.0, 6.0, 20.0) is None
    assert liveness_verdict("suspect", 20.5, 6.0, 20.0) == "down"
    assert liveness_verdict("suspect", 10.0, 6.0, 20.0) is None
    assert liveness_verdict("down", 1e9, 6.0, 20.0) is None


def test_a_backfill_vm_recorded_after_the_last_job_line_is_counted_apart_as_cut():
    """The lab's recording of session 27 ended with a fill's lease line and neither its launch
    nor its job line (read mid-fill): the replay cannot run that job, so node2 read 5 made live
    against 4 replayed. Counted apart, the rest compares as made."""
    def lease(node: str, n: int) -> dict:
        return {"kind": "lease", "key": f"bf:{node}#{n}", "role": "backfill", "node": node, "state": "starting"}
    job = {"kind": "job", "name": "fill", "effects": 2}
    live = [lease("n1", 1), lease("n2", 1), job, lease("n2", 2), job, lease("n2", 3)]
    replayed = [lease("n1", 1), lease("n2", 1), job, lease("n2", 2), job]
    assert backfill_made(live, replayed) == {"n1": {"live": 1, "replay": 1},
                                             "n2": {"live": 2, "replay": 2, "cut": 1}}
    # a recording with no job line at all: nothing is cut
    assert backfill_made([lease("n1", 1)], []) == {"n1": {"live": 1, "replay": 0}}
