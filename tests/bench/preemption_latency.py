"""On-demand requests that must preempt a backfill VM, with real VMs; and an impossible request.

    python -m tests.bench.preemption_latency [--requests 10]

A real controller and a real agent on this host (2 CPUs), both with mutual TLS. Backfill
(interruption = terminate, set explicitly: the hibernate path is tests/bench/hibernate.py's part 3)
fills the host with two 1-vCPU VMs; once both guests have booted, a 1-vCPU on-demand request must
preempt the most recent one. Each request is timed by this process from sending it until
libvirt shows the on-demand domain running (polled every 5 ms); the victim's shutdown is timed
by the agent and read from the audit log. Then the victim is awaited, the on-demand VM released
(forced), backfill refills the host, and the next request follows.

- instant_*: the controller's host_headroom_mib is 0, so the node's memory holds the new VM
  beside its victim: it is launched at once, and the victim gets its notice (30 s) for a clean
  ACPI shutdown beside it.
- preempt_*: then the controller is restarted with a headroom of the node's whole memory, so no
  VM fits beside its victims and the launch waits for the victim's clean shutdown (as before).
Last, a request no node can host (3 vCPUs) is timed and the terminations it caused counted:
reject_ms is this process's wall time around the RequestVm call (TLS channel already open),
reject_decision_ms the controller's own time for the decision under its lock.
Left out of every timer: filling the host with booted backfill VMs between requests, and the
victim's shutdown on the instant path (it runs beside the new VM; preempt_* includes it).
Placement by allocation only (no CPU prediction): this run's own boots would otherwise decide
how many backfill VMs fit.

notice_*: what a victim on notice costs the foreground. A separate agent (no controller) runs a
foreground latency probe (as in tests.bench.interference: one sample is the wall time of one
~2 ms CPU burst, read inside the guest) and, on the same host CPU, a volunteer CPU hog whose
guest keeps hogging for NOTICE_WORK_S after its power button (a backfill job using its notice).
Each round: "alone" (the hog suspended through libvirt) is measured for --phase-seconds, then
the hog resumes and "volunteer" (the same hog at work in its class, before any notice) is
measured, then the agent is asked to terminate it with the controller's notice as grace
(TerminateDomain, grace_seconds=30: exactly the call a victim on notice gets), and the probe is
measured for --phase-seconds inside that notice (SETTLE_SECONDS after the call). Rounds
repeat the three phases --rounds times (5 by default), a fresh victim each;
notice_fg_p99_ratio is the p99 over all the notice samples over the p99 over all the alone
samples (nearest rank), notice_fg_p99_ratio_rounds the same within each round (the goal,
NOTICE_GOAL, is 1.05), and notice_vs_volunteer_* set the notice beside the same hog before it:
what the notice itself adds, apart from a volunteer hog's mere presence. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import libvirt

from protos import agent_pb2, controller_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request,
                             remove_test_domains, unique_name, wait_for, wait_for_console)
from tests.bench.interference import SETTLE_SECONDS, measure, phase_stats, set_class
from tests.controllerproc import ControllerProcess, backfilled_pool

NOTICE_SECONDS = 30   # the controller's default notice_seconds
NOTICE_WORK_S = 40    # the hog's guest works on past the notice: the agent destroys it at its end
NOTICE_PHASES = ("alone", "volunteer", "notice")   # the order within each notice round
NOTICE_GOAL = 1.05    # notice_fg_p99_ratio: a victim on notice costs the foreground at most 5% of its p99


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def domain_state(name: str) -> int | None:
    conn = libvirt.open(LIBVIRT_URI)
    try:
        return conn.lookupByName(name).state()[0]
    except libvirt.libvirtError:
        return None
    finally:
        conn.close()


def booted_backfill(controller: ControllerProcess, agent: AgentProcess, count: int) -> list:
    leases = controller.leases("backfill", "running")
    if len(leases) != count:
        return []
    for lease in leases:
        wait_for_console(agent.state_dir / "console" / f"{lease.vm_name}.log", "GLEANER-READY", timeout=240)
    return leases


def explain_stall(controller: ControllerProcess, agent: AgentProcess) -> None:
    """What the pool looked like when backfill did not come back: leases, then the logs' ends."""
    for lease in controller.leases():
        print(f"lease {lease.lease_id} {lease.role} {lease.state} {lease.vm_name}", file=sys.stderr)
    for process in (controller, agent):
        lines = process.log_text().splitlines()[-40:]
        print(f"--- end of {process.log_path}", *lines, sep="\n", file=sys.stderr)


