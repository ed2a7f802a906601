"""Task-level backfill (controller/sim/jobs.py): backfill VMs run jobs from an SWF trace; a
stopped VM loses only its running jobs' progress. Small synthetic SWF files, worked out by hand."""
from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

from controller.core.records import Lease, LedgerSettings
from controller.core.backfill_plan import recycles_when_idle
from controller.core.records import BackfillConfig, Policy
from controller.sim import cli, traces
from controller.sim.engine import DAY, SimSettings, SimVm, Simulation, last_tenth_at
from controller.sim.jobs import JobLevelWork
from controller.sim.traces import OnDemandRequest

REQUESTS_CSV = Path(__file__).parent.parent / "data" / "traces" / "requests.csv"


def swf(path: Path, jobs: list[tuple[int, float, float, int]]) -> Path:
    """An SWF file of (job id, submit s, run time s, procs), the other fields unknown."""
    lines = ["; Version: 2.2", "; MaxProcs: 64"]
    lines += [f"{i} {submit:g} -1 {runtime:g} {procs} -1 -1 {procs} -1 -1 1 1 1 -1 1 -1 -1 -1"
              for i, submit, runtime, procs in jobs]
    path.write_text("\n".join(lines) + "\n")
    return path


def one_node(jobs: list[traces.Job], requests=(), end: float = 2000.0, duration_seconds: int = 604800,
             guest_retires: bool = True) -> Simulation:
    """One node of 4 vCPUs; one backfill VM of 4 vCPUs fills it; launches take exactly 10 s and
    clean stops 5 s; allocation-only placement."""
    settings = SimSettings(nodes=1, node_cpus=4, node_memory_mib=8192, days=end / DAY, launch_seconds=10,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0, guest_retires=guest_retires)
    backfill = BackfillConfig(enabled=True, interruption="terminate", vcpus=4, memory_mb=128,
                              duration_seconds=duration_seconds)
    sim = Simulation(list(requests), settings, backfill, LedgerSettings(use_prediction=False),
                     work=JobLevelWork(jobs, backfill.vcpus))
    sim.run()
    return sim


def test_a_preemption_loses_only_the_running_jobs_progress_and_they_run_again(tmp_path):
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [
        (1, 1000, 100, 2),    # the first job arrives at the start: submit times shift by 1000
        (2, 1000, 1000, 2),
        (3, 1005, 50, 1),     # queued: the VM's 4 vCPUs are taken by jobs 1 and 2; runs 110-160
        (4, 1005, 10, 8),     # needs more than a backfill VM has: never runs
    ]))
    # At 250 the on-demand VM preempts the backfill VM, which runs on notice until the on-demand
    # VM's launch is answered (Stop.after_launch): at 260 job 2 (running since 10) loses 250 s and
    # queues again. The VM stops at 265; the on-demand VM runs 260-460, then backfill
    # comes back at 470 and job 2 runs again from the start, 470-1470.
    figures = one_node(jobs, [OnDemandRequest(250.0, 4, 512, 200.0, "od", "od-1")]).summary()["figures"]
    assert figures["preemptions"] == 1
    assert (figures["backfill_jobs_arrived"], figures["backfill_jobs_completed"], figures["backfill_jobs_too_big"],
            figures["backfill_job_requeues"]) == (3, 3, 1, 1)
    assert figures["backfill_job_seconds_done"] == 100 + 50 + 1000
    assert figures["backfill_job_seconds_lost"] == figures["backfill_job_seconds_lost_to_preemption"] == 250
    assert figures["backfill_job_lost_share"] == round(250 / 1400, 6)
    assert figures["backfill_jobs_running_at_end"] == figures["backfill_jobs_queued_at_end"] == 0


def test_the_queue_is_first_in_first_out_but_a_job_that_does_not_fit_holds_no_one_back(tmp_path):
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 100, 3), (2, 1, 100, 2), (3, 2, 100, 1)]))
    # At 10 the VM takes job 1 (3 vCPUs); job 2 needs 2 of the 1 left, job 3 fits and runs beside
    # it. At 110 both finish and job 2 runs, 110-210: at 150 it has done 40 s.
    figures = one_node(jobs, end=150.0).summary()["figures"]
    assert (figures["backfill_jobs_completed"], figures["backfill_jobs_running_at_end"]) == (2, 1)
    assert figures["backfill_job_seconds_done"] == 100 + 100 + 40
    assert figures["backfill_job_seconds_lost"] == 0 and figures["backfill_job_lost_share"] == 0


