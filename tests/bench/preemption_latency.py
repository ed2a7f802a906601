"""On-demand requests that must preempt a backfill VM, with real VMs; and an impossible request.

    python -m tests.bench.preemption_latency [--requests 10]

A real controller and a real agent on this host (2 CPUs), both with mutual TLS. Backfill fills
the host with two 1-vCPU VMs; once both guests have booted, a 1-vCPU on-demand request must
stop the most recent one (ACPI shutdown, clean power-off) and launch the on-demand VM. The time
is measured from sending the request until libvirt shows the on-demand domain running. The
on-demand VM is then released, backfill refills the host, and the next request follows. Last,
a request no node can host (3 vCPUs) is timed and the terminations it caused are counted.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    env = LabEnv.create()
    controller = ControllerProcess(env, name="bench-ctl", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(env, name="bench-node", settings=agent_settings(controller)).start()
    preempt, clean, work_lost = [], 0, []
    try:
        stub = controller.stub()
        wait_for(lambda: controller.node_state("bench-node") == "up", 30, "the agent to report")
        stub.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, memory_mb=128, vcpus=1, grace_seconds=10))
        for i in range(args.requests):
            backfill = wait_for(lambda: booted_backfill(controller, agent, 2), 300, "two booted backfill VMs")
            youngest = max(backfill, key=lambda l: l.launched_at)
            started = time.monotonic()
            reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="bench",
                                                            request_id=f"bench-{i}"), timeout=120)
            if reply.outcome != "placed":
                raise SystemExit(f"request {i} was {reply.outcome}: {reply.reason}")
            wait_for(lambda: domain_state(reply.lease.vm_name) == libvirt.VIR_DOMAIN_RUNNING, 30, "on-demand running",
                     interval=0.005)
            preempt.append(time.monotonic() - started)
            if [p.lease_id for p in reply.preempted] != [youngest.lease_id]:
                raise SystemExit(f"request {i} preempted {[p.lease_id for p in reply.preempted]}, "
                                 f"not the most recent backfill VM {youngest.lease_id}")
            clean += reply.preempted[0].outcome == "clean_shutdown"
            work_lost.append(reply.preempted[0].work_lost_vcpu_seconds)
            print(f"request {i + 1}/{args.requests}: {preempt[-1]:.2f} s "
                  f"({reply.preempted[0].outcome} in {reply.preempted[0].seconds:.2f} s)", file=sys.stderr, flush=True)
            stub.Release(controller_pb2.ReleaseRequest(lease_id=reply.lease.lease_id, force=True), timeout=60)
        wait_for(lambda: booted_backfill(controller, agent, 2), 300, "two booted backfill VMs")
        before = {l.lease_id for l in controller.leases()}
        preemptions = len(controller.events("vm.preempted"))
        started = time.perf_counter()
        reply = stub.RequestVm(controller_pb2.VmRequest(vcpus=3, memory_mib=128, image="tiny", owner="bench",
                                                        request_id="bench-impossible"), timeout=30)
        reject_ms = (time.perf_counter() - started) * 1000
        if reply.outcome != "rejected":
            raise SystemExit(f"the impossible request was {reply.outcome}")
        terminations = (len(controller.events("vm.preempted")) - preemptions) + len(
            before - {l.lease_id for l in controller.leases()})
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
        env.remove()
    print(json.dumps({
        "requests": len(preempt), "preempt_p50_s": round(statistics.median(preempt), 3),
        "preempt_p99_s": round(percentile(preempt, 99), 3), "preempt_max_s": round(max(preempt), 3),
        "preempt_min_s": round(min(preempt), 3), "clean_shutdowns": clean,
        "work_lost_vcpu_s_p50": round(statistics.median(work_lost), 1),
        "reject_ms": round(reject_ms, 2), "reject_decision_ms": round(reply.decision_ms, 3),
        "reject_terminations": terminations}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
