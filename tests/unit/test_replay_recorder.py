"""The controller's recording (controller/recording.py, [record] in its configuration): bounded by
its cap and saying so, ended cleanly (logged once) by a write error while the controller carries
on, and read back as it was written; the [record] keys checked like every other key.

The service-level tests run the real PoolService over a real SQLite store, calling a real gRPC
agent (tests/fake_agents.py, mutual TLS with the lab PKI) that answers at once."""
from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path

import pytest

from controller.agents import AgentLinks
from controller.config import ControllerConfig, check_config, parse_config, to_toml
from controller.core.records import Ask, BackfillConfig, Launch, LedgerSettings, Write
from controller.recording import STOPPED_LINE_BYTES, LeaseKeys, Recorder, read_recording
from controller.service import PoolService
from controller.store import Store
from gleaner_common.config import ConfigError, TlsConfig
from gleaner_common.pki import ensure_lab_pki
from protos import controller_pb2
from tests.fake_agents import serve_fake_agent, stop_fake_agent


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_file_never_passes_its_cap_and_its_last_line_says_it_stopped(tmp_path, caplog):
    path = tmp_path / "record.jsonl"
    recorder = Recorder.open(path, max_mib=8192 / 2**20, clock=Clock())   # an 8 KiB cap
    for n in range(500):
        recorder.request(1, 128, "tiny", "alice", f"r-{n:04d}")
    assert not recorder.enabled
    recorder.request(1, 128, "tiny", "alice", "after")   # nothing, and no error
    recorder.close()
    assert path.stat().st_size <= 8192
    lines = read_recording(path)
    assert lines[-1]["kind"] == "stopped" and "cap of 8192 bytes" in lines[-1]["reason"]
    assert all(line["kind"] == "request" for line in lines[:-1]) and len(lines) > 20
    assert "after" not in {line.get("rid") for line in lines}
    assert [r.message for r in caplog.records].count("record.stopped") == 1


