"""The controller's store, configuration, request checks and gleanctl's own checks."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from controller import checks
from controller.config import ControllerConfig, check_config, parse_config, to_toml
from controller.checks import SettingError, parse_backfill_setting
from controller.gleanctl import EXIT_UNREACHABLE, EXIT_USAGE, main as gleanctl_main
from controller.core.records import BackfillConfig, Policy, Size
from controller.store import MIGRATIONS, SCHEMA_VERSION, Lease, LeaseConflict, Reserve, Store, StoreError
from gleaner_common.config import ConfigError, TlsConfig
from gleaner_common.ids import InvalidField
from tests.agentproc import REPO, free_port


def lease(lease_id: str, state: str = "running", **kw) -> Lease:
    return Lease(lease_id, "backfill", "n1", f"vm-{lease_id}", 1, 128, "tiny", "me", state, 100.0, **kw)


def test_store_keeps_leases_settings_and_events_across_reopen(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    store.put_leases([lease("a"), lease("b")])
    store.put_lease(lease("b", "ended", ended_at=200.0, end_reason="released"))
    store.set_backfill(BackfillConfig(enabled=True, max_instances=3, termination_policy=Policy.LEAST_LOSS))
    store.set_reserve(Reserve("*", vcpus=1, memory_mib=512))
    store.record("vm.preempted", "n1", "a", policy="most_recent", seconds=1.5)
    store.close()
    again = Store(tmp_path / "c.sqlite3")
    assert [l.lease_id for l in again.live_leases()] == ["a"]
    assert again.lease("b").end_reason == "released"
    assert again.backfill() == BackfillConfig(enabled=True, max_instances=3, termination_policy=Policy.LEAST_LOSS)
    assert again.reserves() == {"*": Reserve("*", 1, 512, False)}
    (event,) = again.events()
    assert (event.kind, event.lease_id, event.detail) == ("vm.preempted", "a", {"policy": "most_recent",
                                                                                  "seconds": 1.5})
    assert again.count_events("vm.preempted") == 1
    assert again.schema_version == SCHEMA_VERSION
    assert sqlite3.connect(tmp_path / "c.sqlite3").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_refuses_a_newer_schema_and_leaves_it_alone(tmp_path):
    path = tmp_path / "c.sqlite3"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this controller"):
        Store(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_store_migrates_an_empty_database_step_by_step(tmp_path):
    path = tmp_path / "c.sqlite3"
    sqlite3.connect(path).close()
    store = Store(path)
    assert store.schema_version == len(MIGRATIONS)
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"leases", "requests", "settings", "reserves", "events"} <= tables


def test_store_rejects_impossible_rows(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    with pytest.raises(StoreError, match="CHECK constraint failed"):
        store.put_lease(Lease("x", "weird", "n1", "vm-x", 1, 1, "tiny", "me", "running", 1.0))
    assert store.live_leases() == []  # the failed transaction left nothing
    store.put_lease(Lease("a", "backfill", "n1", "vm-a", 1, 1, "tiny", "me", "running", 1.0))
    with pytest.raises(LeaseConflict):  # another lease's VM name: refused, never a replacement of its row
        store.put_lease(Lease("b", "backfill", "n2", "vm-a", 1, 1, "tiny", "me", "running", 1.0))
    with pytest.raises(LeaseConflict):
        store.insert_lease(Lease("a", "backfill", "n2", "vm-other", 1, 1, "tiny", "me", "running", 1.0))
    assert [(l.lease_id, l.node_id, l.vm_name) for l in store.live_leases()] == [("a", "n1", "vm-a")]


def test_controller_config_round_trips_and_is_strict():
    config = ControllerConfig(listen="unix:/run/gleaner/c.sock", tls=TlsConfig(insecure=True), churn_burst=5)
    import tomllib
    assert parse_config(tomllib.loads(to_toml(config))) == config
    with pytest.raises(ConfigError, match="unknown key selection.treshold"):
        parse_config({"selection": {"treshold": 1}})
    with pytest.raises(ConfigError, match="down_after_seconds must be longer"):
        check_config(ControllerConfig(tls=TlsConfig(insecure=True), listen="unix:/c.sock", suspect_after_seconds=30,
                                      down_after_seconds=10), "test")
    with pytest.raises(ConfigError, match="insecure mode \\(no TLS\\) is only allowed on a unix socket"):
        check_config(ControllerConfig(tls=TlsConfig(insecure=True)), "test")
    with pytest.raises(ConfigError, match="mutual TLS needs"):
        check_config(ControllerConfig(), "test")
    with pytest.raises(ConfigError, match="vm_name_prefix"):
        check_config(ControllerConfig(listen="unix:/c.sock", tls=TlsConfig(insecure=True), vm_name_prefix="a/b"), "t")
    for field in ("agent_timeout_seconds", "down_after_seconds"):
        with pytest.raises(ConfigError, match=f"{field} must be within .* \\(a finite number\\), not inf"):   # TOML has inf
            check_config(ControllerConfig(listen="unix:/c.sock", tls=TlsConfig(insecure=True),
                                          **{field: float("inf")}), "t")


@pytest.mark.parametrize("args, field", [
    ((0, 128, "tiny", "me", "r1"), "vcpus"),
    ((1, 0, "tiny", "me", "r1"), "memory_mib"),
    ((1, 128, "../x", "me", "r1"), "image"),
    ((1, 128, "/etc/passwd", "me", "r1"), "image"),
    ((1, 128, "tiny", "me; rm", "r1"), "owner"),
    ((1, 128, "tiny", "me", ""), "request_id"),
    ((1, 128, "tiny", "me", "x" * 65), "request_id"),
])
def test_requests_are_checked_field_by_field(args, field):
    with pytest.raises(InvalidField) as caught:
        checks.request(*args)
    assert caught.value.field == field and field in str(caught.value)
    checks.request(1, 128, "tiny", "me", "r1")  # and a good one passes


def test_gleanctl_backfill_settings_are_checked_before_sending():
    assert parse_backfill_setting("max_instances=4") == ("max_instances", 4)
    assert parse_backfill_setting("enabled=off") == ("enabled", False)
    for bad in ("max_instances", "max_instances=four", "colour=red", "enabled=maybe", "vcpus=-1"):
        with pytest.raises(SettingError):
            parse_backfill_setting(bad)


def test_gleanctl_exit_codes_for_usage_and_an_unreachable_controller(capsys):
    assert gleanctl_main(["status"]) == EXIT_USAGE  # no TLS settings
    assert "mutual TLS" in capsys.readouterr().err
    port = free_port()
    assert gleanctl_main(["--controller", f"127.0.0.1:{port}", "--insecure", "--timeout", "2", "status"]) \
        == EXIT_UNREACHABLE
    assert "cannot reach" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", "frobnicate"], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 2 and "invalid choice" in done.stderr


class SlowAgents:
    """Stands in for the agents (not under test here): terminations take a while, launches succeed."""

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.retire_after: dict[str, int] = {}   # what each launched guest was told
        self.work_channel: dict[str, bool] = {}  # whether each was asked for the work channel
        self.terminated: list[str] = []

    def launch(self, node_id, address, name, role, vcpus, memory_mib, image, lease_id, retire_after_seconds=0,
               work_channel=False) -> None:
        self.launched.append(name)
        self.retire_after[name] = retire_after_seconds
        self.work_channel[name] = work_channel

    def terminate(self, node_id, address, name, grace_seconds, force=False):
        import time
        from controller.agents import Stopped
        time.sleep(0.3)
        self.terminated.append(name)
        return Stopped("clean_shutdown", 0.3, "stand-in")


def pool_of_two_backfill_vms(tmp_path, agents, **settings):
    """An in-process pool (stand-in agents) whose one 2-CPU node runs two backfill VMs, bf0 then
    bf1; (the pool, the node's report)."""
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1", **settings)
    store = Store(config.store_path)
    store.put_leases([lease(f"bf{i}", launched_at=1000.0 + i) for i in range(2)])
    pool = PoolService(config, store, agents)
    report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                       images=["tiny"], min_memory_mib=32)
    for i in range(2):
        report.vms.add(name=f"vm-bf{i}", lease_id=f"bf{i}", role="backfill", vcpus=1, memory_mib=128)
    pool.ingest(report)
    return pool, report


