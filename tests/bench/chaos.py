"""Chaos: randomized faults in the middle of preemptions and releases, over real VMs, and how
long the pool takes to settle after each; under interruption = terminate and = hibernate.

    python -m tests.bench.chaos [--runs 30] [--seed 1] [--settle-seconds 120] [--faults F1,F2]
                                [--interruption terminate|hibernate|both]

A real controller and a real agent on this host (2 CPUs), mutual TLS; backfill fills the node
with two VMs. Each run sets the backfill's interruption explicitly (SetBackfill; with `both`,
chosen at random per run from its own generator seeded by --seed), waits for the node to be full
of booted backfill VMs, then asks for an on-demand VM that must preempt one (alternately on the
instant path and, with the controller's headroom set to the node's memory, on the path that
waits for the victims), and strikes one fault, chosen at random.

Terminate runs (the victim is shut down):
- controller_crash: the controller exits at a named crash point of the request (GLEANER_CRASH_AT,
  see controller/service.py) and is started again;
- agent_kill: the agent is killed (SIGKILL) a random 0 to 2 s after the request, and started again;
- libvirtd_restart: libvirtd is restarted a random 0 to 2 s after a release of the on-demand VM.

Hibernate runs (the victim is saved; releasing the on-demand VM makes room and brings its resume):
- controller_crash at a save point (before_call:stop, after_call:stop, after_write:vm.hibernated:
  the save goes through the stop path), armed during the request; or at a resume point
  (after_write:vm.resuming, before_call:resume, after_call:resume), armed during the release of
  the on-demand VM, once the victim is saved;
- agent_kill mid-save: the agent is killed a random 0 to 2 s after the request; or mid-restore:
  once the victim is saved, a random 0 to 1 s after the release of the on-demand VM is answered;
- libvirtd_restart during the resume: once the victim is saved, a random 0 to 1 s after the
  release is answered.
resuming_after_release_s: from the release's answer (for a controller crash, from the release
call) to the controller's vm.resuming in the audit log; struck_after_resuming_s: where each agent
kill or libvirtd restart fell against that vm.resuming (negative: before the resume was asked).

The request is then asked again with its id. A run has settled when the request is answered
(placed or failed), every lease is running with its VM on the node, and every VM of ours has a
lease; on hibernate runs also: every hibernated lease has its saved domain and its complete state
file (libvirt's header `LibvirtQemudSave`) in the agent's hibernation directory, read by this
bench, and no running domain; no file in that directory lacks a hibernated lease (orphan); no
lease is resuming or discarding; and each VM that was saved when the on-demand VM was released
is running again (lease and domain) or was discarded (its lease ended with `discarded: <why>`,
vm.stopping saying so and vm.discarded in the audit log). converge_s is timed (polled every
0.5 s, at most --settle-seconds) from:
- controller_crash: the crashed controller's exit, so its restart and resumption are included;
- agent_kill: the killed agent's exit, so its restart and the agent's own recovery (its settling
  of state files, a save or restore libvirtd finished alone) are included;
- libvirtd_restart: the end of the restart and of the release call it interrupted (both left out;
  libvirtd's own restart is not ours to time). On hibernate runs the release is answered before
  the restart: timed from the restart's end.
A hibernate run whose fault struck the save records what became of its victim (save_outcomes:
hibernated, or ended and why), then releases the on-demand VM and times resume_s, from the
release call's answer until the saved VM runs again (or was discarded) and the checks
above hold; the run has converged only if that too settles within --settle-seconds. On a resume
fault converge_s includes the resume (the fault strikes around it). Left out everywhere: filling
the node with booted backfill VMs before each run, and waiting for the victim's save before a
resume fault. The on-demand VM is released after each run.

Prints one JSON object: runs, converged, max_converge_s, p50_converge_s, orphan_vms, stuck_leases
(VMs without a lease and leases not running or hibernated, in runs that did not settle),
orphan_state_files and missing_state_files (likewise), unresolved_requests, the runs by fault,
by_interruption (the same figures per interruption, with every converge_s of each fault, on
hibernate of each fault and step as in agent_kill/save, and the saved VMs resumed, discarded or
lost), and what a controller crash during a request costs the user: od_running_after_restart_s,
per path, every run's time from the crashed controller's exit to its on-demand lease running
(polled with the convergence, every 0.5 s; resume faults, where the on-demand VM is released, are
left out), with p50 and max. The command fails (exit 1) if a run did not converge, or if on the instant path that
time is over 5 s in any run: a victim may take its notice again after a crash, the on-demand VM
must not wait for it.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

from protos import agent_pb2, controller_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, remove_test_domains, restart_libvirtd,
                             wait_for, wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings, books_match_node

POINTS = ["after_write:request.placed", "before_call:launch", "after_call:launch", "before_call:stop",
          "after_call:stop", "after_write:vm.preempted"]
SAVE_POINTS = ["before_call:stop", "after_call:stop", "after_write:vm.hibernated"]
RESUME_POINTS = ["after_write:vm.resuming", "before_call:resume", "after_call:resume"]
FAULTS = ["controller_crash", "agent_kill", "libvirtd_restart"]
INTERRUPTIONS = ["terminate", "hibernate"]
OD_AFTER_RESTART_GOAL_S = 5.0   # instant path: a crashed controller's restart to the on-demand VM running
SAVE_MAGIC = b"LibvirtQemudSave"   # a complete libvirt save image (a half-written one says ...Part)
SAVE_SUFFIX = ".save"


def full(controller: ControllerProcess, agent: AgentProcess) -> bool:
    leases = controller.leases()
    if len(leases) != 2 or any(l.role != "backfill" or l.state != "running" for l in leases):
        return False
    for lease in leases:
        wait_for_console(agent.state_dir / "console" / f"{lease.vm_name}.log", "GLEANER-READY", timeout=120)
    return True


def restart(controller: ControllerProcess, headroom: int, env: dict | None = None) -> None:
    controller.stop()
    controller.settings["host_headroom_mib"] = headroom
    controller.start(env=env)


def set_interruption(controller: ControllerProcess, interruption: str) -> None:
    """The backfill settings of every run, with its interruption said explicitly (never the default)."""
    controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(
        enabled=True, memory_mb=128, vcpus=1, grace_seconds=10, retry_seconds=5, interruption=interruption),
        timeout=10)


def ask(controller: ControllerProcess, request: controller_pb2.VmRequest, timeout: float = 120):
    try:
        return controller.stub().RequestVm(request, timeout=timeout)
    except grpc.RpcError:
        return None


def on_demand_running(controller: ControllerProcess) -> bool:
    try:
        return bool(controller.leases("on_demand", "running"))
    except grpc.RpcError:
        return False


def release_on_demand(controller: ControllerProcess) -> None:
    for lease in controller.leases("on_demand"):
        try:
            controller.stub().Release(controller_pb2.ReleaseRequest(lease_id=lease.lease_id, force=True), timeout=60)
        except grpc.RpcError:
            pass


# -- what a hibernate run checks -------------------------------------------------------------------

def state_files(agent: AgentProcess) -> dict[str, bytes]:
    """The agent's hibernation directory as this bench reads it: each entry's first 16 bytes."""
    directory = agent.state_dir / "hibernation"
    found = {}
    for entry in sorted(directory.iterdir()) if directory.is_dir() else []:
        try:
            with open(entry, "rb") as f:
                found[entry.name] = f.read(len(SAVE_MAGIC))
        except OSError:
            found[entry.name] = b""
    return found


def hibernate_faults(controller: ControllerProcess, agent: AgentProcess) -> dict[str, int]:
    """What keeps a hibernate pool from having settled, apart from books_match_node: hibernated
    leases without a complete state file, and files without a hibernated lease."""
    saved = {l.vm_name + SAVE_SUFFIX for l in controller.leases(state="hibernated")}
    files = state_files(agent)
    return {"missing_state_files": sum(files.get(name) != SAVE_MAGIC for name in saved),
            "orphan_state_files": len(set(files) - saved)}


def victim_outcome(controller: ControllerProcess, lease_id: str) -> str:
    """A VM saved when the on-demand VM was released: resumed, discarded (with its reason in the
    audit log), still waiting, or lost some other way (a bug)."""
    lease = next((l for l in controller.stub().ListVms(controller_pb2.ListVmsRequest(include_ended=True),
                                                        timeout=10).leases if l.lease_id == lease_id), None)
    if lease is None:
        return "lost: no such lease"
    if lease.state == "running":
        return "resumed"
    if lease.state in ("hibernated", "resuming", "discarding"):
        return f"waiting: {lease.state}"
    said = [json.loads(e.detail_json).get("reason", "") for e in controller.events("vm.stopping")
            if e.lease_id == lease_id]
    gone = [e for e in controller.events("vm.discarded") if e.lease_id == lease_id]
    if lease.end_reason.startswith("discarded: ") and gone and any(r.startswith("discarded: ") for r in said):
        return lease.end_reason
    return f"lost: {lease.state} ({lease.end_reason})"


def victim_fates(controller: ControllerProcess, lease_ids: list[str]) -> dict[str, str]:
    """What became of the backfill VMs that filled the node before a save fault, those not running:
    hibernated (their work kept), or ended (and why; with the agent's refusal if it refused the save)."""
    leases = {l.lease_id: l for l in controller.stub().ListVms(controller_pb2.ListVmsRequest(include_ended=True),
                                                                timeout=10).leases}
    refused = {e.lease_id: json.loads(e.detail_json).get("error", "")
               for e in controller.events("vm.hibernate_refused")}
    fates = {}
    for lease_id in lease_ids:
        lease = leases.get(lease_id)
        if lease is None or lease.state == "running":
            continue
        fates[lease_id] = lease.state if lease.state == "hibernated" else f"{lease.state}: {lease.end_reason}"
        if lease_id in refused:
            fates[lease_id] += f" (save refused: {refused[lease_id]})"
    return fates


def settled(controller: ControllerProcess, agent: AgentProcess, hibernate: bool, victims: list[str]) -> bool:
    try:
        if not books_match_node(controller, agent.stub()):
            return False
        if not hibernate:
            return True
        return not any(hibernate_faults(controller, agent).values()) \
            and all(victim_outcome(controller, v) == "resumed" or victim_outcome(controller, v).startswith("discarded")
                    for v in victims)
    except grpc.RpcError:
        return False


def leftovers(controller: ControllerProcess, agent: AgentProcess, hibernate: bool) -> dict[str, int]:
    """What a run that did not settle left behind."""
    try:
        domains = {d.name for d in agent.stub().ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains}
        leases = controller.leases()
    except grpc.RpcError:
        return {"unreachable": 1}
    found = {"orphan_vms": len(domains - {l.vm_name for l in leases}),
             "stuck_leases": sum(l.state not in (("running", "hibernated") if hibernate else ("running",))
                                 for l in leases)}
    if hibernate:
        found.update(hibernate_faults(controller, agent))
    return found


# -- striking ---------------------------------------------------------------------------------------

def crash_controller(controller: ControllerProcess, agent: AgentProcess, headroom: int, point: str,
                     act) -> float | None:
    """Restart the controller armed at `point`, do `act`, see it exit there and start it again:
    the exit's time, or None if the point was never reached (then it is restarted plainly)."""
    restart(controller, headroom, env={"GLEANER_CRASH_AT": point})
    wait_for(lambda: controller.node_state(agent.name) == "up", 60, "the node to report")
    act()
    try:
        controller.process.wait(60)
    except subprocess.TimeoutExpired:
        restart(controller, headroom)
        return None
    controller.process = None
    struck = time.monotonic()
    controller.start()
    return struck


def kill_agent_after(agent: AgentProcess, call, delay: float) -> float:
    """Start `call` (a gRPC future), kill the agent `delay` s later, start it again; the kill's time."""
    future = call()   # a gRPC future, or None for a call already answered
    time.sleep(delay)
    agent.process.kill()
    agent.process.wait()
    struck = time.monotonic()
    agent.process = None
    agent.start()
    try:
        if future is not None:
            future.result()
    except grpc.RpcError:
        pass
    return struck


def restart_libvirtd_after(call, delay: float) -> float:
    future = call()
    time.sleep(delay)
    restart_libvirtd()
    try:
        if future is not None:
            future.result()
    except grpc.RpcError:
        pass
    return time.monotonic()


def release_future(controller: ControllerProcess, lease_id: str):
    return lambda: controller.stub().Release.future(controller_pb2.ReleaseRequest(lease_id=lease_id), timeout=120)


def strike_request(fault: str, rng: random.Random, controller: ControllerProcess, agent: AgentProcess,
                   request: controller_pb2.VmRequest, headroom: int, points: list[str]) -> tuple[str, float | None]:
    """A fault during the request (and, for libvirtd, the release after it): its detail and time."""
    if fault == "controller_crash":
        point = rng.choice(points)
        struck = crash_controller(controller, agent, headroom, point, lambda: ask(controller, request, timeout=60))
        return point + ("" if struck else " (not reached)"), struck
    if fault == "agent_kill":
        delay = rng.uniform(0, 2)
        return f"{delay:.2f}s after the request", kill_agent_after(
            agent, lambda: controller.stub().RequestVm.future(request, timeout=120), delay)
    reply = ask(controller, request)
    delay = rng.uniform(0, 2)
    if reply is not None and reply.outcome == "placed":
        return f"{delay:.2f}s after a release", restart_libvirtd_after(
            release_future(controller, reply.lease.lease_id), delay)
    return f"no release ({reply.outcome if reply else 'no answer'})", time.monotonic()


def strike_resume(fault: str, rng: random.Random, controller: ControllerProcess, agent: AgentProcess,
                  headroom: int, point: str) -> tuple[str, float | None, float, float]:
    """A fault around the resume the release of the on-demand VM brings: its detail, its time,
    and the wall-clock times of the release and of the strike (to place the strike against the
    resume's start in the audit log)."""
    released = 0.0

    def release() -> None:   # the resume starts once the release is done and the node reports its room
        nonlocal released
        released = time.time()
        release_on_demand(controller)   # a controller armed at a resume point dies after answering it
        if fault != "controller_crash":
            released = time.time()   # the release's answer: the agent's fault waits from there
    if fault == "controller_crash":
        struck = crash_controller(controller, agent, headroom, point, release)
        return point + ("" if struck else " (not reached)"), struck, released, wall(struck)
    delay = rng.uniform(0, 1)
    if fault == "agent_kill":
        struck = kill_agent_after(agent, release, delay)
        return f"mid-restore: {delay:.2f}s after the release", struck, released, wall(struck)
    struck = restart_libvirtd_after(release, delay)
    return f"during the resume: {delay:.2f}s after the release", struck, released, released + delay


def wall(monotonic: float | None) -> float:
    """A time.monotonic() reading as wall-clock time (the audit log's)."""
    return time.time() - (time.monotonic() - monotonic) if monotonic is not None else time.time()


def settle_loop(controller: ControllerProcess, agent: AgentProcess, struck: float, settle: float,
                request: controller_pb2.VmRequest | None, hibernate: bool, victims: list[str]
                ) -> tuple[object, float | None, float | None]:
    """Poll until the run has settled: (the request's answer, settled at, on-demand running at)."""
    answer = None
    running_at = None
    while time.monotonic() - struck < settle:
        if request is not None and (answer is None or answer.outcome == "pending"):
            answer = ask(controller, request, timeout=30)
        if running_at is None and request is not None and on_demand_running(controller):
            running_at = time.monotonic()
        answered = request is None or (answer is not None and answer.outcome != "pending")
        if answered and settled(controller, agent, hibernate, victims):
            return answer, time.monotonic(), running_at
        time.sleep(0.5)
    return answer, None, running_at


def resuming_after(controller: ControllerProcess, lease_id: str, since: float) -> float | None:
    """Seconds from `since` (wall clock) to the first vm.resuming of `lease_id` after it."""
    times = [e.at for e in controller.events("vm.resuming") if e.lease_id == lease_id and e.at >= since - 1]
    return round(min(times) - since, 2) if times else None


# -- a run -------------------------------------------------------------------------------------------

def one_run(run: int, interruption: str, fault: str, rng: random.Random, controller: ControllerProcess,
            agent: AgentProcess, settle: float) -> dict:
    headroom = 0 if run % 2 == 0 else 2**20   # alternately the instant path and the one that waits
    restart(controller, headroom)
    wait_for(lambda: controller.node_state(agent.name) == "up", 60, "the node to report")
    set_interruption(controller, interruption)
    wait_for(lambda: full(controller, agent), 300, "two booted backfill VMs")
    request = controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="chaos", request_id=f"chaos-{run}")
    hibernate = interruption == "hibernate"
    result = {"run": run, "interruption": interruption, "fault": fault, "phase": "request",
              "path": "instant" if headroom == 0 else "after_victims"}
    if not hibernate:
        detail, struck = strike_request(fault, rng, controller, agent, request, headroom, POINTS)
        result.update(_settle(controller, agent, struck, settle, request, False, []))
    else:
        phase = hibernate_phase(fault, rng)
        result["phase"] = phase
        if phase == "save":
            filled = [l.lease_id for l in controller.leases("backfill")]
            detail, struck = strike_request(fault, rng, controller, agent, request, headroom, SAVE_POINTS)
            result.update(_settle(controller, agent, struck, settle, request, True, []))
            result["save_outcomes"] = victim_fates(controller, filled)
            if result["converged"]:
                result.update(_resume_after_release(controller, agent, settle))
        else:
            detail, struck = _resume_fault(fault, rng, controller, agent, request, headroom, settle, result)
    result["detail"] = detail
    if not result["converged"]:
        result.update(leftovers(controller, agent, hibernate))
    release_on_demand(controller)
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def hibernate_phase(fault: str, rng: random.Random) -> str:
    """Which hibernation step a fault strikes: libvirtd restarts during the resume; the others
    strike the save or the resume."""
    if fault == "libvirtd_restart":
        return "resume"
    if fault == "controller_crash":
        return "save" if rng.random() < len(SAVE_POINTS) / (len(SAVE_POINTS) + len(RESUME_POINTS)) else "resume"
    return rng.choice(["save", "resume"])


