"""idle_first end to end: a real controller and agent on the local libvirtd, two backfill VMs.

The controller launches one backfill VM (the tiny guest, idle); then a volunteer running the
tiny guest's CPU hog is started on the agent behind the controller's back, and the controller
adopts it as a backfill VM (the younger). An on-demand request then needs one VM's room:
most_recent would stop the younger; idle_first stops the older, idle one, from the CPU figures
the agent reports, and its audit says so.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from controller.core.ledger import IDLE_CPU_CORES
from protos import agent_pb2, controller_pb2
from tests.agentproc import (AgentProcess, launch_request, remove_test_domains, unique_name, wait_for,
                             wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings

pytestmark = pytest.mark.libvirt


def domain_cpu(agent: AgentProcess, name: str) -> float | None:
    snap = agent.stub().GetMetrics(agent_pb2.GetMetricsRequest(), timeout=10)
    return next((d.cpu_cores for d in snap.domains if d.name == name), None)


def test_idle_first_stops_the_idle_backfill_vm_not_the_busy_younger_one(test_env):
    controller = ControllerProcess(test_env, name="ctl-idle", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(test_env, name="node1", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 to report")

        def backfill_set(*items: str) -> None:
            subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "backfill",
                            "set", *items], check=True, capture_output=True, timeout=60)

        backfill_set("enabled=true", "memory_mb=128", "max_instances=1", "termination_policy=idle_first",
                     "interruption=terminate")
        older = wait_for(lambda: controller.leases("backfill", "running"), 60, "the controller's backfill VM")[0]
        wait_for_console(str(agent.state_dir / "console" / f"{older.vm_name}.log"), "GLEANER-READY", 120)
        hog = unique_name("hog")
        reply = agent.stub().LaunchDomain(launch_request(hog, memory_mib=128, kernel_cmdline="gleaner.workload=hog"))
        younger = wait_for(lambda: [l for l in controller.leases("backfill", "running") if l.vm_name == hog], 30,
                           "the hog's adoption")[0]
        assert younger.owner == "adopted" and younger.launched_at > older.launched_at
        wait_for_console(reply.domain.console_log, "GLEANER-HOG", 120)
        wait_for(lambda: (domain_cpu(agent, hog) or 0) > 0.5
                 and (domain_cpu(agent, older.vm_name) or 1) < IDLE_CPU_CORES, 30,
                 "the agent to see the hog busy and the other VM idle", interval=0.5)
        time.sleep(1.5)   # the controller has had its reports (every 0.5 s)

        reply = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                     owner="alice", request_id="idle-1"), timeout=120)
        assert reply.outcome == "placed", reply.reason
        assert reply.policy == "idle_first"
        assert [p.lease_id for p in reply.preempted] == [older.lease_id]
        (event,) = [e for e in controller.events("vm.preempting") if e.lease_id == older.lease_id]
        detail = json.loads(event.detail_json)
        assert detail["policy"] == "idle_first" and detail["last_seen"] == "idle" and detail["busy_for_s"] == 0
        wait_for(lambda: [e for e in controller.events("vm.preempted") if e.lease_id == older.lease_id], 60,
                 "the idle victim's stop to be confirmed")
        assert [l.lease_id for l in controller.leases("backfill", "running")] == [younger.lease_id]
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