def test_a_full_file_at_start_records_nothing(tmp_path, caplog):
    path = tmp_path / "record.jsonl"
    path.write_text("x" * (2**20 - STOPPED_LINE_BYTES // 2))
    recorder = Recorder.open(path, max_mib=1)
    assert not recorder.enabled
    recorder.request(1, 128, "tiny", "alice", "r-1")
    assert path.stat().st_size == 2**20 - STOPPED_LINE_BYTES // 2
    assert "record.full" in [r.message for r in caplog.records]


def test_a_write_error_ends_the_recording_once_and_raises_nothing(caplog):
    recorder = Recorder.open(Path("/dev/full"), max_mib=1)   # every write fails: no space left on device
    assert recorder.enabled
    recorder.flush_seconds = 0.0
    for n in range(5):
        recorder.request(1, 128, "tiny", "alice", f"r-{n}")   # the first write fails; no exception
    assert not recorder.enabled
    assert "No space left" in recorder.stopped_reason
    stopped = [r for r in caplog.records if r.message == "record.stopped"]
    assert len(stopped) == 1 and stopped[0].levelno == logging.ERROR
    recorder.close()


def test_a_file_that_cannot_be_opened_records_nothing(tmp_path, caplog):
    recorder = Recorder.open(tmp_path / "missing-dir" / "record.jsonl", max_mib=1)
    assert not recorder.enabled
    recorder.request(1, 128, "tiny", "alice", "r-1")   # does nothing
    assert "record.unavailable" in [r.message for r in caplog.records]


def test_what_is_written_reads_back_the_same(tmp_path):
    path = tmp_path / "record.jsonl"
    clock = Clock()
    recorder = Recorder.open(path, max_mib=1, clock=clock)
    recorder.started(LedgerSettings(), BackfillConfig(enabled=True), {"wait_seconds": 0})
    clock.now += 1.5
    recorder.request(2, 512, "tiny", "bob", "r-\u00e9\"quoted\"\n")
    recorder.backfill(BackfillConfig(enabled=False))
    recorder.close()
    start, request, backfill = read_recording(path)
    assert start["kind"] == "start" and start["format"] == 1 and start["ledger"] == LedgerSettings().__dict__
    assert BackfillConfig.from_dict(start["backfill"]) == BackfillConfig(enabled=True)
    assert request == dict(t=1001.5, kind="request", rid="r-\u00e9\"quoted\"\n", vcpus=2, memory_mib=512,
                           image="tiny", owner="bob")
    assert BackfillConfig.from_dict(backfill["backfill"]) == BackfillConfig(enabled=False)


def test_a_torn_last_line_is_left_out_but_a_bad_line_within_is_named(tmp_path):
    path = tmp_path / "record.jsonl"
    path.write_text('{"t": 1, "kind": "start"}\n{"t": 2, "ki')
    assert read_recording(path) == [{"t": 1, "kind": "start"}]
    path.write_text('{"t": 1, "kind": "start"}\nnot json\n{"t": 2, "kind": "job"}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_recording(path)


def test_lease_keys_are_stable_across_runs_whatever_the_lease_ids():
    from controller.core.records import Lease
    def lease(lease_id, role, node, request_id="", owner="x"):
        return Lease(lease_id, role, node, f"vm-{lease_id}", 1, 128, "tiny", owner, "starting", 0.0,
                     request_id=request_id)
    first, second = LeaseKeys(), LeaseKeys()
    for keys, ids in ((first, ("a1", "a2", "a3", "a4")), (second, ("zz", "yy", "xx", "ww"))):
        assert keys.made(lease(ids[0], "backfill", "n1")) == "bf:n1#1"
        assert keys.made(lease(ids[1], "backfill", "n1")) == "bf:n1#2"
        assert keys.made(lease(ids[2], "on_demand", "n2", "req-7")) == "od:req-7"
        assert keys.made(lease(ids[3], "backfill", "n1", owner="adopted")) == f"adopted:vm-{ids[3]}"
    assert first.key("a2") == second.key("yy") == "bf:n1#2"
    assert first.key("never-made") == "lease:never-made"


def test_an_unchanged_report_is_recorded_again_only_after_its_node_changed_in_the_books():
    """A report that repeats the last one is left out, unless a line about its node came since:
    the same report then matches other leases (a stop answered before a report sent earlier)."""
    from controller.core.records import Lease
    from controller.sim.world import Report, SimNode, SimVm
    out, clock = io.StringIO(), Clock()
    recorder = Recorder(out, 2**40, clock=clock)
    node, other = SimNode("n1", 16, 24576, ("tiny",)), SimNode("n2", 16, 24576, ("tiny",))
    lease = Lease("bf-1", "backfill", "n1", "vm-bf-1", 1, 1024, "tiny", "backfill", "running", 0.0)
    node.vms[lease.vm_name] = SimVm(lease, 0.0)
    recorder.effects([Write(created=(lease,)), Launch(lease)])

    def reports() -> list[dict]:
        return [line for line in map(json.loads, out.getvalue().splitlines()) if line["kind"] == "report"]
    for _ in range(3):
        recorder.report(Report(node, 0.0))
        recorder.report(Report(other, 0.0))
    assert [r["node"] for r in reports()] == ["n1", "n2"]
    recorder.stop_answer(lease, True, "clean_shutdown", 0.01, "")   # a line about n1, none about n2
    recorder.report(Report(node, 0.0))   # sent before the stop ended: the VM is still in it
    recorder.report(Report(other, 0.0))
    assert [r["node"] for r in reports()] == ["n1", "n2", "n1"]
    assert reports()[-1]["vms"][0][0] == "vm-bf-1"


def test_what_the_recorder_keeps_in_memory_stays_bounded():
    """A long run: every lease made and ended; the keys of ended ones are kept only for a while."""
    from controller.core.records import Audit, Lease, Write
    from controller.recording import ENDED_KEYS_KEPT
    out = io.StringIO()
    recorder = Recorder(out, 2**40)
    for n in range(ENDED_KEYS_KEPT + 500):
        lease = Lease(f"bf-{n}", "backfill", "n1", f"vm-{n}", 1, 128, "tiny", "backfill", "starting", 0.0)
        recorder.effects([Write(created=(lease,)), Launch(lease)])
        recorder.effects([Write(events=(Audit("vm.launch_failed", "n1", lease.lease_id, {"reason": "x"}),))])
    keys = recorder.keys
    assert not keys.keys and not keys.leases and not recorder.asked
    assert len(keys.ended) == ENDED_KEYS_KEPT
    assert keys.key(f"bf-{ENDED_KEYS_KEPT + 499}") == f"bf:n1#{ENDED_KEYS_KEPT + 500}"   # a late answer still named


# -- [record] in the configuration --------------------------------------------------------------

def test_record_keys_round_trip_and_bad_values_are_named(tmp_path):
    config = ControllerConfig(record_path=tmp_path / "r.jsonl", record_max_mib=64, tls=TlsConfig(insecure=True),
                              listen="127.0.0.1:7450")
    import tomllib
    again = parse_config(tomllib.loads(to_toml(config)), "c.toml")
    assert again.record_path == tmp_path / "r.jsonl" and again.record_max_mib == 64
    assert parse_config({}, "c.toml").record_path is None   # off by default
    for path, problem in (("relative/r.jsonl", "must be an absolute path"),
                          (str(tmp_path / "nowhere" / "r.jsonl"), "does not exist"),
                          (str(tmp_path), "is a directory")):
        bad = parse_config({"record": {"path": path}, "controller": {"listen": "127.0.0.1:7450"},
                            "tls": {"insecure": True}}, "c.toml")
        with pytest.raises(ConfigError, match=f"c.toml: record.path .*{problem}|c.toml: record.path {problem}"):
            check_config(bad, "c.toml")
    with pytest.raises(ConfigError, match=r"c.toml: record.max_mib must be within 1..1048576"):
        check_config(parse_config({"record": {"max_mib": 0}}, "c.toml"), "c.toml")
    with pytest.raises(ConfigError, match="unknown key record.size"):
        parse_config({"record": {"size": 1}}, "c.toml")


# -- in the service -----------------------------------------------------------------------------

@pytest.fixture
def service_with(tmp_path):
    """A PoolService recording to a path, with node a's quick agent reporting."""
    made = []

    def make(record_path: Path) -> PoolService:
        pki = ensure_lab_pki(tmp_path / f"pki{len(made)}", nodes=("a",))
        agent, server = serve_fake_agent(pki, "a", hung=False)
        state = tmp_path / f"state{len(made)}"
        state.mkdir()
        config = ControllerConfig(state_dir=state, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                                  use_prediction=False, record_path=record_path)
        store = Store(config.store_path)
        service = PoolService(config, store, AgentLinks(pki.controller, config.agent_timeout_seconds))
        made.append((service, store, agent, server))
        service.ingest(controller_pb2.NodeReport(node_id="a", agent_address=f"127.0.0.1:{server.port}", cpus=8,
                                                 memory_mib=16384, images=["tiny"], min_memory_mib=32))
        return service
    yield make
    for service, store, agent, server in made:
        stop_fake_agent(agent, server)
        service.close()
        service.executor.shutdown(wait=True)
        service.agents.close()
        store.close()


def test_the_service_records_a_request_its_decision_and_the_agents_answer(service_with, tmp_path):
    path = tmp_path / "record.jsonl"
    service = service_with(path)
    result = service.request(2, 256, "tiny", "alice", "req-1", wait_seconds=15)
    assert result.record.outcome == "placed"
    service.release(result.lease.lease_id, wait_seconds=15)
    service.close()
    lines = read_recording(path)
    kinds = [line["kind"] for line in lines]
    assert kinds[0] == "start" and "report" in kinds
    (request,) = [line for line in lines if line["kind"] == "request"]
    assert (request["rid"], request["vcpus"], request["memory_mib"], request["owner"]) == ("req-1", 2, 256, "alice")
    (placed,) = [line for line in lines if line.get("event") == "request.placed"]
    assert (placed["key"], placed["node"], placed["path"], placed["victims"]) == ("od:req-1", "a", "free", [])
    (answer,) = [line for line in lines if line["kind"] == "launch_answer"]
    assert answer["key"] == "od:req-1" and answer["ok"] is True and 0 <= answer["delay_s"] < 15
    (release,) = [line for line in lines if line["kind"] == "release"]
    assert release["key"] == "od:req-1" and release["force"] is False
    (stop,) = [line for line in lines if line["kind"] == "stop_answer"]
    assert stop["ok"] is True and stop["outcome"] == "clean_shutdown"
    assert [line["t"] for line in lines] == sorted(line["t"] for line in lines)


def test_a_recording_that_fails_never_stops_the_controller(service_with, caplog):
    service = service_with(Path("/dev/full"))   # every write fails
    service.recorder.flush_seconds = 0.0
    for n in range(3):
        result = service.request(1, 128, "tiny", "alice", f"req-{n}", wait_seconds=15)
        assert result.record.outcome == "placed"
    assert not service.recorder.enabled
    assert [r.message for r in caplog.records].count("record.stopped") == 1
    service.tick()
    service.fill()


def test_recording_costs_a_request_little(service_with, tmp_path):
    """The hooks add little to a decision: 200 requests booked with and without recording."""
    timings = {}
    for label, path in (("off", None), ("on", tmp_path / "r.jsonl")):
        service = service_with(path)
        started = time.perf_counter()
        for n in range(200):
            with service.lock:
                service.recorder.request(1, 16, "tiny", "alice", f"{label}-{n}")
                service._apply(service.ledger.request(Ask(1, 16, "tiny", "alice", f"{label}-{n}"), service.clock()))
        timings[label] = time.perf_counter() - started
    assert timings["on"] < 2 * timings["off"] + 0.2, timings


def test_a_report_line_keeps_the_hibernated_vms_and_their_budget():
    """The replay feeds recorded reports: a hibernating pool's saved VMs and disk budget must be in
    them (the books terminate victims where the budget is 0), and a VM saved or resumed is a change."""
    from types import SimpleNamespace
    out, clock = io.StringIO(), Clock()
    recorder = Recorder(out, 2**40, clock=clock)

    def report(saved):
        return SimpleNamespace(node_id="n1", cpus=16, memory_mib=24576, images=["tiny"], foreground_cpu_cores=0.0,
                               min_memory_mib=32, vms=[], hibernation_budget_bytes=4 << 30,
                               hibernated=[SimpleNamespace(name=n, lease_id=f"bf-{n}", vcpus=1, memory_mib=1024,
                                                           image="tiny") for n in saved])
    recorder.report(report(["a"]))
    recorder.report(report(["a"]))
    recorder.report(report(["a", "b"]))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [l["saved"] for l in lines] == [[["a", "bf-a", 1, 1024, "tiny"]],
                                           [["a", "bf-a", 1, 1024, "tiny"], ["b", "bf-b", 1, 1024, "tiny"]]]
    assert all(l["hibernation_budget_bytes"] == 4 << 30 for l in lines)


def test_a_repeated_report_is_recorded_when_the_books_act_on_it_and_the_left_out_are_counted():
    from controller.sim.world import Report, SimNode
    out, clock = io.StringIO(), Clock()
    recorder = Recorder(out, 2**40, clock=clock)
    node = SimNode("n1", 16, 24576, ("tiny",))
    recorder.report(Report(node, 0.0))
    for _ in range(3):
        clock.now += 2.0
        recorder.report(Report(node, 0.0))   # repeats: left out
    recorder.report_acted("n1")              # the books acted on the last one: written, at its own time
    clock.now += 2.0
    recorder.report(Report(node, 0.0))
    recorder.report_acted("n2")              # nothing held for that node: nothing written
    node.memory_mib = 32768
    recorder.report(Report(node, 0.0))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(l["t"], l["skipped"]) for l in lines] == [(1000.0, 0), (1006.0, 2), (1008.0, 1)]


def recording_config(tmp_path: Path, path: Path, **more) -> ControllerConfig:
    """A controller's configuration that records to `path` (no TLS, no listener used, no prediction)."""
    return ControllerConfig(state_dir=tmp_path / "controller", tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                            use_prediction=False, record_path=path, **more)


def test_the_service_records_a_repeated_report_that_found_a_vm_lost(tmp_path):
    """A node's reports stop showing a VM: the same report repeats, and the one past lost_after
    makes the books find it lost. Left out as a repeat, the replay would find it up to 30 s late."""
    from controller.core.records import Size
    from tests.unit.test_books_faults import Clock as BooksClock, RecordingAgents, drained
    clock = BooksClock()
    path = tmp_path / "record.jsonl"
    config = recording_config(tmp_path, path)
    store = Store(config.store_path)
    service = PoolService(config, store, RecordingAgents(), clock=clock)
    try:
        empty = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=4, memory_mib=4096,
                                          images=["tiny"], min_memory_mib=32)
        service.ingest(empty)
        service.request(1, 256, "tiny", "alice", "r1", wait_seconds=0)
        drained(service)
        [lease] = [l for l in service.live_leases() if l.request_id == "r1"]
        shown = controller_pb2.NodeReport()
        shown.CopyFrom(empty)
        shown.vms.add(name=lease.vm_name, lease_id=lease.lease_id, role="on_demand", vcpus=1, memory_mib=256,
                      state="running", image="tiny")
        service.ingest(shown)
        for _ in range(int(service.ledger.settings.lost_after) + 3):
            clock.now += 1.0
            service.ingest(empty)   # the same report each second
    finally:
        service.close()
        store.close()
    lines = read_recording(path)
    lost = next(l for l in lines if l.get("event") == "vm.lost")
    reports = [l for l in lines if l["kind"] == "report" and l["t"] <= lost["t"]]
    assert reports[-1]["vms"] == [] and lost["t"] - reports[-1]["t"] < 0.5   # the report that found it
    assert reports[-1]["skipped"] >= 1


def test_the_goals_job_is_recorded_while_a_tenant_has_a_goal_even_when_it_changed_nothing(tmp_path):
    """A sizing that asks for nothing still steers the next one (two in a row before dedicated VMs
    go): the recording keeps every goals job while a goal is set, and none without one."""
    from controller.core.records import Policy, Size
    from tests.unit.test_books_faults import Clock as BooksClock, RecordingAgents
    clock, path = BooksClock(), tmp_path / "record.jsonl"
    config = recording_config(tmp_path, path)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=256, termination_policy=Policy.MOST_RECENT))
    service = PoolService(config, store, RecordingAgents(), clock=clock)
    try:
        service.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=1024,
                                                 images=["tiny"], min_memory_mib=32))
        service.size_goals()   # no goal: not recorded
        service.create_tenant("science", "batch", Size(1, 256), Size(2, 512))
        service.set_tenant_goal("science", {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": clock.now + 36000})
        for _ in range(3):
            clock.now += 60
            service.size_goals()   # volunteers meet it: nothing asked
    finally:
        service.close()
        store.close()
    jobs = [line for line in read_recording(path) if line["kind"] == "job" and line["name"] == "goals"]
    assert len(jobs) == 3 and all(line["effects"] == 0 for line in jobs)


def test_a_report_line_keeps_the_guests_word_and_a_change_of_it_is_not_a_repeat():
    """The guest's progress, its work word and whether the VM's CPU was sampled steer the books
    (goal sizing, idleness): a report line keeps them, and a report whose only news is one of
    them is written, not left out as a repeat. Ages that grow with the clock are no news; a work
    state said anew (a new job's "busy": its age drops) is."""
    from controller.core.records import Lease
    from controller.sim.world import Report, SimNode, SimVm

    class Guest(SimVm):
        __slots__ = ("progress_done", "progress_total", "progress_for_s")
    out, clock = io.StringIO(), Clock()
    recorder = Recorder(out, 2**40, clock=clock)
    node = SimNode("n1", 16, 24576, ("tiny",))
    lease = Lease("bf-1", "backfill", "n1", "vm-bf-1", 1, 1024, "tiny", "backfill", "running", 0.0)
    vm = node.vms[lease.vm_name] = Guest(lease, 0.0)
    vm.progress_done, vm.progress_total, vm.progress_for_s = 3, 10, 1.25
    vm.work_state, vm.cpu_sampled = "busy", False

    def reports() -> list[dict]:
        return [line for line in map(json.loads, out.getvalue().splitlines()) if line["kind"] == "report"]
    recorder.report(Report(node, 0.0))
    assert reports()[0]["vms"][0][6:] == [1.0, False, "busy", 0.0, 3, 10, 1.25]
    vm.progress_for_s = 9.0   # older, the same word: a repeat
    recorder.report(Report(node, 0.0))
    assert len(reports()) == 1
    for change in (lambda: setattr(vm, "progress_done", 4), lambda: setattr(vm, "work_state", "idle"),
                   lambda: setattr(vm, "cpu_sampled", True), lambda: setattr(vm, "progress_total", 20)):
        change()
        recorder.report(Report(node, 0.0))
    assert [r["vms"][0][7:12] for r in reports()[1:]] == [
        [False, "busy", 0.0, 4, 10], [False, "idle", 0.0, 4, 10], [True, "idle", 0.0, 4, 10], [True, "idle", 0.0, 4, 20]]
    vm.clock, vm.work_state, vm.work_since = clock, "busy", clock.now   # the agent times the guest's word
    recorder.report(Report(node, 0.0))
    count = len(reports())
    for _ in range(3):   # still busy, a minute older each time: no news
        clock.now += 60.0
        recorder.report(Report(node, 0.0))
    assert len(reports()) == count
    vm.work_since = clock.now - 1.0   # busy said anew: a new job began
    recorder.report(Report(node, 0.0))
    assert len(reports()) == count + 1 and reports()[-1]["vms"][0][8:10] == ["busy", 1.0]


def test_the_service_records_its_tenants_at_start_and_each_change_of_them(tmp_path):
    """A replay needs the tenants the books had: the start line has them as stored (here after a
    restart, with the pool's RBT and URR and a job done), and each create, goal and delete
    writes the tenants as stored then, saying when a goal's job begins and the goals were sized."""
    from controller.core.records import Size
    from tests.unit.test_books_faults import Clock as BooksClock, RecordingAgents
    clock, path = BooksClock(), tmp_path / "record.jsonl"
    config = recording_config(tmp_path, path, tenants_rbt=1.5, tenants_urr=0.8)
    goal = {"kind": "deadline", "work_vcpu_hours": 1.0, "deadline_s": clock.now + 36000}
    store = Store(config.store_path)
    service = PoolService(config, store, RecordingAgents(), clock=clock)
    try:
        service.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=4, memory_mib=8192,
                                                 images=["tiny"], min_memory_mib=32))
        service.create_tenant("science", "batch", Size(1, 256), Size(2, 512))
        service.set_tenant_goal("science", goal)
        service.create_tenant("gone", "on_demand", Size(0, 0), Size(1, 256))
        service.delete_tenant("gone", drain=False)
        store.apply(Write(goals_done=("science",)))   # as the books write it when the guests say it is done
    finally:
        service.close()
    service = PoolService(config, store, RecordingAgents(), clock=clock)   # a restart: a new segment
    service.close()
    store.close()
    lines = read_recording(path)
    changes = [line for line in lines if line["kind"] == "tenants"]
    built_in = {"backfill", "default"}   # the store keeps the built-in tenants too (their bounds may be set)

    def named(tenants: list[dict]) -> list[str]:
        return sorted(t["name"] for t in tenants if t["name"] not in built_in)
    assert [(named(c["tenants"]), c["goal_begins"], c["sized"]) for c in changes] == [
        (["science"], None, False), (["science"], "science", True), (["gone", "science"], None, False),
        (["science"], None, False)]
    assert json.loads(next(t for t in changes[1]["tenants"] if t["name"] == "science")["goal"]) == goal
    first, second = [line for line in lines if line["kind"] == "start"]
    assert named(first["tenants"]) == [] and first["goals_done"] == []
    (science,) = [t for t in second["tenants"] if t["name"] == "science"]
    assert (science["name"], science["kind"], science["lower_vcpus"], science["upper_memory_mib"]) == \
        ("science", "batch", 1, 512)
    assert second["tenancy"] == {"rbt": 1.5, "urr": 0.8} and second["goals_done"] == ["science"]