def _settle(controller, agent, struck: float | None, settle: float, request, hibernate: bool,
            victims: list[str]) -> dict:
    struck = struck if struck is not None else time.monotonic()
    answer, converged_at, running_at = settle_loop(controller, agent, struck, settle, request, hibernate, victims)
    out = {"converged": converged_at is not None,
           "converge_s": round((converged_at or time.monotonic()) - struck, 2),
           "od_running_after_restart_s": round(running_at - struck, 2) if running_at is not None else None}
    if request is not None:
        out["answer"] = answer.outcome if answer else "none"
    return out


def _resume_after_release(controller: ControllerProcess, agent: AgentProcess, settle: float) -> dict:
    """After a save fault: release the on-demand VM and time the saved VM's resume (resume_s)."""
    victims = [l.lease_id for l in controller.leases(state="hibernated")]
    since = time.time()
    release_on_demand(controller)
    released = time.monotonic()
    _, done, _ = settle_loop(controller, agent, released, settle, None, True, victims)
    out = {"victims": {v: victim_outcome(controller, v) for v in victims},
           "resume_s": round((done or time.monotonic()) - released, 2)}
    if victims:
        out["resuming_after_release_s"] = resuming_after(controller, victims[0], since)
    if done is None:
        out["converged"] = False
    return out


