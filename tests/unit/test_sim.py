"""The simulator: small scenarios worked out by hand, determinism, and a day of the Azure trace."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from controller.core.records import LedgerSettings
from controller.core.records import BackfillConfig, Policy
from controller.sim import cli, traces
from controller.sim.engine import DAY, DeadlineChecks, SimSettings, Simulation, Timeline
from controller.sim.progress import ProgressBar
from controller.sim.traces import NodeGroup, OnDemandRequest
from controller.sim.workload import stretch_to_load
from tests.bench import simulate as simulate_bench

# shared/ sits beside the repository (as in CI)
AZURE = Path(os.environ.get("GLEANER_TRACES", simulate_bench.TRACES)) / simulate_bench.AZURE   # the shared traces
AZURE_SMALL = Path(__file__).parent.parent / "data" / "traces" / "azure_vm_entries.csv"


@pytest.fixture
def azure() -> Path:
    """The shared Azure trace, beside the repository as on every machine of the project; missing is a failure."""
    if not AZURE.exists():
        pytest.fail(f"the shared traces are missing ({AZURE}); they come with the workplace's shared/ folder",
                    pytrace=False)
    return AZURE
END = 4000.0


def scenario(requests, **backfill) -> Simulation:
    """2 nodes of 4 vCPUs and 8 GiB; backfill VMs of 1 vCPU and 1 GiB; launches and clean stops
    take exactly 5 s; no prediction (backfill fills every free vCPU)."""
    settings = SimSettings(nodes=2, node_cpus=4, node_memory_mib=8192, days=END / DAY, launch_seconds=5,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0)
    config = BackfillConfig(**{**dict(enabled=True, vcpus=1, memory_mb=1024, grace_seconds=10,
                                      termination_policy=Policy.MOST_RECENT, interruption="terminate"), **backfill})
    return Simulation(requests, settings, config, LedgerSettings(use_prediction=False))


REQUESTS = [
    # A: every vCPU is backfill's; memory holds A beside its victims, so it starts at once (instant)
    OnDemandRequest(100.0, 2, 2048, 1000.0, "alice", "A"),
    # B: the youngest backfill VMs are the two launched after A was released
    OnDemandRequest(2000.0, 1, 1024, None, "bob", "B"),
    # C: more vCPUs than any node has
    OnDemandRequest(3000.0, 5, 1024, 60.0, "carol", "C"),
]


def test_a_small_scenario_by_hand():
    sim = scenario(REQUESTS)
    summary = sim.run()
    f = summary["figures"]
    # t=0 the fill books 4 backfill VMs per node (bf-1..4 on n0, bf-5..8 on n1), running from t=5.
    # t=100 A preempts bf-1 and bf-2 on n0 (ties broken by node, then VM id), instant path: A runs from
    # 105; the victims run on notice until A's launch is answered (Stop.after_launch), are asked to
    # stop at 105 and stop at 110 (5 s < 30 s notice), each losing (110 - 5) x 1 vCPU = 105 vCPU-s.
    # t=1105 A is released; the fill that follows launches bf-10 and bf-11 on n0 (running from 1110).
    # t=2000 B preempts bf-10, the most recent (1 vCPU needed), asked to stop when B runs (2005),
    # stopped at 2010: (2010 - 1110) = 900.
    # t=3000 C is rejected by the ledger: no node has 5 vCPUs.
    preempted = [l for l in sim.store.leases.values() if l.end_reason.startswith("preempted")]
    assert sorted(l.lease_id for l in preempted) == ["bf-1", "bf-10", "bf-2"]
    assert [d["work_lost_vcpu_seconds"] for d in sim.store.details["vm.preempted"]] == [105.0, 105.0, 900.0]
    assert {d["path"] for d in sim.store.details["vm.preempted"]} == {"instant"}
    assert sim.store.leases["od-9"].node_id == "n0" and sim.store.leases["od-9"].end_reason == "released"
    assert sim.store.leases["bf-10"].launched_at == 1110.0
    assert (f["requests_total"], f["requests_placed"], f["requests_rejected"]) == (3, 2, 1)
    assert f["rejected_larger_than_node"] == 1 and f["rejected_due_to_backfill"] == 0
    assert f["rejection_reasons"] == {"no node can host N vCPUs and N MiB even after stopping every backfill VM": 1}
    assert f["requests_pending"] == 0 and f["requests_released"] == 1
    assert f["wait_p50_s"] == 5.0 and f["wait_p99_s"] == 5.0
    # on-demand: A 2 vCPUs x (1105 - 105) + B 1 vCPU x (4000 - 2005)
    capacity = 8 * END
    assert f["utilization_on_demand"] == round((2 * 1000 + 1 * 1995) / capacity, 6)
    # backfill: 8 vCPUs 5..105; 6 from A's victims' notice (asked when A runs) to 1110; 8 to B's
    # victim's at 2005; then 7
    backfill_area = 8 * 100 + 6 * 1005 + 8 * 895 + 7 * 1995
    assert f["utilization_backfill"] == round(backfill_area / capacity, 6)
    # work done: bf-1, bf-2 105 each; bf-3..8 3995 each; bf-10 900; bf-11 2890
    done = 2 * 105 + 6 * 3995 + 900 + 2890
    lost = 105 + 105 + 900
    assert f["vm_level_work_vcpu_hours"] == round(done / 3600, 3)
    assert f["vm_level_lost_vcpu_hours"] == round(lost / 3600, 3)
    assert f["vm_level_lost_share"] == round(lost / done, 6)
    assert f["vm_level_goodput_vcpu_hours"] == round((done - lost) / 3600, 3)
    assert f["preemptions"] == 3
    assert f["preemptions_per_100_vm_hours"] == round(100 * 3 / (done / 3600), 4)
    assert f["backfill_survival_1h"] == 0.75   # of bf-1..8 (launched before 400 s), bf-1 and bf-2 fell short
    assert f["backfill_survival_1d"] is None
    assert summary["events"]["vm.preempted"] == 3


def test_a_pool_of_two_sizes():
    """Each request goes where it fits; one that no node holds, though each of its figures fits
    some node, is larger than every node; utilization is over the pool's vCPUs."""
    settings = SimSettings(nodes=2, pool=(NodeGroup(1, 2, 32768), NodeGroup(1, 8, 4096)), days=END / DAY,
                           launch_seconds=5, launch_jitter=0, progress_seconds=0)
    requests = [OnDemandRequest(100.0, 6, 2048, None, "alice", "cores"),     # only n1 has 6 vCPUs
                OnDemandRequest(200.0, 2, 16384, None, "bob", "memory"),     # only n0 has 16 GiB
                OnDemandRequest(300.0, 4, 8192, None, "carol", "neither")]   # n1's vCPUs, n0's memory
    sim = Simulation(requests, settings, BackfillConfig(), LedgerSettings())
    f = sim.run()["figures"]
    records = sim.store.requests
    assert (records["cores"].node_id, records["memory"].node_id, records["neither"].outcome) == ("n1", "n0", "rejected")
    assert f["rejected_larger_than_node"] == 1
    assert f["utilization_on_demand"] == round((6 * (END - 105) + 2 * (END - 205)) / (10 * END), 6)
    with pytest.raises(ValueError, match="nodes is 3 but the pool's groups have 2"):
        SimSettings(nodes=3, pool=settings.pool)