def test_concurrent_requests_never_double_book_a_node(tmp_path):
    import threading
    agents = SlowAgents()
    pool, _report = pool_of_two_backfill_vms(tmp_path, agents)
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(pool.request(1, 128, "tiny", "me", f"r{i}")))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    placed = [r for r in results if r.record.outcome == "placed"]
    assert len(placed) == 2 and len([r for r in results if r.record.outcome == "rejected"]) == 2
    assert sorted(v.lease.lease_id for r in placed for v in r.preempted) == ["bf0", "bf1"]  # each stopped once
    assert {r.record.path for r in placed} == {"instant"}  # the node's memory holds them beside their victims
    pool.executor.shutdown(wait=True)  # the victims' stops run beside the launches
    assert sorted(agents.terminated) == ["vm-bf0", "vm-bf1"]
    live = pool.live_leases()
    assert sum(l.vcpus for l in live) == 2 and {l.role for l in live} == {"on_demand"}
    # the same request_id again: the same answer, nothing new
    again = pool.request(1, 128, "tiny", "me", placed[0].record.request_id)
    assert again.lease.lease_id == placed[0].lease.lease_id and len(agents.launched) == 2


class OrderedAgents:
    """Stands in for the agents (not under test here): records the order of calls, and a launch
    takes a while, so a stop sent beside it (not after it) would be recorded first."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def launch(self, node_id, address, name, role, vcpus, memory_mib, image, lease_id, retire_after_seconds=0,
               work_channel=False) -> None:
        import time
        time.sleep(0.3)
        self.calls.append(("launch", name))

    def terminate(self, node_id, address, name, grace_seconds, force=False):
        from controller.agents import Stopped
        self.calls.append(("stop", name))
        return Stopped("clean_shutdown", 0.0, "stand-in")


@pytest.mark.parametrize("headroom_mib, path, first", [(0, "instant", "launch"), (4096, "after_victims", "stop")])
def test_instant_victims_get_their_notice_once_the_new_vm_is_launched(tmp_path, headroom_mib, path, first):
    """libvirt holds up a domain's define while another one shuts down, so on the instant path the
    controller asks for the victims' stop after the launch; when the launch waits for the victims'
    memory, the stop comes first."""
    agents = OrderedAgents()
    pool, report = pool_of_two_backfill_vms(tmp_path, agents, host_headroom_mib=headroom_mib)
    import time
    result = pool.request(1, 128, "tiny", "me", "r1", wait_seconds=0.0)
    assert result.record.path == path
    if path == "instant":   # its deadline leaves room for the launch its stop waits for
        s, victim = pool.ledger.settings, pool.ledger.leases["bf1"]
        assert victim.deadline >= result.record.created_at + s.notice_seconds + s.stop_timeout + s.launch_timeout - 1
    report.ClearField("vms")   # the victim is gone from the node (once its stop is answered, the
    report.vms.add(name="vm-bf0", lease_id="bf0", role="backfill", vcpus=1, memory_mib=128)  # launch follows)
    deadline = time.monotonic() + 5
    while len(agents.calls) < 2 and time.monotonic() < deadline:
        pool.ingest(report)
        time.sleep(0.05)
    pool.executor.shutdown(wait=True)
    kinds = [kind for kind, _name in agents.calls]
    assert kinds[0] == first and sorted(kinds) == ["launch", "stop"], agents.calls
    assert ("stop", "vm-bf1") in agents.calls   # the most recent backfill VM


class BrokenLaunchAgents(OrderedAgents):
    def launch(self, *args) -> None:
        raise ValueError("a bug in the launch path")


def test_an_instant_victim_is_still_asked_to_stop_when_the_launch_breaks(tmp_path):
    import time
    agents = BrokenLaunchAgents()
    pool, _report = pool_of_two_backfill_vms(tmp_path, agents, host_headroom_mib=0)
    assert pool.request(1, 128, "tiny", "me", "r1", wait_seconds=0.0).record.path == "instant"
    deadline = time.monotonic() + 5
    while not agents.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    pool.executor.shutdown(wait=True)
    assert agents.calls == [("stop", "vm-bf1")]


def test_agent_controller_settings_are_checked():
    from nodeagent.config import AgentConfig
    from nodeagent.config import check_config as check_agent
    tls = TlsConfig(insecure=True)
    with pytest.raises(ConfigError, match="controller.address"):
        check_agent(AgentConfig(listen="unix:/run/a.sock", tls=tls, controller_address="nowhere"), "t")
    with pytest.raises(ConfigError, match="needs controller.advertise"):
        check_agent(AgentConfig(listen="unix:/run/a.sock", tls=tls, controller_address="ctl:7450"), "t")
    assert AgentConfig(listen="127.0.0.1:7443").reachable_address == "127.0.0.1:7443"
    assert AgentConfig(listen="0.0.0.0:7443").reachable_address.endswith(":7443")
    assert not AgentConfig(listen="0.0.0.0:7443").reachable_address.startswith("0.0.0.0")
    assert AgentConfig(advertise_address="node7:7443").reachable_address == "node7:7443"


def test_the_launcher_fills_by_potential_productivity_and_respects_reserves(tmp_path):
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              prediction_window=5)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=512))
    agents = SlowAgents()
    pool = PoolService(config, store, agents)
    for _ in range(5):  # "busy" runs 1.6 of its 2 cores in the foreground, "idle" almost nothing
        for node_id, fg in (("busy", 1.6), ("idle", 0.1), ("kept", 0.0)):
            pool.ingest(controller_pb2.NodeReport(node_id=node_id, agent_address="127.0.0.1:9", cpus=2,
                                                  memory_mib=4096, foreground_cpu_cores=fg, images=["tiny"]))
    pool.set_reserve(Reserve("kept", whole_node=True))
    assert pool.fill() == 2
    assert {l.node_id for l in pool.live_leases()} == {"idle"}   # P(busy) = 0.4 < half a core; "kept" is reserved
    assert pool.productivity["busy"] == pytest.approx(0.4) and pool.productivity["kept"] == 0.0
    assert pool.selected[0] == "idle"
    assert pool.fill() == 0  # full: nothing more


def test_a_backfill_guest_is_told_when_it_will_be_recycled_and_an_on_demand_one_is_not(tmp_path):
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=512, max_instances=1, duration_seconds=7200))
    agents = SlowAgents()
    pool = PoolService(config, store, agents)
    pool.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                          images=["tiny"], min_memory_mib=32))
    assert pool.fill() == 1
    placed = pool.request(1, 128, "tiny", "me", "od-1")
    assert placed.record.outcome == "placed"
    pool.executor.shutdown(wait=True)
    (backfill,) = [l.vm_name for l in pool.live_leases() if l.role == "backfill"]
    assert agents.retire_after == {backfill: 7200, placed.lease.vm_name: 0}



def test_only_a_goals_dedicated_vms_are_launched_with_the_work_channel_beside_backfill(tmp_path):
    """A goal's dedicated VM runs its tenant's job, so its guest may say the job's progress: the
    agent is asked for the work channel for it, and for no other on-demand VM (a backfill VM has
    it whatever it is asked)."""
    import time
    from controller.core.records import is_dedicated
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=512, vcpus=1))
    agents = SlowAgents()
    pool = PoolService(config, store, agents)
    pool.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=4, memory_mib=8192,
                                          images=["tiny"], min_memory_mib=32))
    assert pool.fill() == 4   # the built-in tenant's backfill fills the node
    placed = pool.request(1, 128, "tiny", "me", "od-1")
    assert placed.record.outcome == "placed"
    pool.create_tenant("science", "batch", Size(2, 1024), Size(4, 4096))
    pool.set_tenant_goal("science", {"kind": "deadline", "work_vcpu_hours": 1000, "deadline_s": time.time() + 3600})
    pool.size_goals()
    pool.executor.shutdown(wait=True)
    dedicated = {l.vm_name for l in pool.live_leases() if is_dedicated(l)}
    assert len(dedicated) == 2, pool.live_leases()   # its lower bound: the deadline is out of reach
    assert {name for name, asked in agents.work_channel.items() if asked} == dedicated
    assert agents.work_channel[placed.lease.vm_name] is False

def test_backfill_vms_past_their_duration_are_recycled(tmp_path):
    import time
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=128, duration_seconds=60))
    store.put_leases([lease("old", launched_at=time.time() - 61), lease("new", launched_at=time.time() - 5)])
    agents = SlowAgents()
    pool = PoolService(config, store, agents)
    report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                       images=["tiny"], min_memory_mib=32)
    for name in ("old", "new"):
        report.vms.add(name=f"vm-{name}", lease_id=name, role="backfill", vcpus=1, memory_mib=128)
    pool.ingest(report)
    pool.fill()
    pool.executor.shutdown(wait=True)  # the recycling runs on the agent-call threads
    assert agents.terminated == ["vm-old"]
    assert store.lease("old").end_reason == "recycled after 60 s"
    assert store.count_events("vm.recycled") == 1


def test_one_controller_owns_a_store(tmp_path):
    from controller.store import StoreBusy
    first = Store(tmp_path / "c.sqlite3", exclusive=True)
    with pytest.raises(StoreBusy, match="in use by another controller"):
        Store(tmp_path / "c.sqlite3", exclusive=True)
    first.close()
    Store(tmp_path / "c.sqlite3", exclusive=True).close()  # free again once the first let go


def test_a_damaged_store_is_reported_and_left_untouched(tmp_path):
    path = tmp_path / "c.sqlite3"
    store = Store(path)
    store.put_leases([lease("a")])
    store.close()
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xff" * 4096   # the second page: the leases table
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(StoreError, match="damaged|not a usable SQLite database"):
        Store(path)
    assert path.read_bytes() == before


def serve_three_nodes(tmp_path, reserves):
    """An in-process controller (no TLS, loopback) with `reserves` and nodes a, b, c of 2 vCPUs:
    (config, store, pool, server, gleanctl's target arguments)."""
    from controller.server import build_server
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:0",
                              reserves=reserves)
    store = Store(config.store_path)
    pool = PoolService(config, store, SlowAgents())
    for node_id in ("a", "b", "c"):
        pool.ingest(controller_pb2.NodeReport(node_id=node_id, agent_address="127.0.0.1:9", cpus=2,
                                              memory_mib=4096, images=["tiny"]))
    server = build_server(config, pool, lambda _config: None)
    return config, store, pool, server, ["--controller", f"127.0.0.1:{server.port}", "--insecure", "--timeout", "10"]


