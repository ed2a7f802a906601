"""The simulator's outputs (issue 24, item 4): utilization_working never above utilization, and the
VM-level work figures named apart from the job figures."""
from __future__ import annotations

import json
import re
from pathlib import Path

from controller.core.records import BackfillConfig, LedgerSettings, Policy
from controller.sim import cli
from controller.sim.engine import DAY, SimSettings, Simulation
from controller.sim.jobs import JobLevelWork
from controller.sim.traces import Job, OnDemandRequest
from tests.unit.test_sim import END, REQUESTS, scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "controller" / "sim" / "examples" / "azure-on-demand.csv.gz"


def test_victims_on_notice_do_not_count_as_working_at_vm_level():
    """test_sim's scenario by hand: bf-1 and bf-2 are on notice from 105 to 110 and bf-10 from
    2005 to 2010 (instant path), while A and B hold their vCPUs. Their runtime to the stop is the
    work VM-level accounting counts (and loses), but not working time: working is exactly what
    was allocated, as every VM-level VM works from launch to its end or notice."""
    sim = scenario(REQUESTS)
    f = sim.run()["figures"]
    assert sim.store.details["vm.preempted"] and {d["path"] for d in sim.store.details["vm.preempted"]} == {"instant"}
    capacity = 8 * END
    on_demand = 2 * 1000 + 1 * 1995
    done = 2 * 105 + 6 * 3995 + 900 + 2890   # to each VM's stop, notice included
    notice = 3 * 5                             # three victims, 5 s each
    assert f["vm_level_work_vcpu_hours"] == round(done / 3600, 3)
    assert f["utilization_working"] == round((on_demand + done - notice) / capacity, 6)
    assert f["utilization_working"] == f["utilization"]


def jobs_for(count: int, runtime: float) -> list[Job]:
    return [Job(0.0, runtime, 1, str(i), 0) for i in range(count)]


def test_victims_on_notice_do_not_count_as_working_at_task_level():
    """The same scenario with each backfill VM running a job longer than the run: working is at
    most what was allocated."""
    settings = SimSettings(nodes=2, node_cpus=4, node_memory_mib=8192, days=END / DAY, launch_seconds=5,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0)
    config = BackfillConfig(enabled=True, vcpus=1, memory_mb=1024, grace_seconds=10,
                            termination_policy=Policy.MOST_RECENT, interruption="terminate")
    sim = Simulation(REQUESTS, settings, config, LedgerSettings(use_prediction=False),
                     work=JobLevelWork(jobs_for(40, 10 * END), 1))
    f = sim.run()["figures"]
    assert f["preempted_paths"] == {"instant": 3}
    assert f["backfill_job_seconds_lost"] > 0
    assert f["utilization_working"] <= f["utilization"]


def run_day(tmp_path: Path, *extra: str, interruption: str = "terminate") -> dict:
    out = tmp_path / f"{interruption}_{'_'.join(extra)}".replace("/", "_")[-60:]
    argv = ["--nodes", "12", "--days", "1", "--requests", str(EXAMPLE), "--format", "csv", "--load", "0.6",
            "--backfill", "enabled=true", f"interruption={interruption}", "--quiet", "--out", str(out), *extra]
    assert cli.main(argv) == 0
    return json.loads((out / "summary.json").read_text())["figures"]


def test_working_is_never_above_allocated_on_a_day_of_the_example(tmp_path, capsys):
    """A day of the shipped example on 12 nodes, where most preemptions take the instant path."""
    jobs = tmp_path / "jobs.swf"
    jobs.write_text("".join(f"{i} {i * 30} 0 {600 + 37 * i % 3000} 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n"
                            for i in range(1, 400)))
    for interruption in ("terminate", "hibernate"):
        for extra in ((), ("--backfill-jobs", str(jobs))):
            f = run_day(tmp_path, *extra, interruption=interruption)
            assert f["preempted_paths"].get("instant", 0) > 10, (interruption, f["preempted_paths"])
            assert f["utilization_working"] <= f["utilization"], (interruption, extra)