def test_the_cli_reads_a_pool_of_several_sizes(tmp_path, capsys):
    pool = tmp_path / "pool.csv"
    pool.write_text("count,cpus,memory_mib\n2,4,8192\n1,32,131072\n")
    requests = str(Path(__file__).parent.parent / "data" / "traces" / "requests.csv")
    assert cli.main(["--requests", requests, "--format", "csv", "--pool", str(pool), "--days", "0.1",
                     "--load", "0.5", "--out", str(tmp_path / "out"), "--quiet"]) == 0
    header = json.loads((tmp_path / "out" / "summary.json").read_text())["header"]
    assert header["sim"]["nodes"] == 3 and [g["cpus"] for g in header["sim"]["pool"]] == [4, 32]
    assert "node_cpus" not in header["sim"]   # one size it did not read
    assert header["inputs"]["pool_sha256"] == traces.digest(pool)
    assert header["inputs"]["tile_period_s"] > 0
    capsys.readouterr()
    assert cli.main(["--requests", requests, "--format", "csv", "--pool", str(pool), "--nodes", "3", "--quiet"]) == 2
    assert "--pool gives the nodes and their sizes: drop --nodes" in capsys.readouterr().err
    pool.write_text("count,cpus,memory_mib\n2,0,8192\n")
    assert cli.main(["--requests", requests, "--format", "csv", "--pool", str(pool), "--quiet"]) == 2
    assert "pool.csv:2: cpus: must be >= 1, got 0" in capsys.readouterr().err


