"""Hibernation end to end (issue 25): a real controller and agent on the local libvirtd.

A backfill guest runs the jobs workload (adopted by the controller as a backfill VM). With
interruption = hibernate, an on-demand request that needs its vCPUs is placed on the instant
path; the victim is saved, not shut down (its lease hibernated, its domain hibernated on the
agent). When the on-demand VM is released, the launcher resumes the saved VM before anything
else: its jobs go on from where they stood, none started again, the guest never booted again,
and the audit log says what was saved and resumed, with no work lost.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from protos import agent_pb2, controller_pb2
from tests.agentproc import AgentProcess, launch_request, remove_test_domains, unique_name, wait_for, wait_for_console
from tests.controllerproc import ControllerProcess, agent_settings

pytestmark = pytest.mark.libvirt

JOBS = "gleaner.workload=jobs gleaner.jobs=3,1"   # numbered jobs: 3 s busy, 1 s idle


def jobs_started(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"GLEANER-JOB (\d+) start", text)]


def domain_state(agent: AgentProcess, name: str) -> int | None:
    listed = agent.stub().ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains
    return next((d.state for d in listed if d.name == name), None)


def test_an_on_demand_request_hibernates_its_victim_and_the_release_resumes_its_jobs(test_env):
    controller = ControllerProcess(test_env, name="ctl-hib", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(test_env, name="node1", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 to report")
        worker = unique_name("jobs")
        reply = agent.stub().LaunchDomain(launch_request(worker, memory_mib=128, kernel_cmdline=JOBS))
        console = reply.domain.console_log
        victim = wait_for(lambda: [l for l in controller.leases("backfill", "running") if l.vm_name == worker], 30,
                          "the jobs guest's adoption as backfill")[0]
        subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "backfill", "set",
                        "enabled=true", "max_instances=1", "memory_mb=128", "interruption=hibernate"],
                       check=True, capture_output=True, timeout=60)
        wait_for_console(console, "GLEANER-JOB 2 start", 180)

        cpus = agent.stub().DescribeHost(agent_pb2.DescribeHostRequest(), timeout=10).cpus
        placed = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=cpus, memory_mib=128, image="tiny",
                                                                      owner="alice", request_id="hib-1"), timeout=120)
        assert placed.outcome == "placed", placed.reason
        assert [p.lease_id for p in placed.preempted] == [victim.lease_id]
        (placing,) = [e for e in controller.events("request.placed") if json.loads(e.detail_json)["request_id"]
                      == "hib-1"]
        assert json.loads(placing.detail_json)["path"] == "instant"   # the on-demand VM did not wait for the save
        (saving,) = [e for e in controller.events("vm.preempting") if e.lease_id == victim.lease_id]
        assert json.loads(saving.detail_json)["interruption"] == "hibernate"
        (saved,) = wait_for(lambda: [e for e in controller.events("vm.hibernated") if e.lease_id == victim.lease_id],
                            120, "the victim's save")
        assert json.loads(saved.detail_json)["work_kept_vcpu_seconds"] > 0
        assert not [e for e in controller.events("vm.preempted") if e.lease_id == victim.lease_id]   # nothing lost
        assert [l.state for l in controller.leases("backfill") if l.lease_id == victim.lease_id] == ["hibernated"]
        assert domain_state(agent, worker) == agent_pb2.DOMAIN_STATE_HIBERNATED
        before = jobs_started(open(console).read())

        controller.stub().Release(controller_pb2.ReleaseRequest(lease_id=placed.lease.lease_id), timeout=60)
        (resumed,) = wait_for(lambda: [e for e in controller.events("vm.resumed") if e.lease_id == victim.lease_id],
                              180, "the saved VM's resume once the on-demand VM left")
        assert json.loads(resumed.detail_json)["slept_s"] > 0
        assert [l.state for l in controller.leases("backfill") if l.lease_id == victim.lease_id] == ["running"]
        following = max(before) + 1
        wait_for_console(console, f"GLEANER-JOB {following} start", 120)
        text = open(console).read()
        # its jobs went on: each started once, in order, and the guest booted once
        assert jobs_started(text) == list(range(1, max(jobs_started(text)) + 1)), text[-600:]
        assert text.count("GLEANER-READY") == 1, text[-600:]
        assert len(controller.leases("backfill", "running")) == 1   # resumed, not a new VM beside it
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()