def request_until_running(stub, request_id: str) -> tuple[float, controller_pb2.VmRequestResult, float]:
    """One 1-vCPU on-demand request, timed from sending it until libvirt shows its domain
    running (polled every 5 ms); SystemExit if it is not placed. Also the seconds until the
    RequestVm call was answered."""
    started = time.monotonic()
    reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="bench",
                                                    request_id=request_id), timeout=120)
    answered = time.monotonic() - started
    if reply.outcome != "placed":
        raise SystemExit(f"request {request_id} was {reply.outcome}: {reply.reason}")
    wait_for(lambda: domain_state(reply.lease.vm_name) == libvirt.VIR_DOMAIN_RUNNING, 30, "on-demand running",
             interval=0.005)
    return time.monotonic() - started, reply, answered


@contextmanager
def backfilled_node(env: LabEnv, interruption: str, name: str = "bench") -> Iterator[tuple]:
    """A real controller (no headroom: the instant path) and a real agent, node `{name}-node`,
    backfill on with 1-vCPU 128 MiB VMs preempted as `interruption` says; all stopped and our
    domains removed on the way out."""
    # No headroom: the node's memory (gigabytes) holds the new VM beside its victim, so it starts at once.
    try:
        with backfilled_pool(env, name, interruption, settings=dict(use_prediction=False, host_headroom_mib=0),
                             controller_name=f"{name}-ctl", vcpus=1) as pool:
            yield pool
    finally:
        remove_test_domains()


def preemptions(controller: ControllerProcess, agent: AgentProcess, count: int, tag: str) -> dict:
    """`count` on-demand requests that each preempt the most recent of two booted backfill VMs;
    each timed from sending the request until libvirt shows the on-demand domain running."""
    stub = controller.stub()
    times, clean, work_lost, paths = [], 0, [], set()
    for i in range(count):
        try:
            backfill = wait_for(lambda: booted_backfill(controller, agent, 2), 300, "two booted backfill VMs")
        except TimeoutError:
            explain_stall(controller, agent)
            raise
        youngest = max(backfill, key=lambda l: l.launched_at)
        seconds, reply, _answered = request_until_running(stub, f"bench-{tag}-{i}")
        times.append(seconds)
        if [p.lease_id for p in reply.preempted] != [youngest.lease_id]:
            raise SystemExit(f"request {i} preempted {[p.lease_id for p in reply.preempted]}, "
                             f"not the most recent backfill VM {youngest.lease_id}")
        victim = youngest.vm_name
        wait_for(lambda: domain_state(victim) is None, 60, "the victim to be gone")
        event = wait_for(lambda: [e for e in controller.events("vm.preempted") if e.lease_id == youngest.lease_id],
                         30, "the victim's stop to be confirmed")[-1]
        detail = json.loads(event.detail_json)
        clean += detail["stopped"] == "clean_shutdown"
        paths.add(detail["path"])
        work_lost.append(detail["work_lost_vcpu_seconds"])
        print(f"{tag} request {i + 1}/{count}: {times[-1]:.2f} s ({detail['path']}; victim "
              f"{detail['stopped']} in {detail['seconds']:.2f} s)", file=sys.stderr, flush=True)
        stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id, force=True), timeout=60)
    return {"times": times, "clean": clean, "work_lost": work_lost, "paths": sorted(paths)}