def test_gleanctl_reserve_hints_round_trip_through_the_controller_and_its_store(tmp_path, capsys):
    import json
    from controller.core.reserve_settings import PredictiveMode, ReserveSettings
    from controller.gleanctl import EXIT_INVALID
    from controller.service import PoolService
    config, store, pool, server, target = serve_three_nodes(
        tmp_path, ReserveSettings(static_nodes=1, predictive=PredictiveMode.WEEK, wait_seconds=60))
    try:
        assert gleanctl_main(target + ["--json", "reserve", "hint", "2", "--in", "1", "--for", "3",
                                       "--label", "exam"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert [(h["nodes"], h["label"]) for h in data["hints"]] == [(2, "exam")]
        assert data["settings"]["static_nodes"] == 1 and data["settings"]["predictive"] == "week"
        assert gleanctl_main(target + ["reserve", "hint", "2", "--in", "1", "--for", "1"]) == EXIT_INVALID
        assert "nodes" in capsys.readouterr().err   # with the first hint, 4 of 3 nodes: refused naming the field
        assert gleanctl_main(target + ["reserve", "hint", "1", "--in", "-1", "--for", "1"]) == EXIT_INVALID
        assert "in_hours" in capsys.readouterr().err
        assert gleanctl_main(target + ["reserve"]) == 0
        text = capsys.readouterr().out
        assert "no per-node reserves" in text and "static 1" in text and "exam" in text
        assert "static_nodes=1" in text and "wait_seconds=60" in text
    finally:
        server.stop(grace=1)
    pool.save_history()
    pool.close()
    store.close()
    reopened = Store(config.store_path)
    assert [(h.nodes, h.label) for h in reopened.hints()] == [(2, "exam")]
    assert reopened.history() is not None and reopened.count_events("reserve.hint") == 1
    assert reopened.count_events("reserve.configured") == 1   # the settings, audited once while they hold
    again = PoolService(config, reopened, SlowAgents())
    assert [h.label for h in again.ledger.hints] == ["exam"]
    assert again.cancel_hints("exam") == 1 and reopened.hints() == []
    again.close()
    reopened.close()


def test_gleanctl_reserve_node_option_reaches_a_node_named_like_an_action(tmp_path, capsys):
    from controller.core.reserve_settings import ReserveSettings
    from protos import controller_pb2
    config, store, pool, server, target = serve_three_nodes(tmp_path, ReserveSettings())
    pool.ingest(controller_pb2.NodeReport(node_id="set", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                          images=["tiny"]))
    try:
        assert gleanctl_main(target + ["reserve", "set", "--node", "set", "--vcpus", "1"]) == 0
        assert pool.ledger.reserve_for("set").vcpus == 1 and "set" in capsys.readouterr().out
        assert gleanctl_main(target + ["reserve", "a", "--node", "set"]) == EXIT_USAGE
        assert "name the node once: 'a' and --node 'set'" in capsys.readouterr().err
        assert gleanctl_main(target + ["reserve", "hint", "--node", "a"]) == EXIT_USAGE
        assert "does not go with `reserve hint`" in capsys.readouterr().err
        assert gleanctl_main(target + ["reserve", "--node", "bad id!"]) != 0
        assert "node" in capsys.readouterr().err
    finally:
        server.stop(grace=1)
        pool.close()
        store.close()


def test_gleanctl_reserve_set_changes_settings_now_and_they_hold_until_the_file_is_edited(tmp_path, capsys, caplog):
    import dataclasses
    import logging
    import grpc
    from controller.core.reserve_settings import PredictiveMode, ReserveSettings
    from controller.gleanctl import EXIT_INVALID
    from controller.service import PoolService
    from protos import controller_pb2, controller_pb2_grpc
    config, store, pool, server, target = serve_three_nodes(tmp_path, ReserveSettings(static_nodes=1))
    changed = ReserveSettings(static_nodes=1, predictive=PredictiveMode.DAY, wait_seconds=120, drain=False)
    try:
        assert gleanctl_main(target + ["reserve", "set", "predictive=day", "drain=false", "wait_seconds=120"]) == 0
        assert "drain=False" in capsys.readouterr().out and pool.ledger.reserve_settings == changed
        for bad, field in (("predictive=year", "predictive"), ("slot_seconds=7000", "slot_seconds"),
                           ("static_nodes=-1", "static_nodes")):
            assert gleanctl_main(target + ["reserve", "set", bad]) == EXIT_INVALID
            assert field in capsys.readouterr().err
        assert gleanctl_main(target + ["reserve", "set", "colour=red"]) == EXIT_USAGE
        assert "KEY one of static_nodes" in capsys.readouterr().err
        assert gleanctl_main(target + ["reserve", "set"]) == EXIT_USAGE
        assert gleanctl_main(target + ["reserve", "set", "drain=false", "drain=true"]) == EXIT_USAGE
        assert "drain: given twice" in capsys.readouterr().err
        assert gleanctl_main(["--controller", "127.0.0.1:1", "reserve", "set", "static_nodes"]) == EXIT_USAGE
        assert "expected KEY=VALUE" in capsys.readouterr().err   # said before any want of TLS settings
        assert gleanctl_main(target + ["reserve", "set", "slot_seconds=3600"]) == 0   # the history's slots move
        capsys.readouterr()
        assert store.events(kind="reserve.configured", limit=1, newest=True)[-1].detail["history_reset"] is True
        assert gleanctl_main(target + ["reserve", "set", "slot_seconds=21600", "predictive=DAY"]) == 0
        stub = controller_pb2_grpc.ControllerStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))
        with pytest.raises(grpc.RpcError) as err:   # the controller checks too, whoever calls
            stub.SetReserveSettings(controller_pb2.SetReserveSettingsRequest(lead_seconds=-1), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "lead_seconds" in err.value.details()
        assert pool.ledger.reserve_settings == changed
    finally:
        server.stop(grace=1)
    [configured, *_slot_changes] = [e for e in store.events(kind="reserve.configured", limit=10)
                                    if e.detail["source"].startswith("gleanctl")]
    assert configured.detail["drain"] is False and configured.detail["predictive"] == "day"
    assert configured.detail["source"] == "gleanctl (admin/local-root)"   # who: here the insecure local caller
    assert "history_reset" not in configured.detail
    pool.close()
    store.close()
    reopened = Store(config.store_path)   # the same file: the change holds
    again = PoolService(config, reopened, SlowAgents())
    assert again.ledger.reserve_settings == changed and reopened.count_events("reserve.configured") == 4
    again.close()
    edited = dataclasses.replace(config, reserves=ReserveSettings(static_nodes=2))   # the file edited: it wins
    with caplog.at_level(logging.WARNING, logger="controller.service"):
        third = PoolService(edited, reopened, SlowAgents())
    [overridden] = [r for r in caplog.records if r.getMessage() == "reserve.settings_overridden"]
    assert overridden.keys == "drain,predictive,wait_seconds"   # what the gleanctl change had set
    assert third.ledger.reserve_settings == ReserveSettings(static_nodes=2)
    latest = reopened.events(kind="reserve.configured", limit=1, newest=True)[-1]
    assert latest.detail["source"] == "config file" and latest.detail["static_nodes"] == 2
    third.close()
    reopened.close()


def test_the_store_keeps_the_reserved_nodes_written_with_their_event(tmp_path):
    from controller.core.records import Audit, Write
    store = Store(tmp_path / "controller.sqlite3")
    assert store.reserved_nodes() == []
    store.apply(Write(events=(Audit("reserve.changed"),), reserved=("n1", "n3")))
    store.apply(Write(events=(Audit("vm.launching"),)))   # other writes leave them as they are
    store.close()
    reopened = Store(tmp_path / "controller.sqlite3")
    assert reopened.reserved_nodes() == ["n1", "n3"] and reopened.count_events("reserve.changed") == 1
    reopened.close()


def test_the_reserves_section_of_the_controller_config_is_checked_naming_the_field():
    from controller.core.reserve_settings import PredictiveMode
    config = parse_config({"reserves": {"static_nodes": 3, "predictive": "day", "wait_seconds": 120,
                                        "drain": False}})
    assert config.reserves.static_nodes == 3 and config.reserves.predictive is PredictiveMode.DAY
    assert config.reserves.drain is False and parse_config({}).reserves.drain is True
    import tomllib
    assert parse_config(tomllib.loads(to_toml(config))).reserves == config.reserves
    for bad, field in (({"predictive": "year"}, "reserves.predictive"),
                       ({"slot_seconds": 7000}, "reserves.slot_seconds"),
                       ({"wait_seconds": -1}, "reserves.wait_seconds"), ({"static": 1}, "reserves.static"),
                       ({"static_nodes": "two"}, "reserves.static_nodes"), ({"drain": "no"}, "reserves.drain")):
        with pytest.raises(ConfigError, match=field):
            parse_config({"reserves": bad})


def one_node_with_a_wait_window(tmp_path, listen: str):
    """An in-process pool (stand-in agents) with a one-hour wait window and node n1 of 2 vCPUs:
    (config, store, pool)."""
    from controller.core.reserve_settings import ReserveSettings
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen=listen,
                              reserves=ReserveSettings(wait_seconds=3600))
    store = Store(config.store_path)
    pool = PoolService(config, store, SlowAgents())
    pool.ingest(controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                          images=["tiny"], min_memory_mib=32))
    return config, store, pool


