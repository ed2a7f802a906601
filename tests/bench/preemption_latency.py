"""On-demand requests that must preempt a backfill VM, with real VMs; and an impossible request.

    python -m tests.bench.preemption_latency [--requests 10]

A real controller and a real agent on this host (2 CPUs), both with mutual TLS. Backfill fills
the host with two 1-vCPU VMs; once both guests have booted, a 1-vCPU on-demand request must
preempt the most recent one. Each request is timed by this process from sending it until
libvirt shows the on-demand domain running (polled every 5 ms); the victim's shutdown is timed
by the agent and read from the audit log. Then the victim is awaited, the on-demand VM released
(forced), backfill refills the host, and the next request follows.

- instant_*: the controller's host_headroom_mib is 0, so the node's memory holds the new VM
  beside its victim: it is launched at once, and the victim gets its notice (30 s) for a clean
  ACPI shutdown beside it.
- preempt_*: then the controller is restarted with a headroom of the node's whole memory, so no
  VM fits beside its victims and the launch waits for the victim's clean shutdown (as before).
Last, a request no node can host (3 vCPUs) is timed and the terminations it caused counted.
Placement by allocation only (no CPU prediction): this run's own boots would otherwise decide
how many backfill VMs fit. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import libvirt

from protos import controller_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, LabEnv, exit_cleanly_on_sigterm, remove_test_domains, wait_for,
                             wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings


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


def preemptions(controller: ControllerProcess, agent: AgentProcess, count: int, tag: str) -> dict:
    """`count` on-demand requests that each preempt the most recent of two booted backfill VMs;
    each timed from sending the request until libvirt shows the on-demand domain running."""
    stub = controller.stub()
    times, clean, work_lost, paths = [], 0, [], set()
    for i in range(count):
        backfill = wait_for(lambda: booted_backfill(controller, agent, 2), 300, "two booted backfill VMs")
        youngest = max(backfill, key=lambda l: l.launched_at)
        started = time.monotonic()
        reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="bench",
                                                        request_id=f"bench-{tag}-{i}"), timeout=120)
        if reply.outcome != "placed":
            raise SystemExit(f"request {i} was {reply.outcome}: {reply.reason}")
        wait_for(lambda: domain_state(reply.lease.vm_name) == libvirt.VIR_DOMAIN_RUNNING, 30, "on-demand running",
                 interval=0.005)
        times.append(time.monotonic() - started)
        if [p.lease_id for p in reply.preempted] != [youngest.lease_id]:
            raise SystemExit(f"request {i} preempted {[p.lease_id for p in reply.preempted]}, "
                             f"not the most recent backfill VM {youngest.lease_id}")
        victim = youngest.vm_name
        wait_for(lambda: domain_state(victim) is None, 60, "the victim to be gone")
        event = [e for e in controller.events("vm.preempted") if e.lease_id == youngest.lease_id][-1]
        detail = json.loads(event.detail_json)
        clean += detail["stopped"] == "clean_shutdown"
        paths.add(detail["path"])
        work_lost.append(detail["work_lost_vcpu_seconds"])
        print(f"{tag} request {i + 1}/{count}: {times[-1]:.2f} s ({detail['path']}; victim "
              f"{detail['stopped']} in {detail['seconds']:.2f} s)", file=sys.stderr, flush=True)
        stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id, force=True), timeout=60)
    return {"times": times, "clean": clean, "work_lost": work_lost, "paths": sorted(paths)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    env = LabEnv.create()
    # No headroom: the node's memory (gigabytes) holds the new VM beside its victim, so it starts at once.
    controller = ControllerProcess(env, name="bench-ctl", settings=dict(use_prediction=False, host_headroom_mib=0))
    controller.start()
    agent = AgentProcess(env, name="bench-node", settings=agent_settings(controller)).start()
    try:
        stub = controller.stub()
        wait_for(lambda: controller.node_state("bench-node") == "up", 30, "the agent to report")
        stub.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, memory_mb=128, vcpus=1, grace_seconds=10))
        instant = preemptions(controller, agent, args.requests, "instant")
        # A headroom of the node's whole memory: no VM fits beside its victims, the launch waits for them.
        controller.stop()
        controller.settings["host_headroom_mib"] = 2**20
        controller.start()
        wait_for(lambda: controller.node_state("bench-node") == "up", 60, "the agent to report again")
        waiting = preemptions(controller, agent, args.requests, "after-victims")
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
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
        env.remove()
    if instant["paths"] != ["instant"] or waiting["paths"] != ["after_victims"]:
        raise SystemExit(f"paths taken: {instant['paths']} and {waiting['paths']}")
    preempt = waiting["times"]
    print(json.dumps({
        "requests": len(preempt), "instant_p50_s": round(statistics.median(instant["times"]), 3),
        "instant_p99_s": round(percentile(instant["times"], 99), 3), "instant_max_s": round(max(instant["times"]), 3),
        "instant_clean_shutdowns": instant["clean"],
        "preempt_p50_s": round(statistics.median(preempt), 3),
        "preempt_p99_s": round(percentile(preempt, 99), 3), "preempt_max_s": round(max(preempt), 3),
        "preempt_min_s": round(min(preempt), 3), "clean_shutdowns": waiting["clean"],
        "work_lost_vcpu_s_p50": round(statistics.median(waiting["work_lost"] + instant["work_lost"]), 1),
        "reject_ms": round(reject_ms, 2), "reject_decision_ms": round(reply.decision_ms, 3),
        "reject_terminations": terminations}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