def test_a_finished_simulation_can_be_freed_and_leaves_the_collector_as_it_was():
    import gc
    import weakref
    threshold = gc.get_threshold()
    sim = scenario(REQUESTS)
    sim.run()
    gone = weakref.ref(sim)
    del sim
    gc.collect()
    assert gone() is None and gc.get_freeze_count() == 0 and gc.get_threshold() == threshold


def test_a_deadline_check_is_dropped_only_when_it_could_not_tick():
    heap: list = []
    checks = DeadlineChecks(heap, print, bucket_seconds=30.0)
    leases = {"due": SimpleNamespace(deadline=60.0), "running": SimpleNamespace(deadline=None)}
    for seq, (at, lease_id) in enumerate([(60.0, "due"), (65.0, "running"), (70.0, "ended")]):
        checks.add(at, seq, lease_id, running=(0.0, -1))
    assert heap == []   # their bucket (60 to 90 s) has not come yet
    while checks.next_join <= 60.0:
        assert checks.join_next(leases, end=1000.0) == 0
    # the lease that runs and the one that ended are past their deadlines' checks: only one joins
    assert [(at, seq, lease_id) for at, seq, _, lease_id in heap] == [(60.0, 0, "due")]
    # a Write at 61 s (an event after the bucket joined) gives the running lease a deadline of 65 s
    # again: its dropped check comes back (in its place, sequence 1) beside the new one
    checks.add(65.0, 9, "running", running=(61.0, 8))
    # one at 70 s (sequence 12) gives the ended lease a deadline of 70 s: its dropped check (70 s,
    # sequence 2) is behind the clock, so only the new one joins
    checks.add(70.0, 13, "ended", running=(70.0, 12))
    assert sorted((at, seq, lease_id) for at, seq, _, lease_id in heap) == \
        [(60.0, 0, "due"), (65.0, 1, "running"), (65.0, 9, "running"), (70.0, 13, "ended")]
    # the one dropped for good counts as the event it was
    assert checks.settle(end=1000.0) == 1


def test_a_request_that_cannot_fit_beside_its_victims_waits_for_them():
    # 7,000 MiB does not fit beside 4 GiB of backfill: it waits until its victims are gone
    sim = scenario([OnDemandRequest(100.0, 3, 7000, 100.0, "dora", "D")], grace_seconds=3)
    f = sim.run()["figures"]
    assert sim.store.requests["D"].path == "after_victims"
    # the victims are asked to stop at 100 with 3 s grace: 5 s shutdowns are cut to 3 s (destroyed)
    assert f["wait_p50_s"] == 3 + 5
    # 3 victims free 3 vCPUs and leave 8192 - 1024 MiB >= 7000 (the headroom is the instant path's only)
    assert f["preemptions"] == 3
    assert f["requests_placed"] == 1 and f["requests_pending"] == 0


def test_backfill_disabled_leaves_utilization_to_on_demand():
    sim = scenario(REQUESTS, enabled=False)
    f = sim.run()["figures"]
    assert f["utilization_backfill"] == 0 and f["preemptions"] == 0
    assert f["utilization_on_demand"] == round((2 * 1000 + 1 * 1995) / (8 * END), 6)


