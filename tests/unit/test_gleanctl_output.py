"""gleanctl's tables and figures (issue 27, item 4): every table has a header row, events
included; a preemption's lost work is the final figure of `vm.preempted`, and the decision's
figure (`vm.preempting`) is labelled an estimate wherever it is printed.

A real controller process preempts a real backfill lease: its node is a fake agent that is a real
gRPC server with the node's certificate (it answers launches and stops at once, and boots
nothing), and the node's reports come over a real report stream with the agent's identity,
listing the VMs the fake agent was asked to launch and not yet to stop. No libvirt."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from gleaner_common.authz import DenyList, Limits
from gleaner_common.rpc import ServerSettings, start_server
from protos import agent_pb2, agent_pb2_grpc, controller_pb2
from tests.agentproc import REPO, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, reporting_node

NODE = "out-node"
STOP_SECONDS = 1.5


class QuickAgent(agent_pb2_grpc.NodeAgentServicer):
    """Launches and stops at once; remembers what runs, so the node's reports can list it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, agent_pb2.LaunchDomainRequest] = {}
        self.launched_at: dict[str, float] = {}

    def LaunchDomain(self, request, context):
        with self.lock:
            self.running[request.name] = request
            self.launched_at.setdefault(request.name, time.time())
        return agent_pb2.LaunchDomainResponse(domain=agent_pb2.Domain(name=request.name), created=True)

    def TerminateDomain(self, request, context):
        time.sleep(STOP_SECONDS)   # a shutdown takes a while: the work lost grows past the decision's figure
        with self.lock:
            self.running.pop(request.name, None)
        return agent_pb2.TerminateDomainResponse(name=request.name,
                                                 outcome=agent_pb2.TERMINATION_OUTCOME_CLEAN_SHUTDOWN,
                                                 duration_seconds=STOP_SECONDS, detail="quick agent")

    def report(self, address: str) -> controller_pb2.NodeReport:
        with self.lock:
            vms = [controller_pb2.ReportedVm(
                name=r.name, lease_id=r.lease_id, state="running", vcpus=r.vcpus, memory_mib=r.memory_mib,
                launched_at=self.launched_at[r.name], image=r.image,
                role="backfill" if r.role == agent_pb2.ROLE_BACKFILL else "on_demand") for r in self.running.values()]
        return controller_pb2.NodeReport(node_id=NODE, agent_address=address, cpus=2, memory_mib=4096, images=["tiny"],
                                         min_memory_mib=32, vms=vms, sent_at=time.time(), agent_version="test")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A controller and its one 2-CPU node (a QuickAgent reporting twice a second), backfill on with
    1-vCPU VMs that are shut down when preempted."""
    env = LabEnv.in_dir(tmp_path_factory.mktemp("gleanctl-output"), nodes=(NODE,))
    controller = ControllerProcess(env, name="output-ctl", settings=dict(use_prediction=False)).start()
    agent = QuickAgent()
    server = start_server(ServerSettings("127.0.0.1:0", env.pki.agent(NODE), DenyList(env.pki.deny_list),
                                         Limits(calls_per_identity=16, streams_per_identity=2, streams_total=4)),
                          agent_pb2.DESCRIPTOR.services_by_name["NodeAgent"].full_name,
                          lambda s: agent_pb2_grpc.add_NodeAgentServicer_to_server(agent, s))
    try:
        with reporting_node(controller, NODE, lambda: agent.report(f"127.0.0.1:{server.port}")):
            controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(
                enabled=True, memory_mb=128, vcpus=1, interruption="terminate", grace_seconds=0), timeout=10)
            yield controller, agent
    finally:
        server.stop(grace=0)
        controller.stop()


def gleanctl(controller: ControllerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "--timeout", "30",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=90)


def header(text: str) -> list[str]:
    return text.splitlines()[0].split()


def test_every_listing_has_a_header_row(pool):
    controller, _agent = pool
    wait_for(lambda: len(controller.leases("backfill", "running")) == 2, 30, "two backfill VMs to run")
    for args, columns in ((["nodes"], ["NODE", "STATE", "VCPUS"]), (["vms"], ["LEASE", "ROLE", "STATE", "NODE"]),
                          (["events"], ["SEQ", "TIME", "KIND", "NODE", "LEASE", "DETAIL"]),
                          (["events", "--kind", "vm.launched"], ["SEQ", "TIME", "KIND", "NODE", "LEASE", "DETAIL"])):
        done = gleanctl(controller, *args)
        assert done.returncode == 0, done.stderr
        assert header(done.stdout)[:len(columns)] == columns, (args, done.stdout)
        assert len(done.stdout.splitlines()) >= 2, (args, done.stdout)   # the header, then rows
    done = gleanctl(controller, "events", "--kind", "vm.launched")
    row = done.stdout.splitlines()[1].split()
    assert row[2] == "vm.launched" and row[3] == NODE and row[4].startswith("bf-"), done.stdout


def test_the_cli_prints_the_final_lost_work_and_labels_the_estimate(pool):
    controller, agent = pool
    wait_for(lambda: len(controller.leases("backfill", "running")) == 2, 30, "two backfill VMs to run")
    time.sleep(2.5)   # some work to lose
    done = gleanctl(controller, "request", "--vcpus", "2", "--memory", "256", "--request-id", "out-1")
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(lambda: len(controller.events("vm.preempted")) == 2, 30, "both victims to stop")
    final = {e.lease_id: json.loads(e.detail_json)["work_lost_vcpu_seconds"] for e in controller.events("vm.preempted")}
    estimate = {e.lease_id: json.loads(e.detail_json)["work_at_stake_vcpu_seconds"]
                for e in controller.events("vm.preempting")}
    assert set(final) == set(estimate) and all(final[v] > estimate[v] for v in final), (final, estimate)
    # what the request printed: each victim's final figure, or one labelled an estimate
    for lease_id in final:
        line = next(l for l in done.stdout.splitlines() if f"preempted {lease_id}" in l)
        assert f"{final[lease_id]:.1f} vCPU-s of work lost" in line or "(estimate:" in line, line
    # asked again (the same request id): the victims have stopped, so the final figures only
    again = gleanctl(controller, "request", "--vcpus", "2", "--memory", "256", "--request-id", "out-1")
    assert again.returncode == 0, again.stderr
    for lease_id, lost in final.items():
        line = next(l for l in again.stdout.splitlines() if f"preempted {lease_id}" in l)
        assert line.endswith(f", {lost:.1f} vCPU-s of work lost"), line
    data = json.loads(gleanctl(controller, "-o", "json", "request", "--vcpus", "2", "--memory", "256",
                               "--request-id", "out-1").stdout)
    assert {p["lease_id"]: (p["work_lost_vcpu_seconds"], p["work_lost_is_estimate"]) for p in data["preempted"]} \
        == {lease_id: (lost, False) for lease_id, lost in final.items()}
    # the events table: vm.preempting's figure is named an estimate, vm.preempted's is the loss
    table = gleanctl(controller, "events", "--kind", "vm.preempting").stdout
    assert "work_lost_estimate_vcpu_seconds=" in table and "work_at_stake" not in table, table
    table = gleanctl(controller, "events", "--kind", "vm.preempted").stdout
    assert all(f"work_lost_vcpu_seconds={lost}" in table for lost in final.values()), table