def notice_interference(env: LabEnv, rounds: int, seconds: float, cpu: str) -> dict:
    """The foreground probe's samples alone, beside the volunteer hog, and while that hog is on
    notice (see above)."""
    agent = AgentProcess(env, name="bench-notice").start()
    windows: dict[str, list] = {phase: [] for phase in NOTICE_PHASES}
    conn = libvirt.open(LIBVIRT_URI)
    try:
        stub = agent.stub()
        probe = stub.LaunchDomain(launch_request(unique_name("probe"), agent_pb2.ROLE_ON_DEMAND, cpuset=cpu,
                                                 kernel_cmdline="gleaner.workload=probe gleaner.probe=2000,10,100"))
        console = Path(probe.domain.console_log)
        wait_for_console(console, "GLEANER-PROBE start", timeout=120)
        for r in range(rounds):
            hog = unique_name(f"victim{r}")
            reply = stub.LaunchDomain(launch_request(hog, agent_pb2.ROLE_ON_DEMAND, cpuset=cpu, kernel_cmdline=(
                f"gleaner.workload=hog gleaner.notice_work={NOTICE_WORK_S}")))   # boots promoted: quicker
            wait_for_console(reply.domain.console_log, "GLEANER-HOG", timeout=120)
            set_class(stub, hog, agent_pb2.ROLE_BACKFILL)   # a running backfill VM's class
            dom = conn.lookupByName(hog)
            dom.suspend()
            print(f"round {r + 1}/{rounds}: measuring alone", file=sys.stderr, flush=True)
            windows["alone"].append(measure(console, seconds))
            dom.resume()
            print(f"round {r + 1}/{rounds}: measuring beside the volunteer, before its notice", file=sys.stderr,
                  flush=True)
            windows["volunteer"].append(measure(console, seconds))
            stopping = threading.Thread(target=lambda: stub.TerminateDomain(agent_pb2.TerminateDomainRequest(
                name=hog, grace_seconds=NOTICE_SECONDS), timeout=NOTICE_SECONDS + 60), daemon=True)
            stopping.start()
            print(f"round {r + 1}/{rounds}: measuring a victim on notice", file=sys.stderr, flush=True)
            windows["notice"].append(measure(console, seconds))
            if "GLEANER-NOTICE" not in Path(reply.domain.console_log).read_text(errors="replace"):
                raise SystemExit(f"{hog} never got its notice: the window measured no victim on notice")
            if not stopping.is_alive():
                raise SystemExit(f"{hog} stopped before the window ended: it was not on notice throughout")
            stopping.join(NOTICE_SECONDS + 90)
    finally:
        conn.close()
        agent.stop()
    return notice_summary(windows, rounds, seconds)


def notice_summary(windows: dict[str, list], rounds: int, seconds: float) -> dict:
    """Pooled and per-round p99 ratios: notice over alone (the goal), and notice over the same
    volunteer before its notice (what the notice itself adds)."""
    stats = {phase: phase_stats(windows[phase]) for phase in NOTICE_PHASES}

    def per_round(over: str, under: str) -> list[float | None]:
        return [round(a / b, 3) if a and b else None for a, b in
                zip(stats[over]["p99_all_rounds_ms"], stats[under]["p99_all_rounds_ms"])]
    by_round = per_round("notice", "alone")
    return {"notice_fg_p99_ratio": round(stats["notice"]["p99_all_ms"] / stats["alone"]["p99_all_ms"], 3),
            "notice_fg_p99_ratio_rounds": by_round,
            "notice_fg_p99_goal": NOTICE_GOAL,
            "notice_rounds_over_goal": sum(r is not None and r > NOTICE_GOAL for r in by_round),
            "notice_vs_volunteer_p99_ratio": round(stats["notice"]["p99_all_ms"] / stats["volunteer"]["p99_all_ms"], 3),
            "notice_vs_volunteer_p99_ratio_rounds": per_round("notice", "volunteer"),
            "notice_volunteer_p99_ratio": round(stats["volunteer"]["p99_all_ms"] / stats["alone"]["p99_all_ms"], 3),
            "notice_alone_p99_ms": stats["alone"]["p99_all_ms"], "notice_p99_ms": stats["notice"]["p99_all_ms"],
            "notice_volunteer_p99_ms": stats["volunteer"]["p99_all_ms"],
            **{f"notice_{phase}_p99_rounds_ms": stats[phase]["p99_all_rounds_ms"] for phase in NOTICE_PHASES},
            **{f"notice_{phase}_p50_ms": stats[phase]["p50_all_ms"] for phase in NOTICE_PHASES},
            "notice_samples": {phase: stats[phase]["samples"] for phase in NOTICE_PHASES},
            "notice_rounds": rounds, "notice_phase_seconds": seconds}