def azure_day(nodes: int = 100, days: float = 1.0, policy: Policy = Policy.MOST_RECENT,
              interruption: str = "terminate") -> Simulation:
    requests = traces.azure_requests(AZURE)
    requests, _ = stretch_to_load(requests, days * DAY, 0.6, nodes * 16)
    return Simulation(requests, SimSettings(nodes=nodes, days=days, progress_seconds=0),
                      BackfillConfig(enabled=True, termination_policy=policy, interruption=interruption))


def figures_without_wall(summary):
    return {k: v for k, v in summary["figures"].items() if k not in ("wall_seconds", "sim_events_per_s")}


def test_the_same_inputs_give_the_same_summary(azure):
    first = azure_day(nodes=20, days=0.25, policy=Policy.ANY)
    second = azure_day(nodes=20, days=0.25, policy=Policy.ANY)
    a, b = first.run(), second.run()
    assert figures_without_wall(a) == figures_without_wall(b)
    assert a["events"] == b["events"] and first.vm_rows() == second.vm_rows()


@pytest.mark.parametrize("interruption", ["terminate", "hibernate"])
def test_a_day_of_100_nodes_on_the_azure_trace(azure, interruption):
    sim = azure_day(interruption=interruption)
    summary = sim.run()
    f = summary["figures"]
    assert 0 < f["utilization_on_demand"] <= f["utilization"] <= 1
    assert 0 < f["utilization_backfill"] <= 1
    assert f["requests_pending"] == 0
    assert f["requests_answered"] == f["requests_total"] > 1000
    assert f["requests_placed"] + f["requests_rejected"] + f["requests_failed"] == f["requests_total"]
    assert f["requests_failed"] == 0   # agents never fail here: no deadline may pass
    assert f["rejected_larger_than_node"] > 0   # the trace has 20- and 32-vCPU VMs
    assert 0 <= f["vm_level_lost_share"] < 1 and f["vm_level_goodput_vcpu_hours"] > 0
    assert f["wait_p50_s"] is not None and f["wait_p99_s"] < 60
    # a victim is saved or terminated (one saved and then refused is counted once, terminated)
    events = summary["events"]
    assert events.get("vm.preempted", 0) + events.get("vm.hibernated", 0) == f["preemptions"] > 0
    assert (events.get("vm.hibernated", 0) > events.get("vm.preempted", 0)) == (interruption == "hibernate")
    # the books still match: every live lease the ledger holds is a VM on its node, or is on its way,
    # or is saved (a hibernated VM is no longer on its node)
    for lease in sim.ledger.leases.values():
        on_node = lease.vm_name in sim.nodes[lease.node_id].vms
        assert on_node == (lease.state not in ("starting", "waiting", "hibernated")), lease


def test_the_cli_writes_a_summary_and_a_vm_table(tmp_path, capsys):
    code = cli.main(["--requests", str(AZURE_SMALL), "--format", "azure", "--nodes", "3", "--days", "3",
                     "--backfill", "enabled=true", "memory_mb=2048", "--out", str(tmp_path), "--quiet"])
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["header"]["inputs"]["requests_sha256"] == traces.digest(AZURE_SMALL)
    assert summary["header"]["backfill"]["memory_mb"] == 2048
    assert summary["figures"]["requests_pending"] == 0
    lines = (tmp_path / "vms.csv").read_text().splitlines()
    assert lines[0].startswith("lease_id,role,node,vcpus,memory_mib,launched,ended")
    assert len(lines) > 3
    assert json.loads(capsys.readouterr().out)["requests_total"] == summary["figures"]["requests_total"]


def test_the_cli_compares_policies(capsys):
    code = cli.main(["--requests", str(Path(__file__).parent.parent / "data" / "traces" / "requests.csv"),
                     "--format", "csv", "--nodes", "2", "--days", "0.1", "--backfill", "enabled=true",
                     "--compare", "most_recent,least_loss", "--quiet"])
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["figure", "most_recent", "least_loss"]