def test_a_goals_job_that_released_a_dedicated_vm_no_goal_steers_is_recorded(tmp_path):
    """The controller restarts with a dedicated VM whose tenant has no goal any more: its first
    goals job releases it, and the recording keeps that job though no goal is set (a replay
    without it would keep the VM)."""
    from controller.core.records import Lease, Size
    from tests.unit.test_books_faults import Clock as BooksClock, RecordingAgents, drained
    clock, path = BooksClock(), tmp_path / "record.jsonl"
    config = recording_config(tmp_path, path)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=256))
    service = PoolService(config, store, RecordingAgents(), clock=clock)
    service.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=1024,
                                             images=["tiny"], min_memory_mib=32))
    service.create_tenant("science", "batch", Size(1, 256), Size(2, 512))
    service.close()
    store.put_leases([Lease("od-1", "on_demand", "n1", "vm-goal", 1, 256, "tiny", "science", "running", clock.now - 60,
                            launched_at=clock.now - 60, request_id="goal-science-1")])
    service = PoolService(config, store, RecordingAgents(), clock=clock)
    try:
        report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=1024,
                                           images=["tiny"], min_memory_mib=32)
        report.vms.add(name="vm-goal", lease_id="od-1", role="on_demand", vcpus=1, memory_mib=256, state="running",
                       image="tiny")
        service.ingest(report)
        assert not service.ledger.tenant_goals
        service.size_goals()
        drained(service)
    finally:
        service.close()
        store.close()
    jobs = [line for line in read_recording(path) if line["kind"] == "job" and line["name"] == "goals"]
    assert [line["effects"] > 0 for line in jobs] == [True]