def _resume_fault(fault: str, rng: random.Random, controller: ControllerProcess, agent: AgentProcess,
                  request: controller_pb2.VmRequest, headroom: int, settle: float, result: dict
                  ) -> tuple[str, float | None]:
    """A fault around the resume: place the on-demand VM, wait for its victim's save, then strike
    while the release brings the resume; converge_s includes the resume."""
    point = rng.choice(RESUME_POINTS) if fault == "controller_crash" else ""
    reply = ask(controller, request)
    result["answer"] = reply.outcome if reply else "none"
    try:
        victims = [l.lease_id for l in wait_for(lambda: controller.leases(state="hibernated"), settle,
                                                "the victim's save", interval=0.5)]
    except TimeoutError:
        victims = []
    if reply is None or reply.outcome != "placed" or not victims:
        result.update(_settle(controller, agent, time.monotonic(), settle, None, True, victims))
        return f"not struck: no saved victim beside a placed on-demand VM ({result['answer']})", None
    detail, struck, since, struck_wall = strike_resume(fault, rng, controller, agent, headroom, point)
    result.update(_settle(controller, agent, struck, settle, None, True, victims))
    result["victims"] = {v: victim_outcome(controller, v) for v in victims}
    result["resuming_after_release_s"] = resuming_after(controller, victims[0], since)
    if result["resuming_after_release_s"] is not None and fault != "controller_crash":
        # negative: the fault struck before the controller asked for the resume
        result["struck_after_resuming_s"] = round(struck_wall - since - result["resuming_after_release_s"], 2)
    return detail, struck