def test_the_cli_refuses_bad_backfill_settings(capsys):
    assert cli.main(["--requests", str(AZURE_SMALL), "--backfill", "vcpus=0", "--quiet"]) == 2
    assert "vcpus" in capsys.readouterr().err
    assert cli.main(["--requests", str(AZURE_SMALL), "--backfill", "colour=blue", "--quiet"]) == 2


# -- outputs: per-VM rows, the timeline, the progress bar, the plots, the bench --------------------

def test_the_vm_rows_say_each_vms_wait_runtime_and_whether_it_was_preempted():
    sim = scenario(REQUESTS)
    sim.run()
    rows = {r["lease_id"]: r for r in sim.vm_rows()}
    assert rows["od-9"]["wait_s"] == 5.0 and rows["od-9"]["runtime_s"] == 1000.0   # A: 105 to 1105
    assert rows["bf-1"]["preempted"] and rows["bf-10"]["preempted"] and not rows["bf-3"]["preempted"]
    assert rows["bf-10"]["runtime_s"] == 900.0 and rows["bf-10"]["wait_s"] is None   # 1110 to 2010: asked to stop once B ran
    assert rows["bf-3"]["runtime_s"] == END - 5   # still running at the end


def test_the_timeline_splits_time_at_bucket_edges_and_adds_up_to_the_summary():
    timeline = Timeline(300.0, 100.0)
    timeline.allocated(50.0, 250.0, 2, 1)
    timeline.lost_work(120.0, 3600.0)
    rows = timeline.rows(300.0, pool_vcpus=4)
    assert [r["utilization_on_demand"] for r in rows] == [0.25, 0.5, 0.25]   # 2 vCPUs of 4, 50/100/50 s
    assert [r["utilization_backfill"] for r in rows] == [0.125, 0.25, 0.125]
    assert [r["vm_level_lost_vcpu_hours"] for r in rows] == [0.0, 1.0, 1.0]
    sim = scenario(REQUESTS)
    f = sim.run()["figures"]
    rows = sim.timeline_rows()
    spans = [min(sim.timeline.bucket, END - r["start_s"]) for r in rows]
    assert sum(r["utilization_on_demand"] * s for r, s in zip(rows, spans)) / END == pytest.approx(
        f["utilization_on_demand"], abs=1e-5)
    assert rows[-1]["vm_level_lost_vcpu_hours"] == f["vm_level_lost_vcpu_hours"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_draws_in_place_on_a_terminal_and_lines_elsewhere():
    log = io.StringIO()
    bar = ProgressBar(log, width=10)
    bar(0.5, "day 15 of 30")
    bar(1.0, "done")
    bar.finish()
    assert log.getvalue() == "sim [#####.....]  50% day 15 of 30\nsim [##########] 100% done\n"
    tty = Terminal()
    bar = ProgressBar(tty, width=4)
    bar(0.25, "a")
    bar(0.75, "b")
    bar.finish()
    assert tty.getvalue() == "\r\x1b[Ksim [#...]  25% a\r\x1b[Ksim [###.]  75% b\n"


def test_a_long_run_reports_its_progress(azure):
    calls = []
    sim = azure_day(nodes=20, days=0.2)
    sim.settings = replace(sim.settings, progress_seconds=1e-9)   # every 1,024 events
    sim.progress = lambda done, detail: calls.append((done, detail))
    sim.run()
    assert len(calls) == sim.events_run // 1024 > 0
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and 0 < calls[-1][0] <= 1
    assert "of 0.2, " in calls[0][1]


def test_the_cli_draws_the_plots_from_what_it_wrote(tmp_path):
    code = cli.main(["--requests", str(AZURE_SMALL), "--format", "azure", "--nodes", "3", "--days", "1",
                     "--backfill", "enabled=true", "--out", str(tmp_path), "--plots", "--quiet"])
    assert code == 0
    for name in ("utilization.png", "lost_work.png", "wait_cdf.png", "survival.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    timeline = (tmp_path / "timeline.csv").read_text().splitlines()
    assert timeline[0] == "start_s,utilization_on_demand,utilization_backfill,vm_level_lost_vcpu_hours"
    assert len(timeline) == 1 + 720   # a day in buckets of two minutes
    assert cli.main(["--requests", str(AZURE_SMALL), "--plots", "--quiet"]) == 2


def test_the_bench_prints_one_entry_per_setting(azure, capsys):
    assert simulate_bench.main(["--nodes", "4", "--days", "0.05", "--traces", str(azure.parents[1]), "--quiet",
                                "--timed-runs", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    # timed: the default settings with VM-level work, the median of the runs (the lower of two);
    # the entries run the HTC jobs (task-level)
    assert out["wall_s"] == out["default_vm_level"]["wall_s"] == min(out["wall_s_runs"]) and out["sim_events_per_s"] > 0
    assert len(out["wall_s_runs"]) == 2
    assert out["default_vm_level"]["job_lost_share"] is None and out["default"]["jobs_completed"] > 0
    # the controller knows nothing of jobs but whether a worker idles, which changes nothing
    # before the last tenth of a VM's life: the same decisions either way
    for key in ("utilization", "vm_level_lost_share", "rejected", "preemptions"):
        assert out["default"][key] == out["default_vm_level"][key], key
    assert out["goals"]["job_lost_at_most_before"]["measured"] == out["default"]["job_lost_share"]
    assert out["goals"]["job_lost_at_most_before"]["applies"] is False   # not a month of 1,000 nodes
    assert out["goals"]["utilization_at_least_nimbus"]["measured"] == out["default"]["utilization_working"]
    names = {"default", "reserve_static", "reserve_balancer_static", "reserve_hint", "reserve_predictive_day",
             "reserve_predictive_week", "reserve_predictive_day_soft", "reserve_predictive_week_soft", "reserve_wait",
             "hibernate_wait_1d"} | {p.value for p in Policy}
    assert names <= set(out)
    for name in names:
        for key in ("utilization", "vm_level_lost_share", "rejected", "rejected_due_to_backfill", "on_demand_wait_p99_s"):
            assert key in out[name], (name, key)
    assert out["hibernate"]["same_run_as"] == "default"   # the default hibernates its victims
    hibernate_goal = out["goals"]["hibernate_job_lost_under_1pct"]   # within the default wait limit only
    assert "same_run_as" not in out["most_recent"]
    assert set(hibernate_goal) == {"default", "hibernate_wait_1d", "hibernate_no_retire"}
    assert hibernate_goal["default"]["applies"] is True and hibernate_goal["hibernate_wait_1d"]["applies"] is False
    assert hibernate_goal["hibernate_no_retire"]["applies"] is False   # guests that do not retire: for reading
    # all 4 nodes reserved whole (12 asked): no backfill at all
    assert out["reserve_static"]["reserved_nodes"] == 4 and out["reserve_static"]["utilization_backfill"] == 0
    assert out["default"]["utilization_backfill"] > 0
    # the baseline: the same requests with backfill off; every entry's rejections against it
    baseline = out["no_backfill"]
    assert baseline["utilization_backfill"] == 0 and baseline["rejected_beyond_no_backfill"] == 0
    for name in names:   # request by request: none the baseline placed is rejected (the promise)
        assert out[name]["rejected_beyond_no_backfill"] == 0, name
        assert out[name]["rejected_difference_of_totals"] == out[name]["rejected"] - baseline["rejected"], name
        assert out[name]["on_demand_served_vs_no_backfill"] == \
            round(out[name]["utilization_on_demand"] / baseline["utilization_on_demand"], 6), name
    promise = out["goals"]["promise"]
    assert promise["rejected_beyond_no_backfill"]["default"] == out["default"]["rejected_beyond_no_backfill"]
    assert promise["met"] is True and "hibernate" not in promise["rejected_beyond_no_backfill"]   # (the default's run)
    assert "most_recent" in promise["rejected_beyond_no_backfill"]   # terminate's own run


def test_a_run_is_the_same_in_another_process(azure):
    """The pool's order of nodes does not depend on the process's string hashing (the any policy
    shuffles that order): two processes with different hash seeds give the same figures."""
    code = ("import json; from tests.unit.test_sim import azure_day, figures_without_wall; "
            "from controller.core.policy import Policy; "
            "print(json.dumps(figures_without_wall(azure_day(nodes=10, days=0.1, policy=Policy.ANY).run())))")
    repo = Path(__file__).resolve().parents[2]
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outputs) == 1 and json.loads(outputs.pop())["preemptions"] > 0


def reserve_scenario(reserve_settings, hints=(), backfill=True) -> Simulation:
    """The pool full of on-demand VMs until 600 s (and backfill beside them with backfill on); a
    third request at 200 s finds no room."""
    from controller.core.reserve_settings import ReserveSettings
    requests = [OnDemandRequest(100.0, 4, 2048, 500.0, "alice", "X1"),
                OnDemandRequest(100.0, 4, 2048, 500.0, "alice", "X2"),
                OnDemandRequest(200.0, 4, 2048, 100.0, "bob", "Y")]
    settings = SimSettings(nodes=2, node_cpus=4, node_memory_mib=8192, days=END / DAY, launch_seconds=5,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0)
    config = BackfillConfig(enabled=backfill, vcpus=1, memory_mb=1024, grace_seconds=10, interruption="terminate")
    return Simulation(requests, settings, config, LedgerSettings(use_prediction=False),
                      reserve_settings=reserve_settings or ReserveSettings(), hints=hints)


def test_the_wait_window_turns_a_rejection_into_a_wait_in_the_simulator():
    from controller.core.reserve_settings import ReserveSettings
    at_once = reserve_scenario(ReserveSettings()).run()["figures"]
    assert at_once["requests_rejected"] == 1 and at_once["requests_queued"] == 0
    waited = reserve_scenario(ReserveSettings(wait_seconds=900)).run()
    figures = waited["figures"]
    assert figures["requests_rejected"] == 0 and figures["requests_placed"] == 3 and figures["requests_queued"] == 1
    assert figures["wait_p99_s"] >= 400   # Y waited from 200 s until X's room was free after 600 s
    assert waited["header"]["reserve_settings"]["wait_seconds"] == 900
    short = reserve_scenario(ReserveSettings(wait_seconds=100)).run()["figures"]
    assert short["requests_rejected"] == 1 and short["requests_queued"] == 1
    assert short["rejection_reasons"] and "wait window" in next(iter(short["rejection_reasons"]))


def test_a_static_reserve_keeps_nodes_from_backfill_in_the_simulator():
    from controller.core.reserve_settings import Hint, ReserveSettings
    free = reserve_scenario(ReserveSettings(), backfill=True).run()["figures"]
    kept = reserve_scenario(ReserveSettings(static_nodes=1), backfill=True).run()["figures"]
    assert kept["utilization_backfill"] < free["utilization_backfill"]
    hinted = reserve_scenario(ReserveSettings(lead_seconds=600), hints=[Hint(2, 2000.0, 3000.0)]).run()
    assert hinted["figures"]["backfill_drained"] > 0 and hinted["header"]["hints"][0]["nodes"] == 2
    assert hinted["figures"]["utilization_backfill"] < free["utilization_backfill"]


def test_the_cli_compares_reserve_modes_and_takes_reserves_from_the_config(tmp_path, capsys):
    config = tmp_path / "controller.toml"
    config.write_text("[reserves]\nwait_seconds = 60\n")
    code = cli.main(["--requests", str(Path(__file__).parent.parent / "data" / "traces" / "requests.csv"),
                     "--format", "csv", "--nodes", "2", "--days", "0.1", "--backfill", "enabled=true",
                     "--config", str(config), "--hint", "1:0.5:0.5",
                     "--compare", "most_recent,static=1,predictive=day+wait=0,hint=1:1:1,static=1+drain=false",
                     "--quiet"])
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["figure", "most_recent", "static=1", "predictive=day+wait=0", "hint=1:1:1",
                              "static=1+drain=false"]
    assert any(line.startswith("requests queued for room") for line in out)
    for setting, says in (("static=x", "'static=x': static takes a whole number of nodes, not 'x'"),
                          ("wait=soon", "'wait=soon': wait takes seconds, not 'soon'"),
                          ("predictive=hourly", "predictive takes one of off, day, week, month, not 'hourly'"),
                          ("newest", f"'newest': not a policy ({', '.join(p.value for p in Policy)}) nor static=N"),
                          ("most_recent=1", "'most_recent=1': not a policy"),
                          ("static", "'static': not a policy")):
        assert cli.main(["--requests", str(AZURE_SMALL), "--compare", setting, "--quiet"]) == 2
        assert says in capsys.readouterr().err, setting
    assert cli.main(["--requests", str(AZURE_SMALL), "--compare", "drain=maybe", "--quiet"]) == 2
    assert "drain: expected true or false" in capsys.readouterr().err
    assert cli.main(["--requests", str(AZURE_SMALL), "--nodes", "2", "--hint", "3:1:1", "--quiet"]) == 2
    assert "nodes" in capsys.readouterr().err


def test_at_vm_level_idle_first_decides_as_most_recent(tmp_path):
    """A VM-level backfill VM is busy from its launch to its end (cpu_cores = its vCPUs; with the
    guests' work channel, it says busy at its launch): idle_first's clock is its launch, so it stops
    what most_recent stops, on a pool busy enough to preempt."""
    names = ("most_recent", "idle_first", "idle_first+work_channel=true")
    code = cli.main(["--requests", str(AZURE_SMALL), "--nodes", "3", "--days", "1", "--load", "0.7",
                     "--backfill", "enabled=true", "interruption=terminate", "--compare", ",".join(names),
                     "--out", str(tmp_path), "--quiet"])
    assert code == 0
    runs = {name: json.loads((tmp_path / name / "summary.json").read_text())["figures"] for name in names}
    for figures in runs.values():
        for key in ("wall_seconds", "sim_events_per_s"):
            figures.pop(key)
    assert runs["most_recent"]["preemptions"] > 10
    assert runs["most_recent"] == runs["idle_first"] == runs["idle_first+work_channel=true"]


def test_rejections_are_compared_with_the_baseline_only_over_the_same_span():
    """Request by request: a request the baseline placed and this run rejected counts; one the
    baseline rejected too does not, nor one placed here that the baseline rejected (counted
    apart); a difference of totals would net these out."""
    mine = dict(placed=frozenset({"b", "c"}), rejected=frozenset({"a", "d"}), started={"b": (5.0, 2)}, area=1000.0)
    base = dict(placed=frozenset({"a", "b"}), rejected=frozenset({"c", "d"}), started={"b": (1.0, 2)}, area=1000.0)
    run = dict(rejected=2, utilization_on_demand=0.3, complete=True, outcomes=mine)
    baseline = dict(rejected=2, utilization_on_demand=0.4, complete=True)
    compared = simulate_bench.against_baseline(dict(run), baseline, base)
    assert compared["rejected_beyond_no_backfill"] == 1 and compared["rejected_beyond_examples"] == ["a"]
    assert compared["placed_beyond_no_backfill"] == 1 and compared["rejected_difference_of_totals"] == 0
    assert compared["on_demand_served_vs_no_backfill"] == 0.75
    # b launched 4 s later with its 2 vCPUs: 8 vCPU-seconds of the 1000 added back
    assert compared["on_demand_served_with_delay_vs_no_backfill"] == round((0.3 + 0.008) / 0.4, 6)
    assert simulate_bench.against_baseline(dict(run), dict(baseline, utilization_on_demand=0.0), base)[
        "on_demand_served_vs_no_backfill"] is None
    for stopped, other in ((dict(run, complete=False), baseline), (dict(run), dict(baseline, complete=False))):
        compared = simulate_bench.against_baseline(stopped, other, base)   # either stopped early: no comparison
        assert compared["rejected_beyond_no_backfill"] is None and compared["on_demand_served_vs_no_backfill"] is None