def test_a_vacated_job_goes_back_to_its_place_by_submit_time(tmp_path):
    # Jobs 1 and 2 run at 10; job 3 (submitted later) queues. The preemption at 50 vacates both
    # once the on-demand VM runs (60-260): when backfill comes back at 270 the queue holds 1, 2, 3 in
    # submit order, so the 4 vCPUs go to 1 and 2 again (270-870) and 3 still waits at 800.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 600, 2), (2, 1, 600, 2), (3, 2, 600, 2)]))
    sim = one_node(jobs, [OnDemandRequest(50.0, 4, 512, 200.0, "od", "od-1")], end=800.0)
    work = sim.work
    assert isinstance(work, JobLevelWork)
    running = sorted(run.job.job_id for runs in work.running.values() for run in runs)
    assert running == ["1", "2"] and work.summary(sim.end, 0, 0)["backfill_jobs_queued_at_end"] == 1
    assert work.lost_seconds == 2 * (60 - 10)


def test_a_retiring_guest_takes_no_job_in_the_last_tenth_so_its_recycle_cuts_none(tmp_path):
    # Jobs of 140 s back to back in a VM that runs from 10 and lives 1000 s: the 7th runs 850-990.
    # A retiring guest takes no job from 910 (900 s of run time), so at 990 it idles and is
    # recycled having lost nothing. A guest that is not told takes the 8th at 990, which the
    # recycle at 1000 s of run time cuts.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(i, 0, 140, 4) for i in range(1, 30)]))
    retiring = one_node(jobs, end=1500.0, duration_seconds=1000).summary()["figures"]
    assert retiring["backfill_job_seconds_lost"] == 0 and retiring["backfill_jobs_completed"] >= 7
    blind = one_node(jobs, end=1500.0, duration_seconds=1000, guest_retires=False).summary()["figures"]
    assert blind["backfill_job_seconds_lost"] > 0
    assert blind["backfill_job_seconds_lost_to_preemption"] == 0   # the recycle's, not a preemption's