def instant_summary(instant: dict) -> dict:
    times = instant["times"]
    return {"instant_p50_s": round(statistics.median(times), 3), "instant_p99_s": round(percentile(times, 99), 3),
            "instant_max_s": round(max(times), 3), "instant_clean_shutdowns": instant["clean"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5, help="alone/volunteer/notice repetitions (default 5)")
    parser.add_argument("--phase-seconds", type=float, default=15.0, help="per phase per round (default 15); "
                        f"with the settling it must fit in the {NOTICE_SECONDS} s notice")
    parser.add_argument("--cpu", default="1", help="host CPU the probe and the victim are pinned to")
    parser.add_argument("--only", choices=("instant", "notice"), help="measure only the instant_* or notice_* figures")
    args = parser.parse_args(argv)
    if args.phase_seconds + SETTLE_SECONDS >= NOTICE_SECONDS:
        parser.error(f"--phase-seconds must be under {NOTICE_SECONDS - SETTLE_SECONDS:g}")
    exit_cleanly_on_sigterm()
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    env = LabEnv.create()
    try:
        result = {} if args.only == "notice" else preemption_figures(env, args.requests, args.only == "instant")
        if args.only != "instant":
            result.update(notice_interference(env, args.rounds, args.phase_seconds, args.cpu))
    finally:
        remove_test_domains()
        env.remove()
    print(json.dumps(result))
    return 0


def preemption_figures(env: LabEnv, requests: int, instant_only: bool) -> dict:
    """instant_*, preempt_* and reject_* (see the module's doc), all on the terminate path: set
    explicitly, whatever the controller's default interruption."""
    with backfilled_node(env, "terminate") as (controller, agent):
        stub = controller.stub()
        instant = preemptions(controller, agent, requests, "instant")
        if instant["paths"] != ["instant"]:
            raise SystemExit(f"paths taken with no headroom: {instant['paths']}")
        if instant_only:
            return {"requests": len(instant["times"]), **instant_summary(instant)}
        # A headroom of the node's whole memory: no VM fits beside its victims, the launch waits for them.
        controller.stop()
        controller.settings["host_headroom_mib"] = 2**20
        controller.start()
        wait_for(lambda: controller.node_state("bench-node") == "up", 60, "the agent to report again")
        waiting = preemptions(controller, agent, requests, "after-victims")
        if waiting["paths"] != ["after_victims"]:
            raise SystemExit(f"paths taken with the whole memory as headroom: {waiting['paths']}")
        wait_for(lambda: booted_backfill(controller, agent, 2), 300, "two booted backfill VMs")
        before = {l.lease_id for l in controller.leases()}
        preemptions_before = len(controller.events("vm.preempted"))
        started = time.perf_counter()
        reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=3, memory_mib=128, image="tiny", owner="bench",
                                                        request_id="bench-impossible"), timeout=30)
        reject_ms = (time.perf_counter() - started) * 1000
        if reply.outcome != "rejected":
            raise SystemExit(f"the impossible request was {reply.outcome}")
        terminations = (len(controller.events("vm.preempted")) - preemptions_before) + len(
            before - {l.lease_id for l in controller.leases()})
    preempt = waiting["times"]
    return {
        "requests": len(preempt), **instant_summary(instant),
        "preempt_p50_s": round(statistics.median(preempt), 3),
        "preempt_p99_s": round(percentile(preempt, 99), 3), "preempt_max_s": round(max(preempt), 3),
        "preempt_min_s": round(min(preempt), 3), "clean_shutdowns": waiting["clean"],
        "work_lost_vcpu_s_p50": round(statistics.median(waiting["work_lost"] + instant["work_lost"]), 1),
        "reject_ms": round(reject_ms, 2), "reject_decision_ms": round(reply.decision_ms, 3),
        "reject_terminations": terminations}


if __name__ == "__main__":
    sys.exit(main())