# -- the whole bench ---------------------------------------------------------------------------------

def interruptions_for(choice: str, runs: int, seed: int) -> list[str]:
    if choice != "both":
        return [choice] * runs
    pick = random.Random(f"{seed}-interruption")   # its own generator: the faults' draws stay as they were
    return [pick.choice(INTERRUPTIONS) for _ in range(runs)]


def fault_key(result: dict) -> str:
    """A terminate run's fault; a hibernate run's fault and the step it struck (agent_kill/save)."""
    return result["fault"] + ("" if result["phase"] == "request" else f"/{result['phase']}")


def figures(results: list[dict]) -> dict:
    """Convergence figures over some runs."""
    times = [r["converge_s"] for r in results if r["converged"]]
    by_fault = {}
    for fault in [f"{f}{p}" for f in FAULTS for p in ("", "/save", "/resume")]:
        mine = [r for r in results if fault_key(r) == fault]
        if mine:
            by_fault[fault] = {"runs": len(mine), "converged": sum(r["converged"] for r in mine),
                               "converge_s": [r["converge_s"] for r in mine],
                               "max_converge_s": max((r["converge_s"] for r in mine if r["converged"]), default=None)}
    out = {"runs": len(results), "converged": sum(r["converged"] for r in results),
           "max_converge_s": max(times, default=None), "p50_converge_s": statistics.median(times) if times else None}
    for counter in ("orphan_vms", "stuck_leases", "orphan_state_files", "missing_state_files"):
        out[counter] = sum(r.get(counter, 0) for r in results)
    out["unresolved_requests"] = sum(r.get("answer") in ("pending", "none") for r in results)
    out["by_fault"] = by_fault
    return out