def test_a_request_waiting_for_room_is_written_and_waits_again_after_a_restart(tmp_path):
    from controller.service import PoolService
    config, store, pool = one_node_with_a_wait_window(tmp_path, "127.0.0.1:1")
    assert pool.request(2, 512, "tiny", "alice", "first", wait_seconds=0).lease is not None
    waiting = pool.request(2, 512, "tiny", "bob", "second", wait_seconds=0)
    assert waiting.record.outcome == "pending" and waiting.record.path == "queued" and waiting.lease is None
    assert store.count_events("request.queued") == 1
    pool.close()
    store.close()
    reopened = Store(config.store_path)
    [record] = [r for r in reopened.pending_requests() if r.request_id == "second"]
    again = PoolService(config, reopened, SlowAgents())
    assert again.ledger.waiting["second"][1] == record.created_at   # its window runs from when it was made
    assert record.wait_until == record.created_at + 3600                 # its deadline was written ...
    assert again.ledger.waiting["second"][2] == record.wait_until       # ... and is the one kept after a restart
    again.close()
    reopened.close()


def test_gleanctl_cancels_a_waiting_request_and_the_caller_waiting_on_it_hears_so(tmp_path, capsys):
    import threading
    import time
    from controller.gleanctl import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_REFUSED
    from controller.server import build_server
    from controller.service import PoolService
    config, store, pool = one_node_with_a_wait_window(tmp_path, "127.0.0.1:0")
    first = pool.request(2, 512, "tiny", "alice", "first", wait_seconds=0).lease
    answers = []
    caller = threading.Thread(target=lambda: answers.append(pool.request(2, 512, "tiny", "bob", "second",
                                                                         wait_seconds=60)))
    caller.start()
    deadline = time.monotonic() + 10
    while "second" not in pool.ledger.waiting and time.monotonic() < deadline:
        time.sleep(0.05)
    server = build_server(config, pool, lambda _config: None)
    target = ["--controller", f"127.0.0.1:{server.port}", "--insecure", "--timeout", "10"]
    try:
        assert gleanctl_main(target + ["cancel", "second"]) == 0
        assert "cancelled request second: cancelled after waiting" in capsys.readouterr().out
        caller.join(timeout=10)   # the caller waiting on it is answered, not left to its timeout
        assert not caller.is_alive() and answers[0].record.outcome == "cancelled"
        assert gleanctl_main(target + ["request", "--vcpus", "2", "--memory", "512", "--owner", "bob",
                                       "--request-id", "second"]) == EXIT_REFUSED   # the same id: its answer
        assert "cancelled: cancelled after waiting" in capsys.readouterr().out
        assert gleanctl_main(target + ["cancel", "second"]) == 0                 # again: the same answer
        assert "cancelled request second" in capsys.readouterr().out
        assert pool.request(4, 512, "tiny", "carol", "huge", wait_seconds=0).record.outcome == "rejected"
        assert gleanctl_main(target + ["cancel", "huge"]) == EXIT_REFUSED        # answered otherwise first
        assert "is rejected, not waiting for room: no node" in capsys.readouterr().out
        assert gleanctl_main(target + ["cancel", "first"]) == EXIT_REFUSED       # placed: its lease to release
        err = capsys.readouterr().err
        assert "failed precondition" in err and f"on lease {first.lease_id}" in err and "release" in err
        assert gleanctl_main(target + ["cancel", "nobody"]) == EXIT_NOT_FOUND
        assert "no request 'nobody'" in capsys.readouterr().err
        assert gleanctl_main(target + ["cancel", "bad id!"]) == EXIT_INVALID
        assert "request_id" in capsys.readouterr().err
    finally:
        server.stop(grace=1)
    assert store.count_events("request.cancelled") == 1
    assert first.lease_id in {l.lease_id for l in pool.live_leases()}   # cancelling touched no lease
    pool.close()
    store.close()
    reopened = Store(config.store_path)   # a restart does not queue it again
    assert reopened.request("second").outcome == "cancelled"
    assert "second" not in {r.request_id for r in reopened.pending_requests()}
    again = PoolService(config, reopened, SlowAgents())
    assert not again.ledger.waiting
    again.close()
    reopened.close()