def test_the_service_records_a_delete_with_drain_its_releases_and_its_end(tmp_path):
    """`tenant delete --drain`: the drain's start, a release line per VM it releases (a replay
    releases them as any release), the drain's end, then the tenants without it, in that order."""
    from controller.core.records import Size
    from tests.unit.test_books_faults import Clock as BooksClock, RecordingAgents, drained
    clock, path = BooksClock(), tmp_path / "record.jsonl"
    config = recording_config(tmp_path, path)
    store = Store(config.store_path)
    service = PoolService(config, store, RecordingAgents(), clock=clock)
    try:
        service.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=4, memory_mib=8192,
                                                 images=["tiny"], min_memory_mib=32))
        service.create_tenant("lab", "on_demand", Size(0, 0), Size(4, 4096))
        for rid in ("r1", "r2"):
            service.request(1, 256, "tiny", "lab", rid, wait_seconds=0)
        drained(service)
        leases = sorted(l.lease_id for l in service.live_leases() if l.owner == "lab")
        assert len(leases) == 2
        service.delete_tenant("lab", drain=True, wait_seconds=5)
    finally:
        service.close()
        store.close()
    lines = read_recording(path)
    drain = [i for i, line in enumerate(lines) if line["kind"] == "drain"]
    assert [(lines[i]["tenant"], lines[i]["draining"]) for i in drain] == [("lab", True), ("lab", False)]
    released = [i for i, line in enumerate(lines) if line["kind"] == "release"]
    assert sorted(lines[i]["lease"] for i in released) == leases
    deleted = [i for i, line in enumerate(lines) if line["kind"] == "tenants"][-1]
    assert drain[0] < min(released) and max(released) < drain[1] < deleted
    assert "lab" not in {t["name"] for t in lines[deleted]["tenants"]}
