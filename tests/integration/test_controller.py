"""The controller end to end: a real controller process and a real agent on the local libvirtd
(plus agents on libvirt's test:/// driver as extra nodes), all over mutual TLS.

The tests in this module run in order and share one pool: backfill fills the node, an
on-demand request preempts the youngest backfill VM, an impossible one is rejected, a release
brings backfill back, the controller restarts and keeps its leases, and the agent stops and
comes back.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import libvirt
import pytest

from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import (LIBVIRT_URI, REPO, AgentProcess, console_text, launch_request, remove_test_domains,
                             unique_name, wait_for, wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings, rpc_code

pytestmark = pytest.mark.libvirt


@pytest.fixture(scope="module")
def pool(test_env):
    # Placement by allocation only: on this 2-core host the test run itself is "foreground"
    # CPU, and the moving average would make refills wait on it (selection has its own tests).
    controller = ControllerProcess(test_env, name="ctl", settings=dict(use_prediction=False)).start()
    agent = AgentProcess(test_env, name="node1", settings=agent_settings(controller)).start()
    try:
        wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 to report")
        yield controller, agent
    finally:
        agent.stop()
        controller.stop()
        remove_test_domains()


def gleanctl(controller: ControllerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def domain_states() -> dict[str, int]:
    conn = libvirt.open(LIBVIRT_URI)
    states = {}
    try:
        for dom in conn.listAllDomains():
            try:   # a stopping domain may be undefined between the listing and this call
                states[dom.name()] = dom.state()[0]
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
        return states
    finally:
        conn.close()


def console_of(agent: AgentProcess, vm_name: str) -> str:
    return str(agent.state_dir / "console" / f"{vm_name}.log")


def running_backfill(controller: ControllerProcess, count: int) -> list:
    leases = controller.leases("backfill", "running")
    return leases if len(leases) == count else []


def test_backfill_fills_the_idle_node(pool):
    controller, agent = pool
    done = gleanctl(controller, "--json", "backfill", "set", "enabled=true", "memory_mb=128", "grace_seconds=10",
                    "interruption=terminate")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["enabled"] is True
    leases = wait_for(lambda: running_backfill(controller, 2), 60, "two running backfill VMs")  # 2 host CPUs
    states = domain_states()
    for lease in leases:
        assert states[lease.vm_name] == libvirt.VIR_DOMAIN_RUNNING
        wait_for_console(console_of(agent, lease.vm_name), "GLEANER-READY", timeout=120)
    (node,) = controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes
    assert 0 <= node.last_report_age_seconds < 10   # reports every 0.5 s
    time.sleep(2)
    assert len(controller.leases("backfill")) == 2  # full: nothing more is launched


def test_on_demand_request_preempts_the_most_recent_backfill_vm(pool):
    controller, agent = pool
    backfill = controller.leases("backfill", "running")
    youngest = max(backfill, key=lambda l: (l.launched_at, l.lease_id))
    reply = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="alice",
                                                                 request_id="e2e-1"), timeout=120)
    assert reply.outcome == "placed", reply.reason
    assert [p.lease_id for p in reply.preempted] == [youngest.lease_id]
    assert reply.policy == "most_recent" and reply.preempted[0].work_lost_vcpu_seconds > 0
    # The node's memory holds the new VM beside its victim: it started at once (the instant path),
    # and the victim shuts down cleanly on its notice, beside it.
    assert domain_states()[reply.lease.vm_name] == libvirt.VIR_DOMAIN_RUNNING
    event = wait_for(lambda: [e for e in controller.events("vm.preempted") if e.lease_id == youngest.lease_id], 60,
                     "the victim's stop to be confirmed")[0]
    detail = json.loads(event.detail_json)
    assert detail["policy"] == "most_recent" and detail["path"] == "instant"
    assert detail["stopped"] == "clean_shutdown" and "e2e-1" in detail["cause"]
    assert "GLEANER-SHUTDOWN" in console_text(console_of(agent, youngest.vm_name))
    assert youngest.vm_name not in domain_states()
    # the same request_id gives the same answer and launches nothing new
    again = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="alice",
                                                                 request_id="e2e-1"), timeout=30)
    assert again.lease.lease_id == reply.lease.lease_id
    assert len(controller.leases("on_demand")) == 1


def test_impossible_request_is_rejected_and_touches_nothing(pool):
    controller, _agent = pool
    before = domain_states()
    preemptions = len(controller.events("vm.preempted"))
    done = gleanctl(controller, "--json", "request", "--vcpus", "3", "--memory", "128", "--request-id", "e2e-big")
    assert done.returncode == 1
    reply = json.loads(done.stdout)
    assert reply["outcome"] == "rejected" and "no node can host 3 vCPUs" in reply["reason"]
    assert reply["decision_ms"] < 50
    assert domain_states() == before
    assert len(controller.events("vm.preempted")) == preemptions


def test_bad_requests_get_clear_errors(pool):
    controller, _agent = pool
    done = gleanctl(controller, "request", "--vcpus", "1", "--memory", "128", "--image", "../etc/passwd")
    assert done.returncode == 2 and "image" in done.stderr
    done = gleanctl(controller, "request", "--request-id", "e2e-1", "--vcpus", "2", "--memory", "128")
    assert done.returncode == 2 and "already used" in done.stderr
    done = gleanctl(controller, "backfill", "set", "termination_policy=oldest")
    assert done.returncode == 2 and "termination_policy" in done.stderr
    done = gleanctl(controller, "backfill", "set", "vcpus")
    assert done.returncode == 2 and "KEY=VALUE" in done.stderr
    done = gleanctl(controller, "release", "od-doesnotexist")
    assert done.returncode == 4 and "no lease" in done.stderr


def test_release_brings_backfill_back(pool):
    controller, _agent = pool
    (on_demand,) = controller.leases("on_demand", "running")
    started = time.monotonic()
    done = gleanctl(controller, "release", on_demand.lease_id)
    assert done.returncode == 0, done.stderr
    assert on_demand.vm_name not in domain_states()
    wait_for(lambda: running_backfill(controller, 2), 60, "backfill to refill the released room")
    assert time.monotonic() - started < 60  # retry_seconds is 300: the release triggered it
    status = json.loads(gleanctl(controller, "--json", "status").stdout)
    assert status["backfill_vcpus"] == 2 and status["on_demand_vcpus"] == 0 and status["preemptions"] >= 1


def test_calls_answer_before_the_callers_deadline_and_can_be_asked_again(pool):
    controller, _agent = pool
    wait_for(lambda: running_backfill(controller, 2), 60, "a node full of backfill")
    stub = controller.stub()
    request = controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="alice", request_id="e2e-soon")
    # 1.05 s leaves the controller 50 ms: no launch is that quick, so the answer is "pending" (not
    # DEADLINE_EXCEEDED), and asking again with the same id gives the VM, not a second one.
    assert stub.RequestVm(request, timeout=1.05).outcome == "pending"
    placed = stub.RequestVm(request, timeout=120)
    assert placed.outcome == "placed" and len(controller.leases("on_demand")) == 1
    released = stub.Release(controller_pb2.ReleaseRequest(lease_id=placed.lease.lease_id), timeout=1.05)
    assert released.lease.state == "stopping"   # a clean shutdown takes longer than 50 ms
    ended = wait_for(lambda: [l for l in controller.leases("on_demand")] == [] or None, 60, "the release to end")
    assert ended and placed.lease.vm_name not in domain_states()
    # Settled for the tests that follow: the victim's notice over, backfill refilled, all running.
    wait_for(lambda: running_backfill(controller, 2) if len(controller.leases()) == 2 else [], 90,
             "the victim to stop and backfill to refill the room")


def test_a_restarted_controller_keeps_its_leases(pool):
    controller, _agent = pool
    before = {(l.lease_id, l.vm_name, l.state) for l in controller.leases()}
    controller.stop()
    controller.start()
    after = {(l.lease_id, l.vm_name, l.state) for l in controller.leases()}
    assert after == before
    wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 to report to the new controller")
    time.sleep(2)
    assert {(l.lease_id, l.state) for l in controller.leases()} == {(l, s) for l, _, s in before}
    assert gleanctl(controller, "--json", "backfill", "show").stdout.count('"enabled": true') == 1


def test_a_stopped_agent_makes_its_node_suspect_then_down_and_it_rejoins(pool):
    controller, agent = pool
    backfill = {l.lease_id for l in controller.leases("backfill")}
    agent.stop()
    try:
        wait_for(lambda: controller.node_state("node1") == "suspect", 10, "node1 suspect")
        wait_for(lambda: controller.node_state("node1") == "down", 15, "node1 down")
        assert {l.lease_id for l in controller.leases(state="lost")} == backfill
        reply = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                     owner="bob", request_id="e2e-down"), timeout=30)
        assert reply.outcome == "rejected" and "no node is up" in reply.reason
    finally:
        agent.start()
    wait_for(lambda: controller.node_state("node1") == "up", 20, "node1 back up")
    wait_for(lambda: {l.lease_id for l in controller.leases("backfill", "running")} == backfill, 20,
             "its VMs recovered")
    kinds = [e.kind for e in controller.events() if e.node_id == "node1"]
    assert "node.suspect" in kinds and "node.down" in kinds and "node.rejoined" in kinds


def test_an_unknown_gleaner_vm_is_adopted(pool):
    controller, agent = pool
    name = unique_name("stray")
    agent.stub().LaunchDomain(launch_request(name, memory_mib=128))  # behind the controller's back
    lease = wait_for(lambda: [l for l in controller.leases() if l.vm_name == name], 20, "adoption")[0]
    assert lease.owner == "adopted" and lease.role == "backfill" and lease.node_id == "node1"
    assert any(e.lease_id == lease.lease_id for e in controller.events("vm.adopted"))


def test_clients_without_a_certificate_are_refused(pool):
    controller, _agent = pool
    plain = controller_pb2_grpc.ControllerStub(grpc.insecure_channel(controller.address))
    assert rpc_code(lambda: plain.Status(controller_pb2.StatusRequest(), timeout=5)) == grpc.StatusCode.UNAVAILABLE
    # A TLS client that trusts the CA (so it accepts the server) but has no certificate of its own:
    # the handshake fails, so nothing it asks for, reading or changing, is done.
    backfill_before = controller.stub().GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10)
    reserves_before = controller.stub().ListReserves(controller_pb2.ListReservesRequest(), timeout=10)
    admin = controller.env.pki.admin
    # Control: the same trust and address with a certificate works, so the refusal below is the
    # server's demand for a client certificate, not a client-side failure to accept the server.
    with_cert = grpc.ssl_channel_credentials(admin.ca.read_bytes(), admin.key.read_bytes(), admin.cert.read_bytes())
    with grpc.secure_channel(controller.address, with_cert) as channel:
        controller_pb2_grpc.ControllerStub(channel).Status(controller_pb2.StatusRequest(), timeout=10)
    no_cert = grpc.ssl_channel_credentials(root_certificates=admin.ca.read_bytes())
    with grpc.secure_channel(controller.address, no_cert) as channel:
        certless = controller_pb2_grpc.ControllerStub(channel)
        for call in (lambda: certless.Status(controller_pb2.StatusRequest(), timeout=5),
                     lambda: certless.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                         owner="no-cert", request_id="tls-no-cert"),
                                                timeout=5),
                     lambda: certless.SetBackfill(controller_pb2.SetBackfillRequest(
                         max_instances=backfill_before.max_instances + 7), timeout=5),
                     lambda: certless.SetReserve(controller_pb2.Reserve(node_id="node1", whole_node=True),
                                                 timeout=5)):
            assert rpc_code(call) == grpc.StatusCode.UNAVAILABLE
    assert controller.stub().GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10) == backfill_before
    assert controller.stub().ListReserves(controller_pb2.ListReservesRequest(), timeout=10) == reserves_before
    assert not [l for l in controller.leases() if l.owner == "no-cert"]
    assert not [e for e in controller.events() if "no-cert" in e.detail_json]
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", "--controller", controller.address, "status"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and "mutual TLS" in done.stderr


def test_extra_nodes_on_the_test_driver_take_placements(pool, test_env):
    controller, _agent = pool
    gleanctl(controller, "backfill", "disable")
    fakes = [AgentProcess(test_env, name=f"fake{i}", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start() for i in (1, 2)]
    try:
        for fake in fakes:
            wait_for(lambda: controller.node_state(fake.name) == "up", 20, f"{fake.name} to report")
        reply = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=4, memory_mib=512, image="tiny",
                                                                     owner="carol", request_id="e2e-fake"), timeout=60)
        assert reply.outcome == "placed", reply.reason
        assert reply.lease.node_id in ("fake1", "fake2") and not reply.preempted
        gleanctl(controller, "reserve", "set", "fake1", "--whole-node")
        gleanctl(controller, "reserve", "set", "fake2", "--whole-node")
        reserves = json.loads(gleanctl(controller, "--json", "reserve").stdout)["reserves"]
        assert {r["node_id"] for r in reserves if r["whole_node"]} == {"fake1", "fake2"}
    finally:
        for fake in fakes:
            fake.stop()