def test_denial_rows_in_the_audit_log_are_bounded(tmp_path):
    """Each flush adds a bounded number of rows, and the oldest denial rows past the cap go in
    the same transaction; other events are never pruned."""
    from types import SimpleNamespace
    from controller.cli import audit_denials
    from gleaner_common.authz import DenialCounter
    store = Store(tmp_path / "controller.sqlite3")
    store.record("node.joined", node_id="n1")
    counter = DenialCounter()
    server, pool = SimpleNamespace(authorizer=SimpleNamespace(denials=counter)), SimpleNamespace(store=store)
    for minute in range(5):
        for i in range(4):
            counter.add(f"viewer/v{minute}-{i}", "/x/Y", "no")
        audit_denials(pool, server, keep=6)
    rows = store.events(kind="rpc.denied", limit=100)
    assert [r.detail["identity"] for r in rows] == ["viewer/v3-2", "viewer/v3-3"] + [f"viewer/v4-{i}" for i in range(4)]
    assert store.count_events("node.joined") == 1
    audit_denials(pool, server, keep=6)   # nothing denied since: nothing written, nothing pruned
    assert store.count_events("rpc.denied") == 6
    store.close()


def test_a_failing_store_answers_unavailable_naming_it_not_unknown_or_internal(tmp_path):
    import grpc
    from controller.server import build_server
    from controller.service import PoolService
    from protos import controller_pb2, controller_pb2_grpc
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:0")
    store = Store(config.store_path)
    pool = PoolService(config, store, SlowAgents())
    server = build_server(config, pool, lambda _config: None)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = controller_pb2_grpc.ControllerStub(channel)
    report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                       images=["tiny"], min_memory_mib=32)
    calls = {"Report": lambda: stub.Report(iter([report]), timeout=10),
             "RequestVm": lambda: stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                          owner="a", request_id="r1"), timeout=10)}
    try:
        store._db.close()   # as far as the controller can tell, its disk is gone
        for method, call in calls.items():
            with pytest.raises(grpc.RpcError) as failed:
                call()
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, (method, failed.value.details())
            assert f"store {config.store_path} failed" in failed.value.details()
    finally:
        channel.close()
        server.stop(grace=1)
        pool.close()