def test_task_level_runs_name_the_vm_level_work_apart_from_the_jobs(tmp_path, capsys):
    """No figure says lost work without saying whose: the VM-level accounting's are vm_level_*,
    the jobs' backfill_job*; the job figures appear only in task-level runs."""
    jobs = tmp_path / "jobs.swf"
    jobs.write_text("".join(f"{i} {i * 60} 0 900 1 -1 -1 1 -1 -1 1 1 1 1 1 -1 -1 -1\n" for i in range(1, 200)))
    vm_level, task_level = run_day(tmp_path), run_day(tmp_path, "--backfill-jobs", str(jobs))
    for f in (vm_level, task_level):
        assert not [k for k in f if ("lost" in k or "goodput" in k or "work_vcpu" in k)
                    and not k.startswith(("vm_level_", "backfill_job"))]
        assert {"vm_level_lost_share", "vm_level_goodput_vcpu_hours", "vm_level_lost_vcpu_hours",
                "vm_level_work_vcpu_hours"} <= f.keys()
    assert not [k for k in vm_level if k.startswith("backfill_job")]
    assert task_level["backfill_job_lost_share"] is not None
    # the VM-level share counts whole VMs' runtimes: far above the jobs' on the same run
    assert task_level["vm_level_lost_share"] > task_level["backfill_job_lost_share"]


def test_the_compare_table_prints_percentages_counts_and_seconds_with_units(tmp_path, capsys):
    assert cli.main(["--nodes", "12", "--days", "1", "--requests", str(EXAMPLE), "--format", "csv", "--load", "0.6",
                     "--backfill", "enabled=true", "--quiet", "--compare", "most_recent,idle_first"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {cells[0]: cells[1:] for cells in (re.split(r" {2,}", line.strip()) for line in lines)}
    assert rows["figure"] == ["most_recent", "idle_first"]
    assert all(re.fullmatch(r"\d{1,3}\.\d\d %", v) for v in rows["utilization working (Nimbus)"])
    assert all(re.fullmatch(r"\d{1,3}\.\d\d %", v) for v in rows["utilization (allocated vCPUs)"])
    assert all(re.fullmatch(r"\d+\.\d+ s", v) for v in rows["on-demand wait p99"] + rows["wall time"])
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})+", v) for v in rows["simulated events"])   # thousands apart
    assert not [line for line in lines if re.search(r"\de[+-]\d", line)]   # no 3.508e+04
    assert not [label for label in rows if label.startswith("job")]   # VM-level runs: no job rows


def test_table_values_by_kind():
    assert cli.value(35080, "count") == "35,080"
    assert cli.value(0.93680, "percent") == "93.68 %"
    assert cli.value(12.3456, "seconds") == "12.3 s" and cli.value(5.0039, "seconds") == "5.00 s"
    assert cli.value(7200.0, "hours") == "2.00 h" and cli.value(3600.0 * 1234, "hours") == "1,234 h"
    assert cli.value(None, "percent") == "-"


def test_compare_plots_name_their_setting_and_compare_png_sets_them_side_by_side(tmp_path, capsys):
    """most_recent and static=1 both run under most_recent: each plot's title names its setting,
    not the policy alone; compare.png is written beside them."""
    from controller.sim.plots import _title
    out = tmp_path / "out"
    assert cli.main(["--nodes", "4", "--days", "0.3", "--requests", str(EXAMPLE), "--format", "csv", "--load", "0.6",
                     "--backfill", "enabled=true", "--quiet", "--compare", "most_recent,static=1", "--out", str(out),
                     "--plots"]) == 0
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    titles = {}
    for name in ("most_recent", "static=1"):
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["header"]["backfill"]["termination_policy"] == "most_recent"
        titles[name] = _title(summary)
        assert titles[name].startswith(f"{name}: ")
        for png in ("utilization.png", "lost_work.png", "wait_cdf.png", "survival.png"):
            assert (out / name / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert titles["most_recent"] != titles["static=1"]