def hibernate_figures(results: list[dict]) -> dict:
    outcomes = [o for r in results for o in r.get("victims", {}).values()]
    resumes = [r["resume_s"] for r in results if "resume_s" in r]
    return {"by_phase": {p: sum(r["phase"] == p for r in results) for p in ("save", "resume")},
            "saved_vms_resumed": sum(o == "resumed" for o in outcomes),
            "saved_vms_discarded": sum(o.startswith("discarded") for o in outcomes),
            "saved_vms_lost": sum(not (o == "resumed" or o.startswith("discarded")) for o in outcomes),
            "resume_s_after_save_faults": resumes,
            "not_struck": sum("not reached" in r["detail"] or r["detail"].startswith("not struck") for r in results)}


def summary(results: list[dict]) -> tuple[dict, bool]:
    after_crash = {path: [r["od_running_after_restart_s"] for r in results if r["fault"] == "controller_crash"
                          and r["phase"] != "resume" and r["path"] == path
                          and r["od_running_after_restart_s"] is not None]
                   for path in ("instant", "after_victims")}
    met = all(t <= OD_AFTER_RESTART_GOAL_S for t in after_crash["instant"])
    overall = figures(results)
    by_interruption = {}
    for interruption in INTERRUPTIONS:
        mine = [r for r in results if r["interruption"] == interruption]
        if mine:
            by_interruption[interruption] = figures(mine)
            if interruption == "hibernate":
                by_interruption[interruption].update(hibernate_figures(mine))
    out = {**{k: v for k, v in overall.items() if k != "by_fault"},
           "faults": {f: sum(r["fault"] == f for r in results) for f in FAULTS},
           "answers": {a: sum(r.get("answer") == a for r in results) for a in ("placed", "failed", "pending", "none")},
           "by_interruption": by_interruption,
           "od_running_after_restart_s": {
               path: dict(runs=values, p50=statistics.median(values) if values else None,
                          max=max(values, default=None)) for path, values in after_crash.items()},
           "od_running_after_restart_goal": dict(instant_max_s=OD_AFTER_RESTART_GOAL_S, met=met)}
    return out, met and overall["converged"] == len(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle-seconds", type=float, default=120.0)
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"the faults to choose from, comma-separated (default: {','.join(FAULTS)})")
    parser.add_argument("--interruption", default="both", choices=INTERRUPTIONS + ["both"],
                        help="what preemption does to a victim in each run (default: both, chosen per run)")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    if not faults or set(faults) - set(FAULTS):
        parser.error(f"--faults takes some of {', '.join(FAULTS)}, not {args.faults!r}")
    if args.runs < 1 or args.settle_seconds <= 0:
        parser.error(f"--runs must be at least 1 and --settle-seconds above 0, not {args.runs} and "
                     f"{args.settle_seconds}")
    exit_cleanly_on_sigterm()
    rng = random.Random(args.seed)
    interruptions = interruptions_for(args.interruption, args.runs, args.seed)
    env = LabEnv.create()
    controller = ControllerProcess(env, name="chaos-ctl", settings=dict(use_prediction=False, notice_seconds=5))
    controller.start()
    agent = AgentProcess(env, name="chaos-node", settings=agent_settings(controller)).start()
    results = []
    try:
        wait_for(lambda: controller.node_state("chaos-node") == "up", 30, "the agent to report")
        set_interruption(controller, interruptions[0])
        for run in range(args.runs):
            results.append(one_run(run, interruptions[run], rng.choice(faults), rng, controller, agent,
                                   args.settle_seconds))
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
        env.remove()
    out, ok = summary(results)
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