@pytest.mark.parametrize("args, field", [
    (["request", "--vcpus", "1", "--memory", "128", "--owner", "eve\nmallory"], "owner"),
    (["request", "--vcpus", "1", "--memory", "128", "--image", "../etc/passwd"], "image"),
    (["request", "--vcpus", "1", "--memory", "128", "--request-id", "r/1"], "request_id"),
    (["request", "--vcpus", "0", "--memory", "128"], "vcpus"),
    (["request", "--vcpus", "1", "--memory", str(2**40)], "memory_mib"),
    (["release", "od/../x"], "lease_id"),
    (["reserve", "set", "Node_1", "--vcpus", "1"], "node_id"),
    (["reserve", "set", "node1", "--vcpus", "100000"], "vcpus"),
    (["reserve", "unhint", "--label", "a b"], "label"),
])
def test_gleanctl_checks_arguments_before_calling(args, field, capsys):
    """Refused here with the field named (exit 4): the unreachable controller is never asked."""
    from controller.gleanctl import EXIT_INVALID
    target = ["--controller", f"127.0.0.1:{free_port()}", "--insecure", "--timeout", "2"]
    assert gleanctl_main(target + args) == EXIT_INVALID
    assert f"invalid argument {field}:" in capsys.readouterr().err
    fine = {"request": ["request", "--vcpus", "1", "--memory", "128"], "release": ["release", "od-1"],
            "reserve": ["reserve", "set", "node1", "--vcpus", "1"]}
    assert gleanctl_main(target + fine[args[0]]) == EXIT_UNREACHABLE  # valid arguments do go out