class RetiringRecorded(JobLevelWork):
    """JobLevelWork that notes when each VM retired, and its run time then."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.retired: list[tuple[float, float]] = []

    def vm_retiring(self, vm: SimVm, now: float) -> None:
        self.retired.append((now, vm.runtime(now)))
        super().vm_retiring(vm, now)


def test_a_guest_that_slept_retires_by_its_own_run_time(tmp_path):
    """Hibernated while an on-demand VM holds the node (from 300 for 400 s), a guest's clock
    stands still: it retires at 900 s of run time, later than its age's last tenth (at 910) by
    its sleep, and the ledger recycles it idle by the same clock."""
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(i, 0, 50, 4) for i in range(1, 60)]))
    settings = SimSettings(nodes=1, node_cpus=4, node_memory_mib=8192, days=3000 / DAY, launch_seconds=10,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0)
    backfill = BackfillConfig(enabled=True, vcpus=4, memory_mb=128, duration_seconds=1000, retry_seconds=60)
    work = RetiringRecorded(jobs, backfill.vcpus)
    sim = Simulation([OnDemandRequest(300.0, 4, 512, 400.0, "od", "od-1")], settings, backfill,
                     LedgerSettings(use_prediction=False), work=work)
    figures = sim.run()["figures"]
    assert figures["hibernations"] == 1 and figures["hibernated_resumed"] == 1
    first_at, first_runtime = work.retired[0]
    assert abs(first_runtime - 900) < 1e-6 and first_at > 910 + 400, work.retired
    assert figures["backfill_job_seconds_lost"] == 0   # every VM retired, idled and was recycled whole


def test_every_arrived_job_is_done_running_or_queued_on_a_busy_pool(tmp_path):
    rng = random.Random(7)
    rows = [(i, rng.uniform(0, 20000), rng.uniform(10, 3000), rng.choice((1, 1, 2, 4, 8))) for i in range(1, 400)]
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", rows))
    requests = [OnDemandRequest(rng.uniform(0, 20000), rng.choice((1, 2, 4)), 1024, rng.uniform(60, 4000), "od",
                                f"r{i}") for i in range(200)]
    requests.sort(key=lambda r: r.at)
    settings = SimSettings(nodes=4, node_cpus=8, node_memory_mib=16384, days=21600 / DAY, progress_seconds=0)
    backfill = BackfillConfig(enabled=True, interruption="terminate", vcpus=4, memory_mb=512)
    sim = Simulation(requests, settings, backfill, LedgerSettings(use_prediction=False),
                     work=JobLevelWork(jobs, backfill.vcpus))
    figures = sim.run()["figures"]
    assert figures["preemptions"] > 0 and figures["backfill_job_requeues"] > 0
    assert figures["backfill_jobs_arrived"] == figures["backfill_jobs_completed"] + \
        figures["backfill_jobs_running_at_end"] + figures["backfill_jobs_queued_at_end"]
    assert figures["backfill_jobs_too_big"] == sum(procs > 4 for *_, procs in rows)
    assert 0 < figures["backfill_job_lost_share"] < 1
    assert figures["backfill_job_seconds_lost_to_preemption"] <= figures["backfill_job_seconds_lost"]


def test_the_cli_runs_task_level_backfill_and_keeps_vm_level_the_default(tmp_path, capsys):
    jobs = swf(tmp_path / "jobs.swf", [(1, 0, 600, 1), (2, 30, 60, 1), (3, 60, 60, 64)])
    base = ["--requests", str(REQUESTS_CSV), "--format", "csv", "--nodes", "2", "--node-cpus", "4", "--days", "0.05",
            "--backfill", "enabled=true", "--quiet"]
    assert cli.main(base + ["--backfill-jobs", str(jobs), "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    figures = summary["figures"]
    assert figures["backfill_jobs_completed"] == 2 and figures["backfill_jobs_too_big"] == 1
    assert summary["header"]["inputs"]["backfill_jobs_sha256"] == traces.digest(jobs)
    capsys.readouterr()
    assert cli.main(base) == 0
    assert not [k for k in json.loads(capsys.readouterr().out) if "job" in k]   # VM-level: no job figures


def test_the_cli_compares_policies_on_task_level_backfill(tmp_path, capsys):
    jobs = swf(tmp_path / "jobs.swf", [(1, 0, 600, 1), (2, 30, 60, 1)])
    assert cli.main(["--requests", str(REQUESTS_CSV), "--format", "csv", "--nodes", "2", "--days", "0.05",
                     "--backfill", "enabled=true", "--backfill-jobs", str(jobs), "--compare", "most_recent,least_loss",
                     "--quiet"]) == 0
    rows = {cells[0]: cells[1:] for cells in (re.split(r" {2,}", line.strip())
                                              for line in capsys.readouterr().out.splitlines())}
    assert rows["jobs completed"] == ["2", "2"]   # a fresh queue for each run


def test_the_cli_refuses_jobs_without_backfill_and_queues_without_jobs(tmp_path, capsys):
    jobs = swf(tmp_path / "jobs.swf", [(1, 0, 600, 1)])
    base = ["--requests", str(REQUESTS_CSV), "--format", "csv", "--quiet"]
    assert cli.main(base + ["--backfill-jobs", str(jobs)]) == 2
    assert "needs backfill enabled" in capsys.readouterr().err
    assert cli.main(base + ["--backfill", "enabled=true", "--backfill-jobs-queues", "4"]) == 2
    assert "needs --backfill-jobs" in capsys.readouterr().err
    assert cli.main(base + ["--backfill", "enabled=true", "--backfill-jobs", str(jobs),
                            "--backfill-jobs-queues", "low"]) == 2
    assert "N[,N...]" in capsys.readouterr().err


def test_the_first_job_a_backfill_vm_can_run_arrives_at_the_start(tmp_path):
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [
        (1, 0, 100, 8),       # too big for the 4-vCPU VM: it does not set the start
        (2, 5000, 100, 2),    # arrives at 0 (not at 5000): runs 10-110, once the VM is up
    ]))
    figures = one_node(jobs, end=200.0).summary()["figures"]
    assert (figures["backfill_jobs_arrived"], figures["backfill_jobs_completed"]) == (1, 1)
    # Nimbus' utilization: vCPUs running a job (2 of 4 for 100 s of 200), not the idle VM beside it
    assert figures["utilization_working"] == round(2 * 100 / (4 * 200), 6)
    assert figures["utilization"] > figures["utilization_working"]


def test_at_vm_level_the_whole_backfill_vm_counts_as_working(tmp_path):
    sim = Simulation([], SimSettings(nodes=1, node_cpus=4, node_memory_mib=8192, days=200 / DAY, launch_seconds=10,
                                     launch_jitter=0, stop_seconds=5, progress_seconds=0),
                     BackfillConfig(enabled=True, interruption="terminate", vcpus=4, memory_mb=128),
                     LedgerSettings(use_prediction=False))
    figures = sim.run()["figures"]
    assert figures["utilization_working"] == round(4 * 190 / (4 * 200), 6)   # running from 10 s to the end


def test_jobs_stretched_to_a_load_offer_it_and_only_jobs_that_fit_a_vm(tmp_path):
    from controller.sim.workload import offered_vcpu_seconds
    rows = [(i, 60.0 * i, 600.0 + 10 * i, 1 if i % 3 else 4) for i in range(1, 100)]
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", rows))
    run_s, pool_vcpus = 7 * DAY, 64
    stretched, period = cli.jobs_at_load(jobs, 1, run_s, 0.5, pool_vcpus)
    assert stretched and all(j.procs == 1 for j in stretched) and period > 0
    one_copy = offered_vcpu_seconds([j for j in jobs if j.procs == 1], run_s)
    assert abs(offered_vcpu_seconds(stretched, run_s) - 0.5 * pool_vcpus * run_s) <= one_copy
    assert max(j.submit for j in stretched) < run_s


def test_the_cli_checks_the_jobs_load(tmp_path, capsys):
    jobs = swf(tmp_path / "jobs.swf", [(1, 0, 600, 1)])
    base = ["--requests", str(REQUESTS_CSV), "--format", "csv", "--quiet", "--backfill", "enabled=true"]
    assert cli.main(base + ["--backfill-jobs-load", "0.5"]) == 2
    assert "--backfill-jobs-load needs --backfill-jobs" in capsys.readouterr().err
    assert cli.main(base + ["--backfill-jobs", str(jobs), "--backfill-jobs-load", "0"]) == 2
    assert "must be more than 0" in capsys.readouterr().err
    assert cli.main(base + ["--backfill-jobs-max-runtime", "60"]) == 2
    assert "--backfill-jobs-max-runtime needs --backfill-jobs" in capsys.readouterr().err
    big = swf(tmp_path / "big.swf", [(1, 0, 600, 8)])
    assert cli.main(base + ["--backfill-jobs", str(big), "--backfill-jobs-load", "0.5"]) == 2
    assert "no job of the trace fits" in capsys.readouterr().err


def test_the_cli_keeps_only_jobs_no_longer_than_asked(tmp_path, capsys):
    jobs = swf(tmp_path / "jobs.swf", [(1, 0, 600, 1), (2, 30, 60, 1), (3, 40, 3000, 1)])
    base = ["--requests", str(REQUESTS_CSV), "--format", "csv", "--nodes", "2", "--node-cpus", "4", "--days", "0.05",
            "--backfill", "enabled=true", "--quiet", "--backfill-jobs", str(jobs)]
    assert cli.main(base + ["--backfill-jobs-max-runtime", "600", "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["header"]["inputs"]["trace_jobs"] == 2 and summary["figures"]["backfill_jobs_arrived"] == 2


def two_workers(jobs: list[traces.Job], policy: Policy, vcpus: int = 1, channel: bool = False) -> dict:
    """Two backfill VMs of `vcpus` start at 10 s and fill a node; at 200 s an on-demand VM as big
    needs a victim, which stops when the on-demand launch is answered, at 210 s. `channel`: their
    guests say on the work channel when they turn busy or idle."""
    settings = SimSettings(nodes=1, node_cpus=2 * vcpus, node_memory_mib=8192, days=2000 / DAY, launch_seconds=10,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0, guest_work_channel=channel)
    backfill = BackfillConfig(enabled=True, interruption="terminate", vcpus=vcpus, memory_mb=128,
                              termination_policy=policy)
    sim = Simulation([OnDemandRequest(200.0, vcpus, 512, 100.0, "od", "od-1")], settings, backfill,
                     LedgerSettings(use_prediction=False), work=JobLevelWork(jobs, backfill.vcpus))
    figures = sim.run()["figures"]
    assert figures["preemptions"] == 1
    return figures


def test_idle_first_stops_the_idle_worker_where_most_recent_stops_the_busy_one(tmp_path):
    # The only job (1,000 s) arrives at the start; the first VM to start takes it, the other stays
    # idle. most_recent: both VMs are as young, the tie goes by id to the first, which runs the job
    # (200 s lost, 10 to 210 s); idle_first stops the idle one, as the CPU figures show.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 1000, 1)]))
    lost = {policy: two_workers(jobs, policy)["backfill_job_seconds_lost"]
            for policy in (Policy.MOST_RECENT, Policy.IDLE_FIRST)}
    assert lost == {Policy.MOST_RECENT: 200, Policy.IDLE_FIRST: 0}


def test_idle_first_counts_a_big_worker_with_one_job_as_busy(tmp_path):
    # Two 8-vCPU workers; both 1-vCPU jobs go to the first (the tightest fit for the second):
    # it uses 2 of its 8 vCPUs, which is busy (a whole core and more), not idle per vCPU.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 5000, 1), (2, 100, 5000, 1)]))
    lost = {policy: two_workers(jobs, policy, vcpus=8)["backfill_job_seconds_lost"]
            for policy in (Policy.MOST_RECENT, Policy.IDLE_FIRST)}
    assert lost == {Policy.MOST_RECENT: 200 + 110, Policy.IDLE_FIRST: 0}


def test_idle_first_hears_a_worker_turn_idle_or_busy_between_the_nodes_reports(tmp_path):
    # The first VM runs a 100-s job (10 to 110 s), then idles; a job arriving at 150 s goes to the
    # other VM (free the longest). The node's last report (its VMs' launch, at 10 s) showed the
    # first busy and the second idle; idle_first must see that it is now the other way round.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 100, 1), (2, 150, 1000, 1)]))
    figures = two_workers(jobs, Policy.IDLE_FIRST)
    assert figures["backfill_job_seconds_lost"] == 0 and figures["backfill_jobs_completed"] == 2


# -- the guests' work channel (SimSettings.guest_work_channel) ---------------------------------------

def test_with_the_work_channel_idle_first_stops_the_worker_whose_job_started_last(tmp_path):
    # Job 1 (150 s) runs on the first VM from 10 s, job 3 follows it there straight away at 160 s;
    # job 2 (from 50 s) runs on the second VM. At 200 s the CPU figures show the first VM busy
    # since its launch and the second since 50 s: idle_first stops the second and loses 160 s
    # (50 to 210 s). Its guest says when each job starts: the first VM's job is the younger (160
    # s), so idle_first stops it and loses 50 s, that job's own progress.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 150, 1), (2, 50, 1000, 1), (3, 100, 1000, 1)]))
    lost = {channel: two_workers(jobs, Policy.IDLE_FIRST, channel=channel)["backfill_job_seconds_lost"]
            for channel in (False, True)}
    assert lost == {False: 160, True: 50}
    # most_recent reads neither: the channel changes nothing there (the tie by id takes the first VM)
    runs = [two_workers(jobs, Policy.MOST_RECENT, channel=channel) for channel in (False, True)]
    for figures in runs:
        for key in ("wall_seconds", "sim_events_per_s"):
            figures.pop(key)
    assert runs[0] == runs[1] and runs[0]["backfill_job_seconds_lost"] == 50


def test_with_the_work_channel_an_idle_guest_goes_first(tmp_path):
    # The first VM's job (10 to 110 s) is over: its guest said idle; the second VM took job 2 at
    # 150 s. Job 3 then waits. With the channel the idle one goes (nothing lost), as without it.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 100, 1), (2, 150, 1000, 1)]))
    figures = two_workers(jobs, Policy.IDLE_FIRST, channel=True)
    assert figures["backfill_job_seconds_lost"] == 0 and figures["backfill_jobs_completed"] == 2


def test_a_sim_vms_work_for_s_is_timed_when_it_is_read():
    class Clock:
        now = 130.0
    lease = Lease("bf-1", "backfill", "n0", "bf-1", 1, 128, "tiny", "", "running", 100.0)
    vm = SimVm(lease, 100.0, Clock)
    assert (vm.work_state, vm.work_for_s) == ("", 0.0)   # it said nothing
    vm.work_state, vm.work_since = "busy", 100.0
    assert vm.work_for_s == 30.0
    Clock.now = 250.0
    assert vm.work_for_s == 150.0


def test_the_cli_turns_the_work_channel_on_and_the_summary_says_so(tmp_path, capsys):
    jobs = swf(tmp_path / "jobs.swf", [(1, 0, 600, 1), (2, 30, 60, 1)])
    base = ["--requests", str(REQUESTS_CSV), "--format", "csv", "--nodes", "2", "--days", "0.05",
            "--backfill", "enabled=true", "termination_policy=idle_first", "--backfill-jobs", str(jobs), "--quiet"]
    assert cli.main(base + ["--out", str(tmp_path / "off")]) == 0
    assert cli.main(base + ["--guest-work-channel", "--out", str(tmp_path / "on")]) == 0
    for name, on in (("off", False), ("on", True)):
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["header"]["sim"]["guest_work_channel"] is on
    assert cli.main(base + ["--compare", "idle_first,idle_first+work_channel=true", "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "idle_first+work_channel=true" / "summary.json").read_text()
                      )["header"]["sim"]["guest_work_channel"] is True
    assert json.loads((tmp_path / "c" / "idle_first" / "summary.json").read_text()
                      )["header"]["sim"]["guest_work_channel"] is False
    capsys.readouterr()
    assert cli.main(base + ["--compare", "work_channel=maybe"]) == 2
    assert "work_channel: expected true or false" in capsys.readouterr().err


# -- recycling: in the last tenth of its longest life a worker is recycled as it turns idle --------

def one_worker_recycled(jobs: list[traces.Job], policy: Policy, channel: bool) -> dict:
    """One 1-vCPU backfill VM fills a 1-vCPU node from 10 s; its longest life is 1,000 s."""
    settings = SimSettings(nodes=1, node_cpus=1, node_memory_mib=8192, days=4000 / DAY, launch_seconds=10,
                           launch_jitter=0, stop_seconds=5, progress_seconds=0, guest_work_channel=channel)
    backfill = BackfillConfig(enabled=True, interruption="terminate", vcpus=1, memory_mb=128,
                              termination_policy=policy, duration_seconds=1000)
    sim = Simulation([], settings, backfill, LedgerSettings(use_prediction=False), work=JobLevelWork(jobs, 1))
    return sim.run()["figures"]


def test_every_policy_recycles_a_worker_that_turns_idle_near_the_end_of_its_life_and_loses_nothing(tmp_path):
    # Job 1 runs 10 to 930 s; the VM is then idle at 920 s of its life (past 900, the last tenth).
    # Job 2 (500 s) arrives at 940 s. The VM is recycled at 930 s, and a new one runs job 2 whole;
    # recycled at its longest life (1,010 s), it would lose job 2's first 70 s.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 920, 1), (2, 940, 500, 1)]))
    for policy in Policy:
        for channel in (False, True):   # by the guest's word or by its CPU
            figures = one_worker_recycled(jobs, policy, channel)
            assert figures["backfill_job_seconds_lost"] == 0 and figures["backfill_jobs_completed"] == 2, \
                (policy, channel, figures)


def test_a_worker_idle_since_before_the_last_tenth_is_recycled_as_it_enters_it(tmp_path):
    # Job 1 runs 10 to 810 s; the VM idles from 810 s, before its last tenth (from 910 s): its
    # agent's next report after 910 s shows it idle there, so it is recycled then, and job 2
    # (arriving at 950 s) runs whole on its successor. Were it left to its longest life (1,010 s)
    # it would lose job 2's first 60 s.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 800, 1), (2, 940, 500, 1)]))
    for policy in Policy:
        for channel in (False, True):
            figures = one_worker_recycled(jobs, policy, channel)
            assert figures["backfill_job_seconds_lost"] == 0 and figures["backfill_jobs_completed"] == 2, \
                (policy, channel, figures)


def test_last_tenth_at_is_the_first_instant_in_it():
    for launched in (0.0, 0.1, 1e6 + 0.1, 2591999.7, 123456.789):
        for duration in (1, 1000, 604800, 86401):
            at = last_tenth_at(launched, duration)
            assert recycles_when_idle(at - launched, duration)
            assert not recycles_when_idle(math.nextafter(at, -math.inf) - launched, duration)


def test_with_the_work_channel_a_job_beside_a_running_one_makes_the_vm_look_no_younger(tmp_path):
    # Two 2-vCPU workers. Job 1 (1 vCPU) runs on the first from 10 s, job 2 (2 vCPUs) on the
    # second from 50 s, job 3 (1 vCPU) beside job 1 from 150 s. One line is the whole VM's state:
    # the first stays busy since 10 s, so the second (busy since 50 s) is the victim at 200 s and
    # loses 160 s; a new "busy" for job 3 would have stopped the first, losing 200 + 60 s.
    jobs = traces.swf_jobs(swf(tmp_path / "jobs.swf", [(1, 0, 5000, 1), (2, 50, 5000, 2), (3, 150, 5000, 1)]))
    assert two_workers(jobs, Policy.IDLE_FIRST, vcpus=2, channel=True)["backfill_job_seconds_lost"] == 160