def serve_pool(tmp_path, agents, leases=(), min_memory_mib=32):
    """An in-process controller (no TLS, loopback) with node n1 of 2 vCPUs, its VMs `leases`."""
    from controller.server import build_server
    from controller.service import PoolService
    from protos import controller_pb2
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:0")
    store = Store(config.store_path)
    store.put_leases(list(leases))
    pool = PoolService(config, store, agents)
    report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                       images=["tiny"], min_memory_mib=min_memory_mib)
    for held in leases:
        report.vms.add(name=held.vm_name, lease_id=held.lease_id, role="backfill", vcpus=1, memory_mib=128)
    pool.ingest(report)
    server = build_server(config, pool, lambda _config: None)
    return pool, server, ["--controller", f"127.0.0.1:{server.port}", "--insecure", "--timeout", "30"]


def test_a_request_no_node_can_boot_is_refused_before_any_backfill_vm_is_preempted(tmp_path, capsys):
    import json
    import time
    from controller.gleanctl import EXIT_REFUSED
    agents = SlowAgents()
    pool, server, target = serve_pool(tmp_path, agents, [lease(f"bf{i}", launched_at=1000.0 + i) for i in range(2)],
                                      min_memory_mib=160)
    try:
        for args, why in ((["--memory", "128", "--image", "missing"], "no up node has image 'missing'"),
                          (["--memory", "128"], "128 MiB is less than the smallest VM")):
            assert gleanctl_main(target + ["--json", "request", "--vcpus", "1", *args]) == EXIT_REFUSED
            reply = json.loads(capsys.readouterr().out)
            assert reply["outcome"] == "rejected" and why in reply["reason"] and not reply.get("preempted")
        time.sleep(0.5)   # a victim's stop would have begun by now
        assert agents.terminated == [] and agents.launched == []
        assert sorted((l.lease_id, l.state) for l in pool.live_leases()) == [("bf0", "running"), ("bf1", "running")]
        # the node really was full: a request it can boot does preempt
        assert gleanctl_main(target + ["--json", "request", "--vcpus", "1", "--memory", "192"]) == 0
        assert [p["lease_id"] for p in json.loads(capsys.readouterr().out)["preempted"]] == ["bf1"]
    finally:
        server.stop(grace=1)
        pool.executor.shutdown(wait=True)
        pool.close()


def test_event_paging_through_gleanctl_events(tmp_path, capsys):
    """Oldest first; --after pages on from a sequence number; without it the newest come; the
    limit is capped at 1000 whatever is asked."""
    import json
    pool, server, target = serve_pool(tmp_path, SlowAgents())
    try:
        for i in range(1005):
            pool.store.record("vm.gone", n=i)
        before_first = str(pool.store.events(limit=1, kind="vm.gone")[0].seq - 1)

        def events(*args) -> list[dict]:
            assert gleanctl_main(target + ["--json", "events", "--kind", "vm.gone", *args]) == 0
            return json.loads(capsys.readouterr().out)
        page = events("--after", before_first, "--limit", "3")
        assert [e["detail"]["n"] for e in page] == [0, 1, 2]
        following = events("--after", str(page[-1]["seq"]), "--limit", "3")
        assert [e["detail"]["n"] for e in following] == [3, 4, 5]
        assert [e["detail"]["n"] for e in events("--limit", "2")] == [1003, 1004]   # newest, still ascending
        capped = events("--after", before_first, "--limit", str(2**31 - 1))
        assert len(capped) == 1000 and [e["detail"]["n"] for e in capped[:2]] == [0, 1]
        assert all(type(e["seq"]) is int for e in capped)   # a number, not protobuf JSON's uint64 string
        assert all(a["seq"] < b["seq"] for a, b in zip(capped, capped[1:]))
        assert events("--after", str(2**40)) == []
    finally:
        server.stop(grace=1)
        pool.close()
